"""What every device op module shares: launching kernels, making nodes, operand checks.
"""
from __future__ import annotations

import numpy as np

from fastad._engine.graph import Variable, function_node, grad_slot
# backend(): the active backend (CuPy, or the emulator)
from fastad.cuda.backend import (I32, I64, copy_from_host, fill, from_host, get as backend, launch,
                                 scalar, to_host)
from fastad.cuda.storage import DeviceStorage

__all__ = ["I64", "I32", "backend", "launch", "scalar", "meta_array", "fill", "to_host", "from_host",
           "copy_from_host", "same_device", "make_node", "bound_ids", "cleared", "InputGrads"]


def meta_array(values):
    """A small int64 device array of shape metadata (a valid pointer even when empty)."""
    return backend().from_host(np.array(list(values) or [0], dtype=np.int64))


# ------------------------------------------------------------- operand checks

def same_device(op, *xs):
    """ValueError naming both devices when the Variables among xs are on two."""
    devices = {x.device for x in xs if isinstance(x, Variable)}
    if len(devices) > 1:
        a, b = sorted(devices)
        raise ValueError(f"{op}: inputs on different devices, {a} and {b}; move them with "
                         f".to(device) first")


def make_node(op, inputs, shape, dtype, fn, value=None):
    """A node for op `fn` on the device of inputs[0], its value computed now into a
    fresh buffer of `shape` and `dtype` (or into `value`, an existing device array)."""
    device = inputs[0].device
    storage = (DeviceStorage.empty(device, shape, dtype) if value is None
               else DeviceStorage(device, value))
    return function_node(op, tuple(inputs), tuple(shape), dtype, fn, storage)


def bound_ids(ix, bound, op):
    """Require a device IndexInput's ids below `bound` now and at every set_value."""
    storage = ix.storage
    if storage.id_bound > bound and ix.parents:      # ids computed on the device (argmax): their bound
        raise IndexError(f"{op}: the ids from '{ix.op_name}' range up to {storage.id_bound - 1}, "
                         f"but must be < {bound} here")
    if storage.id_bound > bound:
        ids = storage.to_host().reshape(-1)
        bad = np.flatnonzero(ids >= bound)
        if bad.size:
            raise IndexError(f"{op}: id {ids[bad[0]]} at position {bad[0]} of the IndexInput is "
                             f"out of range (ids must be < {bound})")
        storage.id_bound = bound


def cleared(grad, accumulate):
    """A dense gradient buffer (grad_slot's `grad, accumulate`) for a backward that
    scatter-adds into it: zeroed first when this is the pass's first contribution."""
    if not accumulate:
        fill(grad, 0)
    return grad


class InputGrads:
    """An op whose backward writes or adds its inputs' gradients: `backward` calls
    `backward_into(node, k, x, grad, accumulate)` with the gradient slot of each input
    x = node.parents[k] that needs a gradient, in order, from input `first` on (0; where's
    condition, input 0, gets none)."""

    first = 0

    def backward(self, node):
        for k, x in enumerate(node.parents):
            if k >= self.first and x.requires_grad:
                self.backward_into(node, k, x, *grad_slot(x))
