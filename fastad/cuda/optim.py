"""The GPU side of fastad's optimizers and gradient clipping.

`fastad.optim.optimizers`'s optimizers hand over to a `DeviceState` when their
Parameters live on a GPU: it keeps the optimizer state, the step counts and
the learning rate as device arrays and runs the fused kernels of
`cuda/optim.cu`, which repeat the CPU rules exactly (dense, and the lazy
sparse-row rules). Nothing the kernels read is host-side: the step counts are
advanced by a kernel and the lr is a 1-element float64 device array that the
optimizer's `lr` setter writes at once, so a step captured as a CUDA graph
replays correctly after either changes.

A sparse gradient (see `fastad._engine.graph.grad_state`) is a dense buffer that
holds the accumulated gradient at the touched rows and zeros elsewhere, with
the touched row ids as one or more int64 arrays (ids may repeat). Each
distinct row is updated once: `claim_rows` stores in an int32 owner array
(one entry per row, normally NO_OWNER) the first position listing the row,
the update lets only that position's threads write, and `release_rows`
resets the entries. Every launch is stream-ordered, so one owner array serves
all of an optimizer's Parameters in turn.
"""
from __future__ import annotations

import math

import numpy as np

from fastad.cuda import backend as _backend
from fastad._engine.graph import grad_state

#: An owner entry of an unclaimed row (FA_NO_OWNER in cuda/optim.cu); it also
#: bounds how many row ids one sparse gradient may list.
NO_OWNER = 2 ** 31 - 1


def _row_len(value):
    """The row length of a value whose first axis indexes the sparse rows."""
    rows = value.shape[0]
    return value.size // rows if rows else 0


def _passes(touched, who):
    """[(base, ids)]: each id array of a sparse gradient with its first position,
    the count of ids in the arrays before it."""
    passes, base = [], 0
    for ids in touched:
        passes.append((np.int64(base), ids))
        base += ids.size
    if base > NO_OWNER:
        raise ValueError(f"{who}: a sparse gradient lists {base} row ids; the GPU path takes "
                         f"at most {NO_OWNER} per Parameter and step")
    return passes


def _launch_rows(b, kernel, dtype, owner, passes, row_len, head, tail):
    """Run a rows-form kernel `kernel(*head, ids, owner, base, n_ids, row_len, *tail)`
    over every id array of `passes`, each listed row updated once."""
    row_len = np.int64(row_len)
    for base, ids in passes:
        b.launch("claim_rows", dtype, ids.size, ids, owner, base, np.int64(ids.size))
    for base, ids in passes:
        b.launch(kernel, dtype, ids.size * int(row_len), *head, ids, owner, base,
                 np.int64(ids.size), row_len, *tail)
    for base, ids in passes:
        b.launch("release_rows", dtype, ids.size, ids, owner, np.int64(ids.size))


def new_owner(b, rows):
    """A device owner array for `rows` rows (at least one entry), every entry NO_OWNER."""
    return b.from_host(np.full(max(rows, 1), NO_OWNER, dtype=np.int32))


class DeviceState:
    """An optimizer's device state: `state[i]`, the state arrays of Parameter i
    (device arrays of its shape and dtype); `steps`, the int64 step counts; `lr`,
    the learning rate (1-element float64). Made by `Optimizer.__init__`."""

    def __init__(self, params, device, lr):
        b = _backend.get()
        self.backend = b
        self.params = list(params)
        self.lr = b.from_host(np.array([lr], dtype=np.float64))
        self.steps = b.zeros(len(self.params), np.int64)
        rows = max((p.shape[0] for p in self.params if len(p.shape) >= 1), default=0)
        self.owner = new_owner(b, rows)
        self.state = []
        self._launch_state = []

    def init_state(self, kernel, n_slots, fill):
        """Make the state arrays (n_slots per Parameter, filled with `fill`) for the update
        `kernel` = (name, (h0, h1, h2, h3), flag) of cuda/optim.cu; returns
        `state`, a list of tuples of device arrays.

        An update that keeps one running float64 per Parameter (NAdam's product)
        names, after the flag, the kernel that advances it after each count_step and
        the extra double (h4) it and the update take. Every update kernel takes
        `running` (starting at 1, unread by the others) and h4 (0) after the flag."""
        name, hyper, flag, *running = kernel
        self.dense_kernel, self.rows_kernel = name + "_dense", name + "_rows"
        self.hyper = tuple(np.float64(h) for h in hyper)
        self.flag = np.int32(flag)
        b = self.backend
        self.running_kernel, h4 = running or (None, (0.0,))
        self.running = b.from_host(np.ones(len(self.params), dtype=np.float64))
        self.extra = (self.running,) + tuple(np.float64(h) for h in h4)
        for p in self.params:
            value = p.value
            arrays = tuple(b.from_host(np.full(value.shape, fill, dtype=value.dtype))
                           for _ in range(n_slots))
            self.state.append(arrays)
            # The kernels take two state pointers; an unused one points at the value
            # and is never read.
            self._launch_state.append((arrays + (value, value))[:2])
        return self.state

    def step(self):
        """One optimizer step: for each Parameter holding a gradient, advance its
        step count and update it (dense: every element; sparse: its listed rows)."""
        b = self.backend
        for i, p in enumerate(self.params):
            mode, grad, touched = grad_state(p)
            if mode == "none":
                continue
            value = p.value
            dtype = value.dtype
            s0, s1 = self._launch_state[i]
            index = np.int64(i)
            b.launch("count_step", dtype, 1, self.steps, index)
            if self.running_kernel is not None:
                b.launch(self.running_kernel, dtype, 1, self.running, self.steps, index,
                         *self.hyper, self.flag, *self.extra[1:])
            scalars = (self.lr, self.steps, index, *self.hyper, self.flag, *self.extra)
            if mode == "dense":
                b.launch(self.dense_kernel, dtype, value.size, value, grad, s0, s1,
                         np.int64(value.size), *scalars)
            else:
                _launch_rows(b, self.rows_kernel, dtype, self.owner, _passes(touched, "step()"),
                             _row_len(value), (value, grad, s0, s1), scalars)

    def set_lr(self, lr):
        """Write the learning rate the next kernels read (waits until written, so
        a CUDA graph replayed on another stream reads it)."""
        self.backend.copy_from_host(self.lr, np.array([lr], dtype=np.float64))
        self.backend.synchronize()

    def set_running(self, values):
        """Upload the running values (one float64 per Parameter), after a load."""
        self.backend.copy_from_host(self.running, np.asarray(values, dtype=np.float64))

    def to_host(self):
        """(steps, state) as host numpy copies: an int64 array and a list of lists."""
        b = self.backend
        return b.to_host(self.steps), [[b.to_host(a) for a in arrays] for arrays in self.state]

    def load(self, steps, arrays, lr):
        """Upload checked host values: `steps` (int64, one per Parameter), `arrays`
        as (device state array, host array of its shape), and the lr."""
        b = self.backend
        for current, arr in arrays:
            b.copy_from_host(current, np.asarray(arr, dtype=current.dtype, order="C"))
        b.copy_from_host(self.steps, np.asarray(steps, dtype=np.int64, order="C"))
        self.set_lr(lr)


# ---------------------------------------------------------------- clipping

_scratch = None          # (backend, owner array) shared by the clipping functions


def _scratch_owner(b, rows):
    """An owner array with at least `rows` entries, all NO_OWNER (they are reset after use)."""
    global _scratch
    if _scratch is None or _scratch[0] is not b or _scratch[1].size < rows:
        _scratch = (b, new_owner(b, rows))
    return _scratch[1]


def _grads(params, who):
    """[(grad, passes or None, row_len)] for the Parameters holding a gradient."""
    out = []
    for p in params:
        mode, grad, touched = grad_state(p)
        if mode == "dense":
            out.append((grad, None, 0))
        elif mode == "sparse":
            out.append((grad, _passes(touched, who), _row_len(grad)))
    return out


def _launch_each(b, grads, kernel, *tail):
    """Run `kernel`'s _dense or _rows form, `kernel_dense(grad, n, *tail)` or
    `kernel_rows(grad, ids, owner, base, n_ids, row_len, *tail)`, on each gradient of `grads`."""
    for grad, passes, row_len in grads:
        if passes is None:
            b.launch(kernel + "_dense", grad.dtype, grad.size, grad, np.int64(grad.size), *tail)
        else:
            owner = _scratch_owner(b, grad.shape[0])
            _launch_rows(b, kernel + "_rows", grad.dtype, owner, passes, row_len, (grad,), tail)


def clip_grad_norm(params, max_norm, q):
    """`fa.optim.clip_grad_norm` for Parameters on a device (checked arguments:
    `max_norm` >= 0, `q` > 0 or inf). Returns the norm before clipping as a float."""
    b = _backend.get()
    acc = b.zeros(1, np.float64)
    grads = _grads(params, "clip_grad_norm")
    _launch_each(b, grads, "grad_norm", acc, np.float64(q))
    acc = float(b.to_host(acc)[0])
    if math.isinf(q) or q == 1:
        total = acc
    elif q == 2:
        total = math.sqrt(acc)
    else:
        total = acc ** (1 / q)
    factor = max_norm / (total + 1e-6)
    if factor < 1:
        _launch_each(b, grads, "scale", np.float64(factor))
    return total


def clip_grad_value(params, clip_value):
    """`fa.optim.clip_grad_value` for Parameters on a device (`clip_value` >= 0, checked)."""
    b = _backend.get()
    limit = np.float64(clip_value)
    for grad, passes, row_len in _grads(params, "clip_grad_value"):
        if passes is None:
            b.launch("clamp_dense", grad.dtype, grad.size, grad, np.int64(grad.size), limit)
        else:
            for _, ids in passes:
                b.launch("clamp_rows", grad.dtype, ids.size * row_len, grad, ids,
                         np.int64(ids.size), np.int64(row_len), limit)
