"""Elementwise ops: unary functions, clip, broadcasting + - * / pow maximum minimum,
comparisons (0/1 masks) and where.

Each op's forward value and its derivative stand side by side in the rules
`fa_unary_value`/`fa_unary_slope` and `fa_binary_*` of rules.h, which the CUDA
kernels share; elementwise_loops.h applies them to whole buffers, one loop per op.
"""
cimport cython
cimport numpy as cnp
from cython cimport floating

from fastad._engine.graph cimport (Variable, TwoInputs, val_ptr_or_null, init_node, init_node_like,
                              finish, as_operand, float_operands, same_dtype, require_float,
                              backend_of, grad_enabled, check_real, is_real_number)
from fastad._engine.graph import register_methods
from fastad._engine.broadcast cimport (Bcast, BcastPos, broadcast_shapes, bcast_setup,
                                  bcast_start, bcast_next_row)
from fastad.ops.op_codes cimport *

cnp.import_array()


# ------------------------------------------------------------------ unary

cdef extern from "elementwise_loops.h":
    # One loop per op code (the code a constant there, so that the rule vectorises).
    void fa_unary_forward_f(int op, const float* x, float* y, Py_ssize_t n, float p) noexcept nogil
    void fa_unary_forward_d(int op, const double* x, double* y, Py_ssize_t n,
                            double p) noexcept nogil
    void fa_unary_backward_f(int op, const float* x, const float* y, const float* gy, float* gx,
                             Py_ssize_t n, float p, bint add) noexcept nogil
    void fa_unary_backward_d(int op, const double* x, const double* y, const double* gy,
                             double* gx, Py_ssize_t n, double p, bint add) noexcept nogil
    # One element: the rule itself (a whole-row loop costs more than it saves on one).
    float fa_binary_value_f(int op, float a, float b) noexcept nogil
    double fa_binary_value_d(int op, double a, double b) noexcept nogil
    float fa_binary_da_f(int op, float a, float b, float y) noexcept nogil
    double fa_binary_da_d(int op, double a, double b, double y) noexcept nogil
    float fa_binary_db_f(int op, float a, float b, float y) noexcept nogil
    double fa_binary_db_d(int op, double a, double b, double y) noexcept nogil
    # `rows` rows of n of a binary op, row strides ra and rb, element strides sa and sb (see
    # the header).
    void fa_binary_forward_f(int op, const float* a, Py_ssize_t ra, Py_ssize_t sa, const float* b,
                             Py_ssize_t rb, Py_ssize_t sb, float* y, Py_ssize_t rows,
                             Py_ssize_t n) noexcept nogil
    void fa_binary_forward_d(int op, const double* a, Py_ssize_t ra, Py_ssize_t sa, const double* b,
                             Py_ssize_t rb, Py_ssize_t sb, double* y, Py_ssize_t rows,
                             Py_ssize_t n) noexcept nogil
    void fa_binary_backward_f(int op, bint to_a, const float* a, Py_ssize_t ra, Py_ssize_t sa,
                              const float* b, Py_ssize_t rb, Py_ssize_t sb, const float* y,
                              const float* gy, float* g, Py_ssize_t rows, Py_ssize_t n,
                              bint add) noexcept nogil
    void fa_binary_backward_d(int op, bint to_a, const double* a, Py_ssize_t ra, Py_ssize_t sa,
                              const double* b, Py_ssize_t rb, Py_ssize_t sb, const double* y,
                              const double* gy, double* g, Py_ssize_t rows, Py_ssize_t n,
                              bint add) noexcept nogil


cdef inline void unary_forward(int op, const char* x, char* y, Py_ssize_t n, double p,
                               bint f64) noexcept nogil:
    if f64:
        fa_unary_forward_d(op, <const double*>x, <double*>y, n, p)
    else:
        fa_unary_forward_f(op, <const float*>x, <float*>y, n, <float>p)


cdef inline void unary_backward(int op, const char* x, const char* y, const char* gy, char* gx,
                                Py_ssize_t n, double p, bint add, bint f64) noexcept nogil:
    if f64:
        fa_unary_backward_d(op, <const double*>x, <const double*>y, <const double*>gy,
                            <double*>gx, n, p, add)
    else:
        fa_unary_backward_f(op, <const float*>x, <const float*>y, <const float*>gy, <float*>gx,
                            n, <float>p, add)


@cython.no_gc
cdef class Unary(Variable):
    cdef int code
    cdef double p
    cdef Variable x

    cdef int run_forward(self) except -1 nogil:
        unary_forward(self.code, self.x.val_ptr, self.val_ptr, self.size, self.p, self.f64)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        cdef bint add = self.x.prepare_grad()
        unary_backward(self.code, self.x.val_ptr, self.val_ptr, self.grad_ptr, self.x.grad_ptr,
                       self.size, self.p, add, self.f64)
        return 0


cdef Variable _unary(str name, int code, object x, double p=0):
    require_float(name, x, "x")
    if (dev := backend_of(x)) is not None:
        return dev.unary(name, code, x, p)
    cdef Unary node = Unary.__new__(Unary)
    node.code = code
    node.p = p
    node.x = <Variable>x
    init_node_like(node, name, (x,), <Variable>x)
    return finish(node)


# The functions of the op manifest's plain ops (unary, binary and comparisons),
# `__all__` and `_BINARY_NAMES`: written by fastad/ops/generate.py.
include "elementwise_ops.pxi"


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, else negative_slope * x, elementwise; its gradient at 0 is negative_slope.

    `negative_slope` is a finite Python number. Same shape and dtype as x. Example::

        fa.leaky_relu(fa.Input([-1.0, 2.0]), 0.1).value   # [-0.1, 2. ]
    """
    return _unary("leaky_relu", U_LEAKY_RELU, x, check_real("leaky_relu", "negative_slope", negative_slope))


def gelu(x, approximate="none"):
    """Gaussian error linear unit x * Phi(x), elementwise, as torch.nn.functional.gelu.

    `approximate="none"` (the default) uses the exact normal CDF Phi (through erf);
    `approximate="tanh"` uses PyTorch's tanh approximation
    0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3))). Same shape and dtype
    as x. Example::

        fa.gelu(fa.Input([-1.0, 1.0])).value   # [-0.1587,  0.8413]
    """
    if approximate == "none":
        return _unary("gelu", U_GELU, x)
    if approximate == "tanh":
        return _unary("gelu", U_GELU_TANH, x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")

def elu(x, alpha=1.0):
    """Exponential linear unit: x where x > 0, else alpha * (e**x - 1), elementwise.

    As torch.nn.functional.elu; `alpha` is a finite Python number. Same shape and
    dtype as x. Example::

        fa.elu(fa.Input([-1.0, 2.0])).value   # [-0.6321,  2.    ]
    """
    return _unary("elu", U_ELU, x, check_real("elu", "alpha", alpha))

def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clamped into [min_val, max_val], elementwise, as torch.nn.functional.hardtanh.

    The gradient is 1 strictly inside (min_val, max_val) and 0 elsewhere, as
    PyTorch's. `min_val` <= `max_val` are Python numbers, not NaN; an infinite one
    leaves that side open, as in `clip`. Same shape and dtype as x. Example::

        fa.hardtanh(fa.Input([-3.0, 0.5, 2.0])).value   # [-1. ,  0.5,  1. ]
    """
    low = check_real("hardtanh", "min_val", min_val, True)
    high = check_real("hardtanh", "max_val", max_val, True)
    if not low <= high:
        raise ValueError(f"hardtanh: min_val must be <= max_val, got min_val={min_val!r}, "
                         f"max_val={max_val!r}")
    return _unary("hardtanh", U_HARDTANH_MAX, _unary("hardtanh", U_HARDTANH_MIN, x, low), high)

def pow(x, exponent):
    """x ** exponent, elementwise.

    With a Python number exponent, a unary op on x (same shape and dtype); else x
    and exponent (Variables, numbers or arrays, at least one a Variable) broadcast
    as in `add`, and both get gradients: d/dx = exponent * x**(exponent - 1) (0
    where the exponent is 0), d/dexponent = x**exponent * log(x), which is 0 where
    x == 0 and exponent >= 0 and NaN where x < 0, as in PyTorch. `v ** p` and
    `2.0 ** v` call it. Example::

        fa.pow(fa.Input([4.0, 9.0]), 0.5).value                    # [2., 3.]
        fa.pow(2.0, fa.Parameter([1.0, 3.0])).value                # [2., 8.]
    """
    if not (isinstance(x, Variable) and is_real_number(exponent)):
        return _binary(B_POW, x, exponent)
    e = float(exponent)
    if e == 2:
        return _unary("square", U_SQUARE, x)
    if e == 1:
        return _unary("pow", U_MUL_SCALAR, x, 1.0)
    return _unary("pow", U_POW, x, e)


def clip(x, a_min=None, a_max=None):
    """x limited to [a_min, a_max], elementwise; None leaves that side open.

    The bounds are Python numbers, not NaN (an infinite one, like None, leaves
    its side open: a ValueError for NaN). The gradient is 1 where
    a_min <= x <= a_max (the bounds included) and 0 elsewhere, as torch.clamp;
    with a_min > a_max every element becomes a_max. Same shape and dtype as x.
    Example::

        fa.clip(fa.Input([-2.0, 0.5, 3.0]), 0, 1).value   # [0. , 0.5, 1. ]
    """
    if a_min is None and a_max is None:
        raise ValueError("clip: give a_min, a_max or both (None leaves one side open)")
    low = None if a_min is None else check_real("clip", "a_min", a_min, True)
    high = None if a_max is None else check_real("clip", "a_max", a_max, True)
    if low is not None:
        x = _unary("clip", U_CLAMP_MIN, x, low)
    if high is not None:
        x = _unary("clip", U_CLAMP_MAX, x, high)
    return x


# ------------------------------------------------- binary (and where's node)

cdef inline void binary_forward(int op, const floating* a, Py_ssize_t ra, Py_ssize_t sa,
                                const floating* b, Py_ssize_t rb, Py_ssize_t sb, floating* y,
                                Py_ssize_t rows, Py_ssize_t n) noexcept nogil:
    """`rows` rows of n: y[r*n + i] = a[r*ra + i*sa] op b[r*rb + i*sb]."""
    if rows == 1 and n == 1 and floating is float:
        y[0] = fa_binary_value_f(op, a[0], b[0])
    elif rows == 1 and n == 1:
        y[0] = fa_binary_value_d(op, a[0], b[0])
    elif floating is float:
        fa_binary_forward_f(op, a, ra, sa, b, rb, sb, y, rows, n)
    else:
        fa_binary_forward_d(op, a, ra, sa, b, rb, sb, y, rows, n)


cdef inline void binary_backward_rows(int op, bint to_a, const floating* a, Py_ssize_t ra,
                                      Py_ssize_t sa, const floating* b, Py_ssize_t rb,
                                      Py_ssize_t sb, const floating* y, const floating* gy,
                                      floating* g, Py_ssize_t rows, Py_ssize_t n,
                                      bint add) noexcept nogil:
    """`rows` rows of n of the gradient into a (to_a) or b; g has that side's strides."""
    cdef floating slope
    if rows == 1 and n == 1:
        if floating is float:
            slope = fa_binary_da_f(op, a[0], b[0], y[0]) if to_a else fa_binary_db_f(op, a[0], b[0], y[0])
        else:
            slope = fa_binary_da_d(op, a[0], b[0], y[0]) if to_a else fa_binary_db_d(op, a[0], b[0], y[0])
        g[0] = g[0] + gy[0] * slope if add else gy[0] * slope
    elif floating is float:
        fa_binary_backward_f(op, to_a, a, ra, sa, b, rb, sb, y, gy, g, rows, n, add)
    else:
        fa_binary_backward_d(op, to_a, a, ra, sa, b, rb, sb, y, gy, g, rows, n, add)


cdef void where_forward_row(const floating* c, Py_ssize_t sc, const floating* a, Py_ssize_t sa,
                            const floating* b, Py_ssize_t sb, floating* y,
                            Py_ssize_t n) noexcept nogil:
    # both sides are read before the pick, so that gcc selects without a branch
    cdef Py_ssize_t i
    cdef floating ai, bi
    if sc == 1 and sa == 1 and sb == 1:
        for i in range(n):
            ai = a[i]
            bi = b[i]
            y[i] = ai if c[i] != 0 else bi
    else:
        for i in range(n):
            ai = a[i * sa]
            bi = b[i * sb]
            y[i] = ai if c[i * sc] != 0 else bi


cdef void where_backward_same(bint to_a, const floating* c, const floating* gy, floating* g,
                              Py_ssize_t n, bint add) noexcept nogil:
    """Gradient into a (to_a: where c is nonzero) or b (where c is 0), all of one shape;
    gy is read before the pick, so that gcc selects without a branch."""
    cdef Py_ssize_t i
    cdef floating gi
    if add:
        for i in range(n):
            gi = gy[i]
            g[i] += gi if (c[i] != 0) == to_a else 0
    else:
        for i in range(n):
            gi = gy[i]
            g[i] = gi if (c[i] != 0) == to_a else 0


cdef void where_backward_row(bint to_a, const floating* c, Py_ssize_t sc, const floating* gy,
                             floating* g, Py_ssize_t sg, Py_ssize_t n) noexcept nogil:
    """One row of a broadcast where's gradient, added into a (to_a: where c is nonzero) or b."""
    cdef Py_ssize_t i
    for i in range(n):
        if (c[i * sc] != 0) == to_a:
            g[i * sg] += gy[i]


cdef inline void forward_row(int op, const floating* c, Py_ssize_t sc, const floating* a,
                             Py_ssize_t sa, const floating* b, Py_ssize_t sb, floating* y,
                             Py_ssize_t n) noexcept nogil:
    """One row of a Binary: where's pick when c is not NULL, else binary_forward's."""
    if c != NULL:
        where_forward_row(c, sc, a, sa, b, sb, y, n)
    else:
        binary_forward(op, a, 0, sa, b, 0, sb, y, 1, n)


@cython.no_gc
cdef class Binary(TwoInputs):
    """a op b, or, with `cond` set, where's pick: a where cond is nonzero, else b. `it` is set
    only when the shapes differ (broadcasting)."""
    cdef int code
    cdef Variable cond              # where's condition; None for the other ops

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """The whole output: one flat row when `it` is NULL (one shape), rows of a two-axis
        broadcast in one call, else row by row."""
        cdef const floating* a = <floating*>self.a.val_ptr
        cdef const floating* b = <floating*>self.b.val_ptr
        cdef const floating* c = <floating*>val_ptr_or_null(self.cond)
        cdef const Bcast* it = self.it
        cdef BcastPos pos
        cdef Py_ssize_t r, inner, last
        if it == NULL:
            forward_row(self.code, c, 1, a, 1, b, 1, y, self.size)
            return 0
        last = it.nd - 1
        inner = it.shape[last]
        if it.nd == 2 and c == NULL:
            binary_forward(self.code, a, it.sa[0], it.sa[1], b, it.sb[0], it.sb[1], y, it.rows, inner)
            return 0
        bcast_start(it, &pos)
        for r in range(it.rows):
            forward_row(self.code, c + pos.oc if c != NULL else NULL, it.sc[last], a + pos.oa,
                        it.sa[last], b + pos.ob, it.sb[last], y + r * inner, inner)
            bcast_next_row(it, &pos)
        return 0

    cdef int _gradient(self, char* g, bint to_a, bint add) except -1 nogil:
        return (self._gradient_into(<double*>g, to_a, add) if self.f64
                else self._gradient_into(<float*>g, to_a, add))

    cdef int _gradient_into(self, floating* g, bint to_a, bint add) except -1 nogil:
        """The gradient g into a (to_a) or b: written or added (`add`) when `it` is NULL (one
        shape), else added (rows of a two-axis broadcast in one call, else row by row),
        summed over the axes it was broadcast along."""
        cdef const floating* a = <floating*>self.a.val_ptr
        cdef const floating* b = <floating*>self.b.val_ptr
        cdef const floating* c = <floating*>val_ptr_or_null(self.cond)
        cdef const floating* y = <floating*>self.val_ptr
        cdef const floating* gy = <floating*>self.grad_ptr
        cdef const Bcast* it = self.it
        cdef BcastPos pos
        cdef Py_ssize_t r, inner, last
        if it == NULL:
            if c != NULL:
                where_backward_same(to_a, c, gy, g, self.size, add)
            else:
                binary_backward_rows(self.code, to_a, a, 0, 1, b, 0, 1, y, gy, g, 1, self.size, add)
            return 0
        last = it.nd - 1
        inner = it.shape[last]
        if it.nd == 2 and c == NULL:
            binary_backward_rows(self.code, to_a, a, it.sa[0], it.sa[1], b, it.sb[0], it.sb[1], y, gy,
                                 g, it.rows, inner, True)
            return 0
        bcast_start(it, &pos)
        for r in range(it.rows):
            if c != NULL:
                where_backward_row(to_a, c + pos.oc, it.sc[last], gy + r * inner,
                                   g + (pos.oa if to_a else pos.ob),
                                   it.sa[last] if to_a else it.sb[last], inner)
            else:
                binary_backward_rows(self.code, to_a, a + pos.oa, 0, it.sa[last], b + pos.ob, 0,
                                     it.sb[last], y + r * inner, gy + r * inner,
                                     g + (pos.oa if to_a else pos.ob), 1, inner, True)
            bcast_next_row(it, &pos)
        return 0


cdef inline bint _is_number(object x):
    return isinstance(x, (float, int)) and not isinstance(x, bool)


cdef Variable _with_number(int code, object a, object b):
    """a op b where exactly one side is a Python number: one Unary node."""
    if _is_number(b):
        if code == B_ADD: return _unary("add", U_ADD_SCALAR, a, b)
        if code == B_SUB: return _unary("sub", U_ADD_SCALAR, a, -b)
        if code == B_MUL: return _unary("mul", U_MUL_SCALAR, a, b)
        return _unary("div", U_DIV_SCALAR, a, b)
    if code == B_ADD: return _unary("add", U_ADD_SCALAR, b, a)
    if code == B_SUB: return _unary("sub", U_RSUB_SCALAR, b, a)
    if code == B_MUL: return _unary("mul", U_MUL_SCALAR, b, a)
    return _unary("div", U_RDIV_SCALAR, b, a)


cdef Variable _binary(int code, object a, object b):
    cdef str name = _BINARY_NAMES[code]
    cdef Variable va, vb
    if code <= B_DIV and (isinstance(a, Variable) and _is_number(b)
                          or isinstance(b, Variable) and _is_number(a)):
        return _with_number(code, a, b)
    if isinstance(a, Variable) and isinstance(b, Variable):    # without float_operands' tuple
        va = require_float(name, a, "a")
        vb = require_float(name, b, "b")
        same_dtype(name, va, vb)
    else:
        va, vb = float_operands(name, a, b)
    if (dev := backend_of(va, vb)) is not None:
        shape = va._shape if va._shape == vb._shape else broadcast_shapes(name, va._shape, vb._shape)
        return dev.binary(name, va, vb, shape)
    cdef Binary node = Binary.__new__(Binary)
    node.code = code
    node.a = va
    node.b = vb
    if va._shape == vb._shape:
        init_node_like(node, name, (va, vb), va)
        return finish(node)
    shape = broadcast_shapes(name, va._shape, vb._shape)
    init_node(node, name, (va, vb), shape, va.f64)
    bcast_setup(&node.it, shape, va._shape, vb._shape, ())
    return finish(node)


def unary_node(str name, int code, x, double p):
    """The Unary node `name` (op `code` of rules.h, parameter p) on x, as the public unary
    ops build it: fastad.training.autobatch replays a recorded unary op with it."""
    return _unary(name, code, x, p)


def binary_node(str name, a, b):
    """a `name` b for one of the arithmetic binary ops (add, sub, mul, div, pow, maximum,
    minimum), as the public ops build it: fastad.training.autobatch replays a recorded one with it."""
    cdef int code = _BINARY_NAMES.index(name)
    if code > B_MINIMUM:
        raise ValueError(f"binary_node: {name!r} is no arithmetic binary op")
    return _binary(code, a, b)


def maximum(a, b):
    """The larger of a and b, elementwise, with numpy broadcasting (either side may be
    a number or an array). A NaN on either side gives NaN.

    The gradient goes to the larger side; at a tie each side gets half, as
    torch.maximum. Example::

        fa.maximum(fa.Parameter([1.0, 5.0]), 2.0).value   # [2., 5.]
    """
    return _binary(B_MAXIMUM, a, b)

def minimum(a, b):
    """The smaller of a and b, elementwise; as `maximum` otherwise (the gradient goes to the
    smaller side, as torch.minimum). Example::

        fa.minimum(fa.Parameter([1.0, 5.0]), 2.0).value   # [1., 2.]
    """
    return _binary(B_MINIMUM, a, b)


# ------------------------------------------------------------ comparisons

cdef Variable _compare(int code, object a, object b):
    """A comparison node: a Binary (or device) node that passes no gradient back."""
    cdef Variable node = _binary(code, a, b)
    node.requires_grad = False
    return node

def greater(a, b):
    """a > b elementwise as 1.0 / 0.0 in the operands' float dtype, with numpy
    broadcasting; `a > b` calls it.

    A comparison node has no gradient (nothing flows back through it) and is
    recomputed on every replay, so a mask built from it follows `set_value`::

        x = fa.Input([-1.0, 2.0])
        y = fa.where(x > 0, x, 0.01 * x)      # leaky ReLU; y.value: [-0.01, 2.]
        x.set_value([3.0, -4.0]); y.forward() # y.value: [3., -0.04]
    """
    return _compare(B_GREATER, a, b)

def equal(a, b):
    """a == b elementwise as 1.0 / 0.0 in the operands' float dtype, with numpy
    broadcasting; `a == b` calls it (Variables still hash by identity, so they stay
    usable as dict keys). No gradient; recomputed on replay (see `greater`).

    Example: ``fa.equal(fa.Input([1.0, 2.0]), 2.0).value   # [0., 1.]``
    """
    return _compare(B_EQUAL, a, b)

# ------------------------------------------------------------------ where

cdef tuple _where_shape(Variable cond, Variable a, Variable b):
    """The broadcast shape of cond, a and b, or a ValueError naming the argument that
    does not fit."""
    try:
        shape = broadcast_shapes("where", cond._shape, a._shape)
    except ValueError:
        raise ValueError(f"where: a has shape {a._shape}, which does not broadcast with "
                         f"cond's shape {cond._shape}") from None
    try:
        return broadcast_shapes("where", shape, b._shape)
    except ValueError:
        raise ValueError(f"where: b has shape {b._shape}, which does not broadcast with "
                         f"the shape {shape} of cond and a") from None


def where(cond, a, b):
    """a where cond is nonzero, else b, elementwise, broadcasting cond, a and b together.

    `cond` is a Variable (a comparison such as `x > 0`, recomputed on every
    replay) or an array (bool or numbers: a constant, fixed when the node is
    built); a and b are Variables, numbers or arrays, at least one a Variable.
    The gradient of a is the output's gradient where cond is nonzero (0
    elsewhere), that of b the rest; cond gets none. Example::

        x = fa.Parameter([-1.0, 2.0])
        fa.where(x > 0, x, 0.01 * x).value   # [-0.01, 2.  ]
    """
    cdef Variable va, vb, vc
    if not isinstance(a, Variable) and not isinstance(b, Variable):
        raise TypeError(f"where: a or b must be a fastad Variable, got {type(a).__name__} and "
                        f"{type(b).__name__}")
    va, vb = float_operands("where", a, b)
    vc = require_float("where", as_operand("where", "cond", cond, va), "cond")
    if vc.f64 != va.f64:
        raise TypeError(f"where: cond has dtype {vc.dtype}, a and b {va.dtype}; compare "
                        f"Variables of the dtype of a and b, or pass cond as an array")
    shape = _where_shape(vc, va, vb)
    cdef Variable node
    if (dev := backend_of(va, vb, vc)) is not None:
        node = dev.where(vc, va, vb, shape)
    else:
        node = _where_node(vc, va, vb, shape)
    node.requires_grad = (va.requires_grad or vb.requires_grad) and grad_enabled()
    return node


cdef Variable _where_node(Variable cond, Variable a, Variable b, tuple shape):
    cdef Binary node = Binary.__new__(Binary)
    node.cond = cond                # its code is unread
    node.a = a
    node.b = b
    init_node(node, "where", (cond, a, b), shape, a.f64)
    if not (cond._shape == a._shape == b._shape):
        bcast_setup(&node.it, shape, a._shape, b._shape, cond._shape)
    return finish(node)


# Variable's operators and methods
register_methods(add=add, sub=sub, mul=mul, div=div, pow=pow, neg=neg, equal=equal,
                 not_equal=not_equal, greater=greater, greater_equal=greater_equal, less=less,
                 less_equal=less_equal, exp=exp, log=log, tanh=tanh, sigmoid=sigmoid, relu=relu)
