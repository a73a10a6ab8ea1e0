"""Elementwise ops: unary functions and broadcasting + - * /.

Each op's forward value and its derivative stand side by side in the rules
`fa_unary_value`/`fa_unary_slope` and `fa_binary_value`/`fa_binary_da`/`fa_binary_db`
of rules.h, which the CUDA kernels share; the loops below apply them to whole
buffers.
"""
import numpy as np
cimport numpy as cnp
from libc.stdlib cimport malloc, free
from cython cimport floating

from fastad_cy.graph cimport (Variable, init_node, init_node_like, finish, as_variable,
                              same_dtype, require_float, on_device, device_ops)
from fastad_cy.broadcast cimport (Bcast, BcastPos, broadcast_shapes, bcast_setup,
                                  bcast_start, bcast_next_row)
from fastad_cy.loops cimport vec_zero
from fastad_cy.scalar cimport (U_NEG, U_EXP, U_LOG, U_TANH, U_SIGMOID, U_RELU, U_SOFTPLUS,
                               U_LOGSIGMOID, U_SQRT, U_SQUARE, U_ABS, U_POW, U_LEAKY_RELU,
                               U_GELU, U_GELU_TANH, U_ELU, U_SILU, U_CLAMP_MIN, U_CLAMP_MAX,
                               U_ADD_SCALAR, U_RSUB_SCALAR, U_MUL_SCALAR, U_DIV_SCALAR,
                               U_RDIV_SCALAR,
                               B_ADD, B_SUB, B_MUL, B_DIV, unary_value, unary_slope,
                               binary_value, binary_da, binary_db)

cnp.import_array()


# ------------------------------------------------------------------ unary

cdef void unary_forward(int op, const floating* x, floating* y, Py_ssize_t n,
                        floating p) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        y[i] = unary_value(op, x[i], p)


cdef void unary_backward(int op, const floating* x, const floating* y, const floating* gy,
                         floating* gx, Py_ssize_t n, floating p, bint add) noexcept nogil:
    cdef Py_ssize_t i
    if add:
        for i in range(n):
            gx[i] += gy[i] * unary_slope(op, x[i], y[i], p)
    else:
        for i in range(n):
            gx[i] = gy[i] * unary_slope(op, x[i], y[i], p)


cdef class Unary(Variable):
    cdef int code
    cdef double p
    cdef Variable x

    cdef int run_forward(self) except -1:
        if self.f64:
            unary_forward(self.code, <double*>self.x.val_ptr, <double*>self.val_ptr, self.size, self.p)
        else:
            unary_forward(self.code, <float*>self.x.val_ptr, <float*>self.val_ptr, self.size,
                          <float>self.p)
        return 0

    cdef int run_backward(self) except -1:
        cdef Variable x = self.x
        if not x.requires_grad:
            return 0
        cdef bint add = x.prepare_grad()
        if self.f64:
            unary_backward(self.code, <double*>x.val_ptr, <double*>self.val_ptr,
                           <double*>self.grad_ptr, <double*>x.grad_ptr, self.size, self.p, add)
        else:
            unary_backward(self.code, <float*>x.val_ptr, <float*>self.val_ptr,
                           <float*>self.grad_ptr, <float*>x.grad_ptr, self.size, <float>self.p, add)
        return 0


cdef Variable _unary(str name, int code, object x, double p=0):
    require_float(name, x, "x")
    if on_device(x):
        return device_ops().unary(name, code, x, p)
    cdef Unary node = Unary.__new__(Unary)
    node.code = code
    node.p = p
    node.x = <Variable>x
    init_node_like(node, name, (x,), <Variable>x)
    return finish(node)


def neg(x):
    """-x, elementwise.

    Same shape and dtype as x. Example::

        fa.neg(fa.Input([1.0, -2.0])).value   # [-1., 2.]
    """
    return _unary("neg", U_NEG, x)

def exp(x):
    """e**x, elementwise.

    Same shape and dtype as x. Example::

        fa.exp(fa.Input([0.0, 1.0])).value   # [1.    , 2.7183]
    """
    return _unary("exp", U_EXP, x)

def log(x):
    """Natural logarithm, elementwise (NaN/-inf outside x > 0, as numpy).

    Same shape and dtype as x. Example::

        fa.log(fa.Input([1.0, 2.0])).value   # [0.    , 0.6931]
    """
    return _unary("log", U_LOG, x)

def tanh(x):
    """Hyperbolic tangent, elementwise.

    Same shape and dtype as x. Example::

        fa.tanh(fa.Input([0.0, 1.0])).value   # [0.    , 0.7616]
    """
    return _unary("tanh", U_TANH, x)

def sigmoid(x):
    """1 / (1 + e**-x), elementwise, stable for large |x|.

    Same shape and dtype as x. Example::

        fa.sigmoid(fa.Input([0.0, 1.0])).value   # [0.5   , 0.7311]
    """
    return _unary("sigmoid", U_SIGMOID, x)

def relu(x):
    """max(x, 0), elementwise; its gradient at 0 is 0.

    Same shape and dtype as x. Example::

        fa.relu(fa.Input([-1.0, 2.0])).value   # [0., 2.]
    """
    return _unary("relu", U_RELU, x)

cdef double _real_number(str op, str argname, object value) except? -1.0:
    """`value` as a float, or a TypeError naming the op and the argument."""
    if (isinstance(value, (Variable, bool, str, bytes))
            or not np.isscalar(value) or not np.isreal(value)):
        raise TypeError(f"{op}: {argname} must be a real Python number, got "
                        f"{type(value).__name__} {value!r}")
    return float(value)


def leaky_relu(x, negative_slope=0.01):
    """x where x > 0, else negative_slope * x, elementwise; its gradient at 0 is negative_slope.

    `negative_slope` is a Python number. Same shape and dtype as x. Example::

        fa.leaky_relu(fa.Input([-1.0, 2.0]), 0.1).value   # [-0.1, 2. ]
    """
    return _unary("leaky_relu", U_LEAKY_RELU, x, _real_number("leaky_relu", "negative_slope",
                                                              negative_slope))


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

    As torch.nn.functional.elu; `alpha` is a Python number. Same shape and dtype
    as x. Example::

        fa.elu(fa.Input([-1.0, 2.0])).value   # [-0.6321,  2.    ]
    """
    return _unary("elu", U_ELU, x, _real_number("elu", "alpha", alpha))

def silu(x):
    """x * sigmoid(x) (also called swish), elementwise.

    Same shape and dtype as x. Example::

        fa.silu(fa.Input([-1.0, 1.0])).value   # [-0.2689,  0.7311]
    """
    return _unary("silu", U_SILU, x)

def hardtanh(x, min_val=-1.0, max_val=1.0):
    """x clamped into [min_val, max_val], elementwise, as torch.nn.functional.hardtanh.

    The gradient is 1 strictly inside (min_val, max_val) and 0 elsewhere, as
    PyTorch's. `min_val` <= `max_val` are Python numbers. Same shape and dtype as x.
    Example::

        fa.hardtanh(fa.Input([-3.0, 0.5, 2.0])).value   # [-1. ,  0.5,  1. ]
    """
    low = _real_number("hardtanh", "min_val", min_val)
    high = _real_number("hardtanh", "max_val", max_val)
    if not low <= high:
        raise ValueError(f"hardtanh: min_val must be <= max_val, got min_val={min_val!r}, "
                         f"max_val={max_val!r}")
    return _unary("hardtanh", U_CLAMP_MAX, _unary("hardtanh", U_CLAMP_MIN, x, low), high)

def softplus(x):
    """log(1 + e**x), elementwise, without overflow.

    Same shape and dtype as x. Example::

        fa.softplus(fa.Input([0.0, 1.0])).value   # [0.6931, 1.3133]
    """
    return _unary("softplus", U_SOFTPLUS, x)

def logsigmoid(x):
    """log(sigmoid(x)), elementwise, without overflow.

    Same shape and dtype as x. Example::

        fa.logsigmoid(fa.Input([0.0, 1.0])).value   # [-0.6931, -0.3133]
    """
    return _unary("logsigmoid", U_LOGSIGMOID, x)

def sqrt(x):
    """Square root, elementwise.

    Same shape and dtype as x. Example::

        fa.sqrt(fa.Input([4.0, 9.0])).value   # [2., 3.]
    """
    return _unary("sqrt", U_SQRT, x)

def square(x):
    """x * x, elementwise.

    Same shape and dtype as x. Example::

        fa.square(fa.Input([-1.0, 2.0])).value   # [1., 4.]
    """
    return _unary("square", U_SQUARE, x)

def abs(x):
    """|x|, elementwise; its gradient at 0 is 0.

    Same shape and dtype as x. Example::

        fa.abs(fa.Input([-1.0, 2.0])).value   # [1., 2.]
    """
    return _unary("abs", U_ABS, x)

def pow(x, exponent):
    """x ** exponent for a scalar (Python number) exponent, elementwise.

    Same shape and dtype as x; `v ** p` calls it. Example::

        fa.pow(fa.Input([4.0, 9.0]), 0.5).value   # [2., 3.]
    """
    if isinstance(exponent, Variable) or not np.isscalar(exponent) or isinstance(exponent, (str, bytes)):
        raise TypeError(f"pow: the exponent must be a Python number, got {type(exponent).__name__}")
    e = float(exponent)
    if e == 2:
        return _unary("square", U_SQUARE, x)
    if e == 1:
        return _unary("pow", U_MUL_SCALAR, x, 1.0)
    return _unary("pow", U_POW, x, e)


# ----------------------------------------------------------------- binary

cdef dict _BINARY_NAMES = {B_ADD: "add", B_SUB: "sub", B_MUL: "mul", B_DIV: "div"}


cdef void binary_forward(int op, const floating* a, Py_ssize_t sa, const floating* b,
                         Py_ssize_t sb, floating* y, Py_ssize_t n) noexcept nogil:
    """One row: y[i] = a[i*sa] op b[i*sb]; the common stride pairs get their own loop."""
    cdef Py_ssize_t i
    if sa == 1 and sb == 1:
        for i in range(n):
            y[i] = binary_value(op, a[i], b[i])
    elif sa == 1 and sb == 0:
        for i in range(n):
            y[i] = binary_value(op, a[i], b[0])
    elif sa == 0 and sb == 1:
        for i in range(n):
            y[i] = binary_value(op, a[0], b[i])
    else:
        for i in range(n):
            y[i] = binary_value(op, a[i * sa], b[i * sb])


cdef void binary_forward_all(int op, const Bcast* it, Py_ssize_t size, const floating* a,
                             const floating* b, floating* y) noexcept nogil:
    """The whole output: one flat row when `it` is NULL (equal shapes), else row by row."""
    cdef BcastPos pos
    cdef Py_ssize_t r, inner
    if it == NULL:
        binary_forward(op, a, 1, b, 1, y, size)
        return
    inner = it.shape[it.nd - 1]
    bcast_start(it, &pos)
    for r in range(it.rows):
        binary_forward(op, a + pos.oa, it.sa[it.nd - 1], b + pos.ob, it.sb[it.nd - 1],
                       y + r * inner, inner)
        bcast_next_row(it, &pos)


cdef void binary_backward_same(int op, bint to_a, const floating* a, const floating* b,
                               const floating* y, const floating* gy, floating* g,
                               Py_ssize_t n, bint add) noexcept nogil:
    """Gradient into a (to_a) or b when a, b and y share one shape."""
    cdef Py_ssize_t i
    if to_a and add:
        for i in range(n):
            g[i] += gy[i] * binary_da(op, a[i], b[i], y[i])
    elif to_a:
        for i in range(n):
            g[i] = gy[i] * binary_da(op, a[i], b[i], y[i])
    elif add:
        for i in range(n):
            g[i] += gy[i] * binary_db(op, a[i], b[i], y[i])
    else:
        for i in range(n):
            g[i] = gy[i] * binary_db(op, a[i], b[i], y[i])


cdef void binary_backward_bcast(int op, bint to_a, const floating* a, const floating* b,
                                const floating* y, const floating* gy, floating* g,
                                const Bcast* it) noexcept nogil:
    """Add the gradient into a (to_a) or b, summing over the axes it was broadcast along."""
    cdef BcastPos pos
    cdef Py_ssize_t r, i, inner = it.shape[it.nd - 1], o
    cdef Py_ssize_t sa = it.sa[it.nd - 1], sb = it.sb[it.nd - 1]
    cdef const floating* yr
    cdef const floating* gr
    bcast_start(it, &pos)
    for r in range(it.rows):
        yr = y + r * inner
        gr = gy + r * inner
        for i in range(inner):
            if to_a:
                o = pos.oa + i * sa
                g[o] += gr[i] * binary_da(op, a[o], b[pos.ob + i * sb], yr[i])
            else:
                o = pos.ob + i * sb
                g[o] += gr[i] * binary_db(op, a[pos.oa + i * sa], b[o], yr[i])
        bcast_next_row(it, &pos)


cdef class Binary(Variable):
    """a op b; `it` is set only when the shapes differ (broadcasting)."""
    cdef int code
    cdef Variable a, b
    cdef Bcast* it

    def __dealloc__(self):
        free(self.it)

    cdef int run_forward(self) except -1:
        if self.f64:
            binary_forward_all(self.code, self.it, self.size, <double*>self.a.val_ptr,
                               <double*>self.b.val_ptr, <double*>self.val_ptr)
        else:
            binary_forward_all(self.code, self.it, self.size, <float*>self.a.val_ptr,
                               <float*>self.b.val_ptr, <float*>self.val_ptr)
        return 0

    cdef int run_backward(self) except -1:
        if self.a.requires_grad:
            self._backward_into(self.a, True)
        if self.b.requires_grad:
            self._backward_into(self.b, False)
        return 0

    cdef int _backward_into(self, Variable x, bint to_a) except -1:
        cdef bint add = x.prepare_grad()
        if self.it == NULL:
            if self.f64:
                binary_backward_same(self.code, to_a, <double*>self.a.val_ptr, <double*>self.b.val_ptr,
                                     <double*>self.val_ptr, <double*>self.grad_ptr,
                                     <double*>x.grad_ptr, self.size, add)
            else:
                binary_backward_same(self.code, to_a, <float*>self.a.val_ptr, <float*>self.b.val_ptr,
                                     <float*>self.val_ptr, <float*>self.grad_ptr,
                                     <float*>x.grad_ptr, self.size, add)
            return 0
        if self.f64:
            if not add:
                vec_zero(<double*>x.grad_ptr, x.size)
            binary_backward_bcast(self.code, to_a, <double*>self.a.val_ptr, <double*>self.b.val_ptr,
                                  <double*>self.val_ptr, <double*>self.grad_ptr,
                                  <double*>x.grad_ptr, self.it)
        else:
            if not add:
                vec_zero(<float*>x.grad_ptr, x.size)
            binary_backward_bcast(self.code, to_a, <float*>self.a.val_ptr, <float*>self.b.val_ptr,
                                  <float*>self.val_ptr, <float*>self.grad_ptr,
                                  <float*>x.grad_ptr, self.it)
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


cdef Variable _constant(str name, str argname, object x, Variable like):
    """x as a Variable for `name`: itself, or a constant made from a number or array."""
    try:
        return as_variable(x, like)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name}: operand {argname} must be a Variable, a number or an array of "
                        f"real numbers, got {type(x).__name__} ({e})") from None


cdef Variable _binary(int code, object a, object b):
    cdef str name = _BINARY_NAMES[code]
    cdef Variable va, vb
    if isinstance(a, Variable) and _is_number(b) or isinstance(b, Variable) and _is_number(a):
        return _with_number(code, a, b)
    if isinstance(a, Variable):
        require_float(name, a, "a")
        va = <Variable>a
        vb = _constant(name, "b", b, va)
        require_float(name, vb, "b")
    elif isinstance(b, Variable):
        require_float(name, b, "b")
        vb = <Variable>b
        va = _constant(name, "a", a, vb)
    else:
        raise TypeError(f"{name}: at least one operand must be a fastad Variable")
    same_dtype(name, va, vb)
    if on_device(va) or on_device(vb):
        shape = va._shape if va._shape == vb._shape else broadcast_shapes(name, va._shape, vb._shape)
        return device_ops().binary(name, va, vb, shape)
    cdef Binary node = Binary.__new__(Binary)
    node.code = code
    node.a = va
    node.b = vb
    if va._shape == vb._shape:
        init_node_like(node, name, (va, vb), va)
        return finish(node)
    shape = broadcast_shapes(name, va._shape, vb._shape)
    init_node(node, name, (va, vb), shape, va.f64)
    node.it = <Bcast*>malloc(sizeof(Bcast))
    if node.it == NULL:
        raise MemoryError()
    bcast_setup(node.it, shape, va._shape, vb._shape)
    return finish(node)


def add(a, b):
    """a + b with numpy broadcasting (either side may be a number or an array).

    The result has the broadcast shape of a and b; each gradient is summed back
    over the axes its operand was broadcast along. `a + b` calls it. Example::

        x = fa.Input(np.ones((2, 3)))
        b = fa.Parameter(np.zeros(3))
        fa.add(x, b).shape                       # (2, 3); b.grad gets shape (3,)
    """
    return _binary(B_ADD, a, b)

def sub(a, b):
    """a - b with numpy broadcasting.

    The result has the broadcast shape of a and b; each gradient is summed back
    over the axes its operand was broadcast along. `a - b` calls it. Example::

        x = fa.Input(np.ones((2, 3)))
        b = fa.Parameter(np.zeros(3))
        fa.sub(x, b).shape                       # (2, 3); b.grad gets shape (3,)
    """
    return _binary(B_SUB, a, b)

def mul(a, b):
    """a * b with numpy broadcasting.

    The result has the broadcast shape of a and b; each gradient is summed back
    over the axes its operand was broadcast along. `a * b` calls it. Example::

        x = fa.Input(np.ones((2, 3)))
        b = fa.Parameter(np.zeros(3))
        fa.mul(x, b).shape                       # (2, 3); b.grad gets shape (3,)
    """
    return _binary(B_MUL, a, b)

def div(a, b):
    """a / b with numpy broadcasting.

    The result has the broadcast shape of a and b; each gradient is summed back
    over the axes its operand was broadcast along. `a / b` calls it. Example::

        x = fa.Input(np.ones((2, 3)))
        b = fa.Parameter(np.zeros(3))
        fa.div(x, b).shape                       # (2, 3); b.grad gets shape (3,)
    """
    return _binary(B_DIV, a, b)
