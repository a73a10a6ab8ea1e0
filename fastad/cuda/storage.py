"""Where a Variable on a GPU keeps its value and gradient: one `DeviceStorage` per
Variable. fastad.cuda registers the type with the engine (`register_backend`);
the engine holds a device Variable's storage and calls the methods below for
everything it does with the value or gradient (copying, checking, seeding a
backward pass, clearing or reading a gradient), so it needs no knowledge of
CUDA.

A sparse gradient on a GPU (a Parameter indexed by ids) is the dense gradient
buffer, zero outside the rows whose ids fill the first `n_touched` entries of
the int64 device array `touched` (ids may repeat); optimizers update those rows.
"""
from __future__ import annotations

import numpy as np

from fastad.cuda import backend as _backend
from fastad.cuda.backend import I32, I64, copy_from_host, fill, from_host, launch, scalar, to_host
from fastad.cuda.kernels import UNARY_OPS

ID_BOUND_NONE = np.iinfo(np.int64).max   # ids with no table to stay below yet


class DeviceStorage:
    """The value of one Variable on device `device` (a device array), its gradient
    buffer (made on first use), and what the engine keeps about them: the rows a
    sparse gradient touched, whether the gradient buffer is known to be zero
    outside those rows (`grad_is_zero`: then a new sparse gradient need not fill
    it), and, for ids, the bound every id must stay below (that of the smallest
    table an op built on them reads)."""

    __slots__ = ("device", "value", "grad", "touched", "n_touched", "grad_is_zero", "id_bound")

    def __init__(self, device: str, value):
        self.device = device
        self.value = value
        self.grad = None
        self.touched = None
        self.n_touched = 0
        self.grad_is_zero = False
        self.id_bound = ID_BOUND_NONE

    @classmethod
    def from_host(cls, device: str, array: np.ndarray) -> "DeviceStorage":
        """Storage on `device` holding a copy of a host array."""
        return cls(device, from_host(array))

    @classmethod
    def empty(cls, device: str, shape, dtype) -> "DeviceStorage":
        """Storage on `device` for an uninitialised value of `shape` and `dtype`."""
        return cls(device, _backend.get().empty(tuple(shape), dtype))

    # ---- the value

    def to_host(self) -> np.ndarray:
        """A numpy copy of the value."""
        return to_host(self.value)

    def copy_value(self):
        """A new device array holding a copy of the value."""
        return _backend.get().xp.array(self.value, copy=True)

    def copy_from_host(self, host: np.ndarray) -> None:
        """Copy a host array (cast to the value's dtype, same shape) into the value."""
        copy_from_host(self.value, host)

    def copy_device_array(self, data) -> bool:
        """Copy `data` into the value without a trip through the host when it is a
        C-contiguous device array of the value's dtype and shape; else return False
        (the engine then checks `data` and copies it from the host)."""
        value = self.value
        if not (hasattr(data, "__cuda_array_interface__") and data.dtype == value.dtype
                and tuple(data.shape) == value.shape and data.flags.c_contiguous):
            return False
        launch("copy_or_add", value.dtype, value.size, data, value, I64(value.size), I32(0))
        return True

    @staticmethod
    def all_finite(array) -> bool:
        """True when no element of a device array (this storage's value or gradient)
        is NaN or Inf (detect_anomaly); an integer array (argmax's ids) always is."""
        if array.dtype.kind in "iu":
            return True
        flag = _backend.get().zeros((1,), np.int32)
        launch("all_finite", array.dtype, array.size, array, I64(array.size), flag)
        return not to_host(flag)[0]

    # ---- the gradient

    def ensure_grad(self) -> None:
        """Make the gradient buffer (uninitialised) if there is none yet."""
        if self.grad is None:
            self.grad = _backend.get().empty(self.value.shape, self.value.dtype)

    def zero_grad(self) -> None:
        """Set the gradient buffer to zeros (made first if needed)."""
        self.ensure_grad()
        fill(self.grad, 0)

    def seed_grad(self, seed, accumulate: bool) -> None:
        """Start a backward pass here: gradient (+)= ones (seed None) or (+)= `seed`, a host array."""
        grad = self.grad
        if seed is None:
            if accumulate:
                launch("unary_forward", grad.dtype, grad.size, grad, grad, I64(grad.size),
                        I32(UNARY_OPS.index("add_scalar")), scalar(grad.dtype, 1))
            else:
                fill(grad, 1)
            return
        values = from_host(np.asarray(seed, dtype=grad.dtype))
        launch("copy_or_add", grad.dtype, grad.size, values, grad, I64(grad.size), I32(accumulate))

    def leaf_grad(self, dense: bool):
        """A leaf's `.grad` when it holds one: the live buffer when the gradient is dense,
        else a fresh dense copy (a sparse one's buffer is dense already)."""
        if dense:
            return self.grad
        out = _backend.get().zeros(self.value.shape, self.value.dtype)
        launch("copy_or_add", out.dtype, out.size, self.grad, out, I64(out.size), I32(0))
        return out

    # ---- a Parameter's sparse gradient

    def start_sparse(self) -> None:
        """Begin a sparse gradient: all zeros, no rows touched."""
        if self.grad is None or not self.grad_is_zero:
            self.zero_grad()
            self.grad_is_zero = True
        self.n_touched = 0

    def add_touched(self, ids) -> None:
        """Record the int64 device array `ids` as touched rows (the record grows by doubling)."""
        need = self.n_touched + ids.size
        dtype = self.value.dtype            # the kernels' T
        if self.touched is None or self.touched.size < need:
            grown = _backend.get().empty(
                (max(need, 2 * (0 if self.touched is None else self.touched.size), 64),), np.int64)
            if self.n_touched:
                launch("copy_ids", dtype, self.n_touched, self.touched, grown, I64(self.n_touched))
            self.touched = grown
        launch("copy_ids", dtype, ids.size, ids, self.touched[self.n_touched:], I64(ids.size))
        self.n_touched = need

    def touched_ids(self):
        """The ids a sparse gradient touched, as one int64 device array (repeats kept)."""
        return self.touched[:self.n_touched]

    def touched_rows(self) -> np.ndarray:
        """The distinct touched row ids in first-touch order (as on the CPU), on the host."""
        rows, first = np.unique(to_host(self.touched_ids()), return_index=True)
        return rows[np.argsort(first)]

    def sparse_grad(self):
        """`(rows, values)` of a sparse gradient on the host: the touched rows, their gradient rows."""
        rows = self.touched_rows()
        return rows, to_host(self.grad)[rows]

    def densify(self) -> None:
        """The sparse gradient becomes the dense one (its buffer is dense already)."""
        self.n_touched = 0
        self.grad_is_zero = False

    def clear_grad(self, sparse: bool, dense: bool) -> None:
        """Forget the gradient: zero a sparse one's touched rows, so the buffer is all
        zeros again and the next sparse gradient need not fill it."""
        if sparse:
            grad = self.grad
            ids = self.touched_ids()
            row_len = grad.size // grad.shape[0] if grad.shape[0] else 0
            launch("zero_rows", grad.dtype, ids.size * row_len, grad, ids, I64(ids.size), I64(row_len))
            self.grad_is_zero = True
        elif dense:
            self.grad_is_zero = False
        self.n_touched = 0
