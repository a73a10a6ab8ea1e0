"""Shape ops: reshape, transpose, indexing, concat, stack, expand_dims, squeeze, split, flip, tile,
and detach (x's value without its gradient).

Three node kinds do the work, each with its forward and backward side by side:

- `View`: the output is a contiguous run of the input's buffer seen with a new
  shape (reshape, and any index that picks a contiguous run such as `v[2:5]` of
  a vector or `m[i]` of a matrix). Its value is a read-only numpy view of the
  input's buffer, which never moves, so forward costs nothing; it has its own
  gradient.
- `Gather`: transpose and every other index. At build, the flat input position
  of each output element is computed once; forward gathers, backward
  scatter-adds (an integer array may repeat a position).
- `IndexView`: reshape of integer ids (an IndexInput's, an argmax's): a view of
  their buffer that is itself an IndexInput, so that tables can be indexed by it.
- `Join`: concat and stack. Each input fills one block of every outer row of
  the output.

reshape, transpose and basic indexing (ints, slices, None, Ellipsis) let numpy
make the strided view of the input's buffer that they describe; a
C-contiguous one becomes a View, any other a Gather of its strided positions.
Integer arrays and boolean masks go through `_flat_positions`.
"""
import operator
from math import prod

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.stdlib cimport malloc, free
from cpython.ref cimport PyObject
from cython cimport floating

from fastad._engine.graph cimport (Variable, IndexInput, OneInput, init_node, init_node_on, init_view_node, finish, value_array, require_float, same_dtype,
                              backend_of, backend_among)
from fastad._engine.graph import register_methods
from fastad._engine.loops cimport element_size, put_values, zero_values, vec_zero
from fastad.ops.reduction import _normalize_axes

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["reshape", "transpose", "getitem", "concat", "stack", "expand_dims", "squeeze",
           "split", "flip", "tile", "detach"]


# -------------------------------------------------------------------- View

cdef void put_run(char* gx, Py_ssize_t nx, const char* g, Py_ssize_t offset, Py_ssize_t n,
                  bint add, bint f64) noexcept nogil:
    """gx[offset:offset+n] = g (or += g when `add`); writing also zeroes the rest of gx.
    Offsets and lengths count elements."""
    cdef Py_ssize_t size = element_size(f64)
    if not add:
        zero_values(gx, offset, f64)
        zero_values(gx + (offset + n) * size, nx - offset - n, f64)
    put_values(gx + offset * size, g, n, add, f64)


@cython.no_gc
cdef class View(Variable):
    """A contiguous run of x's buffer with another shape; the value aliases x's buffer."""
    cdef Variable x
    cdef Py_ssize_t offset          # the run's first element in x

    cdef int run_forward(self) except -1 nogil:
        return 0                    # the value is a view: it follows x by itself

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        cdef bint add = self.x.prepare_grad()
        put_run(self.x.grad_ptr, self.x.size, self.grad_ptr, self.offset, self.size, add, self.f64)
        return 0


@cython.no_gc
cdef class IndexView(IndexInput):
    """Integer ids of another shape: a read-only view of an integer node's buffer (an
    IndexInput's, or an op's such as argmax's), which follows its input by itself."""

    cdef int run_forward(self) except -1 nogil:
        return 0                    # the value is a view: it follows x by itself

    def set_value(self, ids):
        raise TypeError(f"{self.op_name}: a reshaped integer node shows its input's ids; set the "
                        f"input's value instead")

    def __repr__(self):
        return f"Variable(op={self.op_name!r}, shape={self._shape}, dtype=int64)"


# ------------------------------------------------------------------ Gather

@cython.no_gc
cdef class Gather(OneInput):
    """y.flat[i] = x.flat[positions[i]]; positions are checked once, at build."""
    cdef cnp.ndarray positions      # int64, C-contiguous, every entry in [0, x.size)
    cdef const int64_t* pos
    cdef bint each_once             # positions is a permutation of x's elements

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef const int64_t* pos = self.pos
        cdef Py_ssize_t i
        for i in range(self.size):
            y[i] = x[pos[i]]
        return 0

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* g, bint add) except -1 nogil:
        """x's gradient at pos[i] = g[i] (or += when adding: repeated positions sum)."""
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef const int64_t* pos = self.pos
        cdef Py_ssize_t i
        # A permutation writes every element of x's gradient once; any other
        # map leaves some untouched or hits some twice, so it must add into zeros.
        if not add and not self.each_once:
            vec_zero(gx, self.x.size)
            add = True
        if add:
            for i in range(self.size):
                gx[pos[i]] += g[i]
        else:
            for i in range(self.size):
                gx[pos[i]] = g[i]
        return 0


cdef Variable _gather(str op, Variable x, cnp.ndarray positions, bint each_once):
    """The node that picks x.flat[positions]; positions is int64, in range, C-contiguous."""
    cdef Gather node = Gather.__new__(Gather)
    node.x = x
    node.positions = positions
    node.pos = <const int64_t*>cnp.PyArray_DATA(positions)
    node.each_once = each_once
    init_node(node, op, (x,), (<object>positions).shape, x.f64)
    return finish(node)


# ---------------------------------------- numpy views of x's buffer as nodes

cdef void strided_positions(int64_t* out, Py_ssize_t size, int nd, const cnp.npy_intp* shape,
                            const Py_ssize_t* steps, Py_ssize_t start) noexcept nogil:
    """out[i] = start + sum_k index_k * steps[k] for the i-th multi-index of `shape` in C order."""
    cdef Py_ssize_t idx[cnp.NPY_MAXDIMS]
    cdef Py_ssize_t i, pos = start
    cdef int d
    for d in range(nd):
        idx[d] = 0
    for i in range(size):
        out[i] = pos
        d = nd - 1
        while d >= 0:
            idx[d] += 1
            pos += steps[d]
            if idx[d] < shape[d]:
                break
            pos -= steps[d] * shape[d]
            idx[d] = 0
            d -= 1


cdef Variable _from_view(str op, Variable x, cnp.ndarray view):
    """The node whose value is `view`, a view numpy made of x's buffer (no repeated elements)."""
    cdef Py_ssize_t item = cnp.PyArray_ITEMSIZE(view)
    cdef Py_ssize_t size = cnp.PyArray_SIZE(view), k
    cdef Py_ssize_t start = (<char*>cnp.PyArray_DATA(view) - x.val_ptr) // item
    cdef int nd = cnp.PyArray_NDIM(view)
    cdef Py_ssize_t steps[cnp.NPY_MAXDIMS]
    cdef View node
    if view is value_array(x):      # the read-only flag below must not reach x's own array
        view = view.view()
    if cnp.PyArray_IS_C_CONTIGUOUS(view):
        node = View.__new__(View)
        node.x = x
        node.offset = start if size else 0   # an empty view may point past x's end
        cnp.PyArray_CLEARFLAGS(view, cnp.NPY_ARRAY_WRITEABLE)
        init_node_on(node, op, (x,), view)
        return finish(node)
    for k in range(nd):
        steps[k] = cnp.PyArray_STRIDES(view)[k] // item
    positions = <cnp.ndarray>cnp.PyArray_EMPTY(nd, cnp.PyArray_DIMS(view), cnp.NPY_INT64, 0)
    strided_positions(<int64_t*>cnp.PyArray_DATA(positions), size, nd, cnp.PyArray_DIMS(view),
                      steps, start)
    # A view never repeats an element, so one as large as x is a permutation of it.
    return _gather(op, x, positions, size == x.size)


cdef Variable _row(str op, Variable x, object key):
    """x[key] for an int key of x's first axis, in range (negative from the end), of a
    C-contiguous x on the host: the View _from_view makes of numpy's view, made here without
    numpy's indexing, and without an array until its value is read (init_view_node): a
    tree's nodes each read their row this way. None for any other x or key: _index's general
    path then answers (and words the errors)."""
    cdef object owner = x._value if x._value is not None else x._value_block
    if (owner is None or len(x._shape) == 0
            or (x._value is not None and not cnp.PyArray_IS_C_CONTIGUOUS(x._value))):
        return None
    cdef Py_ssize_t n = x._shape[0], i
    try:
        i = key
    except OverflowError:
        return None
    if i < 0:
        i += n
    if not 0 <= i < n:
        return None
    cdef Py_ssize_t row = x.size // n
    cdef View node = View.__new__(View)
    node.x = x
    node.offset = i * row
    init_view_node(node, op, (x,), x._shape[1:], row, x.f64,
                   x.val_ptr + i * row * element_size(x.f64), owner)
    return finish(node)


cdef bint _is_basic_index(object part):
    """True for the parts of a key that numpy answers with a view: ints, slices, None, ...."""
    if type(part) is int or part is None or part is Ellipsis or type(part) is slice:
        return True
    return isinstance(part, (int, np.integer)) and not isinstance(part, (bool, np.bool_))


cdef object _flat_positions(tuple shape, object key):
    """x.flat positions of the elements of x[key], for an x of `shape` (numpy semantics).

    A flat position is the sum over axes of index * C-stride. Each axis's term
    is indexed from a zero-copy array of x's shape that varies along that axis
    alone, so numpy applies its rules (and its bounds checks) while the work and
    memory stay those of the output, not of x.
    """
    cdef Py_ssize_t nd = len(shape), k, j, stride = 1
    positions = np.zeros((), dtype=np.int64)[key] if nd == 0 else 0
    for k in range(nd - 1, -1, -1):
        along = np.arange(shape[k], dtype=np.int64) * stride
        steps = tuple(along.itemsize if j == k else 0 for j in range(nd))
        positions = positions + np.ndarray(shape, np.int64, along, 0, steps)[key]
        stride *= shape[k]
    return np.asarray(positions, dtype=np.int64, order="C")     # keeps a 0-d result 0-d


# ---------------------------------------------------------- public: views

def reshape(x, shape):
    """x with a new shape of the same size; one entry may be -1 (inferred).

    `shape` is an int or a tuple of ints. The value is a view of x's buffer
    (forward costs nothing); the gradient is x's gradient reshaped back.

    Integer ids (an IndexInput, or an integer node such as `fa.argmax`'s) reshape
    too, on the CPU: the result is integer ids that index tables as x does, and
    follow x's ids as they change (`set_value`, a sampler, a forward).

    >>> fa.reshape(fa.Parameter(np.arange(6.0)), (2, -1)).shape
    (2, 3)
    >>> fa.reshape(fa.argmax(fa.Input([[1.0, 5.0], [7.0, 2.0]]), axis=1), (2, 1)).value
    array([[1],
           [0]])
    """
    if shape is None:
        raise TypeError("reshape: shape must be an int or a tuple of ints, got None")
    if isinstance(x, IndexInput):
        return _reshaped_ids(<IndexInput>x, shape)
    require_float("reshape", x, "x")
    return _reshaped("reshape", <Variable>x, shape)


cdef IndexInput _reshaped_ids(IndexInput x, object shape):
    """The IndexView of x's ids with `shape` (checked by numpy; one -1 inferred)."""
    if x.on_device:
        raise ValueError(f"reshape: x holds integer ids on {x.device}; integer ids reshape on the "
                         f"CPU only (reshape the ids before moving them)")
    try:
        view = value_array(x).reshape(shape)
    except ValueError as e:
        raise ValueError(f"reshape: cannot reshape integer ids of shape {x._shape} ({x.size} "
                         f"elements) into {shape} ({e})") from None
    except TypeError as e:
        raise TypeError(f"reshape: shape must be an int or a tuple of ints, got {shape!r} ({e})") from None
    if view is value_array(x):
        view = view.view()
    cnp.PyArray_CLEARFLAGS(view, cnp.NPY_ARRAY_WRITEABLE)
    cdef IndexView node = IndexView.__new__(IndexView)
    init_node_on(node, "reshape", (x,), view)
    return node


cdef Variable _reshaped(str op, Variable v, object shape):
    """The `op` node that views x's buffer with `shape` (checked here; one -1 inferred)."""
    # On a device, a stand-in host array of x's shape (zero strides: it allocates nothing)
    # checks `shape` and infers the -1.
    dev = backend_of(v)
    cdef object source = (value_array(v) if dev is None
                          else np.broadcast_to(np.empty((), dtype=np.int8), v._shape))
    try:
        view = source.reshape(shape)
    except ValueError as e:
        raise ValueError(f"{op}: cannot reshape shape {v._shape} ({v.size} elements) "
                         f"into {shape} ({e})") from None
    except TypeError as e:
        raise TypeError(f"{op}: shape must be an int or a tuple of ints, got {shape!r} ({e})") from None
    if dev is not None:
        return dev.reshape(v, view.shape)
    return _from_view(op, v, view)


def detach(x):
    """x's value, through which no gradient flows: a stop-gradient (PyTorch's
    `detach`, JAX's `stop_gradient`).

    The result is a node of the graph, not a copy: its value is a view of x's
    buffer, so it follows x on every `forward()` (graph re-use, `fa.train`), and
    costs nothing; backward stops there, so a weight computed from the model's own
    scores (a rank weight, a target) scales a loss without being trained. Under
    `fa.autobatch`, detaching a recorded value raises NotImplementedError.

    >>> w = fa.Parameter([2.0, 3.0])
    >>> (fa.detach(w) * w).sum().backward()     # the gradient of c * w, c = w's value
    >>> w.grad
    array([2., 3.], dtype=float32)
    """
    cdef Variable v = require_float("detach", x, "x")
    cdef Variable node
    if (dev := backend_of(v)) is not None:
        node = dev.detach(v)                    # the device's view of x's buffer
    else:
        node = _from_view("detach", v, value_array(v))
    node.requires_grad = False
    return node


cdef tuple _transpose_axes(tuple shape, object axes):
    cdef Py_ssize_t nd = len(shape)
    if axes is None:
        return tuple(range(nd - 1, -1, -1))
    if not isinstance(axes, (tuple, list)):
        axes = (axes,)
    try:
        given = tuple(operator.index(a) for a in axes)
    except TypeError:
        raise TypeError(f"transpose: axes must be integers, got {axes!r}") from None
    if len(given) != nd:
        raise ValueError(f"transpose: axes {given} has {len(given)} entries, but shape {shape} "
                         f"has {nd} axes")
    normal = tuple(a + nd if a < 0 else a for a in given)
    if sorted(normal) != list(range(nd)):
        raise ValueError(f"transpose: axes {given} is not a permutation of the {nd} axes of "
                         f"shape {shape} (each of 0..{nd - 1}, or its negative, exactly once)")
    return normal


def transpose(x, axes=None):
    """x with its axes permuted: output axis i is input axis axes[i].

    `axes=None` reverses them (`x.T`). Negative axes count from the end.

    >>> fa.transpose(fa.Parameter(np.zeros((2, 3, 4))), (1, 0, 2)).shape
    (3, 2, 4)
    """
    cdef Variable v = require_float("transpose", x, "x")
    if (dev := backend_of(v)) is not None:
        return dev.transpose(v, _transpose_axes(v._shape, axes))
    return _from_view("transpose", v, value_array(v).transpose(_transpose_axes(v._shape, axes)))


def getitem(x, key):
    """x[key] with numpy's indexing rules; the gradient scatters back (repeats add up).

    Keys: ints (negative count from the end), slices with any step, None
    (np.newaxis), Ellipsis, integer arrays or lists, boolean masks, and tuples of
    these. An IndexInput key goes to `take` (sparse gradient), not here. The key
    is fixed when the node is built.

    >>> v = fa.Parameter(np.arange(12.0).reshape(3, 4))
    >>> getitem(v, (slice(None, None, -1), [0, 0, 3])).shape
    (3, 3)
    """
    return _index("getitem", require_float("getitem", x, "x"), key)


cdef Variable _index(str op, Variable v, object key):
    """The `op` node picking v[key] (see getitem): a View, or a Gather of flat positions."""
    if type(key) is int and backend_of(v) is None:
        row = _row(op, v, key)
        if row is not None:
            return row
    cdef tuple parts = key if isinstance(key, tuple) else (key,)
    cdef bint basic = True, ellipsis = False
    for part in parts:
        if isinstance(part, Variable):
            raise TypeError(f"{op}: a Variable ({part!r}) cannot be part of an index; "
                            f"index a Parameter with one IndexInput alone (p[ix] or fa.take)")
        basic = basic and _is_basic_index(part)
        ellipsis = ellipsis or part is Ellipsis
    dev = backend_of(v)
    try:
        if basic and dev is None:
            # A trailing Ellipsis makes numpy return a 0-d view, not a scalar, for all-int keys.
            view = value_array(v)[parts if ellipsis else parts + (Ellipsis,)]
        elif basic:      # the positions as a view of a count: a device's (or a recording's) x[i]
            positions = np.arange(v.size, dtype=np.int64).reshape(v._shape)[
                parts if ellipsis else parts + (Ellipsis,)]
        else:
            positions = _flat_positions(v._shape, key)
    except (IndexError, TypeError, ValueError) as e:
        raise type(e)(f"{op}: bad index {key!r} for shape {v._shape}: {e}") from None
    if dev is not None:
        return dev.gather(op, v, positions)
    if basic:
        return _from_view(op, v, view)
    return _gather(op, v, positions, False)


# ---------------------------------------------------------- concat, stack

cdef void put_blocks(char* dst, Py_ssize_t dst_row, const char* src, Py_ssize_t src_row,
                     Py_ssize_t width, Py_ssize_t rows, bint add, bint f64) noexcept nogil:
    """For each row r: dst[r*dst_row : +width] = (or +=) src[r*src_row : +width], in elements."""
    cdef Py_ssize_t r, size = element_size(f64)
    for r in range(rows):
        put_values(dst + r * dst_row * size, src + r * src_row * size, width, add, f64)


@cython.no_gc
cdef class Join(Variable):
    """concat/stack: input i fills columns [starts[i], starts[i] + widths[i]) of every outer row."""
    cdef Py_ssize_t outer           # rows: the product of the output axes before the joined one
    cdef Py_ssize_t row             # elements in one output row
    cdef Py_ssize_t* widths         # per input: elements of its block in one row
    cdef Py_ssize_t* starts
    cdef PyObject** inputs          # the parents, borrowed (the parents tuple keeps them), for
    cdef Py_ssize_t n_inputs        # the passes without the GIL

    def __dealloc__(self):
        free(self.widths)
        free(self.starts)
        free(self.inputs)

    cdef int run_forward(self) except -1 nogil:
        cdef Py_ssize_t i, size = element_size(self.f64)
        for i in range(self.n_inputs):
            put_blocks(self.val_ptr + self.starts[i] * size, self.row,
                       (<Variable>self.inputs[i]).val_ptr, self.widths[i], self.widths[i],
                       self.outer, False, self.f64)
        return 0

    cdef int run_backward(self) except -1 nogil:
        cdef Py_ssize_t i, size = element_size(self.f64)
        cdef bint add
        for i in range(self.n_inputs):
            if not (<Variable>self.inputs[i]).requires_grad:
                continue
            add = (<Variable>self.inputs[i]).prepare_grad()
            put_blocks((<Variable>self.inputs[i]).grad_ptr, self.widths[i],
                       self.grad_ptr + self.starts[i] * size, self.row, self.widths[i], self.outer,
                       add, self.f64)
        return 0


cdef tuple _join_inputs(str op, object xs):
    if not isinstance(xs, (list, tuple)):
        raise TypeError(f"{op}: xs must be a list or tuple of Variables, got {type(xs).__name__}")
    if not xs:
        raise ValueError(f"{op}: xs is empty; need at least one Variable")
    cdef Py_ssize_t i
    for i in range(len(xs)):
        if not isinstance(xs[i], Variable) or isinstance(xs[i], IndexInput):
            require_float(op, xs[i], f"xs[{i}]")      # raises, naming xs[i]
        same_dtype(op, <Variable>xs[0], <Variable>xs[i])
    return tuple(xs)


cdef Py_ssize_t _normal_axis(str op, object axis, Py_ssize_t nd) except -1:
    """axis in [-nd, nd) as a non-negative int, or a ValueError."""
    try:
        a = operator.index(axis)
    except TypeError:
        raise TypeError(f"{op}: axis must be an integer, got {axis!r}") from None
    if not -nd <= a < nd:
        raise ValueError(f"{op}: axis {a} is out of range for {nd} axes (allowed {-nd}..{nd - 1})")
    return a + nd if a < 0 else a


cdef Variable _join(str op, tuple xs, tuple out_shape, Py_ssize_t axis):
    """The Join node; input i's block width is the product of its own axes from `axis` on."""
    if (dev := backend_among(xs)) is not None:
        return dev.join(op, xs, out_shape, axis)
    cdef Join node = Join.__new__(Join)
    cdef Py_ssize_t i, n = len(xs), start = 0
    node.widths = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    node.starts = <Py_ssize_t*>malloc(n * sizeof(Py_ssize_t))
    node.inputs = <PyObject**>malloc(n * sizeof(PyObject*))
    if node.widths == NULL or node.starts == NULL or node.inputs == NULL:
        raise MemoryError()
    node.n_inputs = n
    for i in range(n):
        node.inputs[i] = <PyObject*>xs[i]
        node.widths[i] = prod((<Variable>xs[i])._shape[axis:])
        node.starts[i] = start
        start += node.widths[i]
    node.outer = prod(out_shape[:axis])
    node.row = start
    init_node(node, op, xs, out_shape, (<Variable>xs[0]).f64)
    return finish(node)


def concat(xs, axis=0):
    """Join Variables along an existing axis (numpy.concatenate).

    All inputs have the same dtype and number of axes (at least 1) and the same
    length on every axis but `axis`. Each input gets its slice of the gradient.

    >>> fa.concat([fa.Parameter(np.zeros((2, 3))), fa.Parameter(np.ones((2, 1)))], axis=1).shape
    (2, 4)
    """
    cdef tuple inputs = _join_inputs("concat", xs)
    cdef tuple first = (<Variable>inputs[0])._shape
    cdef Py_ssize_t nd = len(first), i, total = 0
    if nd == 0:
        raise ValueError("concat: xs[0] is 0-d; concat needs at least one axis (use stack)")
    cdef Py_ssize_t ax = _normal_axis("concat", axis, nd)
    for i in range(len(inputs)):
        shape = (<Variable>inputs[i])._shape
        if len(shape) != nd or shape[:ax] != first[:ax] or shape[ax + 1:] != first[ax + 1:]:
            raise ValueError(f"concat: xs[{i}] has shape {shape}, but xs[0] has shape {first}; "
                             f"all axes except axis {ax} must match")
        total += shape[ax]
    return _join("concat", inputs, first[:ax] + (total,) + first[ax + 1:], ax)


def stack(xs, axis=0):
    """Join same-shaped Variables along a new axis (numpy.stack).

    `axis` may be -(ndim+1)..ndim of the inputs' ndim. n inputs of shape s give
    shape s[:axis] + (n,) + s[axis:].

    >>> fa.stack([fa.Parameter(np.zeros(3)), fa.Parameter(np.ones(3))], axis=1).shape
    (3, 2)
    """
    cdef tuple inputs = _join_inputs("stack", xs)
    cdef tuple first = (<Variable>inputs[0])._shape
    cdef Py_ssize_t i
    cdef Py_ssize_t ax = _normal_axis("stack", axis, len(first) + 1)
    for i in range(len(inputs)):
        if (<Variable>inputs[i])._shape != first:
            raise ValueError(f"stack: xs[{i}] has shape {(<Variable>inputs[i])._shape}, but xs[0] "
                             f"has shape {first}; stack needs equal shapes")
    return _join("stack", inputs, first[:ax] + (len(inputs),) + first[ax:], ax)


# ------------------------------------------------ expand_dims, squeeze, split, flip, tile
# Views become reshape nodes and everything else a getitem or a Gather of positions
# fixed at build, so these ops get their backward (and their GPU path) from those nodes.

def expand_dims(x, axis):
    """x with a new length-1 axis at `axis` (an int or a tuple of ints), as numpy.expand_dims.

    Axes count in the output's dimensions (x.ndim + the number of new axes);
    negatives count from the end. The value is a view of x's buffer.

    >>> fa.expand_dims(fa.Parameter(np.zeros((2, 3))), (0, -1)).shape
    (1, 2, 3, 1)
    """
    cdef Variable v = require_float("expand_dims", x, "x")
    cdef Py_ssize_t added = len(axis) if isinstance(axis, tuple) else 1
    cdef list shape = list(v._shape)
    for a in _normalize_axes("expand_dims", axis, len(shape) + added):
        shape.insert(a, 1)
    return _reshaped("expand_dims", v, tuple(shape))


def squeeze(x, axis=None):
    """x without length-1 axes: all of them (axis None) or those named (an int or a tuple).

    Naming an axis whose length is not 1 raises ValueError. The value is a view.

    >>> fa.squeeze(fa.Parameter(np.zeros((1, 3, 1))), axis=0).shape
    (3, 1)
    """
    cdef Variable v = require_float("squeeze", x, "x")
    cdef tuple shape = v._shape
    if axis is None:
        axes = tuple(i for i, d in enumerate(shape) if d == 1)
    else:
        axes = _normalize_axes("squeeze", axis, len(shape))
    for a in axes:
        if shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} has length {shape[a]}, not 1 (input shape "
                             f"{shape}); only length-1 axes can be removed")
    return _reshaped("squeeze", v, tuple(d for i, d in enumerate(shape) if i not in axes))


def split(x, indices_or_sections, axis=0):
    """x cut along `axis` into a list of Variables, as numpy.split.

    An int n cuts into n equal parts (ValueError if n does not divide the
    axis); a list of indices cuts before each (as slices: past the end gives
    empty parts). Each part is a view or a gather of x; gradients add back.

    >>> [p.shape for p in fa.split(fa.Parameter(np.zeros((2, 6))), [1, 4], axis=1)]
    [(2, 1), (2, 3), (2, 2)]
    """
    cdef Variable v = require_float("split", x, "x")
    cdef tuple shape = v._shape
    if not shape:
        raise ValueError("split: x is 0-d; split needs at least one axis")
    cdef Py_ssize_t ax = _normal_axis("split", axis, len(shape)), n = shape[ax], sections
    if isinstance(indices_or_sections, (list, tuple, np.ndarray)):
        try:
            cuts = [operator.index(i) for i in indices_or_sections]
        except TypeError:
            raise TypeError(f"split: indices must be integers, got {indices_or_sections!r}") from None
    else:
        try:
            sections = operator.index(indices_or_sections)
        except TypeError:
            raise TypeError(f"split: indices_or_sections must be an int or a list of ints, got "
                            f"{indices_or_sections!r}") from None
        if sections <= 0 or n % sections:
            raise ValueError(f"split: {sections} sections do not divide axis {ax} of length {n} "
                             f"(input shape {shape}) into equal parts")
        cuts = [n // sections * i for i in range(1, sections)]
    cdef tuple before = (slice(None),) * ax
    return [_index("split", v, before + (slice(start, end),))
            for start, end in zip([0] + cuts, cuts + [n])]


def flip(x, axis=None):
    """x with the order of elements reversed along `axis` (None: every axis; an int or a
    tuple of ints), as numpy.flip.

    >>> fa.flip(fa.Parameter([1.0, 2.0, 3.0])).value
    array([3., 2., 1.], dtype=float32)
    """
    cdef Variable v = require_float("flip", x, "x")
    axes = _normalize_axes("flip", axis, len(v._shape))
    return _index("flip", v, tuple(slice(None, None, -1) if i in axes else slice(None)
                                  for i in range(len(v._shape))))


def tile(x, reps):
    """x repeated `reps` times along each axis (an int or a tuple of ints >= 0), as numpy.tile.

    A longer `reps` than x.ndim adds leading axes; a shorter one repeats the
    last axes. The gradient of each element of x sums over its copies.

    >>> fa.tile(fa.Parameter([1.0, 2.0]), (2, 2)).value
    array([[1., 2., 1., 2.],
           [1., 2., 1., 2.]], dtype=float32)
    """
    cdef Variable v = require_float("tile", x, "x")
    try:
        counts = tuple(operator.index(r) for r in (reps if isinstance(reps, (tuple, list)) else (reps,)))
    except TypeError:
        raise TypeError(f"tile: reps must be an int or a tuple of ints, got {reps!r}") from None
    if any(r < 0 for r in counts):
        raise ValueError(f"tile: reps must be >= 0, got {reps!r} (input shape {v._shape})")
    positions = np.ascontiguousarray(
        np.tile(np.arange(v.size, dtype=np.int64).reshape(v._shape), counts), dtype=np.int64)
    if (dev := backend_of(v)) is not None:
        return dev.gather("tile", v, positions)
    return _gather("tile", v, positions, positions.size == v.size)


register_methods(getitem=getitem, transpose=transpose, reshape=reshape)   # Variable's operators and methods
