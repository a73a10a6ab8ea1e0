"""GPUs: device queries, device names, and CUDA-graph capture of a replayed step.

fastad runs on NVIDIA GPUs through CuPy (an optional extra:
`pip install fastad[cuda12]` or `fastad[cuda13]`). Put leaves on a GPU with
`device="cuda"` (or "cuda:N"), or move them with `.to("cuda")`; every op built
on them runs there, with its kernel in the `cuda/` folder of the source tree.

>>> device = "cuda" if fa.cuda.is_available() else "cpu"
>>> w = fa.Parameter(np.random.randn(784, 128), device=device)

Nothing here imports CuPy or touches a GPU until asked.

For machines without a GPU, `fastad.cuda.emulate()` runs the same kernels
compiled as C++ on the CPU (a test tool: slow, but exact about what each
kernel computes); FASTAD_CUDA_EMULATE=1 selects it for a whole process.
"""
from __future__ import annotations

import contextlib
import re

from fastad.ops.backend import Backend as _Backend
from fastad._engine.graph import register_backend as _register_backend
from fastad.cuda import backend as _backend, ops as _ops, optim as _optim
from fastad.cuda.storage import DeviceStorage as _DeviceStorage

__all__ = ["is_available", "device_count", "capture", "synchronize", "emulate",
           "canonical_device", "check_device"]


def is_available() -> bool:
    """True when fastad can run on a GPU: CuPy is installed and sees a CUDA device
    (or the emulator is selected).

    >>> fa.cuda.is_available()        # False on a machine without CuPy or a GPU
    """
    return _backend.get(required=False) is not None


def device_count() -> int:
    """How many CUDA devices CuPy sees (0 without CuPy or a GPU; 1 under the emulator).

    >>> fa.cuda.device_count()
    """
    b = _backend.get(required=False)
    if b is None:
        return 0
    if b.name == "emulator":
        return 1
    return b.xp.cuda.runtime.getDeviceCount()


_DEVICE = re.compile(r"cuda(?::(\d+))?\Z")


def canonical_device(device) -> str:
    """"cuda:N" for "cuda" (the current device, N=0 by default), "cuda:N" or a
    device number; raises ValueError for other names and RuntimeError when no
    GPU is usable, saying what is missing.

    >>> fa.cuda.canonical_device("cuda")          # 'cuda:0'
    """
    if isinstance(device, int) and not isinstance(device, bool):
        index = device
    else:
        match = _DEVICE.match(str(device))
        if match is None:
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
        index = int(match.group(1) or 0)
    b = _backend.get(required=True)
    count = device_count()
    if not 0 <= index < count:
        raise ValueError(f"device {device!r}: there {'is' if count == 1 else 'are'} {count} "
                         f"CUDA device{'' if count == 1 else 's'} (cuda:0 to cuda:{count - 1})")
    if b.name != "emulator" and index != b.xp.cuda.Device().id:
        raise ValueError(f"device {device!r}: fastad computes on the current CUDA device, "
                         f"cuda:{b.xp.cuda.Device().id}; select another one with "
                         f"`with cupy.cuda.Device({index}):` around the whole program")
    return f"cuda:{index}"


def check_device(who, device) -> str:
    """`device` for a model's `fit`: "cpu", or the canonical "cuda:N" of `canonical_device`;
    its ValueError (a bad name) or RuntimeError (no usable GPU) names `who` and the argument.

    >>> fa.cuda.check_device("BPR.fit", "cuda")      # 'cuda:0' where a GPU is usable
    """
    if device == "cpu":
        return "cpu"
    try:
        return canonical_device(device)
    except (ValueError, RuntimeError) as e:
        raise type(e)(f"{who}: device={device!r}: {e}") from None


def synchronize():
    """Wait until every kernel fastad launched has finished (for timing)."""
    _backend.get(required=True).synchronize()


def capture(step):
    """Capture `step()` (forward, backward and optimizer step of a graph built
    on the GPU) once as a CUDA graph; return a function that replays it with one
    launch. `step` runs once as a warm-up (which makes any lazily allocated
    buffers), then is called once more to record its kernels without running
    them: after `capture` returns, one step has happened. The replay reads the
    leaves' current device buffers: feed new data with `set_value` between
    replays; Python in `step` does not run again, so anything it decides on the
    host (its shapes, which branch it takes, hyperparameters passed as numbers)
    is fixed at capture.

    A captured step may not allocate or copy between host and device. Keep
    these outside it, between replays: `set_value`, `.item()`/`.numpy()`,
    `clip_grad_norm` (it returns a host number; `clip_grad_value` is fine),
    and learning-rate changes (`opt.lr = ...`, a scheduler's `step()`: they
    write the lr the replay reads). Call `opt.zero_grad()` inside the step:
    the rows a sparse gradient touches are recorded at capture.

    >>> loss = fa.nn.cross_entropy(model(x), y)           # x, y, model on "cuda"
    >>> def step():
    ...     loss.forward(); opt.zero_grad(); loss.backward(); opt.step()
    >>> replay = fa.cuda.capture(step)
    >>> for xb, yb in batches:
    ...     x.set_value(xb); y.set_value(yb); replay()
    """
    if not callable(step):
        raise TypeError(f"capture: expected a callable, got {type(step).__name__}")
    return _backend.get(required=True).capture(step)


@contextlib.contextmanager
def emulate():
    """Within this block, "cuda" means the CPU emulator of fastad's kernels.

    For tests on machines without a GPU: it compiles `cuda/*.cu` as C++ (needs
    g++) and runs each kernel over numpy arrays, one thread after another.

    >>> with fa.cuda.emulate():
    ...     w = fa.Parameter(np.ones(3), device="cuda")    # w.value is a numpy array
    """
    previous = _backend._emulate
    _backend.set_emulation(True)
    try:
        yield
    finally:
        _backend.set_emulation(previous)


# fastad's GPU backend: DeviceStorage holds a device Variable, fastad.cuda.ops implements
# each primitive op under its name, and the fused nodes (the recurrent cells, ranking,
# gather_dot) fall back to the base's composition.
_CudaBackend = type("CudaBackend", (_Backend,), {
    "canonical_device": staticmethod(canonical_device),
    "from_host": staticmethod(_DeviceStorage.from_host),
    "empty": staticmethod(_DeviceStorage.empty),
    "to_host": staticmethod(_ops.to_host),
    "DeviceState": _optim.DeviceState,
    "clip_grad_norm": staticmethod(_optim.clip_grad_norm),
    "clip_grad_value": staticmethod(_optim.clip_grad_value),
    **{name: staticmethod(getattr(_ops, name)) for name in _Backend.PRIMITIVES}})

# The engine (fastad._engine) never imports this package: this is how it learns of devices.
_register_backend(_CudaBackend())
