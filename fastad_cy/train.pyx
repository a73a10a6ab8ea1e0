"""Per-example training loops run in compiled code: `fastad.train`.

A Python loop of `set_value`/`forward`/`backward`/`step` costs a few
microseconds per example in interpreter overhead alone. `train` runs the same
steps over whole feed arrays with no Python between them, which is what makes
a million sparse examples a second per core possible (and what Hogwild
workers call on their shard).
"""
import numbers
from collections.abc import Mapping

import numpy as np
cimport numpy as cnp
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.string cimport memcpy

from fastad_cy.graph cimport Variable, IndexInput, Input, replay_forward, replay_backward
from fastad_cy.optim cimport Optimizer

cnp.import_array()


cdef object _feed_array(Variable leaf, object data, Py_ssize_t* count):
    """`data` as a C-contiguous array of shape (N,) + leaf.shape, checked."""
    if not isinstance(leaf, (Input, IndexInput)):
        # A Parameter too is a leaf, but feeding it would overwrite what the optimizer learns.
        raise TypeError(f"train: feeds must be keyed by Input or IndexInput leaves, got '{leaf.op_name}'")
    if np.ndim(data) == 0:
        raise ValueError(f"train: the feed for a leaf of shape {leaf.shape} is a scalar; "
                         f"expected an array of shape (N,) + {leaf.shape}")
    if isinstance(leaf, IndexInput):
        arr = np.asarray(data)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"train: the feed for an IndexInput must hold integers, got {arr.dtype}")
        if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
            raise IndexError(f"train: a feed for an IndexInput holds an id too large for int64 ({arr.max()})")
        arr = np.ascontiguousarray(arr, dtype=np.int64)
        if arr.size and arr.min() < 0:
            raise IndexError(f"train: a feed for an IndexInput holds a negative id ({arr.min()})")
    else:
        try:
            arr = np.ascontiguousarray(data, dtype=leaf.dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"train: the feed for an Input of shape {leaf.shape} must hold real "
                            f"numbers ({e})") from None
    shape = leaf.shape
    if arr.shape[1:] != shape and not (arr.ndim == 1 and shape == (1,)):
        raise ValueError(f"train: a feed of shape {arr.shape} does not fit a leaf of shape {shape}; "
                         f"expected (N,) + {shape}")
    count[0] = arr.shape[0]
    return arr


def train(loss, optimizer, feeds, epochs=1, bint shuffle=False, seed=None, progress=None,
          Py_ssize_t report_every=100_000):
    """Train by replaying one graph per example, in compiled code.

    For each example e (in order, or shuffled each epoch): copy row e of every
    feed into its leaf, `loss.forward()`, `loss.backward()`,
    `optimizer.step()`, `optimizer.zero_grad()`.

    loss       a one-element Variable built once over the leaves in `feeds`.
    optimizer  any fastad optimizer over the parameters to train.
    feeds      {leaf: array}: an array of shape (N,) + leaf.shape per leaf
               (IndexInput or Input), or (N,) for a leaf of shape (1,).
    shuffle    visit the examples in a new random order each epoch (from a
               numpy Generator seeded with `seed`); the feeds are copied in
               that order once per epoch, which takes memory for one copy.
    progress   optional callable(examples_done) called every `report_every`
               examples and at the end.

    Returns the mean loss of each epoch (a list of floats).

    >>> u, i = fa.IndexInput([0]), fa.IndexInput([0])
    >>> loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i])).sum()
    >>> fa.train(loss, fa.optim.SGD([U, V], lr=0.05), {u: users, i: items}, epochs=2)
    """
    if not isinstance(loss, Variable) or (<Variable>loss).size != 1:
        raise TypeError("train: `loss` must be a one-element fastad Variable")
    if not (<Variable>loss).requires_grad:
        raise RuntimeError("train: `loss` does not depend on any Parameter")
    if (<Variable>loss)._device is not None:
        raise ValueError(f"train: the compiled loop runs on the CPU, and `loss` is on "
                         f"{(<Variable>loss)._device}; on a GPU, replay the step (forward, "
                         f"backward, optimizer.step) or capture it with fa.cuda.capture")
    if not hasattr(optimizer, "step") or not hasattr(optimizer, "zero_grad"):
        raise TypeError("train: `optimizer` must have step() and zero_grad() (a fastad optimizer)")
    if isinstance(optimizer, Optimizer) and (<Optimizer>optimizer)._device is not None:
        raise ValueError("train: the compiled loop runs on the CPU, and the optimizer's "
                         "Parameters are on a GPU; build the graph and the optimizer on one device")
    if isinstance(epochs, bool) or not isinstance(epochs, numbers.Integral):
        raise TypeError(f"train: epochs must be an integer, got {epochs!r}")
    if epochs < 0 or report_every < 1:
        raise ValueError("train: epochs must be >= 0 and report_every >= 1")
    if not isinstance(feeds, Mapping):
        raise TypeError(f"train: feeds must be a dict {{leaf: array}}, got {type(feeds).__name__}")
    if not feeds:
        raise ValueError("train: `feeds` is empty; give at least one {leaf: array}")
    cdef Variable root = <Variable>loss
    cdef list leaves = [], arrays = []
    cdef Py_ssize_t n = -1, count = 0
    for leaf, data in feeds.items():
        if not isinstance(leaf, Variable):
            raise TypeError(f"train: feed keys must be leaves, got {type(leaf).__name__}")
        if leaf.device != "cpu":
            raise ValueError(f"train: the compiled loop runs on the CPU; the fed leaf {leaf!r} "
                             f"is on {leaf.device}")
        arrays.append(_feed_array(<Variable>leaf, data, &count))
        if n >= 0 and count != n:
            raise ValueError(f"train: feeds hold different numbers of examples ({n} and {count})")
        n = count
        leaves.append(leaf)
    cdef Py_ssize_t k, nfeeds = len(leaves), e = 0, epoch = 0, done = 0
    cdef char** src = <char**>PyMem_Malloc(nfeeds * sizeof(char*))
    cdef char** dst = <char**>PyMem_Malloc(nfeeds * sizeof(char*))
    cdef Py_ssize_t* width = <Py_ssize_t*>PyMem_Malloc(nfeeds * sizeof(Py_ssize_t))
    if src == NULL or dst == NULL or width == NULL:
        PyMem_Free(src)
        PyMem_Free(dst)
        PyMem_Free(width)
        raise MemoryError()
    rng = np.random.default_rng(seed)
    order = None
    # A fastad optimizer is called through C; any other object with step()/zero_grad() through Python.
    cdef Optimizer fast_opt = optimizer if isinstance(optimizer, Optimizer) else None
    step = optimizer.step
    zero_grad = optimizer.zero_grad
    cdef double total
    means = []
    try:
        for k in range(nfeeds):
            src[k] = <char*>cnp.PyArray_DATA(arrays[k])
            dst[k] = (<Variable>leaves[k]).val_ptr
            width[k] = cnp.PyArray_NBYTES(arrays[k]) // n if n else 0
        zero_grad()
        for epoch in range(epochs):
            if shuffle:
                # Copy the feeds in the new order once per epoch, so that the loop
                # reads them sequentially instead of missing the cache per example.
                order = rng.permutation(n)
                epoch_arrays = [arr[order] for arr in arrays]
                for k in range(nfeeds):
                    src[k] = <char*>cnp.PyArray_DATA(epoch_arrays[k])
            total = 0
            for e in range(n):
                for k in range(nfeeds):
                    memcpy(dst[k], src[k] + e * width[k], width[k])
                replay_forward(root)
                total += (<double*>root.val_ptr)[0] if root.f64 else (<float*>root.val_ptr)[0]
                replay_backward(root, None)
                if fast_opt is not None:
                    fast_opt.step()
                    fast_opt.zero_grad()
                else:
                    step()
                    zero_grad()
                done += 1
                if progress is not None and done % report_every == 0:
                    progress(done)
            means.append(total / n if n else float("nan"))
        if progress is not None and done % report_every:
            progress(done)
    except (IndexError, FloatingPointError) as err:
        # Name the example (a bad id, a NaN); the examples before it have been applied.
        row = int(order[e]) if shuffle else e
        raise type(err)(f"train: epoch {epoch}, row {row} of the feeds: {err}") from err
    finally:
        PyMem_Free(src)
        PyMem_Free(dst)
        PyMem_Free(width)
    return means
