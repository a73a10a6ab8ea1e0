"""What every device op module shares: launching kernels, operand checks, and the
services fastad_cy/graph.pyx calls for device Variables (see the package's docstring).
"""
from __future__ import annotations

import numpy as np

from fastad_cy.graph import Variable, device_node, device_grad_buffer
from fastad.cuda import backend as _backend
from fastad.cuda.kernels import UNARY_OPS

I64, I32 = np.int64, np.int32


def backend():
    """The active backend (CuPy, or the emulator)."""
    return _backend.get()


def launch(kernel, dtype, n, *args):
    """Run `kernel` (from fastad.cuda.kernels) instantiated for `dtype` over n work
    items; args are device arrays and numpy scalars of the kernel's parameter types."""
    backend().launch(kernel, dtype, n, *args)


def scalar(dtype, value):
    """value as a numpy scalar of the kernel's T (inf where float32 overflows, silently,
    as on the CPU)."""
    with np.errstate(over="ignore"):
        return np.dtype(dtype).type(value)


def meta_array(values):
    """A small int64 device array of shape metadata (a valid pointer even when empty)."""
    return backend().from_host(np.array(list(values) or [0], dtype=np.int64))


# ------------------------------------------------------------ engine services
# Called by fastad_cy/graph.pyx for device Variables.

def to_host(array) -> np.ndarray:
    """A numpy copy of a device array."""
    return backend().to_host(array)


def from_host(array: np.ndarray):
    """A new device array holding a copy of a host array (its shape kept, 0-d too)."""
    return backend().from_host(np.asarray(array, order="C"))


def copy(array):
    """A new device array holding a copy of `array`."""
    return backend().xp.array(array, copy=True)


def empty(shape, dtype):
    """A new, uninitialised device array."""
    return backend().empty(shape, dtype)


def empty_like(v: Variable):
    """A new, uninitialised device array of v's shape and dtype (a gradient buffer)."""
    return backend().empty(v.shape, v.dtype)


def fill(buffer, value):
    """Set every element of a float device array to `value`."""
    launch("fill", buffer.dtype, buffer.size, buffer, I64(buffer.size), scalar(buffer.dtype, value))


def copy_from_host(dst, host: np.ndarray):
    """Copy a host array (cast to dst's dtype, same shape) into the device array dst."""
    backend().copy_from_host(dst, np.asarray(host, dtype=dst.dtype, order="C"))


def copy_device_array(leaf, data) -> bool:
    """Copy `data` into a device leaf's buffer without a trip through the host when it
    is a device array of the leaf's dtype and shape (C-contiguous); else return False
    (the engine then checks `data` and copies it from the host)."""
    if not (hasattr(data, "__cuda_array_interface__") and data.dtype == leaf.dtype
            and tuple(data.shape) == leaf.shape and data.flags.c_contiguous):
        return False
    launch("copy_or_add", leaf.dtype, leaf.size, data, leaf.value, I64(leaf.size), I32(0))
    return True


def seed_grad(root, seed, accumulate):
    """Start a backward pass: root's gradient (+)= ones, or (+)= `seed` (a host array)."""
    grad = device_grad_buffer(root)
    if seed is None:
        if accumulate:
            launch("unary_forward", grad.dtype, grad.size, grad, grad, I64(grad.size),
                    I32(UNARY_OPS.index("add_scalar")), scalar(grad.dtype, 1))
        else:
            fill(grad, 1)
        return
    values = from_host(np.asarray(seed, dtype=grad.dtype))
    launch("copy_or_add", grad.dtype, grad.size, values, grad, I64(grad.size), I32(accumulate))


def leaf_grad(leaf, dense, none):
    """A device leaf's `.grad`: the live buffer when dense, else a fresh dense copy
    (zeros when the leaf has no gradient; a sparse gradient's buffer is already dense)."""
    buffer = device_grad_buffer(leaf) if not none else None
    if dense:
        return buffer
    out = backend().zeros(leaf.shape, leaf.dtype)
    if buffer is not None:
        launch("copy_or_add", leaf.dtype, leaf.size, buffer, out, I64(leaf.size), I32(0))
    return out


def zero_rows(grad, ids):
    """Zero the rows of `grad` listed in `ids` (an int64 device array)."""
    row_len = grad.size // grad.shape[0] if grad.shape[0] else 0
    launch("zero_rows", grad.dtype, ids.size * row_len, grad, ids, I64(ids.size), I64(row_len))


def touched_rows(ids) -> np.ndarray:
    """The distinct row ids of a sparse device gradient in first-touch order (as on
    the CPU), on the host."""
    rows, first = np.unique(to_host(ids), return_index=True)
    return rows[np.argsort(first)]


def append_ids(record, count, ids, dtype):
    """Copy the int64 device array `ids` into `record` after its first `count`
    entries, growing it (by doubling) when full; returns the record. `dtype` is
    that of the Parameter the record serves (the kernels' T)."""
    need = count + ids.size
    if record is None or record.size < need:
        grown = backend().empty((max(need, 2 * (0 if record is None else record.size), 64),),
                                np.int64)
        if count:
            launch("copy_ids", dtype, count, record, grown, I64(count))
        record = grown
    launch("copy_ids", dtype, ids.size, ids, record[count:], I64(ids.size))
    return record


def all_finite(array) -> bool:
    """True when no element of a float device array is NaN or Inf (detect_anomaly); an
    integer array (argmax's ids) always is."""
    if array.dtype.kind in "iu":
        return True
    flag = backend().zeros((1,), np.int32)
    launch("all_finite", array.dtype, array.size, array, I64(array.size), flag)
    return not to_host(flag)[0]


# ------------------------------------------------------------- operand checks

def same_device(op, *xs):
    """ValueError naming both devices when the Variables among xs are on two."""
    devices = {x.device for x in xs if isinstance(x, Variable)}
    if len(devices) > 1:
        a, b = sorted(devices)
        raise ValueError(f"{op}: inputs on different devices, {a} and {b}; move them with "
                         f".to(device) first")


def make_node(op, inputs, shape, dtype, fn):
    """A DeviceNode for op `fn` on inputs' device, its value computed now."""
    return device_node(op, tuple(inputs), tuple(shape), dtype, fn)


