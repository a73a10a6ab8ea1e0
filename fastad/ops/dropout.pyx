"""Dropout: x times a random mask that is drawn anew on every forward.

The mask is a node of its own (`DropoutMask`, no inputs, no gradient): it holds p,
a random stream (xoshiro256**, rng.h, started from four words of a numpy
Generator when it is built) and a `TrainingFlag`, which it reads on every
forward. In training mode each element is 0 with probability p and 1 / (1 - p)
otherwise (inverted dropout: the expected output is the input); in eval mode every
element is 1. A graph built once and replayed (`forward()`, `fa.train`) so draws
a new mask on each pass and follows its Module's `train()`/`eval()` at replay
time. The output is `mul(x, mask)`; on a GPU the mask is drawn on the host and
copied over (fastad/cuda/ops/dropout.py).
"""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport uint64_t

from fastad._engine.graph cimport (Variable, init_node, finish, require_float, backend_of, value_array)
from fastad._engine.rng cimport fa_rng, fa_rng_next
from fastad.ops.elementwise import mul

cnp.import_array()


cdef class TrainingFlag:
    """Whether the dropout masks made with it drop (training) or keep everything (eval).

    Read by each mask on every forward, so switching it reaches graphs built
    before; a `fa.nn.Dropout` holds one and its `train()`/`eval()` set it.

    >>> flag = TrainingFlag(); flag.training = False
    """
    cdef public bint training

    def __init__(self, training=True):
        self.training = training

    def __repr__(self):
        return f"TrainingFlag(training={bool(self.training)})"


@cython.no_gc
cdef class DropoutMask(Variable):
    """0 with probability p, else 1 / (1 - p), per element, drawn on every forward while
    the flag says training; all ones otherwise."""
    cdef fa_rng rng
    cdef uint64_t drop_below       # a 53-bit draw below p * 2**53 drops its element
    cdef double scale              # 1 / (1 - p)
    cdef TrainingFlag flag

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef floating scale = <floating>self.scale
        cdef uint64_t drop_below = self.drop_below
        cdef fa_rng* rng = &self.rng
        cdef Py_ssize_t i
        if not self.flag.training:
            for i in range(self.size):
                out[i] = 1
            return 0
        for i in range(self.size):
            out[i] = scale if (fa_rng_next(rng) >> 11) >= drop_below else 0
        return 0

    def draw(self):
        """Draw the next mask into the value, as a forward does, and return the value."""
        self.run_forward()
        return value_array(self)


def dropout_mask(tuple shape, dtype, double p, TrainingFlag flag not None, seed):
    """A DropoutMask node of `shape` and float `dtype` on the CPU (see the module docstring),
    its first mask drawn now; `seed`: 4 uint64 words that start its random stream."""
    if not 0 <= p < 1:
        raise ValueError(f"dropout: p must be a number in [0, 1), got {p!r}")
    state = np.ascontiguousarray(seed, dtype=np.uint64)
    if state.shape != (4,) or not state.any():
        raise ValueError(f"dropout: seed must be 4 uint64 words, not all zero (a numpy "
                         f"Generator's bit_generator.random_raw(4)), got {seed!r}")
    cdef DropoutMask node = DropoutMask.__new__(DropoutMask)
    init_node(node, "dropout_mask", (), shape, np.dtype(dtype) == np.float64)
    node.redraws = True
    node.rng.s[0], node.rng.s[1], node.rng.s[2], node.rng.s[3] = state
    node.drop_below = <uint64_t>(p * 9007199254740992.0)
    node.scale = 1 / (1 - p)
    node.flag = flag
    return finish(node)


def dropout(x, double p, TrainingFlag flag not None, seed):
    """x times a dropout mask drawn anew on every forward: `mul(x, mask)`.

    p      the probability of zeroing an element, in [0, 1);
    flag   the TrainingFlag every forward reads (eval: the mask is all ones);
    seed   4 uint64 words that start the mask's random stream (a numpy
           Generator's `bit_generator.random_raw(4)`).

    `fa.nn.functional.dropout` and `fa.nn.Dropout` call this.
    """
    require_float("dropout", x, "x")
    if (dev := backend_of(x)) is not None:
        mask = dev.dropout_mask(x, p, flag, seed)
    else:
        mask = dropout_mask((<Variable>x)._shape, x.dtype, p, flag, seed)
    return mul(x, mask)
