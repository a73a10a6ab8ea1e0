"""Where device arrays live and how kernels run: CuPy on a GPU, or the CPU emulator.

Both backends offer the same small interface, used by `fastad.cuda.ops` and
`fastad.cuda.optim`:

- `xp`: the array module (cupy, or numpy for the emulator);
- `launch(kernel, dtype, n, *args)`: run a kernel from the table in
  `fastad.cuda.kernels` over `n` work items (grid-stride), scalars passed as
  numpy scalars of the kernel's parameter types;
- `empty`, `zeros`, `from_host`, `to_host`, `gemm`, `synchronize`;
- `capture(fn)`: record what `fn` launches once, return a callable replaying it.

The emulator runs the same `.cu` sources compiled as C++ (see
`fastad.cuda.emulator`), so the GPU path's Python and kernel code are tested
on machines without a GPU. It is selected by `fastad.cuda.emulate()` or the
environment variable FASTAD_CUDA_EMULATE=1, never silently.
"""
from __future__ import annotations

import os

import numpy as np

from fastad.cuda import kernels

BLOCK = 256
I64, I32 = np.int64, np.int32     # the kernels' integer parameter types


class CupyBackend:
    """Kernels from `cuda/*.cu` through `cupy.RawModule`, GEMM through cuBLAS."""

    name = "cupy"

    def __init__(self, cupy):
        self.xp = cupy
        self._modules = {}
        self._functions = {}
        self._max_grid = None

    def _function(self, kernel: str, dtype):
        """The compiled kernel for (kernel, dtype), its family's module built on first use."""
        family = kernels.KERNEL_FAMILY[kernel]
        module = self._modules.get(family)
        if module is None:
            module = self.xp.RawModule(code=kernels.program_source(family),
                                       options=kernels.RAWMODULE_OPTIONS,
                                       name_expressions=kernels.name_expressions(family))
            self._modules[family] = module
        fn = self._functions[kernel, dtype] = module.get_function(
            kernels.name_expression(kernel, dtype))
        return fn

    def launch(self, kernel: str, dtype, n: int, *args):
        if n <= 0:
            return
        fn = self._functions.get((kernel, dtype)) or self._function(kernel, dtype)
        if self._max_grid is None:        # fastad computes on the current device only
            self._max_grid = 32 * self.xp.cuda.Device().attributes["MultiProcessorCount"]
        fn((min((n + BLOCK - 1) // BLOCK, self._max_grid),), (BLOCK,), args)

    def empty(self, shape, dtype):
        return self.xp.empty(shape, dtype=dtype)

    def zeros(self, shape, dtype):
        return self.xp.zeros(shape, dtype=dtype)

    def from_host(self, array: np.ndarray):
        return self.xp.asarray(array)

    def to_host(self, array) -> np.ndarray:
        return self.xp.asnumpy(array)

    def copy_from_host(self, dst, host: np.ndarray):
        """Copy a C-contiguous host array of dst's dtype and shape into dst (same buffer)."""
        dst.set(host)

    def gemm(self, a, b, out, trans_a=False, trans_b=False, beta=0.0):
        """out = op(a) @ op(b) + beta * out, for 2-D C-contiguous arrays (cuBLAS)."""
        from cupy import cublas
        cublas.gemm("T" if trans_a else "N", "T" if trans_b else "N", a, b, out=out,
                    alpha=1.0, beta=beta)

    def synchronize(self):
        self.xp.cuda.get_current_stream().synchronize()

    def capture(self, fn):
        """Capture `fn`'s launches as a CUDA graph (after one warm-up call that makes
        any lazily allocated buffers); return a callable that replays the graph."""
        cupy = self.xp
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            fn()
            stream.synchronize()
            stream.begin_capture()
            try:
                fn()
            finally:
                graph = stream.end_capture()

        def replay():
            # Start after the work queued on the caller's stream (set_value's copies).
            stream.wait_event(cupy.cuda.get_current_stream().record())
            graph.launch(stream)
            stream.synchronize()
        return replay


class DeviceArray(np.ndarray):
    """A numpy array standing for device memory under the emulator: kernels take
    only these (as CuPy takes only its own arrays), so a host array passed to a
    kernel fails here as it would on a GPU."""


class EmulatedBackend:
    """The `.cu` kernels compiled as C++ and run on the CPU over numpy arrays.

    Launches use a small odd grid and block (5 blocks of 7 threads) so every
    grid-stride loop wraps several times: a kernel that is only right for one
    launch shape fails here.
    """

    name = "emulator"
    GRID, BLOCK = 5, 7

    def __init__(self):
        from fastad.cuda.emulator import Emulator
        self.xp = np
        self._emulator = Emulator()
        self._recording = None

    def _run(self, action):
        if self._recording is not None:
            self._recording.append(action)
        else:
            action()

    def launch(self, kernel: str, dtype, n: int, *args):
        for k, arg in enumerate(args):
            if isinstance(arg, np.ndarray) and not isinstance(arg, DeviceArray):
                raise TypeError(f"{kernel}: argument {k} is a host array; kernels take device "
                                f"arrays (from_host, empty, zeros)")
        if n <= 0:
            return
        expression = kernels.name_expression(kernel, dtype)
        family = kernels.KERNEL_FAMILY[kernel]
        grid = min((n + self.BLOCK - 1) // self.BLOCK, self.GRID)
        self._run(lambda: self._emulator.launch(family, expression, grid, self.BLOCK, args))

    def _check_not_capturing(self, what):
        if self._recording is not None:
            raise RuntimeError(f"{what} during fastad.cuda.capture: a captured step must "
                               f"allocate nothing and copy nothing between host and device "
                               f"(keep set_value, .item(), clip_grad_norm and lr changes "
                               f"outside it; see fastad.cuda.capture)")

    def empty(self, shape, dtype):
        self._check_not_capturing("an allocation")
        return np.empty(shape, dtype=dtype).view(DeviceArray)

    def zeros(self, shape, dtype):
        self._check_not_capturing("an allocation")
        return np.zeros(shape, dtype=dtype).view(DeviceArray)

    def from_host(self, array: np.ndarray):
        self._check_not_capturing("a host-to-device copy")
        return np.array(array, copy=True, order="C").view(DeviceArray)

    def to_host(self, array) -> np.ndarray:
        self._check_not_capturing("a device-to-host copy")
        return np.array(array, copy=True, subok=False)

    def copy_from_host(self, dst, host: np.ndarray):
        self._check_not_capturing("a host-to-device copy")
        np.copyto(dst, host)

    def gemm(self, a, b, out, trans_a=False, trans_b=False, beta=0.0):
        if not all(isinstance(m, DeviceArray) for m in (a, b, out)):
            raise TypeError("gemm: the operands must be device arrays")

        def action():
            product = (a.T if trans_a else a) @ (b.T if trans_b else b)
            if beta:
                out[...] = product + beta * out
            else:
                out[...] = product
        self._run(action)

    def synchronize(self):
        pass

    def capture(self, fn):
        fn()
        self._recording = []
        try:
            fn()
            recorded = self._recording
        finally:
            self._recording = None

        def replay():
            for action in recorded:
                action()
        return replay


_backend = None
_emulate = None


def get(required: bool = True):
    """The active backend: the emulator when asked for, else CuPy with a GPU.

    With `required`, raise RuntimeError saying what is missing instead of None.
    """
    global _backend
    if _backend is not None:
        return _backend
    emulate = _emulate if _emulate is not None else os.environ.get("FASTAD_CUDA_EMULATE") == "1"
    if emulate:
        _backend = EmulatedBackend()
        return _backend
    problem = None
    try:
        import cupy
    except ImportError:
        problem = ("fastad's GPU path needs CuPy: install it with `pip install fastad[cuda12]` "
                   "or `fastad[cuda13]` (matching your CUDA driver)")
    else:
        try:
            if cupy.cuda.runtime.getDeviceCount() == 0:
                problem = "fastad's GPU path found CuPy but no CUDA device"
        except Exception as e:        # no driver, or a driver too old for this CuPy
            problem = f"fastad's GPU path found CuPy but no usable CUDA device: {e}"
    if problem is None:
        _backend = CupyBackend(cupy)
    elif required:
        raise RuntimeError(problem)
    return _backend


def set_emulation(enabled):
    """Select the emulator (True), the real GPU (False), or the environment's
    choice (None); forgets the current backend."""
    global _backend, _emulate
    _backend = None
    _emulate = enabled


# ---- the active backend's arrays and kernels, for the ops and the storage

def launch(kernel, dtype, n, *args):
    """Run `kernel` (from fastad.cuda.kernels) instantiated for `dtype` over n work
    items; args are device arrays and numpy scalars of the kernel's parameter types."""
    get().launch(kernel, dtype, n, *args)


def scalar(dtype, value):
    """value as a numpy scalar of the kernel's T (inf where float32 overflows, silently,
    as on the CPU)."""
    with np.errstate(over="ignore"):
        return np.dtype(dtype).type(value)


def fill(buffer, value):
    """Set every element of a float device array to `value`."""
    launch("fill", buffer.dtype, buffer.size, buffer, I64(buffer.size), scalar(buffer.dtype, value))


def to_host(array) -> np.ndarray:
    """A numpy copy of a device array."""
    return get().to_host(array)


def from_host(array):
    """A new device array holding a copy of a host array (its shape kept, 0-d too)."""
    return get().from_host(np.asarray(array, order="C"))


def copy_from_host(dst, host) -> None:
    """Copy a host array (cast to dst's dtype, same shape) into the device array dst."""
    get().copy_from_host(dst, np.asarray(host, dtype=dst.dtype, order="C"))
