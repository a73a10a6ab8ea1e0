"""The graph engine: Variable nodes, leaves, cached replay plans, gradient passes.

A node computes its value when it is built (define-by-run). `root.forward()`
replays every node below `root` in topological order from the leaves' current
values; `root.backward()` pushes gradients back through the same order. The
order is computed once per root, iteratively, and cached; both replays are C
loops that call each node's `run_forward`/`run_backward` with no Python in
between.

Gradient buffers follow a write-then-add rule: within one backward pass the
first contribution to a node's gradient overwrites the buffer and later ones
add, so no buffer is ever zeroed. A pass id stamped on the node tells which
case applies. Leaves keep their gradient across passes (gradients accumulate
until `zero_grad`), tracked by a per-leaf mode; a Parameter can also hold a
sparse gradient: only the rows a gather touched.
"""
import contextlib
import numbers

import numpy as np
cimport cython
cimport numpy as cnp
from cpython.ref cimport PyObject, Py_INCREF, Py_TYPE
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM, PyTuple_GET_ITEM
from cpython.pycapsule cimport PyCapsule_New, PyCapsule_GetPointer
from cpython.pythread cimport PyThread_get_thread_ident
cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
from libc.stdint cimport int32_t, int64_t, uint64_t, INT32_MAX, INT64_MAX
from libc.stdlib cimport malloc, realloc, free
cdef extern from "<stdlib.h>" nogil:
    void* aligned_alloc(size_t alignment, size_t size)
from libc.math cimport isinf
from libc.string cimport memcpy, memmove, memset
from cython cimport floating

from fastad._engine.loops cimport element_size, put_values, scale_rows_of, zero_values

cnp.import_array()

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)

cdef extern from *:
    """
    #define FA_NEGATIVE_ZERO (-0.0)
    """
    const double NEGATIVE_ZERO "FA_NEGATIVE_ZERO"

cdef extern from "threadstate.h":
    # Grad mode, anomaly mode and the current backward pass are per thread.
    unsigned long fa_begin_pass() noexcept nogil
    unsigned long fa_current_pass() noexcept nogil
    bint fa_grad_enabled() noexcept nogil
    void fa_set_grad_enabled(bint on) noexcept nogil
    bint fa_anomaly() noexcept nogil
    void fa_set_anomaly(bint on) noexcept nogil

cdef unsigned long _sort_id = 0          # current topological sort (plans are built holding the GIL)
# Ticks (holding the GIL) whenever a leaf's value changes from outside the graph, or a forward
# draws new random values: the stamps that tell backward() whether a graph's values are current.
cdef unsigned long long _value_clock = 0
# Automatic batching's recording (see set_recording below).
cdef object _recording_type = None    # the type of the recordings set_recording was given
cdef object _recording = None         # the recording on now, or None
cdef unsigned long _recording_thread = 0
cdef bint _default_f64 = False


# ---------------------------------------------------------------- global modes

def set_default_dtype(dtype):
    """Set the dtype of new leaves made without `dtype=`: float32 (default) or float64.

    Example::

        fa.set_default_dtype(np.float64)
        fa.Parameter([1, 2]).dtype        # float64
    """
    global _default_f64
    _default_f64 = _float_dtype(dtype, "set_default_dtype") == float64


def get_default_dtype():
    """The dtype given to new leaves made without `dtype=` (float32 unless changed).

    Example::

        fa.get_default_dtype()            # dtype('float32')
    """
    return float64 if _default_f64 else float32


cdef bint grad_enabled() noexcept:
    return fa_grad_enabled()


def is_grad_enabled():
    """False inside `no_grad()` in this thread, else True (the mode is per thread).

    Example::

        with fa.no_grad():
            fa.is_grad_enabled()          # False
    """
    return fa_grad_enabled()


def is_anomaly_enabled():
    """True inside `detect_anomaly()` in this thread (the mode is per thread)."""
    return fa_anomaly()


def _set_grad_mode(bint on):
    fa_set_grad_enabled(on)


def _set_anomaly_mode(bint on):
    fa_set_anomaly(on)


class _ThreadMode(contextlib.ContextDecorator):
    """A mode switched on entry and restored on exit, in the current thread only.
    As a decorator, every call gets its own instance, so the same decorated function
    can run in several threads at once."""

    def _recreate_cm(self):
        return type(self)()

    def __enter__(self):
        self._prev = self._get()
        self._set(self._value)
        return self

    def __exit__(self, *exc):
        self._set(self._prev)
        return False


class no_grad(_ThreadMode):
    """Context manager (or decorator): nodes built inside it, in this thread, record no gradient.

    The mode is per thread, as in PyTorch: another thread keeps building graphs with
    gradients while this one is inside `no_grad` (a new thread starts with gradients on).

    >>> with fa.no_grad():
    ...     y = w * 2        # y.backward() would raise: nothing needs a gradient
    """
    _value = False
    _get = staticmethod(is_grad_enabled)
    _set = staticmethod(_set_grad_mode)


class enable_grad(_ThreadMode):
    """Context manager (or decorator): gradients on in this thread, even inside `no_grad`.

    >>> with fa.no_grad():
    ...     with fa.enable_grad():
    ...         y = w * 2    # records its gradient
    """
    _value = True
    _get = staticmethod(is_grad_enabled)
    _set = staticmethod(_set_grad_mode)


class detect_anomaly(_ThreadMode):
    """Context manager (or decorator): raise FloatingPointError at the first op whose forward
    or backward produces NaN or Inf, naming the op. Slows every op down. Per thread.

    Example::

        with fa.detect_anomaly():
            fa.log(fa.Input([-1.0]))      # FloatingPointError: ... the forward of 'log' ...
    """
    _value = True
    _get = staticmethod(is_anomaly_enabled)
    _set = staticmethod(_set_anomaly_mode)


cdef object _current_grad(Variable x):
    """The values x's gradient holds now: nothing (None) for a leaf without a gradient
    (its buffer is stale), a sparse Parameter's touched rows (on a device, its dense
    buffer, zero off those rows), else the dense buffer."""
    if isinstance(x, Leaf) and (<Leaf>x).grad_mode == GRAD_NONE:
        return None
    if x.on_device:
        return x._storage.grad
    if isinstance(x, Leaf) and (<Leaf>x).grad_mode == GRAD_SPARSE:
        return (<Parameter>x).slab[:(<Parameter>x).n_touched]
    return _grad_array(x)


cdef cnp.ndarray _grad_array(Variable x):
    """x's host gradient buffer as an array: made now, over its slice of a plan's block
    (place_grads), when it has none yet; None before any buffer."""
    if x._grad is None and x.grad_ptr != NULL:
        x._grad = _array_over(x, x.grad_ptr, x._grad_block)
    return x._grad


cdef int _all_finite(Variable owner, object values) except -1:
    """1 when no element of `values` (owner's value or gradient, or None) is NaN or Inf."""
    if values is None:
        return 1
    if owner.on_device:
        return owner._storage.all_finite(values)
    return np.isfinite(values).all()


cdef int check_anomaly(Variable node, str phase) except -1:
    cdef Variable x
    if phase == "forward":
        if not _all_finite(node, node._storage.value if node.on_device else value_array(node)):
            raise FloatingPointError(
                f"detect_anomaly: the forward of '{node.op_name}' produced NaN or Inf "
                f"(output shape {node._shape})")
        return 0
    for x in node.parents:
        if x.requires_grad and not _all_finite(x, _current_grad(x)):
            raise FloatingPointError(
                f"detect_anomaly: the backward of '{node.op_name}' produced NaN or Inf in the "
                f"gradient of its input '{x.op_name}' (shape {x._shape})")
    return 0


# ------------------------------------------------------------ array checking

cdef object _as_numeric_array(object data, str argname):
    """`data` as an ndarray of real numbers, or a clear TypeError/ValueError.
    A device array (CuPy) is copied to the host."""
    if hasattr(data, "__cuda_array_interface__"):
        data = device_backend().to_host(data)
    try:
        arr = np.asarray(data)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{argname}: cannot make an array of this data ({e})") from None
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{argname}: expected real numbers, got an array of dtype {arr.dtype}")
    return arr


cdef object _float_dtype(object dtype, str who):
    """`dtype` as numpy's float32 or float64, or a TypeError naming `who` and what it got
    (numpy's own says only that a data type is not understood)."""
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{who}: dtype must be float32 or float64, got {dtype!r}") from None
    if d != float32 and d != float64:
        raise TypeError(f"{who}: dtype must be float32 or float64, got {d}")
    return d


cdef object _float_array(object data, object dtype, str argname):
    """A fresh C-contiguous float32/float64 copy of `data`; a large one starts on a cache
    line (see _line_aligned_empty)."""
    arr = _as_numeric_array(data, argname)
    dtype = (float64 if _default_f64 else float32) if dtype is None else _float_dtype(dtype, argname)
    if arr.size * dtype.itemsize < SMALL_BUFFER:
        return own_buffer_copy(np.array(arr, dtype=dtype, order="C", copy=True))
    out = _line_aligned_empty(arr.shape, dtype)
    np.copyto(out, arr, casting="unsafe")
    return out


cdef object _line_aligned_empty(tuple shape, object dtype):
    """An uninitialised C-contiguous array whose data starts on a 64-byte cache line, from
    numpy's allocator (which gives large arrays huge pages). numpy itself aligns to 16
    bytes: a table's 128-byte rows would then each straddle three lines, and in Hogwild
    threads two neighbouring rows would share one."""
    cdef Py_ssize_t nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    # whole lines, so that its last line holds nothing of another allocation either
    raw = np.empty((nbytes + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE + CACHE_LINE, dtype=np.uint8)
    cdef Py_ssize_t offset = (CACHE_LINE - <Py_ssize_t>(<size_t>cnp.PyArray_DATA(raw) % CACHE_LINE)) % CACHE_LINE
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


cdef Variable require_float(str op, object x, str argname):
    if not isinstance(x, Variable):
        raise TypeError(f"{op}: {argname} must be a fastad Variable, got {type(x).__name__}")
    if isinstance(x, IndexInput):
        what = "an IndexInput" if (<Variable>x).is_leaf else f"the integer node of {(<Variable>x).op_name!r}"
        raise TypeError(f"{op}: {argname} is {what} (integer ids); use it to index a Parameter "
                        f"(p[ix]), as targets, or reshape it")
    return <Variable>x


cdef int same_dtype(str op, Variable a, Variable b) except -1:
    if a.f64 != b.f64:
        raise TypeError(f"{op}: mixed dtypes {a.dtype} and {b.dtype}; "
                        f"convert one side (leaves take dtype=)")
    return 0


cdef str _got(object value):
    return f"{value!r} ({type(value).__name__})"


cdef bint check_flag(str who, str name, object value, bint zero_or_one=False) except -1:
    """`value` as a bool: True or False (numpy's too), and with `zero_or_one` the ints 0 and 1
    (as the flags of fastad's Python side); anything else is a TypeError, not a guess."""
    if not isinstance(value, (bool, np.bool_)) and not (
            zero_or_one and isinstance(value, numbers.Integral) and value in (0, 1)):
        raise TypeError(f"{who}: {name} must be True or False, got {_got(value)}")
    return bool(value)


cdef double check_number(str who, str name, object value, bint bools=False) except? -1.0:
    """float(value), or a TypeError; a string is refused, and so is a bool unless `bools`
    (lr=True is no rate, but a saved state dict compares its flags as numbers)."""
    if isinstance(value, (str, bytes)) or not bools and isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{who}: {name} must be a number, got {_got(value)}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{who}: {name} must be a number, got {_got(value)}") from None


cdef double check_above(str who, str name, object value, double low, bint or_equal=False) except? -1.0:
    """check_number's, and a ValueError unless it is > low (>= low when `or_equal`); NaN fails."""
    cdef double number = check_number(who, name, value)
    if not (number >= low if or_equal else number > low):
        raise ValueError(f"{who}: {name} must be {'>=' if or_equal else '>'} {low:g}, got {value!r}")
    return number


cdef Py_ssize_t check_int(str who, str name, object value, Py_ssize_t low) except? -1:
    """`value` as an integer >= low: a bool or a float is a TypeError, even a whole one."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an integer, got {_got(value)}")
    if value < low:
        raise ValueError(f"{who}: {name} must be >= {low}, got {value}")
    return value


cdef bint is_real_number(object value):
    """A Python or NumPy real number: not a bool, a string, an array or a Variable."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


cdef double check_real(str who, str name, object value, bint infinite=False) except? -1.0:
    """`value` as a float: a TypeError unless it is a real number, a ValueError for NaN, and
    for an infinity unless `infinite` (a bound that leaves its side open, as in numpy.clip)."""
    if not is_real_number(value):
        raise TypeError(f"{who}: {name} must be a real Python number, got {_got(value)}")
    cdef double number = float(value)
    if number != number or not infinite and isinf(number):
        expected = "a number (not NaN)" if infinite else "a finite number"
        raise ValueError(f"{who}: {name} must be {expected}, got {value!r}")
    return number


cdef Variable as_variable(object x, Variable like):
    """x if it is a Variable, else a constant leaf in `like`'s dtype."""
    if isinstance(x, Variable):
        return <Variable>x
    return Input(x, dtype=float64 if like.f64 else float32, device=device_of(like))


cdef Variable as_operand(str op, str argname, object x, Variable like):
    """as_variable for an operand of `op`, a TypeError naming it for what makes no array."""
    try:
        return as_variable(x, like)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{op}: operand {argname} must be a Variable, a number or an array of "
                        f"real numbers, got {type(x).__name__} ({e})") from None


cdef tuple float_operands(str op, object a, object b):
    """(a, b) as float Variables of one dtype; one of them may be a number or an array."""
    cdef Variable va, vb
    if isinstance(a, Variable):
        va = require_float(op, a, "a")
        vb = require_float(op, as_operand(op, "b", b, va), "b")
    elif isinstance(b, Variable):
        vb = require_float(op, b, "b")
        va = as_operand(op, "a", a, vb)
    else:
        raise TypeError(f"{op}: at least one operand must be a fastad Variable")
    same_dtype(op, va, vb)
    return va, vb


# ------------------------------------------------------------- node helpers

cdef inline int _type_num(bint f64) noexcept:
    return cnp.NPY_FLOAT64 if f64 else cnp.NPY_FLOAT32


# ---------------------------------------------------------------- buffers

cdef Py_ssize_t SMALL_BUFFER = 1024   # numpy keeps freed blocks below this size for any thread's next array


cdef void _free_buffer(object capsule) noexcept:
    free(PyCapsule_GetPointer(capsule, NULL))


cdef cnp.ndarray new_buffer(int nd, cnp.npy_intp* dims, int type_num):
    """An uninitialised C-contiguous array (float32, float64, int32 or int64) for a buffer
    that a training loop writes on every example: a node's value or gradient, a leaf's ids,
    a sampler's or a node's scratch. A small one gets memory of its own from malloc, whose
    arena belongs to the calling thread, not a block from numpy's cache of small blocks,
    which hands any thread's freed block to the next array of any thread: two Hogwild
    threads' buffers would share cache lines, and each write would take the line from the
    other core. Larger arrays come from numpy, which mallocs them."""
    cdef Py_ssize_t itemsize = (4 if type_num == cnp.NPY_FLOAT32 or type_num == cnp.NPY_INT32 else
                                8 if type_num == cnp.NPY_FLOAT64 or type_num == cnp.NPY_INT64 else 0)
    cdef Py_ssize_t nbytes = cnp.PyArray_MultiplyList(dims, nd) * itemsize
    if itemsize == 0 or nbytes >= SMALL_BUFFER:     # another dtype, or no small buffer
        return <cnp.ndarray>cnp.PyArray_EMPTY(nd, dims, type_num, 0)
    cdef void* data = malloc(nbytes if nbytes else 1)
    if data == NULL:
        raise MemoryError()
    try:
        owner = PyCapsule_New(data, NULL, _free_buffer)
    except BaseException:
        free(data)
        raise
    cdef cnp.ndarray arr = cnp.PyArray_SimpleNewFromData(nd, dims, type_num, data)
    cnp.set_array_base(arr, owner)
    return arr


cdef cnp.ndarray _buffer_of_shape(str who, tuple shape, int type_num):
    """new_buffer of `shape` (a tuple); errors name `who`."""
    cdef cnp.npy_intp dims[64]
    cdef int nd = len(shape), i
    if nd > 64:
        raise ValueError(f"{who}: at most 64 dimensions, got {nd}")
    for i in range(nd):
        dims[i] = shape[i]
    return new_buffer(nd, dims, type_num)


cdef cnp.ndarray empty_buffer(tuple shape, object dtype):
    """new_buffer of `shape` and `dtype`, for the op and sampler modules' scratch."""
    return _buffer_of_shape("a scratch buffer", shape, np.dtype(dtype).num)


cdef cnp.ndarray own_buffer_copy(cnp.ndarray arr):
    """`arr` (C-contiguous) copied into a new_buffer when it is small, else itself."""
    if cnp.PyArray_NBYTES(arr) >= SMALL_BUFFER:
        return arr
    cdef cnp.ndarray out = new_buffer(cnp.PyArray_NDIM(arr), cnp.PyArray_DIMS(arr), cnp.PyArray_TYPE(arr))
    memcpy(cnp.PyArray_DATA(out), cnp.PyArray_DATA(arr), cnp.PyArray_NBYTES(arr))
    return out


cdef int _adopt_value(Variable node, cnp.ndarray value) except -1:
    node._value = keep_data(value, &node.val_ptr)
    node.size = cnp.PyArray_SIZE(value)
    return 0


cdef int _wire(Variable node, str op, tuple inputs, bint f64) except -1:
    cdef Variable x
    cdef bint needs = False
    for x in inputs:
        if x.op_name is None:
            raise TypeError(f"{op}: an input is a Variable that was never initialised; make "
                            f"leaves with fa.Parameter(...), fa.Input(...) or fa.IndexInput(...)")
        if x.on_device or node.on_device:
            if _recording_type is not None and type(x._storage) is _recording_type:
                raise NotImplementedError(f"autobatch: {op} of a recorded value cannot be batched "
                                          f"in this form (see fastad.training.autobatch.BATCHABLE)")
            same_device(op, x, node)
        needs = needs or x.requires_grad
        x.has_children = True
    node.op_name = op
    node.parents = _untracked(inputs)
    node.f64 = f64
    node.requires_grad = needs and fa_grad_enabled()
    node.value_stamp = _value_clock
    return 0


cdef int mark_changed(Variable leaf) except -1:
    global _value_clock
    _value_clock += 1
    leaf.value_stamp = _value_clock
    return 0


cdef int require_current(Plan plan, Variable root) except -1:
    """RuntimeError when a node below `root` (or the root) holds a value computed before
    one of its inputs last changed: a backward through it would mix old and new values.
    Checks every edge only when the value clock moved since the plan was last current."""
    if plan.current_at == _value_clock:
        return 0
    cdef Variable node, parent
    for node in (plan.fwd + (root,)) if not root.is_leaf else plan.fwd:
        for parent in node.parents:
            if parent.value_stamp > node.value_stamp:
                how = ("was recomputed by a forward() of part of the graph" if not parent.is_leaf
                       else "was changed (set_value, load_state_dict or an optimizer step)")
                raise RuntimeError(
                    f"backward(): the graph's values are stale: '{node.op_name}' was computed "
                    f"before its input '{parent.op_name}' (shape {parent._shape}) {how}. Call "
                    f"forward() on the output you differentiate first: it recomputes every "
                    f"node below it from the leaves' current values")
    plan.current_at = _value_clock
    return 0


cdef object device_of(Variable x):
    """None on the host, else the canonical name of x's device."""
    return None if x._storage is None else x._storage.device


cdef str _device_name(Variable x):
    return "cpu" if x._storage is None else x._storage.device


cdef int same_device(str op, Variable a, Variable b) except -1:
    """ValueError naming both devices when a and b are on two."""
    if device_of(a) != device_of(b):
        first, second = sorted((_device_name(a), _device_name(b)))
        raise ValueError(f"{op}: inputs on different devices, {first} and {second}; "
                         f"move them with .to(device) first")
    return 0


cdef inline tuple _untracked(tuple t):
    """`t`, taken off the cyclic collector's lists. A node's parents and shape hold only nodes
    and ints; nodes have no traverse (no_gc), so no cycle the collector could free runs
    through these tuples. Tracked, each would be visited by the next collection (which then
    untracks it): some 5 tuples a node, and a GraphCache keeps its graphs' tuples alive."""
    PyObject_GC_UnTrack(<void*>t)
    return t


cdef inline int _init_with(Variable node, str op, tuple inputs, tuple shape, cnp.ndarray value,
                           bint f64) except -1:
    """What every op node's construction does: wire it to its inputs, and give it `value`."""
    _wire(node, op, inputs, f64)
    node._shape = _untracked(shape)
    _adopt_value(node, value)
    return 0


cdef inline int _init_placed(Variable node, str op, tuple inputs, tuple shape, Py_ssize_t size,
                             bint f64) except -1:
    """_init_with for a new value of `size` elements: its buffer a slot of the value arena
    (place_value), its array made only when something reads it (value_array)."""
    _wire(node, op, inputs, f64)
    node._shape = _untracked(shape)
    node.size = size
    node.val_ptr = _place_value(node)
    return 0


cdef Py_ssize_t _size_of_shape(str op, tuple shape) except -1:
    """The number of elements of `shape`; ValueError naming `op` for a negative dimension,
    more than 64 dimensions or more elements than memory can hold."""
    cdef Py_ssize_t size = 1, d
    if len(shape) > 64:
        raise ValueError(f"{op}: at most 64 dimensions, got {len(shape)}")
    for dim in shape:
        d = dim
        if d < 0:
            raise ValueError(f"{op}: negative dimensions are not allowed, got shape {shape}")
        if d and size > INT64_MAX // 8 // d:
            raise ValueError(f"{op}: a value of shape {shape} is too big")
        size *= d
    return size


cdef int init_node(Variable node, str op, tuple inputs, tuple shape, bint f64) except -1:
    """Wire a new op node to its inputs and give it an output buffer of `shape`."""
    return _init_placed(node, op, inputs, shape, _size_of_shape(op, shape), f64)


cdef int init_node_on(Variable node, str op, tuple inputs, cnp.ndarray value) except -1:
    """Like init_node, with `value` (an array the op made: a view of an input's) as the node's
    value instead of a new buffer."""
    return _init_with(node, op, inputs, (<object>value).shape, value,
                      cnp.PyArray_TYPE(value) == cnp.NPY_FLOAT64)


cdef int init_view_node(Variable node, str op, tuple inputs, tuple shape, Py_ssize_t size, bint f64,
                        char* data, object owner) except -1:
    """Like init_node, for a node whose value is `size` elements of an input's buffer from
    `data` on (a contiguous run of it), which `owner` keeps alive: no buffer of its own, and
    its array, made when read (value_array), is read-only."""
    _wire(node, op, inputs, f64)
    node._shape = _untracked(shape)
    node.size = size
    node.val_ptr = data
    node._value_block = owner
    node.value_read_only = True
    return 0


cdef int init_node_like(Variable node, str op, tuple inputs, Variable like) except -1:
    """Like init_node, with the shape and dtype of `like` (no tuple work)."""
    return _init_placed(node, op, inputs, like._shape, like.size, like.f64)


cdef Variable finish(Variable node):
    node.run_forward()
    if fa_anomaly():
        check_anomaly(node, "forward")
    return node


# ------------------------------------------------------------ plans (replay)

@cython.no_gc
cdef class Plan:
    """The nodes below one root in topological order, computed once: as lists (which
    keep them alive) and as C arrays of the same nodes and the root, which the
    replays walk without the GIL."""

    def __dealloc__(self):
        free(self.fwd_nodes)
        free(self.bwd_nodes)


cdef PyObject** _grow(PyObject** arr, Py_ssize_t* cap) except NULL:
    """`arr` (of *cap pointers, or NULL) reallocated to twice its capacity (at least 64)."""
    cdef Py_ssize_t new_cap = cap[0] * 2 if cap[0] else 64
    cdef PyObject** grown = <PyObject**>realloc(arr, new_cap * sizeof(PyObject*))
    if grown == NULL:
        raise MemoryError()
    cap[0] = new_cap
    return grown


cdef Plan _build_plan(Variable root):
    """Iterative post-order DFS over C arrays of borrowed pointers (the graph holding the GIL
    keeps every node alive): a 100,000-node chain needs no recursion, and a fresh graph's
    first backward pays no Python list per node. The post-order is a topological order."""
    global _sort_id
    _sort_id += 1
    cdef unsigned long sid = _sort_id
    cdef Plan plan = Plan.__new__(Plan)
    cdef list params = [], grad_leaves = []
    cdef Py_ssize_t depth = 1, n = 0, i, n_bwd = 0, stack_cap = 0, order_cap = 0
    cdef PyObject** stack = NULL      # the path from the root, and each one's next parent
    cdef Py_ssize_t* pos = NULL
    cdef PyObject** order = NULL      # the non-leaf nodes below the root, inputs first
    cdef PyObject* child
    cdef Variable node, leaf
    cdef tuple parents
    # The oldest value among the op nodes: when it is the value clock's now, no leaf changed
    # and no node was recomputed since any of them was built (require_current has nothing to do).
    cdef unsigned long long oldest = root.value_stamp
    try:
        stack = _grow(stack, &stack_cap)
        pos = <Py_ssize_t*>malloc(stack_cap * sizeof(Py_ssize_t))
        if pos == NULL:
            raise MemoryError()
        stack[0] = <PyObject*>root
        pos[0] = 0
        root.visit_mark = sid
        while depth:
            node = <Variable>stack[depth - 1]
            parents = node.parents
            i = pos[depth - 1]
            if i < len(parents):
                pos[depth - 1] = i + 1
                child = PyTuple_GET_ITEM(parents, i)
                if (<Variable>child).visit_mark == sid:
                    continue
                (<Variable>child).visit_mark = sid
                if (<Variable>child).is_leaf:
                    leaf = <Variable>child
                    if isinstance(leaf, Parameter):
                        params.append(leaf)
                    if leaf.requires_grad and isinstance(leaf, Leaf):
                        grad_leaves.append(leaf)
                    continue
                if depth == stack_cap:
                    stack = _grow(stack, &stack_cap)
                    pos = <Py_ssize_t*>realloc(pos, stack_cap * sizeof(Py_ssize_t))
                    if pos == NULL:
                        raise MemoryError()
                stack[depth] = child
                pos[depth] = 0
                depth += 1
            else:
                depth -= 1
                if depth:
                    if n == order_cap:
                        order = _grow(order, &order_cap)
                    order[n] = <PyObject*>node
                    n += 1
                    oldest = min(oldest, node.value_stamp)
                    n_bwd += node.requires_grad
                    plan.redraws = plan.redraws or node.redraws
        plan.fwd = PyTuple_New(n)
        for i in range(n):
            Py_INCREF(<object>order[i])
            PyTuple_SET_ITEM(plan.fwd, i, <object>order[i])
        plan.params = tuple(params)
        plan.grad_leaves = tuple(grad_leaves)
        plan.redraws = plan.redraws or root.redraws
        if not root.is_leaf and oldest == _value_clock:
            plan.current_at = _value_clock
        _order_nodes(plan, order, n, n_bwd, None if root.is_leaf else root)
    finally:
        free(stack)
        free(pos)
        free(order)
    return plan


cdef int _order_nodes(Plan plan, PyObject** order, Py_ssize_t n, Py_ssize_t n_bwd,
                      Variable op_root) except -1:
    """The plan's C arrays: its `n` nodes (`order`) and the root last, and the root (when it
    takes a gradient) and the `n_bwd` nodes that do, outputs first. The root is not in
    `fwd`: it owns the plan, and a plan holding it would make a cycle."""
    cdef Py_ssize_t i, k = 0
    plan.fwd_nodes = <PyObject**>malloc((n + 1) * sizeof(PyObject*))
    plan.bwd_nodes = <PyObject**>malloc((n_bwd + 1) * sizeof(PyObject*))
    if plan.fwd_nodes == NULL or plan.bwd_nodes == NULL:
        raise MemoryError()
    memcpy(plan.fwd_nodes, order, n * sizeof(PyObject*))
    plan.n_fwd = n
    if op_root is not None:
        plan.fwd_nodes[n] = <PyObject*>op_root
        plan.n_fwd += 1
        if op_root.requires_grad:
            plan.bwd_nodes[0] = <PyObject*>op_root
            k = 1
    for i in range(n - 1, -1, -1):
        if (<Variable>order[i]).requires_grad:
            plan.bwd_nodes[k] = order[i]
            k += 1
    plan.n_bwd = k
    return 0


cdef int place_grads(Plan plan) except -1:
    """Give every host node of the plan's backward that has no gradient buffer yet one slice
    of a single block (one allocation for the graph, not one array per node; freed when the
    last of its nodes goes). A node's `_grad` array is made only when something reads it."""
    cdef Py_ssize_t i, total = 0
    cdef Variable node
    plan.grads_placed = True
    for i in range(plan.n_bwd):
        node = <Variable>plan.bwd_nodes[i]
        if node.grad_ptr == NULL and not node.on_device and node.val_ptr != NULL:
            total += _slot_bytes(node)
    if total == 0:
        return 0
    cdef _ArenaBlock block = _ArenaBlock(total, 0)      # arena 0: of no GradientArena
    total = 0
    for i in range(plan.n_bwd):
        node = <Variable>plan.bwd_nodes[i]
        if node.grad_ptr == NULL and not node.on_device and node.val_ptr != NULL:
            node.grad_ptr = block.data + total
            node._grad_block = block
            total += _slot_bytes(node)
    return 0


cdef inline Py_ssize_t _slot_bytes(Variable node) noexcept:
    """A node's value slot of the value arena, or its gradient slice of a plan's block: whole
    cache lines (nodes share none)."""
    cdef Py_ssize_t nbytes = node.size * element_size(node.f64)
    return (nbytes + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE if nbytes else CACHE_LINE


cdef int replay_plan_forward(Plan plan) except -1 nogil:
    """Recompute every node of the plan (the root last) in topological order."""
    cdef Py_ssize_t i
    cdef PyObject* node
    cdef bint anomaly = fa_anomaly()
    cdef unsigned long long now = _value_clock
    for i in range(plan.n_fwd):
        node = plan.fwd_nodes[i]        # the plan holds only Variables: no type test
        (<Variable>node).value_stamp = now
        (<Variable>node).run_forward()
        if anomaly:
            with gil:
                check_anomaly(<Variable>node, "forward")
    return 0


cdef int replay_plan_backward(Plan plan) except -1 nogil:
    """Run backward through the plan's nodes, outputs first, skipping those no
    gradient reached in this pass; the root's gradient must be seeded first."""
    cdef Py_ssize_t i
    cdef PyObject* node
    cdef unsigned long pid = fa_current_pass()
    cdef bint anomaly = fa_anomaly()
    for i in range(plan.n_bwd):
        node = plan.bwd_nodes[i]
        if (<Variable>node).grad_pass == pid:
            (<Variable>node).run_backward()
            if anomaly:
                with gil:
                    check_anomaly(<Variable>node, "backward")
    return 0


cdef int seed_scalar_grad(Variable root) except -1 nogil:
    """Start a backward pass from a one-element CPU root: its gradient becomes (or gains) 1."""
    fa_begin_pass()
    cdef bint add = root.prepare_grad()
    if root.f64:
        (<double*>root.grad_ptr)[0] = (<double*>root.grad_ptr)[0] + 1 if add else 1
    else:
        (<float*>root.grad_ptr)[0] = (<float*>root.grad_ptr)[0] + 1 if add else 1
    return 0


cdef int replay_forward(Variable root) except -1:
    """Recompute every node below `root`, then `root`, in topological order."""
    global _value_clock
    cdef Plan plan = root._get_plan()
    if plan.redraws:        # new random values: the nodes above them elsewhere become stale
        _value_clock += 1
    replay_plan_forward(plan)
    plan.current_at = _value_clock
    return 0


cdef list claim_parameters(str who, object params):
    """Claim `params` for a compiled training loop of this thread (holding the GIL), or raise
    RuntimeError, claiming none, if another thread's loop holds one: its gradient rows,
    slab and marks would be written by both at once. Returns those this call claimed (not
    those this thread already held)."""
    cdef unsigned long me = PyThread_get_thread_ident()
    cdef list claimed = []
    cdef Parameter p
    for p in params:
        check_unclaimed(who, p)         # every one before any is claimed
    for p in params:
        if p.trainer != me:
            p.trainer = me
            claimed.append(p)
    return claimed


cdef void release_parameters(list claimed) noexcept:
    cdef Parameter p
    for p in claimed:
        p.trainer = 0


cdef int check_unclaimed(str who, Parameter p) except -1:
    """RuntimeError if another thread's compiled training loop is using `p`."""
    if claimed_elsewhere(p):
        raise RuntimeError(
            f"{who}: {p!r} is being trained by fa.train in another thread. A Parameter takes "
            f"gradients in one thread at a time; for Hogwild threads, put the weights in "
            f"fa.hogwild.share(...) and give each thread its own fa.Parameter(shared[name]) "
            f"over the same memory (as fa.hogwild.run workers and fit(workers=...) do)")
    return 0


cdef int replay_backward(Variable root, object seed) except -1:
    """One backward pass from `root`, seeded with ones (seed None, one-element root) or `seed`."""
    if not root.requires_grad:
        raise RuntimeError(
            f"backward(): '{root.op_name}' does not depend on any Parameter, or was built "
            f"under no_grad(); there is no gradient to compute")
    if seed is None and root.size != 1:
        raise RuntimeError(
            f"backward(): the output has shape {root._shape}; only a one-element "
            f"output can be differentiated without a `grad` of the same shape")
    cdef Plan plan = root._get_plan()
    cdef Parameter p
    for p in plan.params:
        check_unclaimed("backward()", p)
    require_current(plan, root)
    if not plan.grads_placed:
        place_grads(plan)
    cdef bint add
    if seed is None and not root.on_device:
        seed_scalar_grad(root)
    else:
        fa_begin_pass()
        add = root.prepare_grad()
        if root.on_device:
            root._storage.seed_grad(seed, add)
        elif add:
            _grad_array(root)[...] += seed
        else:
            np.copyto(_grad_array(root), seed, casting="unsafe")
    replay_plan_backward(plan)
    return 0


def graph_nbytes(Variable root, bint gradients=True):
    """About the memory the graph below `root` holds (the root included, leaves not): each op
    node's object and value, and the gradient of each that takes one, whether its backward
    has run yet or not (without them when `gradients` is False: a GradientArena holds them).
    For caches of graphs that bound what they keep.

    Example::

        fa.graph_nbytes(fa.tanh(fa.Parameter(np.ones(1000)) * 2.0))   # about 12 KB
    """
    cdef Py_ssize_t i, total = 0
    cdef Plan plan = root._get_plan()
    cdef Variable node
    for i in range(plan.n_fwd):
        node = <Variable>plan.fwd_nodes[i]
        # The node's object, its value and gradient, and what comes with them: array headers
        # (a leaf's or a view's value, a gradient once read), the parents tuple, a value's
        # rounding to cache lines (about 150 bytes: a kept graph's resident memory is within a
        # few percent of this, or below it).
        total += (Py_TYPE(node).tp_basicsize + 2 * sizeof(cnp.PyArrayObject) + 150
                  + node.size * element_size(node.f64) * (2 if node.requires_grad and gradients else 1))
    return total


cdef unsigned long long _arena_serial = 0     # tells arenas apart (blocks outlive their arena)


@cython.no_gc
cdef class _ArenaBlock:
    """One allocation of gradient buffers (a GradientArena's, or a plan's: see place_grads) or
    of op nodes' values (the value arena, _place_value), owned by the buffers placed in it:
    `nbytes` from a cache line on, of GradientArena `arena`."""
    cdef char* data
    cdef unsigned long long arena

    def __cinit__(self, Py_ssize_t nbytes, unsigned long long arena):
        self.data = <char*>aligned_alloc(CACHE_LINE, nbytes)
        if self.data == NULL:
            raise MemoryError()
        self.arena = arena

    def __dealloc__(self):
        free(self.data)


# The value arena: the op nodes' value buffers, placed one after another in blocks shared by
# many nodes (each node keeps its block alive; the last to go frees it), with the GIL. A block
# serves one thread (another thread's first node starts a new one) and a slot is whole cache
# lines: values that two threads write never share a line (see new_buffer).
cdef Py_ssize_t VALUE_BLOCK = 64 * 1024     # the bytes of a shared block
cdef Py_ssize_t OWN_BLOCK = 4096            # a value of this many bytes or more gets a block of its own
cdef _ArenaBlock _values = None             # the block new values go into
cdef Py_ssize_t _values_used = 0            # its bytes handed out
cdef unsigned long _values_thread = 0       # the thread it serves


cdef char* _place_value(Variable node) except NULL:
    """A new op node's value buffer (of its size and dtype), a slot of the value arena, whose
    block the node keeps (`_value_block`): no allocation, array or capsule of its own, and
    the values of a graph built together side by side in memory."""
    global _values, _values_used, _values_thread
    cdef Py_ssize_t slot = _slot_bytes(node)
    cdef char* data
    if slot >= OWN_BLOCK:
        node._value_block = _ArenaBlock(slot, 0)
        return (<_ArenaBlock>node._value_block).data
    cdef unsigned long me = PyThread_get_thread_ident()
    if _values is None or _values_used + slot > VALUE_BLOCK or _values_thread != me:
        _values = _ArenaBlock(VALUE_BLOCK, 0)
        _values_used = 0
        _values_thread = me
    node._value_block = _values
    data = _values.data + _values_used
    _values_used += slot
    return data


cdef cnp.ndarray _array_over(Variable x, char* data, object owner):
    """An array of x's shape and dtype over `data`, whose memory `owner` keeps alive."""
    cdef cnp.npy_intp dims[64]
    cdef int nd = len(x._shape), i
    for i in range(nd):
        dims[i] = x._shape[i]
    cdef cnp.ndarray arr = cnp.PyArray_SimpleNewFromData(nd, dims, _type_num(x.f64), data)
    cnp.set_array_base(arr, owner)
    return arr


cdef cnp.ndarray value_array(Variable x):
    """x's value as an array (None on a device, or never initialised): an op node's is made
    over its slot of the value arena (or a view node's over its input's buffer) when first
    read, and kept (its base is the block or the input's array, not the node: no cycle)."""
    if x._value is None and x._value_block is not None and x.val_ptr != NULL and not x.on_device:
        x._value = _array_over(x, x.val_ptr, x._value_block)
        if x.value_read_only:
            cnp.PyArray_CLEARFLAGS(x._value, cnp.NPY_ARRAY_WRITEABLE)
    return x._value


@cython.no_gc
cdef class GradientArena:
    """Memory shared by the op nodes' gradient buffers of several graphs whose backward passes
    never overlap (the graphs a fa.GraphCache keeps, used by one thread).

    An op node's gradient lives from the start of a backward pass through its graph to the
    pass's end (the next pass writes before it reads), so graphs that take turns need room
    for the largest one's gradients (the block grows at least twofold), not for all of theirs. `place(root)` puts the gradient
    buffers of the op nodes below `root` at the start of the arena's block, the same memory
    as every other graph placed there; the leaves keep their own. After another graph's
    backward, such a node's `.grad` reads None (it is of an older pass).

    `place` returns True when it had to grow the block for this graph: the graphs placed
    before are then still in the old one (kept alive by them), and placing each again moves
    it into the new; else False. `nbytes` is the current block's size.
    """
    cdef _ArenaBlock block
    cdef readonly Py_ssize_t nbytes
    cdef unsigned long long serial

    def __cinit__(self):
        global _arena_serial
        _arena_serial += 1
        self.serial = _arena_serial

    def place(self, Variable root):
        """Give the op nodes below `root` (and the root) their gradient buffers in this arena:
        nodes without one yet, or (to move a graph after the block grew) all in an older
        block of this arena. Returns None, placing nothing, for any other graph: one with a
        node of its own buffer, one whose backward has run, or one that shares a node with a
        graph placed here already (the two would overlap)."""
        cdef Plan plan = root._get_plan()
        cdef Py_ssize_t i, total = 0, fresh = 0
        cdef Variable node
        cdef bint grew = False
        for i in range(plan.n_bwd):
            node = <Variable>plan.bwd_nodes[i]
            if node.on_device or node.val_ptr == NULL:
                return None
            if node.grad_ptr == NULL:
                fresh += 1
            elif not (isinstance(node._grad_block, _ArenaBlock) and node._grad_block is not self.block
                      and (<_ArenaBlock>node._grad_block).arena == self.serial):
                return None
            total += _slot_bytes(node)
        if fresh != 0 and fresh != plan.n_bwd:
            return None
        if total > self.nbytes:          # at least doubled: a growth moves every graph placed
            self.block = _ArenaBlock(max(total, 2 * self.nbytes), self.serial)
            self.nbytes, grew = max(total, 2 * self.nbytes), True
        total = 0
        for i in range(plan.n_bwd):
            node = <Variable>plan.bwd_nodes[i]
            node.grad_ptr = self.block.data + total
            node._grad_block = self.block
            node._grad = None            # an array over an older block: made again when read
            total += _slot_bytes(node)
        plan.grads_placed = True
        return grew


# ---------------------------------------------------------------- Variable

cdef dict _methods = {}    # Variable operator or method name -> its op function (register_methods)


def register_methods(**functions):
    """Give Variable's operators and methods their op functions, by name: each op module
    calls this when imported (`register_methods(add=add, ...)`), and importing fastad.ops
    imports them all. The engine thus imports no op module (they cimport it)."""
    _methods.update(functions)


cdef inline bint _comparable(object other):
    """What `==`/`!=` compare elementwise: a Variable, a number, or an array or sequence."""
    return isinstance(other, (Variable, int, float, np.ndarray, np.generic, list, tuple))


cdef double _python_scalar(Variable v, str who) except? -1.0:
    """The value of a one-element Variable as a Python float; ValueError naming `who` else."""
    if v.size != 1:
        raise ValueError(f"{who}: only one-element Variables can be converted to Python "
                         f"scalars; this one has {v.size} elements (shape {v._shape})")
    if v._value is None and v._value_block is not None and not v.on_device:
        return (<double*>v.val_ptr)[0] if v.f64 else (<float*>v.val_ptr)[0]     # an op node's float
    return float(v.numpy().reshape(-1)[0])


@cython.no_gc
cdef class Variable:
    """A node of a define-by-run graph: a value, and a gradient after backward.

    Variables come from leaves (`Parameter`, `Input`, `IndexInput`) and from
    ops on them (`a + b`, `fa.tanh(a)`, `a @ b`, ...). Each op computes its
    value when it is built. `forward()` recomputes the graph below a node from
    the leaves' current values; `backward()` adds gradients into the leaves.

    Example::

        w = fa.Parameter(np.ones((3, 2)))          # leaves ...
        x = fa.Input(np.zeros((4, 3)))
        y = fa.tanh(x @ w)                         # ... and an op node: shape (4, 2)
        y.sum().backward()                         # w.grad: shape (3, 2)
    """

    __array_ufunc__ = None       # numpy defers `array * variable` to Variable

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} cannot be made directly: make leaves with "
                        f"fa.Parameter, fa.Input or fa.IndexInput, and nodes with ops on them")

    def __reduce_ex__(self, protocol):
        # Before any subclass's generated pickling, which would read the raw buffer pointers as strings.
        raise TypeError(f"{type(self).__name__} cannot be pickled or copied: save the values "
                        f"(fa.save(model.state_dict(), path), v.numpy()) and build a new graph")

    cdef int run_forward(self) except -1 nogil:
        return 0

    cdef int run_backward(self) except -1 nogil:
        return 0

    cdef int ensure_grad_buffer(self) except -1:
        if self.on_device:
            self._storage.ensure_grad()
        elif self.grad_ptr == NULL:
            if self.val_ptr == NULL:
                raise TypeError("this Variable was never initialised: it has no value and no gradient")
            self._grad = _buffer_of_shape("a gradient", self._shape, _type_num(self.f64))
            self.grad_ptr = <char*>cnp.PyArray_DATA(self._grad)
        return 0

    cdef int prepare_grad(self) except -1 nogil:
        """Make the grad buffer ready for a contribution: 1 means add, 0 means overwrite."""
        cdef unsigned long pid = fa_current_pass()
        if self.grad_ptr == NULL:      # always NULL on a device: ensure_grad_buffer is cheap there
            with gil:
                self.ensure_grad_buffer()
        if self.grad_pass == pid:
            return 1
        self.grad_pass = pid
        return 0

    cdef int add_grad_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                           Py_ssize_t row_len) except -1 nogil:
        """Add rows[k] (row_len elements each) into grad row ids[k] (ids already bounds-checked)."""
        if not self.prepare_grad():
            zero_values(self.grad_ptr, self.size, self.f64)
        _scatter_add_rows(self.grad_ptr, ids, n, rows, row_len, self.f64)
        return 0

    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil:
        """add_grad_rows of the rows coefs[k] * x row k // per_x, written to `scratch` first."""
        scale_rows_of(scratch, x, coefs, n, row_len, per_x, self.f64)
        return self.add_grad_rows(ids, n, scratch, row_len)

    # ---- the public face

    @property
    def value(self):
        """The forward value, owned by the node (do not resize it): a numpy array on
        the CPU, a CuPy array on a GPU. An op node's array lives in a block of memory
        shared with the values built beside it, which it keeps alive: keep `.numpy()`, a
        copy, of a value you hold on to after its graph."""
        return self._storage.value if self.on_device else value_array(self)

    @property
    def grad(self):
        """The gradient from the latest backward pass through this node, or None."""
        if self.grad_pass != fa_current_pass():
            return None
        return self._storage.grad if self.on_device else _grad_array(self)

    @property
    def requires_grad(self):
        """Whether a gradient flows back through this node (a leaf's can be set before any
        node is built on it: see Leaf.requires_grad)."""
        return self.requires_grad

    @property
    def shape(self):
        return self._shape

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def dtype(self):
        return float64 if self.f64 else float32

    @property
    def device(self):
        """Where the value lives: "cpu", or "cuda:N" for GPU N."""
        return _device_name(self)

    @property
    def storage(self):
        """On a GPU, the object holding the value and gradient there (a device
        package's storage, see register_backend); None on the CPU, where `value`
        and `grad` are the node's own numpy arrays."""
        return self._storage

    def __len__(self):
        if not self._shape:
            raise TypeError("len() of a 0-d Variable")
        return self._shape[0]

    def __array__(self, dtype=None, copy=None):
        """`np.asarray(v)`: a copy of the value on the host (as `v.numpy()`)."""
        host = self.numpy()
        return host.astype(dtype, copy=False) if dtype is not None else host

    def __bool__(self):
        if self.size != 1:
            raise ValueError(f"the truth value of a Variable with {self.size} elements is ambiguous; "
                             f"compare its .value with numpy instead")
        return bool(self.numpy().reshape(-1)[0])

    def __repr__(self):
        return f"Variable(op={self.op_name!r}, shape={self._shape}, dtype={self.dtype.name})"

    def item(self):
        """The value of a one-element Variable as a Python float (as `float(v)`); ValueError
        for any other size, as torch's "only one element tensors can be converted".

        >>> loss.item()
        """
        return _python_scalar(self, "item()")

    def __float__(self):
        return _python_scalar(self, "float()")

    def numpy(self):
        """A copy of the value, as a numpy array on the host."""
        if self.on_device:
            return self._storage.to_host()
        return value_array(self).copy()

    def to(self, device):
        """This leaf on `device` ("cpu", "cuda", "cuda:N"): itself if it is there
        already, else a new leaf of the same kind holding a copy of the value (a
        Parameter keeps its name; gradients do not flow between the two). Only
        leaves move: build the graph from leaves on the device you want.

        Example::

            w = fa.Parameter(np.ones((3, 2))).to("cuda")     # w.value is a CuPy array
            w.to("cpu").value                                # numpy again
        """
        target = _parse_device(device)
        if target == device_of(self):
            return self
        if not self.is_leaf:
            raise RuntimeError(
                f"to({device!r}): '{self.op_name}' is an op node; only leaves move between devices "
                f"(make the Parameters and Inputs on {device!r} and build the graph there)")
        return self._copy_to(target)     # every leaf is a Parameter, Input or IndexInput

    cdef Plan _get_plan(self):
        if self._plan is None:
            self._plan = _build_plan(self)
        return <Plan>self._plan

    def forward(self):
        """Recompute every node below this one, in place, from the leaves' current values
        (random nodes, such as a Dropout's mask, draw new values)."""
        replay_forward(self)
        return self

    def backward(self, grad=None):
        """Add d(self)/d(leaf) into every leaf's `.grad` (times `grad`, if given).

        A one-element Variable needs no `grad`; any other needs one of its shape.
        Uses the values of the last build or `forward()`: when a leaf below has
        changed since (`set_value`, `load_state_dict`, an optimizer step), it raises
        RuntimeError naming the stale node instead of mixing old and new values;
        call `forward()` first.
        """
        if grad is not None:
            grad = _as_numeric_array(grad, "backward(grad)")
            if grad.shape != self._shape:
                raise ValueError(f"backward(grad): grad has shape {grad.shape}, "
                                 f"expected the output's shape {self._shape}")
        replay_backward(self, grad)

    def parameters(self):
        """The Parameters this Variable depends on, in first-visit order."""
        if isinstance(self, Parameter):
            return [self]
        return list(self._get_plan().params)

    def zero_grad(self):
        """Clear the gradients of every leaf below that takes one (Parameters, Inputs made
        with requires_grad=True), or of this leaf: one compiled pass over the cached plan."""
        cdef Leaf leaf
        if self.is_leaf:        # an IndexInput, which takes no gradient (a Leaf has its own zero_grad)
            return
        for leaf in self._get_plan().grad_leaves:
            if isinstance(leaf, Parameter):
                check_unclaimed("zero_grad()", <Parameter>leaf)
        for leaf in self._get_plan().grad_leaves:
            leaf.clear_grad()

    # ---- operators (the op modules hold the implementations)

    def __add__(self, other):
        return _methods["add"](self, other)

    def __radd__(self, other):
        return _methods["add"](other, self)

    def __sub__(self, other):
        return _methods["sub"](self, other)

    def __rsub__(self, other):
        return _methods["sub"](other, self)

    def __mul__(self, other):
        return _methods["mul"](self, other)

    def __rmul__(self, other):
        return _methods["mul"](other, self)

    def __truediv__(self, other):
        return _methods["div"](self, other)

    def __rtruediv__(self, other):
        return _methods["div"](other, self)

    def __pow__(self, exponent, modulo):
        if modulo is not None:
            raise TypeError("pow() with a modulus is not supported")
        return _methods["pow"](self, exponent)

    def __rpow__(self, base, modulo):
        if modulo is not None:
            raise TypeError("pow() with a modulus is not supported")
        return _methods["pow"](base, self)

    # Comparisons build 0/1 mask nodes (no gradient). Hashing stays by identity, so
    # Variables remain dict keys (feeds, samplers); an operand that is no number,
    # array or Variable (None, a string) compares by identity, as for any object.
    def __hash__(self):
        return object.__hash__(self)

    def __eq__(self, other):
        if not _comparable(other):
            return NotImplemented
        return _methods["equal"](self, other)

    def __ne__(self, other):
        if not _comparable(other):
            return NotImplemented
        return _methods["not_equal"](self, other)

    def __gt__(self, other):
        return _methods["greater"](self, other)

    def __ge__(self, other):
        return _methods["greater_equal"](self, other)

    def __lt__(self, other):
        return _methods["less"](self, other)

    def __le__(self, other):
        return _methods["less_equal"](self, other)

    def __neg__(self):
        return _methods["neg"](self)

    def __pos__(self):
        return self

    def __matmul__(self, other):
        return _methods["matmul"](self, other)

    def __rmatmul__(self, other):
        return _methods["matmul"](other, self)

    def __getitem__(self, key):
        if isinstance(key, IndexInput):
            return _methods["take"](self, key)
        return _methods["getitem"](self, key)

    @property
    def T(self):
        """The transpose (all axes reversed)."""
        return _methods["transpose"](self)

    def transpose(self, *axes):
        return _methods["transpose"](self, axes[0] if len(axes) == 1 else (axes or None))

    def reshape(self, *shape):
        return _methods["reshape"](self, shape[0] if len(shape) == 1 else shape)

    def sum(self, axis=None, keepdims=False):
        return _methods["sum"](self, axis, keepdims)

    def mean(self, axis=None, keepdims=False):
        return _methods["mean"](self, axis, keepdims)

    def max(self, axis=None, keepdims=False):
        return _methods["max"](self, axis, keepdims)

    def exp(self):
        return _methods["exp"](self)

    def log(self):
        return _methods["log"](self)

    def tanh(self):
        return _methods["tanh"](self)

    def sigmoid(self):
        return _methods["sigmoid"](self)

    def relu(self):
        return _methods["relu"](self)


cdef void _scatter_add(floating* dst, const int64_t* ids, Py_ssize_t n, const floating* rows,
                       Py_ssize_t row_len) noexcept nogil:
    cdef Py_ssize_t k, j
    cdef floating* d
    for k in range(n):
        d = dst + ids[k] * row_len
        for j in range(row_len):
            d[j] += rows[k * row_len + j]


cdef struct IdTable:
    # An open-addressing hash table of at most SMALL_GROUP ids on the stack (Fibonacci hashing,
    # linear probing): slot[h] is -1 when position h is empty, else the entry of the id key[h].
    Py_ssize_t mask
    int shift
    int64_t key[4 * SMALL_GROUP]
    int32_t slot[4 * SMALL_GROUP]


cdef inline void id_table_start(IdTable* t, Py_ssize_t n) noexcept nogil:
    """An empty table for up to n (<= SMALL_GROUP) ids, at least four times as large as n
    (few ids then share a position: the probes rarely go on)."""
    cdef Py_ssize_t size = 32
    t.shift = 59
    while size < 4 * n:
        size *= 2
        t.shift -= 1
    t.mask = size - 1
    memset(t.slot, -1, size * sizeof(int32_t))


cdef inline Py_ssize_t id_table_find(const IdTable* t, int64_t r) noexcept nogil:
    """The position of id r in the table, or the empty one where it goes."""
    cdef Py_ssize_t h = <Py_ssize_t>((<uint64_t>r * <uint64_t>0x9E3779B97F4A7C15) >> t.shift)
    while t.slot[h] >= 0 and t.key[h] != r:
        h = (h + 1) & t.mask
    return h


cdef inline Py_ssize_t group_rows(IdTable* t, const int64_t* ids, Py_ssize_t n,
                                  const floating* rows, Py_ssize_t row_len, floating* sums,
                                  int64_t* distinct) noexcept nogil:
    """Each distinct id of ids[:n] once in `distinct`, in the order of first occurrence, with
    the sum of its rows (added in order) in the row of `sums` of the same index; returns how
    many. Every row of sums starts at -0.0, the additive identity (-0.0 + x is x bit for bit,
    -0.0 included), and every row is added: whether an id is new is then a select, not a
    branch, which ids that repeat at random (a Zipf law's) would mispredict. The empty table t
    holds at least 4 n positions."""
    cdef Py_ssize_t i, k, h, m = 0
    cdef int64_t r
    cdef int32_t slot
    cdef bint fresh
    for i in range(n * row_len):
        sums[i] = NEGATIVE_ZERO
    for k in range(n):
        r = ids[k]
        h = <Py_ssize_t>((<uint64_t>r * <uint64_t>0x9E3779B97F4A7C15) >> t.shift)
        while (t.key[h] != r) & (t.slot[h] >= 0):     # & : one rarely-taken branch
            h = (h + 1) & t.mask
        slot = t.slot[h]
        fresh = slot < 0
        slot = <int32_t>m if fresh else slot
        t.slot[h], t.key[h] = slot, r
        distinct[m] = r          # kept only when fresh: m then moves on
        m += fresh
        for i in range(row_len):
            sums[slot * row_len + i] += rows[k * row_len + i]
    return m


cdef inline void _scatter_add_rows(char* dst, const int64_t* ids, Py_ssize_t n, const char* rows,
                                   Py_ssize_t row_len, bint f64) noexcept nogil:
    """Add rows[k] into row ids[k] of dst, in either precision."""
    if f64:
        _scatter_add(<double*>dst, ids, n, <const double*>rows, row_len)
    else:
        _scatter_add(<float*>dst, ids, n, <const float*>rows, row_len)


# ------------------------------------------------------------------- leaves

@cython.no_gc
cdef class Leaf(Variable):
    """Base of Parameter and Input: a value set from outside, a persistent grad."""

    cdef int prepare_grad(self) except -1 nogil:
        if self.grad_ptr == NULL:
            with gil:
                self.ensure_grad_buffer()
        if self.grad_mode == GRAD_DENSE:
            return 1
        self.grad_mode = GRAD_DENSE
        return 0

    @property
    def grad(self):
        """The accumulated gradient as a dense array, or None when the leaf holds none
        (before any backward reaches it, and after zero_grad(), as torch's
        `zero_grad(set_to_none=True)`); reading it changes nothing.

        A dense gradient is the live buffer (writes to it count); a sparse
        gradient (only the touched rows of a gather hold values) reads as a
        read-only dense copy, so it stays sparse. (On a GPU that copy is
        writable, CuPy having no read-only arrays, but writes to it change
        nothing.)
        """
        if self.grad_mode == GRAD_NONE:
            return None
        if self.on_device:
            return self._storage.leaf_grad(self.grad_mode == GRAD_DENSE)
        if self.grad_mode == GRAD_DENSE:
            return self._grad
        dense = np.zeros(self._shape, dtype=self._value.dtype)
        sp = <Parameter>self        # only a Parameter's gradient is sparse
        # as (rows, row_len): a 1-D Parameter's slab rows are one element wide
        dense.reshape(sp._shape[0], sp.row_len)[sp.touched[:sp.n_touched]] = sp.slab[:sp.n_touched]
        dense.flags.writeable = False
        return dense

    cdef int clear_grad(self) except -1 nogil:
        self.grad_mode = GRAD_NONE
        return 0

    @property
    def requires_grad(self):
        """Whether backward computes this leaf's gradient (a Parameter: True at first; an
        Input: as made). Settable, as torch's, to freeze a Parameter, but only before any
        node is built on the leaf: a built graph fixed which of its nodes take gradients, so
        after that it raises RuntimeError (build the graph again on the changed leaf).

        >>> embedding.weight.requires_grad = False       # then build the graph
        """
        return self.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        flag = check_flag(f"{type(self).__name__}.requires_grad", "requires_grad", flag)
        if flag == self.requires_grad:
            return
        if self.has_children:
            raise RuntimeError(
                f"{type(self).__name__}.requires_grad cannot change once a graph is built on "
                f"it: the graph fixed at build time which nodes take gradients; set it before "
                f"building the graph (or build a new graph after setting it)")
        self.requires_grad = flag

    def zero_grad(self):
        """Forget the accumulated gradient (costs nothing: the next one overwrites)."""
        if isinstance(self, Parameter):
            check_unclaimed("zero_grad()", <Parameter>self)
        self.clear_grad()

    def set_value(self, data):
        """Copy `data` (same shape) into this leaf; `forward()` then recomputes the graph."""
        cdef cnp.ndarray arr
        if self.on_device and self._storage.copy_device_array(data):
            mark_changed(self)
            return
        if not self.on_device and _holds_bytes_for(data, self._value):
            arr = <cnp.ndarray>data
            memmove(self.val_ptr, cnp.PyArray_DATA(arr), cnp.PyArray_NBYTES(arr))
            mark_changed(self)
            return
        arr = _as_numeric_array(data, "set_value")
        if (<object>arr).shape != self._shape:
            raise ValueError(f"set_value: got shape {(<object>arr).shape}, expected {self._shape} "
                             f"(a leaf keeps its shape; build a new graph for a new shape)")
        if self.on_device:
            self._storage.copy_from_host(arr)
        else:
            np.copyto(self._value, arr, casting="unsafe")
        mark_changed(self)


cdef bint _holds_bytes_for(object data, cnp.ndarray value):
    """`data` is a C-contiguous array of `value`'s dtype (the same object, or an equivalent
    one: an unpickled array, as Ray's and spawned processes' arguments are, has a dtype
    object of its own; a byte-swapped twin is not equivalent) and shape, whose bytes
    set_value copies as they are. C-level tests: a leaf set once an example pays no dtype
    or shape tuple compares."""
    if not isinstance(data, np.ndarray):
        return False
    cdef cnp.ndarray arr = <cnp.ndarray>data
    cdef int nd = cnp.PyArray_NDIM(arr), i
    if (nd != cnp.PyArray_NDIM(value) or not cnp.PyArray_IS_C_CONTIGUOUS(arr)
            or (<void*>cnp.PyArray_DESCR(arr) != <void*>cnp.PyArray_DESCR(value)
                and not cnp.PyArray_EquivTypes(<cnp.dtype><void*>cnp.PyArray_DESCR(arr),
                                               <cnp.dtype><void*>cnp.PyArray_DESCR(value)))):
        return False
    for i in range(nd):
        if cnp.PyArray_DIMS(arr)[i] != cnp.PyArray_DIMS(value)[i]:
            return False
    return True


cdef int set_storage(Variable node, object storage) except -1:
    """Give node its device storage (None: the host): the only place that sets
    `_storage`, and with it the flag the passes read without the GIL."""
    node._storage = storage
    node.on_device = storage is not None
    return 0


cdef int _init_leaf(Variable leaf, str op, cnp.ndarray arr, bint requires_grad, object device) except -1:
    """Make `leaf` a leaf holding `arr`: as its buffer on the CPU (device None), else a copy on
    `device`. A second __init__ is refused: nodes built on a leaf keep its size, and its buffer."""
    if leaf.op_name is not None:
        raise RuntimeError(f"{type(leaf).__name__} is already initialised; use set_value() "
                           f"to change its value, or make a new leaf for a new shape")
    if device is None:
        _adopt_value(leaf, arr)
    else:
        set_storage(leaf, _backend.from_host(device, arr))
        leaf.size = arr.size
    leaf._shape = (<object>arr).shape
    leaf.f64 = cnp.PyArray_TYPE(arr) == cnp.NPY_FLOAT64
    leaf.op_name = op
    leaf.parents = ()
    leaf.is_leaf = True
    leaf.requires_grad = requires_grad
    return 0


@cython.no_gc
cdef class Parameter(Leaf):
    """A trainable leaf. Gradients accumulate into `.grad` until `zero_grad()`.

    `Parameter(array, dtype=None)` copies `array` (float32 unless `dtype` or
    `set_default_dtype` says otherwise). With `copy=False` the Parameter adopts
    `array` itself as its value, without a copy (the zero-copy route for big
    tables): what trains it changes the array. The array must then be a
    C-contiguous, aligned, writeable float32 or float64 numpy array on the host
    (its dtype is kept; `dtype`, if given, must match it), else a TypeError or
    ValueError says what is wrong and that copy=True would copy it. A shared
    handle (an object with `trainable_array()`, the array it lends, and
    `state_array(key, fill)` for optimizer state, as `fa.hogwild.share` makes) is
    always adopted without a copy. A 2-D Parameter indexed with an
    IndexInput (`p[ix]`) receives a sparse gradient: only the touched rows are stored.

    Example::

        w = fa.Parameter(np.random.randn(4, 3), name="w")    # float32, shape (4, 3)
        (w * w).sum().backward()
        w.grad                                               # 2 * w.value
        table = np.zeros((1_000_000, 64), np.float32)
        E = fa.Parameter(table, copy=False)                  # E.value is table
    """

    def __init__(self, data, dtype=None, name=None, device=None, copy=True):
        target = _parse_device(device)
        shared = shared_array_of(data)
        if shared is not None:         # zero copy: the shared segment is the value
            if target is not None:
                raise ValueError(f"Parameter: a shared array lives in host memory; it cannot "
                                 f"be a Parameter on {target} (Hogwild trains on the CPU)")
            if not isinstance(shared, np.ndarray):
                raise TypeError(f"Parameter: the shared handle's array is a "
                                f"{type(shared).__name__}, not a numpy array")
            _adopt(self, "a shared array", shared, dtype)
            self.shared = data
        elif not copy:
            if not isinstance(data, np.ndarray):
                raise TypeError(f"Parameter: copy=False adopts a numpy array as the value, got "
                                f"{type(data).__name__}; pass copy=True to copy it")
            if target is not None:
                raise ValueError(f"Parameter: copy=False adopts a host array; a Parameter on "
                                 f"{target} holds its own copy (pass copy=True)")
            _adopt(self, "with copy=False, the array", data, dtype)
        else:
            _init_leaf(self, "parameter", _float_array(data, dtype, "Parameter"), True, target)
        self.name = name
        self.row_len = self.size // self._shape[0] if self._shape and self._shape[0] else 0

    cdef int prepare_grad(self) except -1 nogil:
        if self.grad_mode == GRAD_SPARSE:
            with gil:
                self.densify()
            return 1
        return Leaf.prepare_grad(self)

    def _copy_to(self, target):
        return Parameter(self.numpy(), dtype=self.dtype, name=self.name, device=target)

    cdef int densify(self) except -1:
        """Turn the sparse gradient into a dense one."""
        cdef Py_ssize_t k, width = self.row_len * element_size(self.f64)
        if self.on_device:
            self._storage.densify()
        else:
            self.ensure_grad_buffer()
            zero_values(self.grad_ptr, self.size, self.f64)
            for k in range(self.n_touched):
                memcpy(self.grad_ptr + self.touched_ptr[k] * width, self.slab_ptr + k * width, width)
                self.slot_of_ptr[self.touched_ptr[k]] = -1
            self.n_touched = 0
        self.grad_mode = GRAD_DENSE
        return 0

    cdef int _grow_slab(self) except -1:
        return self.grow_slab_to(min(max(16, 2 * self.slab_rows), self._shape[0]))

    cdef int grow_slab_to(self, Py_ssize_t capacity) except -1:
        slab = np.empty((capacity, self.row_len), dtype=self._value.dtype)
        if self.n_touched:
            slab[:self.n_touched] = self.slab[:self.n_touched]
        self.slab = keep_data(slab, &self.slab_ptr)
        self.slab_rows = capacity
        return 0

    cdef int add_grad_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                           Py_ssize_t row_len) except -1 nogil:
        """Add the rows into a dense gradient, else into the sparse one: a row's first
        contribution takes a slab row."""
        cdef Py_ssize_t k, width = row_len * element_size(self.f64)
        cdef int64_t r
        cdef int32_t slot
        cdef bint fresh
        if self.grad_mode == GRAD_DENSE:
            _scatter_add_rows(self.grad_ptr, ids, n, rows, row_len, self.f64)
            return 0
        if self.slot_of_ptr == NULL:
            with gil:
                self.start_sparse()
        self.grad_mode = GRAD_SPARSE
        for k in range(n):
            r = ids[k]
            slot = self.slot_of_ptr[r]
            fresh = slot < 0
            if fresh:
                if self.n_touched == self.slab_rows:
                    with gil:
                        self._grow_slab()
                slot = <int32_t>self.n_touched
                self.slot_of_ptr[r] = slot
                self.touched_ptr[slot] = r
                self.n_touched += 1
            put_values(self.slab_ptr + slot * width, rows + k * width, row_len, not fresh, self.f64)
        return 0

    cdef bint groups_on_stack(self, Py_ssize_t n) noexcept nogil:
        """Whether repeats among n ids are found with a hash table on the stack (up to
        SMALL_GROUP ids of a table of more than SMALL_TABLE rows) rather than by marking rows
        in slot_of, the table-sized row index: its entries are cache misses on a large table,
        and cheaper than hashing on a small one."""
        return n <= SMALL_GROUP and self.size > SMALL_TABLE * self.row_len    # rows > SMALL_TABLE

    cdef int repeats_among(self, const int64_t* ids, Py_ssize_t n) except -1 nogil:
        """1 if an id occurs twice among ids[:n], else 0 (groups_on_stack: in a hash table on
        the stack; else marking rows in slot_of, which holds -1 for every row while no sparse
        gradient is kept, and unmarking them)."""
        cdef Py_ssize_t k, h, marked = n
        cdef int found = 0
        cdef IdTable table
        if self.groups_on_stack(n):
            id_table_start(&table, n)
            for k in range(n):
                h = id_table_find(&table, ids[k])
                if table.slot[h] >= 0:
                    return 1
                table.slot[h], table.key[h] = 0, ids[k]
            return 0
        if self.slot_of_ptr == NULL:
            with gil:
                self.start_sparse()
        for k in range(n):
            if self.slot_of_ptr[ids[k]] != -1:
                found, marked = 1, k
                break
            self.slot_of_ptr[ids[k]] = 0
        for k in range(marked):
            self.slot_of_ptr[ids[k]] = -1
        return found

    cdef Py_ssize_t sum_repeats(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                                Py_ssize_t row_len) except -1 nogil:
        """0 when the rows serve as they are (no id repeats among ids[:n]); else each distinct
        id once in `touched`, in the order of first occurrence, with the sum of its rows
        (added in order, as add_grad_rows adds them) in the slab row of the same index, and
        how many there are, after which the caller takes its step of those rows and calls
        clear_grad(). The sparse gradient must be empty (a RowStep's Parameter). With
        groups_on_stack, one pass over a hash table groups the ids (and may group them when
        none repeats); else slot_of finds the repeats first."""
        cdef IdTable table
        if not self.groups_on_stack(n):
            if not self.repeats_among(ids, n):
                return 0
            self.add_grad_rows(ids, n, rows, row_len)
            return self.n_touched
        if self.slab_rows < n:
            with gil:
                if self.slot_of_ptr == NULL:
                    self.start_sparse()
                self.grow_slab_to(n)
        id_table_start(&table, n)
        if self.f64:
            return group_rows(&table, ids, n, <const double*>rows, row_len,
                              <double*>self.slab_ptr, self.touched_ptr)
        return group_rows(&table, ids, n, <const float*>rows, row_len, <float*>self.slab_ptr,
                          self.touched_ptr)

    cdef int start_sparse(self) except -1:
        """Make the row index and the slab of a first sparse gradient."""
        if self._shape[0] > INT32_MAX:
            raise ValueError(f"take: a sparse gradient supports tables of at most {INT32_MAX} "
                             f"rows, this Parameter has {self._shape[0]}")
        self.slot_of = np.full(self._shape[0], -1, dtype=np.int32)
        self.touched = np.empty(self._shape[0], dtype=np.int64)
        self.slot_of_ptr = <int32_t*>cnp.PyArray_DATA(self.slot_of)
        self.touched_ptr = <int64_t*>cnp.PyArray_DATA(self.touched)
        self._grow_slab()   # even a gather of no rows leaves a sparse gradient with a slab
        return 0

    @property
    def is_sparse_grad(self):
        """True while the gradient holds only the rows listed by `sparse_rows()`."""
        return self.grad_mode == GRAD_SPARSE

    def sparse_rows(self):
        """The row ids a sparse gradient touched (each once), or None if the gradient is dense or empty."""
        if self.grad_mode != GRAD_SPARSE:
            return None
        if self.on_device:
            return self._storage.touched_rows()
        return self.touched[:self.n_touched].copy()

    def sparse_grad(self):
        """`(rows, values)`: the touched row ids and their gradient rows (copies), or None if not sparse."""
        if self.grad_mode != GRAD_SPARSE:
            return None
        if self.on_device:
            return self._storage.sparse_grad()
        return self.touched[:self.n_touched].copy(), self.slab[:self.n_touched].copy()

    def _require_host(self, who):
        if self.on_device:
            raise ValueError(f"{who}: the Parameter is on {device_of(self)}; this works on CPU "
                             f"Parameters")

    def _accumulate_grad(self, values, rows=None):
        """Add `values` into this CPU Parameter's gradient as a backward pass would: without
        `rows` densely (values of its shape), with `rows` (int64 ids) value row k into row
        rows[k] (repeats add; into a sparse gradient unless a dense one is held). `values` is
        C-contiguous, of the Parameter's dtype. Synchronised training moves gradients so."""
        self._require_host("_accumulate_grad")
        if not isinstance(values, np.ndarray) or values.dtype != self._value.dtype \
                or not values.flags.c_contiguous:
            raise TypeError(f"_accumulate_grad: values must be a C-contiguous {self._value.dtype} "
                            f"array, got {type(values).__name__} {getattr(values, 'dtype', '')}")
        cdef const char* data = <const char*>cnp.PyArray_DATA(<cnp.ndarray>values)
        if rows is None:
            if values.shape != self._shape:
                raise ValueError(f"_accumulate_grad: values have shape {values.shape}, expected "
                                 f"the Parameter's {self._shape}")
            put_values(self.grad_ptr, data, self.size, self.prepare_grad(), self.f64)
            return
        cdef cnp.ndarray ids = np.ascontiguousarray(rows, dtype=np.int64)
        if ids.ndim != 1 or not self._shape or values.shape != (ids.shape[0], self.row_len):
            raise ValueError(f"_accumulate_grad: rows of shape {np.shape(rows)} and values of "
                             f"shape {values.shape} do not fit a Parameter of shape "
                             f"{self._shape}: expected (n,) and (n, {self.row_len})")
        if ids.size and (ids.min() < 0 or ids.max() >= self._shape[0]):
            raise IndexError(f"_accumulate_grad: rows must be in [0, {self._shape[0]}), got "
                             f"{ids.min()}..{ids.max()}")
        self.add_grad_rows(<const int64_t*>cnp.PyArray_DATA(ids), ids.shape[0], data, self.row_len)

    def _scale_grad(self, factor):
        """Multiply this CPU Parameter's gradient (dense, or the touched rows of a sparse one)
        by `factor`, in place."""
        self._require_host("_scale_grad")
        if self.grad_mode == GRAD_SPARSE:
            self.slab[:self.n_touched] *= factor
        elif self.grad_mode == GRAD_DENSE:
            self._grad *= factor

    cdef int clear_grad(self) except -1 nogil:
        cdef Py_ssize_t k
        if self.on_device:
            with gil:
                self._storage.clear_grad(self.grad_mode == GRAD_SPARSE, self.grad_mode == GRAD_DENSE)
        elif self.grad_mode == GRAD_SPARSE:
            for k in range(self.n_touched):
                self.slot_of_ptr[self.touched_ptr[k]] = -1
            self.n_touched = 0
        self.grad_mode = GRAD_NONE
        return 0

    def __repr__(self):
        label = f", name={self.name!r}" if self.name is not None else ""
        where = f", device={device_of(self)!r}" if self.on_device else ""
        return f"Parameter(shape={self._shape}, dtype={self.dtype.name}{label}{where})"


@cython.no_gc
cdef class Input(Leaf):
    """A data leaf: `Input(array, dtype=None)`; `set_value(new)` with the same shape.

    Inputs need no gradient unless made with `requires_grad=True`.

    Example::

        x = fa.Input(np.zeros((1, 4)))
        loss = (x * 2.0).sum()
        x.set_value(np.ones((1, 4))); loss.forward()         # loss.item() == 8.0
    """

    def __init__(self, data, dtype=None, requires_grad=False, device=None):
        _init_leaf(self, "input", _float_array(data, dtype, "Input"), bool(requires_grad),
                   _parse_device(device))
        if device is None:
            _join_recording(self)

    def _copy_to(self, target):
        return Input(self.numpy(), dtype=self.dtype, requires_grad=self.requires_grad, device=target)

    def __repr__(self):
        where = f", device={device_of(self)!r}" if self.on_device else ""
        return f"Input(shape={self._shape}, dtype={self.dtype.name}{where})"


cdef bint _any_negative(const int64_t* ids, Py_ssize_t n) noexcept nogil:
    """Whether an id is < 0: one pass gcc vectorises (numpy's min() costs microseconds
    of dispatch on the few ids an example sets)."""
    cdef int64_t lowest = 0
    cdef Py_ssize_t i
    for i in range(n):
        lowest = lowest if lowest < ids[i] else ids[i]
    return lowest < 0


cdef cnp.ndarray _index_array(object ids, str argname):
    """`ids` as a new C-contiguous int64 buffer (new_buffer), or the error naming `argname`:
    integers (an empty float array passes), each >= 0 and < 2**63. The copy and its check
    are C loops: a leaf made an example pays no numpy reductions."""
    cdef cnp.ndarray arr
    if isinstance(ids, np.ndarray):
        arr = <cnp.ndarray>ids
    else:
        try:
            arr = np.asarray(ids)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{argname}: cannot make an array of ids from this data ({e})") from None
    cdef int type_num = cnp.PyArray_TYPE(arr)
    if not cnp.PyTypeNum_ISINTEGER(type_num):
        if not (cnp.PyArray_SIZE(arr) == 0 and cnp.PyTypeNum_ISFLOAT(type_num)):
            raise TypeError(f"{argname}: ids must be integers, got dtype {arr.dtype}")
    elif (cnp.PyTypeNum_ISUNSIGNED(type_num) and cnp.PyArray_ITEMSIZE(arr) == 8
            and cnp.PyArray_SIZE(arr) and arr.max() > INT64_MAX):
        raise IndexError(f"{argname}: ids must be < 2**63, got {arr.max()}")
    cdef cnp.ndarray out = new_buffer(cnp.PyArray_NDIM(arr), cnp.PyArray_DIMS(arr), cnp.NPY_INT64)
    cnp.PyArray_CopyInto(out, arr)
    if _any_negative(<const int64_t*>cnp.PyArray_DATA(out), cnp.PyArray_SIZE(out)):
        raise IndexError(f"{argname}: ids must be >= 0, got {arr.min()}")
    return out


@cython.no_gc
cdef class IndexInput(Variable):
    """An integer leaf of row ids: `IndexInput([3, 7])`; `set_value` with the same shape.

    Index a 2-D Parameter with it (`p[ix]`, `fa.take(p, ix)`) for a sparse
    gradient, or pass it as class targets to `fa.nn.cross_entropy`.

    Example::

        ix = fa.IndexInput([3, 7])
        rows = fa.Parameter(np.zeros((10, 4)))[ix]           # shape (2, 4)
        ix.set_value([1, 2]); rows.forward()
    """

    def __init__(self, ids, device=None):
        _init_leaf(self, "index_input", _index_array(ids, "IndexInput"), False, _parse_device(device))
        if device is None:
            _join_recording(self)

    @property
    def dtype(self):
        return np.dtype(np.int64)

    @property
    def value(self):
        """The ids (int64). On a GPU, a copy: the ids there change only through
        set_value, which checks them on the host before they reach the device."""
        if not self.on_device:
            return self._value
        return self._storage.copy_value()

    def set_value(self, ids):
        """Copy new ids (same shape, integers >= 0) into this leaf."""
        cdef cnp.ndarray arr
        if not self.on_device and _holds_bytes_for(ids, self._value):
            arr = <cnp.ndarray>ids
            if _any_negative(<const int64_t*>cnp.PyArray_DATA(arr), arr.size):
                raise IndexError(f"IndexInput.set_value: ids must be >= 0, got {arr.min()}")
        else:
            arr = _index_array(ids, "IndexInput.set_value")
            if (<object>arr).shape != self._shape:
                raise ValueError(f"IndexInput.set_value: got shape {(<object>arr).shape}, expected {self._shape}")
        if self.on_device:
            bound = self._storage.id_bound
            bad = np.flatnonzero(arr.reshape(-1) >= bound)
            if bad.size:
                raise IndexError(f"IndexInput.set_value: id {arr.reshape(-1)[bad[0]]} at position "
                                 f"{bad[0]} is out of range for the ops built on this IndexInput "
                                 f"(ids must be < {bound})")
            self._storage.copy_from_host(arr)
        else:
            memcpy(self.val_ptr, cnp.PyArray_DATA(arr), cnp.PyArray_NBYTES(arr))
        mark_changed(self)

    def _copy_to(self, target):
        return IndexInput(self.numpy(), device=target)

    def __repr__(self):
        where = f", device={device_of(self)!r}" if self.on_device else ""
        return f"IndexInput(shape={self._shape}{where})"


# ------------------------------------------------------------- row gathers
# Fused training's one extension point (graph.pxd): a row gather sends each table's gradient
# rows to the table, or to the RowStep its slot is routed to.

cdef class RowStep:
    """An optimizer's update of a table's rows, applied as a row gather's backward sends them
    (see graph.pxd); the optimizer makes one per Parameter (`Optimizer.row_step`). This base
    keeps no gradient and applies nothing: a subclass implements add_rows and
    add_scaled_rows."""

    cdef int add_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                      Py_ssize_t row_len) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement add_rows")

    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} does not implement add_scaled_rows")

    cdef const double* plain_sgd_rate(self) noexcept nogil:
        return NULL


@cython.no_gc
cdef class RowGather(Variable):
    """The base of the nodes that gather rows of tables (see graph.pxd)."""

    cdef int gathers(self, tuple tables, tuple sources) except -1:
        if len(tables) > 3:
            raise ValueError(f"{self.op_name}: a row gather has at most 3 tables, got {len(tables)}")
        self.tables, self.sources = tables, sources
        self.sends_once = True
        self.routes = (None,) * len(tables)
        self.route_ptrs[0] = self.route_ptrs[1] = self.route_ptrs[2] = NULL
        return 0

    cdef int route(self, Variable table, RowStep step) except -1:
        routes = list(self.routes)
        for slot, slot_table in enumerate(self.tables):
            if slot_table is table:
                routes[slot] = step
                self.route_ptrs[slot] = NULL if step is None else <PyObject*>step
        self.routes = tuple(routes)       # holds the references route_ptrs borrows
        return self.routes_changed()

    cdef int routes_changed(self) except -1:
        return 0

    @property
    def row_sources(self):
        """((ids, table), ...): the IndexInputs this node reads each table by."""
        return self.sources


# ------------------------------------------------------------------- devices
# The engine imports no device package: a device package registers itself here
# (register_backend). A Variable on a device holds its value and gradient in a
# storage object of the package's type, and the engine calls that object for
# everything it does with them. Device ops are FunctionNodes: the same plans, pass
# ids and leaf gradient modes as on the CPU, with each op's forward and backward
# written in the package.

cdef object _backend = None     # the registered device backend (register_backend)


cdef int _adopt(Parameter p, str what, cnp.ndarray arr, object dtype) except -1:
    """Make `arr` itself p's value, or refuse an array a Parameter cannot train in place:
    not `dtype` (when given) or not C-contiguous float32/float64 (TypeError), read-only
    or misaligned (ValueError)."""
    if dtype is not None and _float_dtype(dtype, "Parameter") != arr.dtype:
        raise TypeError(f"Parameter: {what} is {arr.dtype}, not {np.dtype(dtype)}; a Parameter "
                        f"made without a copy keeps the array's dtype")
    if arr.dtype != float32 and arr.dtype != float64 or not arr.flags.c_contiguous:
        raise TypeError(f"Parameter: {what} must be C-contiguous float32 or float64 to be "
                        f"trained in place, got {arr.dtype}"
                        f"{'' if arr.flags.c_contiguous else ' (not C-contiguous)'}; "
                        f"copy=True copies it into such an array")
    if not arr.flags.writeable or not arr.flags.aligned:
        raise ValueError(f"Parameter: {what} must be writeable and aligned (optimizers update "
                         f"it in place), got a {'read-only' if not arr.flags.writeable else 'misaligned'} "
                         f"array; copy=True copies it")
    _init_leaf(p, "parameter", arr, True, None)
    return 0


cdef object shared_array_of(object handle):
    """The array a shared handle lends a Parameter to train in place (`handle.trainable_array()`:
    any object with that method, and `state_array(key, fill)` for optimizer state, is one:
    fa.hogwild.share's and fa.distributed.share's are), or None when `handle` is none."""
    lend = getattr(type(handle), "trainable_array", None)
    return None if lend is None else lend(handle)


def register_backend(backend):
    """Connect the engine to a device package (which calls this when imported): `backend`
    is an instance of a `fastad.ops.backend.Backend` subclass, which names what the engine
    calls on it: the storage of a device Variable (`from_host`, `empty`; the storage's
    type documents what the engine calls on a storage), device names, optimizer support,
    and the ops on the device."""
    global _backend
    _backend = backend


cdef object device_backend():
    """The registered device backend; RuntimeError when there is none."""
    if _backend is None:
        raise RuntimeError("a Variable on a device: no device support is registered with the "
                           "engine; a device package registers it when it is imported")
    return _backend


# Automatic batching (fastad.training.autobatch) is a device of its own: while a recording is on,
# the Inputs and IndexInputs made in its thread become its leaves (their storage is the
# recording, their values stay here), and every op on them goes to the recording, which
# notes it instead of computing it. The compiled CPU path never looks at any of this.


def set_recording(recording):
    """Make `recording` (None: none) the one that the Inputs and IndexInputs made in this
    thread join, and return the one that was on (fastad.training.autobatch's recordings:
    a storage of their type then marks a Variable they record)."""
    global _recording, _recording_thread, _recording_type
    if recording is not None:
        if _recording_type is not None and type(recording) is not _recording_type:
            raise TypeError(f"set_recording: expected a {_recording_type.__name__}, got "
                            f"{type(recording).__name__}")
        _recording_type = type(recording)
    previous = _recording
    _recording = recording
    _recording_thread = PyThread_get_thread_ident()
    return previous


cdef int _join_recording(Variable leaf) except -1:
    """Make a new leaf one of the recording's (when one is on in this thread)."""
    if _recording is not None and _recording_thread == PyThread_get_thread_ident():
        _recording.add_leaf(leaf)
    return 0


cdef object backend_for(Variable x):
    if _recording_type is not None and type(x._storage) is _recording_type:
        return x._storage
    return device_backend()


cdef object new_storage(object device, tuple shape, object dtype):
    return _backend.empty(device, shape, dtype)


cdef object _parse_device(object device):
    """None for the CPU, else the canonical device name (checked by the registered device package)."""
    if device is None or device == "cpu":
        return None
    return device_backend().canonical_device(device)


# ---------------------------------------------------- ops written in Python
# A device package's ops: nodes whose passes call Python, on values held in
# storage objects, and the gradient slots their backward passes write into.

@cython.no_gc
cdef class OneInput(Variable):
    """An op of one input x: see graph.pxd."""

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        return self._gradient(self.x.prepare_grad())

    cdef int _gradient(self, bint add) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} defines no _gradient")


@cython.no_gc
cdef class TwoInputs(Variable):
    """An op of two inputs a and b: see graph.pxd."""

    def __dealloc__(self):
        free(self.it)

    cdef int run_backward(self) except -1 nogil:
        if self.a.requires_grad:
            _gradient_into(self, self.a, True)
        if self.b.requires_grad:
            _gradient_into(self, self.b, False)
        return 0

    cdef int _gradient(self, char* g, bint to_a, bint add) except -1 nogil:
        with gil:
            raise NotImplementedError(f"{type(self).__name__} defines no _gradient")


cdef inline int _gradient_into(TwoInputs node, Variable x, bint to_a) except -1 nogil:
    """x's gradient buffer readied (zeroed under a broadcast, whose sums add), then node's part."""
    cdef bint add = x.prepare_grad()
    if node.it != NULL and not add:
        zero_values(x.grad_ptr, x.size, node.f64)
    return node._gradient(x.grad_ptr, to_a, add)


cdef class FunctionNode(Variable):
    """An op node whose passes are Python: `fn.forward(node)` writes node.value in
    place from the inputs' values; `fn.backward(node)` pushes node.grad into the
    inputs (through `grad_slot` and `sparse_grad_slot`)."""

    cdef int run_forward(self) except -1 nogil:
        with gil:
            self.fn.forward(self)
        return 0

    cdef int run_backward(self) except -1 nogil:
        with gil:
            self.fn.backward(self)
        return 0


def function_node(str op, tuple inputs, tuple shape, dtype, fn, storage, bint redraws=False):
    """A new FunctionNode of `shape` and `dtype` whose value is held in `storage` (on
    the inputs' device), computed now; `redraws`: its forward draws new random values."""
    if storage is None:
        raise TypeError(f"function_node: '{op}' needs a device storage for its value")
    cdef FunctionNode node = FunctionNode.__new__(FunctionNode)
    set_storage(node, storage)
    _wire(node, op, inputs, np.dtype(dtype) == float64)
    node._shape = shape
    node.size = int(np.prod(shape, dtype=np.int64))
    node.fn = fn
    node.redraws = redraws
    return finish(node)


cdef int _require_storage(str who, Variable x) except -1:
    if not x.on_device:
        raise TypeError(f"{who}: '{x.op_name}' is on the CPU; this serves Variables whose "
                        f"value and gradient are held in a device storage")
    return 0


def grad_slot(Variable x):
    """`(buffer, accumulate)` for a dense gradient contribution to x, a Variable held in
    a storage: write into the buffer when accumulate is 0, add when 1."""
    _require_storage("grad_slot", x)
    cdef int add = x.prepare_grad()
    x._storage.grad_is_zero = False
    return x._storage.grad, add


def sparse_grad_slot(Variable x, ids):
    """The gradient buffer a gather's backward scatter-adds its rows into; ready to be
    added into. When x is a Parameter whose gradient is (or becomes) sparse, the row
    ids (`ids`, an int64 device array) are added to its storage's touched rows."""
    cdef Parameter p
    _require_storage("sparse_grad_slot", x)
    if not isinstance(x, Parameter):
        buf, add = grad_slot(x)
        if not add:
            x._storage.zero_grad()
        return buf
    p = <Parameter>x
    if p.grad_mode == GRAD_NONE:
        p._storage.start_sparse()
        p.grad_mode = GRAD_SPARSE
    if p.grad_mode == GRAD_SPARSE:
        p._storage.add_touched(ids)
    return p._storage.grad


def grad_state(Parameter p):
    """`(mode, grad, touched)` of a Parameter held in a storage, for optimizers: mode
    "none", "dense" or "sparse"; grad the dense buffer (for "sparse": zero outside the
    touched rows); touched the id arrays of a sparse gradient (ids may repeat)."""
    _require_storage("grad_state", p)
    mode = ("none", "sparse", "dense")[p.grad_mode]
    return mode, p._storage.grad, (p._storage.touched_ids(),) if p.grad_mode == GRAD_SPARSE else ()
