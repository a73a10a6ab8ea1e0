"""Automatic batching: the per-example graphs of a minibatch, evaluated as one graph.

Inside `with fa.autobatch():` the Inputs and IndexInputs made in this thread are an
example's data, and the ops on them are recorded, not computed: a recorded Variable has a
shape and a dtype but no value yet. `fa.batch(losses)` evaluates the recording: recorded ops
of one kind and signature (the op and its settings, the dtype, the row width, and the shared
operands: Parameters and any other Variable made outside the recording) at one depth (1 +
the depth of their deepest recorded input) become ONE node of a real graph over the rows of
all their examples, stacked: a matmul of all rows by the shared matrix, one elementwise op
over the stacked buffers, one gather of all the examples' ids (DyNet's on-the-fly operation
batching, Neubig, Goldberg and Dyer 2017, by depth). It returns the sum of the losses, a
Variable of that graph: its backward adds into the Parameters the sum of the examples'
gradients (up to the order of the additions).

A recorded value is held as rows: shape (..., w) is size // w rows of width w (a 0-d value
one row of width 1), and a batched node holds its members' rows one after another, each
member's in a run. Whole rows of a recorded value (x[i], x[a:b]) and a reshape that keeps
the row width are views of its runs, with no node of their own.
"""
cimport cython
from cython cimport floating
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, realloc
from libc.string cimport memcmp, memcpy

import math

import numpy as np

from fastad._engine.graph cimport Variable, Input, IndexInput, init_node, set_storage, value_array
from fastad._engine.graph import set_recording
from fastad._engine.loops cimport element_size, row_axpy, row_scale, zero_values
from fastad.ops.elementwise import unary_node, binary_node, add, sub, mul
from fastad.ops.linalg import matmul
from fastad.ops.fused import gru_cell, lstm_cell, lstm_sequence
from fastad.ops.losses import cross_entropy
from fastad.ops.shape import concat, getitem, reshape
from fastad.ops.sparse import take, embedding

BATCHABLE = ("elementwise unary ops (tanh, exp, relu, scalar + - * /, ...)",
             "add sub mul div pow maximum minimum of two recorded values of one shape, or of a "
             "recorded value and a shared one that broadcasts along its rows ((w,), (1, w) or one element)",
             "matmul of a recorded (k,) or (rows, k) value by a shared (k, n) matrix",
             "take / embedding / table[ix] of a shared 2-D table at recorded IndexInput ids "
             "(no max_norm)",
             "cross_entropy of recorded logits ((C,) or (rows, C); reduction 'none' of one row only)",
             "whole rows x[i], x[a:b] of a recorded value, and reshapes that keep the last axis",
             "concat and stack of recorded values along a leading axis, and concat along the last axis",
             "lstm_cell, gru_cell and lstm_sequence (fa.nn.LSTMCell, GRUCell, LSTM, GRU) of a recorded "
             "input and a recorded or zero state, by shared weights (sequences of any lengths: one call)")

_ARITHMETIC = ("add", "sub", "mul", "div", "pow", "maximum", "minimum")
_FUSED = ("lstm_cell", "gru_cell", "lstm_sequence")       # a K_FUSED node's code: its op

cdef enum Kind:
    K_UNARY = 1
    K_BINARY = 2
    K_MATMUL = 3
    K_TAKE = 4
    K_CROSS_ENTROPY = 5
    K_VIEW = 6           # whole rows of another recorded value: no node of its own
    K_SUM = 7            # a sum of recorded values of one shape (chains of + flattened)
    K_ROWS = 8           # concat or stack along a leading axis: the parts' rows, joined
    K_CONCAT = 9         # concat along the last axis: each row joins the parts' rows
    K_FUSED = 10         # a fused recurrent op (_FUSED) of an example's input and state


# What makes two recorded ops one batched node (compared whole, with memcmp: every field is
# set, and the padding is zero, as Cython zeroes a new object).
cdef struct Signature:
    int kind
    int code             # a unary op's code; a binary op's place in _ARITHMETIC
    int f64
    int recorded         # a binary op's: bit 0, operand a is recorded; bit 1, operand b is;
                         # a fused op's: how many state operands it has (0: a zero state)
    double p             # a unary op's parameter, cross_entropy's label smoothing, a fused
                         # op's direction (1: reverse)
    Py_ssize_t width     # the row width of the (first) recorded operand
    PyObject* shared     # the operand made outside the recording, or NULL; a fused op's
                         # weights and a last-axis concat's widths: a tuple (Recording.intern)
    Py_ssize_t extra     # take: the padding row (-1: none); cross_entropy: ignore_index;
                         # a leading-axis join: its blocks


cdef class Recording


@cython.no_gc
cdef class Lazy(Variable):
    """A recorded Variable: a shape and a dtype, and a value once fa.batch has evaluated it."""
    cdef Signature sig
    cdef Variable a, b               # the operands (b None for one)
    cdef list terms                  # a sum's terms, once needed (a + b of sums: theirs); a
                                     # join's parts; a fused op's input, then its state
    cdef object targets              # cross_entropy: the targets' IndexInput or int64 ids
    cdef int reduction_mean          # cross_entropy with reduction "mean"
    cdef Py_ssize_t depth            # 1 + its deepest recorded operand's: the soonest it can run
    cdef Py_ssize_t rows
    cdef Py_ssize_t offset           # a view: its rows start `offset` rows into a's (else 0)
    # Set by the evaluation's backward sweep (Recording.evaluate): whether a loss needs it,
    # whether only nodes that run as late as they can need it (`tail`), and how late that is.
    cdef bint live, tail
    cdef Py_ssize_t latest
    cdef Variable src                # once evaluated: the batched value holding its rows,
    cdef Py_ssize_t row0             # from row row0 on

    @property
    def value(self):
        """The value, once fa.batch has evaluated the recording (a view of the batched
        graph's buffer); a RuntimeError before."""
        cdef Py_ssize_t row0 = 0
        cdef Variable src = locate(self, None, &row0)
        if src is None:
            raise RuntimeError(f"autobatch: this {self.op_name} is recorded, not computed: it "
                               f"has a value once fa.batch(losses) has evaluated its recording "
                               f"(and a loss given to it needs this value)")
        return value_array(src).reshape(-1, width_of(self._shape))[row0:row0 + self.rows].reshape(self._shape)

    @property
    def grad(self):
        """None: gradients flow through the batched graph (see fa.batch)."""
        return None

    @property
    def device(self):
        return "cpu"

    def numpy(self):
        return np.array(self.value)

    def item(self):
        if self.size != 1:
            raise ValueError(f"item: only one-element Variables can be converted to Python "
                             f"scalars; this one has {self.size} elements (shape {self._shape})")
        return float(self.value.reshape(-1)[0])

    def forward(self):
        raise TypeError("autobatch: a recorded Variable is evaluated by fa.batch(losses), "
                        "not by forward()")

    def backward(self, grad=None):
        raise TypeError("autobatch: call backward() on the Variable that fa.batch(losses) "
                        "returns, not on a recorded loss")

    def __repr__(self):
        return f"Recorded({self.op_name}, shape={self._shape}, dtype={self.dtype.name})"

    # The operators of the common per-example models record directly, without the public
    # functions' general checks; the rest (Variable's) go through them (and so to the
    # Recording's ops).
    def __add__(self, other):
        return _fast_binary("add", self, other) if isinstance(other, Variable) else add(self, other)

    def __sub__(self, other):
        return _fast_binary("sub", self, other) if isinstance(other, Variable) else sub(self, other)

    def __mul__(self, other):
        return _fast_binary("mul", self, other) if isinstance(other, Variable) else mul(self, other)

    def __matmul__(self, other):
        cdef Variable w
        if isinstance(other, Variable) and not (<Variable>other).on_device:
            w = <Variable>other
            if (len(w._shape) == 2 and 1 <= len(self._shape) <= 2 and w.f64 == self.f64
                    and w._shape[0] == width_of(self._shape)):
                return record_matmul(<Recording>self._storage, self, w)
        return matmul(self, other)

    def __getitem__(self, key):
        cdef Py_ssize_t i, n, start, stop, step
        if len(self._shape) >= 2:               # x[i] and x[a:b]: whole rows, as views
            n = self._shape[0]
            if type(key) is int:
                i = key + n if key < 0 else key
                if 0 <= i < n:
                    return record_view(<Recording>self._storage, self, self._shape[1:],
                                       i * (self.rows // n))
            elif type(key) is slice:
                start, stop, step = key.indices(n)
                if step == 1 and start < stop:
                    return record_view(<Recording>self._storage, self,
                                       (stop - start,) + self._shape[1:], start * (self.rows // n))
        return getitem(self, key)

    def reshape(self, *shape):
        new = shape[0] if len(shape) == 1 else shape
        if (type(new) is tuple and new and all(type(d) is int and d > 0 for d in new)
                and new[len(new) - 1] == width_of(self._shape) and math.prod(new) == self.size):
            return record_view(<Recording>self._storage, self, new, 0)
        return reshape(self, new)


cdef inline Py_ssize_t width_of(tuple shape):
    return shape[len(shape) - 1] if shape else 1


cdef inline Py_ssize_t depth_of(Variable x):
    return (<Lazy>x).depth if type(x) is Lazy else 0


cdef bint is_recorded(Recording rec, str op, str argname, Variable x) except -1:
    """Whether operand x is one of rec's values (True) or a shared one on the host (False);
    a ValueError naming the op and the operand when it is on a device or in another recording."""
    if not x.on_device:
        return False
    if x._storage is rec:
        return True
    if type(x._storage) is Recording:
        raise ValueError(f"autobatch: {op}: operand {argname} ({x!r}) belongs to another "
                         f"recording; one fa.batch evaluates one recording")
    raise ValueError(f"autobatch: {op}: operand {argname} ({x!r}) is on {x.device}, but an "
                     f"autobatch recording batches on the CPU; keep every operand on one device")


cdef Lazy new_lazy(Recording rec, int kind, str op, tuple shape, bint f64, Variable a, Variable b):
    """A recorded op node (a view when kind is K_VIEW, which is not listed for evaluation); its
    signature's width is its own row width until a caller sets its operand's."""
    cdef Lazy node = Lazy.__new__(Lazy)
    cdef Py_ssize_t width = width_of(shape)
    set_storage(node, rec)
    node._shape = shape
    node.size = math.prod(shape)
    if node.size == 0:
        raise NotImplementedError(f"autobatch: {op}: a recorded value of shape {shape} has no "
                                  f"elements; empty values cannot be batched")
    node.f64 = f64
    node.op_name = op
    node.parents = ()
    node.a = a
    node.b = b
    node.requires_grad = a.requires_grad or (b is not None and b.requires_grad)
    node.rows = node.size // width
    node.sig.kind = kind
    node.sig.f64 = f64
    node.sig.width = width
    if kind != K_VIEW:
        node.depth = 1 + max(depth_of(a), depth_of(b) if b is not None else 0)
        rec.nodes.append(node)
    return node


cdef Lazy record_view(Recording rec, Variable x, tuple shape, Py_ssize_t offset):
    """Rows [offset, offset + rows) of x (a recorded value: an op's or a leaf's), with `shape`
    (its last axis x's row width)."""
    cdef Lazy node
    if type(x) is Lazy and (<Lazy>x).sig.kind == K_VIEW:     # a view of a view: of the same rows
        offset += (<Lazy>x).offset
        x = (<Lazy>x).a
    node = new_lazy(rec, K_VIEW, "view", shape, x.f64, x, None)
    node.depth = depth_of(x)
    node.offset = offset
    return node


cdef Lazy _fast_binary(str op, Variable a, Variable b):
    if a.f64 != b.f64 or type(b) is IndexInput:
        return {"add": add, "sub": sub, "mul": mul}[op](a, b)    # its checks raise
    return record_binary(<Recording>a._storage, op, a, b)


cdef Lazy record_binary(Recording rec, str op, Variable a, Variable b):
    """a `op` b, an arithmetic binary op whose result has the shape of its recorded operand(s)."""
    cdef bint ra = is_recorded(rec, op, "a", a), rb = is_recorded(rec, op, "b", b)
    cdef Variable x, shared = None
    cdef Py_ssize_t w
    if op not in _ARITHMETIC:
        raise NotImplementedError(f"autobatch: {op} cannot be batched (comparisons make masks "
                                  f"without a gradient); batchable: {'; '.join(BATCHABLE)}")
    if ra and rb:
        if a._shape != b._shape:
            raise NotImplementedError(f"autobatch: {op} of two recorded values batches equal "
                                      f"shapes only, got {a._shape} and {b._shape}")
        if op == "add":
            return record_sum(rec, a, b)
        x = a
    else:
        x, shared = (a, b) if ra else (b, a)
        w = width_of(x._shape)
        if not (shared.size == 1 and len(shared._shape) <= len(x._shape)
                or shared._shape == (w,) or (shared._shape == (1, w) and len(x._shape) >= 2)):
            raise NotImplementedError(
                f"autobatch: {op} of a recorded value of shape {x._shape} and a shared one of "
                f"shape {shared._shape}: the shared operand must broadcast along each row, as "
                f"shape ({w},), (1, {w}) or one element")
    cdef Lazy node = new_lazy(rec, K_BINARY, op, x._shape, x.f64, a, b)
    node.sig.code = _ARITHMETIC.index(op)
    node.sig.recorded = ra | (rb << 1)
    node.sig.shared = <PyObject*>shared if shared is not None else NULL
    return node


cdef inline bint is_sum(Variable x):
    return type(x) is Lazy and (<Lazy>x).sig.kind == K_SUM


cdef Lazy record_sum(Recording rec, Variable a, Variable b):
    """a + b of one shape, both recorded: a sum whose terms are those of a and b (a sum's
    terms stand for it, see _flat_terms), so that a chain of additions is one node (a
    partial sum that nothing else reads is never computed)."""
    cdef Lazy node = new_lazy(rec, K_SUM, "add", a._shape, a.f64, a, b)
    node.depth = 1 + max((<Lazy>a).depth - 1 if is_sum(a) else depth_of(a),
                         (<Lazy>b).depth - 1 if is_sum(b) else depth_of(b))
    return node


cdef list _flat_terms(Lazy node):
    """The terms of a sum recorded as a + b: those of a, then those of b, each a sum's terms
    in its place."""
    cdef list terms = [], stack = [node.b, node.a]
    cdef Variable x
    while stack:
        x = stack.pop()
        if is_sum(x):
            stack.append((<Lazy>x).b)
            stack.append((<Lazy>x).a)
        else:
            terms.append(x)
    return terms


cdef Lazy record_matmul(Recording rec, Variable a, Variable w):
    cdef tuple shape = (w._shape[1],) if len(a._shape) == 1 else (a._shape[0], w._shape[1])
    cdef Lazy node = new_lazy(rec, K_MATMUL, "matmul", shape, a.f64, a, w)
    node.sig.width = width_of(a._shape)
    # fa.linear (nn.Linear) multiplies by a new weight.T node on each call: the transposes of
    # one leaf are one shared operand
    if w.op_name == "transpose" and (<Variable>w.parents[0]).is_leaf:
        node.sig.shared = <PyObject*>w.parents[0]
        node.sig.code = 1
    else:
        node.sig.shared = <PyObject*>w
    return node


cdef Lazy record_fused(Recording rec, int code, tuple shape, Variable x, list state,
                       tuple weights, bint reverse):
    """The fused recurrent op _FUSED[code] of recorded input x and state (recorded values, or
    none for zeros) by shared weights: its group (the same op, weights, direction, widths and
    state form) runs as one call over all its members' batch rows (LSTM sequences of any
    lengths: one call in the packed form)."""
    cdef str op = _FUSED[code]
    cdef Py_ssize_t i
    for i in range(len(state)):
        if not is_recorded(rec, op, ("h", "c")[i], <Variable>state[i]):
            raise NotImplementedError(f"autobatch: {op} batches a recorded state (an example's) "
                                      f"or none (zeros); {('h', 'c')[i]} ({state[i]!r}) is shared")
    cdef Lazy node = new_lazy(rec, K_FUSED, op, shape, x.f64, x, None)
    node.terms = [x] + state
    node.depth = 1 + max([depth_of(v) for v in node.terms])
    node.requires_grad = any([(<Variable>w).requires_grad for w in weights])
    node.sig.code = code
    node.sig.recorded = len(state)
    node.sig.p = reverse
    node.sig.width = width_of(x._shape)
    node.sig.shared = rec.intern(tuple([id(w) for w in weights]), weights)
    return node


@cython.no_gc
cdef class Recording:
    """The ops recorded since the last fa.batch: the storage and the backend of its
    Variables (the engine hands it every op on one of them, as a device's backend)."""
    cdef list nodes                  # the recorded op nodes, inputs first (not the views)
    cdef list leaves                 # the Inputs and IndexInputs made while it was on
    cdef dict interned               # the tuples of signatures (see intern)
    cdef readonly object device      # None: recorded values mix with host Variables

    def __cinit__(self):
        self.discard()

    def add_leaf(self, Variable leaf):
        """Make `leaf` (an Input or IndexInput just made) one of this recording's values."""
        if leaf.requires_grad:
            raise ValueError("autobatch: an Input made while recording is an example's data "
                             "and takes no gradient; make it with requires_grad=False (or "
                             "outside the recording, as a shared Variable)")
        set_storage(leaf, self)
        self.leaves.append(leaf)

    def discard(self):
        """Forget what was recorded and not evaluated (leaving autobatch does this)."""
        self.nodes = []
        self.leaves = []
        self.interned = {}

    # ---- the ops (the backend primitives that batch; every other one raises)

    def unary(self, str name, int code, Variable x, double p):
        cdef Lazy node = new_lazy(self, K_UNARY, name, x._shape, x.f64, x, None)
        node.sig.code = code
        node.sig.p = p
        return node

    def binary(self, str name, Variable a, Variable b, tuple shape):
        return record_binary(self, name, a, b)

    def matmul(self, Variable a, Variable b, tuple out_shape, *sizes):
        if (is_recorded(self, "matmul", "a", a) and not is_recorded(self, "matmul", "b", b)
                and 1 <= len(a._shape) <= 2 and len(b._shape) == 2):
            return record_matmul(self, a, b)
        raise NotImplementedError(f"autobatch: matmul batches a recorded (k,) or (rows, k) "
                                  f"value times a shared (k, n) matrix, got shapes {a._shape} "
                                  f"and {b._shape} ({'recorded' if a.on_device else 'shared'} "
                                  f"and {'recorded' if b.on_device else 'shared'})")

    def take(self, Variable table, IndexInput ix, str op, padding_idx, double max_norm, norm_type):
        if is_recorded(self, op, "table", table) or len(table._shape) != 2:
            raise NotImplementedError(f"autobatch: {op} batches rows of a shared 2-D table, got "
                                      f"a {'recorded' if table.on_device else 'shared'} table "
                                      f"of shape {table._shape}")
        if max_norm != 0:
            raise NotImplementedError(f"autobatch: {op} with max_norm renormalises the table "
                                      f"in place on every forward; it cannot be batched")
        is_recorded(self, op, "ids", ix)
        cdef Lazy node = new_lazy(self, K_TAKE, op, ix._shape + table._shape[1:], table.f64, table, ix)
        node.sig.shared = <PyObject*>table
        node.sig.extra = padding_idx
        return node

    def gather(self, str op, Variable x, positions):
        """x[key] for whole rows of x (positions: x.flat positions of the result)."""
        cdef Py_ssize_t w = width_of(x._shape), n = positions.size, i
        cdef const int64_t[::1] flat = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
        cdef bint rows = n > 0 and width_of(positions.shape) == w and flat[0] % w == 0 and n % w == 0
        for i in range(1, n if rows else 0):        # consecutive positions: whole rows in order
            if flat[i] != flat[0] + i:
                rows = False
                break
        if rows:
            return record_view(self, x, positions.shape, flat[0] // w)
        raise NotImplementedError(f"autobatch: {op} of a recorded value batches whole rows "
                                  f"(x[i], x[a:b] over the leading axes) only; shape "
                                  f"{x._shape} to {positions.shape}")

    def reshape(self, Variable x, tuple shape):
        if width_of(shape) == width_of(x._shape):
            return record_view(self, x, shape, 0)
        raise NotImplementedError(f"autobatch: reshape of a recorded value keeps its last axis "
                                  f"only; {x._shape} to {shape}")

    def cross_entropy(self, checked, double smoothing):
        cdef Variable x = checked.x
        if checked.batch != 1 and checked.reduction_name == "none":
            raise NotImplementedError(f"autobatch: cross_entropy with reduction 'none' batches "
                                      f"one row of logits per example ((C,) or (1, C)), got "
                                      f"shape {x._shape}; reduce with 'mean' or 'sum'")
        targets = checked.ids if checked.source is None else checked.source
        if isinstance(targets, Variable):
            is_recorded(self, "cross_entropy", "targets", <Variable>targets)
        cdef Lazy node = new_lazy(self, K_CROSS_ENTROPY, "cross_entropy", checked.out_shape,
                                  x.f64, x, None)
        node.targets = targets
        node.reduction_mean = checked.reduction_name == "mean"
        node.sig.width = checked.classes
        node.sig.p = smoothing
        node.sig.extra = checked.ignore_index
        return node

    def join(self, str op, tuple xs, tuple out_shape, Py_ssize_t axis):
        """concat or stack of recorded values: along a leading axis (the rows of the parts,
        `blocks` times: a block of each in turn), or concat along the last axis."""
        cdef Py_ssize_t i, w = width_of(out_shape), last = len(out_shape) - 1
        cdef Variable x
        for i in range(len(xs)):
            if not is_recorded(self, op, f"xs[{i}]", <Variable>xs[i]):
                raise NotImplementedError(f"autobatch: {op} batches recorded values only; xs[{i}] "
                                          f"({xs[i]!r}) is shared")
        cdef Variable first = <Variable>xs[0]
        cdef Lazy node
        if op == "concat" and axis == last:
            widths = tuple([width_of((<Variable>x)._shape) for x in xs])
            node = new_lazy(self, K_CONCAT, op, out_shape, first.f64, first, None)
            node.sig.shared = self.intern(("concat",) + widths, widths)
        elif axis < last and all([width_of((<Variable>x)._shape) == w for x in xs]):
            node = new_lazy(self, K_ROWS, op, out_shape, first.f64, first, None)
            node.sig.extra = math.prod(out_shape[:axis])
        else:
            raise NotImplementedError(f"autobatch: {op} of recorded values batches along a "
                                      f"leading axis, or a concat along the last axis; got axis "
                                      f"{axis} to shape {out_shape}")
        node.terms = list(xs)
        node.depth = 1 + max([depth_of(x) for x in xs])
        return node

    def lstm_cell(self, Variable x, h, c, weight_ih, weight_hh, bias_ih, bias_hh, Py_ssize_t H):
        return record_fused(self, 0, (2, x._shape[0], H), x, [] if h is None else [h, c],
                            (weight_ih, weight_hh, bias_ih, bias_hh), False)

    def gru_cell(self, Variable x, h, weight_ih, weight_hh, bias_ih, bias_hh, Py_ssize_t H):
        return record_fused(self, 1, (x._shape[0], H), x, [] if h is None else [h],
                            (weight_ih, weight_hh, bias_ih, bias_hh), False)

    def lstm_sequence(self, Variable x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh,
                      Py_ssize_t H, bint reverse):
        """(hs, h, c), views of one recorded node whose rows are hs's (T, batch, H), then the
        final c's (batch, H)."""
        cdef Py_ssize_t T = x._shape[0], B = x._shape[1]
        cdef Lazy node = record_fused(self, 2, (T + 1, B, H), x, [] if h0 is None else [h0, c0],
                                      (weight_ih, weight_hh, bias_ih, bias_hh), reverse)
        return (record_view(self, node, (T, B, H), 0),
                record_view(self, node, (B, H), (0 if reverse else T - 1) * B),
                record_view(self, node, (B, H), T * B))

    cdef PyObject* intern(self, tuple key, tuple value):
        """The one tuple this recording keeps for `key` (`value` the first time): a
        signature's shared pointer, equal for equal keys."""
        value = self.interned.setdefault(key, value)
        return <PyObject*>value

    def __getattr__(self, name):
        raise NotImplementedError(f"autobatch: {name} of a recorded Variable cannot be batched "
                                  f"(or read before fa.batch evaluates it); batchable: "
                                  f"{'; '.join(BATCHABLE)}")

    # ---- evaluation

    cdef int evaluate(self, Lazy root) except -1:
        """Build the batched graph of what the recorded op node `root` (fa.batch's sum of the
        losses) needs: each node that runs learns its rows there."""
        cdef dict leaf_rows = _stack_leaves(self.leaves)
        cdef list nodes = self.nodes
        cdef Py_ssize_t i, level, max_depth = max([(<Lazy>n).depth for n in nodes])
        cdef Lazy node
        cdef Variable x
        root.live = True
        root.tail = True
        root.latest = max_depth
        # Backward sweep (readers come after what they read): a node runs when a needed one
        # reads it. The losses, and the chains of one-operand ops that lead only to them
        # (a tail: the root's ops of a tree net), run as late as they can, so that the losses
        # of examples of different depths batch; any other node as soon as it can (the
        # nodes of one height in trees of different heights batch).
        cdef list by_level = [[] for _ in range(max_depth + 1)]
        cdef bint chain
        for i in range(len(nodes) - 1, -1, -1):
            node = <Lazy>nodes[i]
            if not node.live:
                continue
            (<list>by_level[node.latest if node.tail else node.depth]).append(node)
            if node.sig.kind == K_SUM and node.terms is None:
                node.terms = _flat_terms(node)
            if node.terms is not None:
                chain = node.tail and (len(node.terms) == 1 or node is nodes[len(nodes) - 1])
                for x in node.terms:
                    _reads(node, x, chain)
            else:
                chain = node.tail and _base(node.b) is None
                _reads(node, node.a, chain)
                _reads(node, node.b, chain)
        cdef list groups, members
        for level in range(1, max_depth + 1):
            groups = []
            for node in reversed(<list>by_level[level]):
                for members in groups:
                    if memcmp(&(<Lazy>members[0]).sig, &node.sig, sizeof(Signature)) == 0:
                        members.append(node)
                        break
                else:
                    groups.append([node])
            for members in groups:
                _build_group(members, leaf_rows)
        self.discard()
        return 0


cdef inline Lazy _base(Variable x):
    """The recorded op node whose rows x is (x itself, or a view's), or None (a leaf, a shared
    operand, or x None)."""
    if type(x) is Lazy and (<Lazy>x).sig.kind == K_VIEW:
        x = (<Lazy>x).a
    return <Lazy>x if type(x) is Lazy else None


cdef inline void _reads(Lazy node, Variable operand, bint chain):
    """Node reads operand (in a tail's chain, when `chain`): the backward sweep's step (see
    Recording.evaluate); nothing when operand is no recorded op's rows (see _base)."""
    cdef Lazy base = _base(operand)
    if base is None:
        return
    if not base.live:
        base.live = True
        base.tail = chain
        base.latest = node.latest - 1
    else:
        base.tail = base.tail and chain
        if node.latest - 1 < base.latest:
            base.latest = node.latest - 1


cdef dict _stack_leaves(list leaves):
    """{float Input leaf: (the batched Input holding its rows, its first row)}: one Input
    per row width and dtype."""
    cdef dict kinds = {}, rows = {}
    cdef Variable leaf
    for leaf in leaves:
        if type(leaf) is not IndexInput:
            kinds.setdefault((width_of(leaf._shape), leaf.f64), []).append(leaf)
    for (w, f64), members in kinds.items():
        stacked = Input(np.concatenate([value_array(<Variable>m).reshape(-1, w) for m in members]),
                        dtype=np.float64 if f64 else np.float32)
        start = 0
        for m in members:
            rows[m] = (stacked, start)
            start += (<Variable>m).size // w
    return rows


cdef Variable locate(Variable x, dict leaf_rows, Py_ssize_t* row0):
    """The batched value holding x's rows (None before evaluation), and x's first row there
    in row0; for a leaf's rows with leaf_rows None (Lazy.value), the leaf itself."""
    cdef Py_ssize_t offset = 0
    if type(x) is Lazy and (<Lazy>x).sig.kind == K_VIEW:
        offset = (<Lazy>x).offset
        x = (<Lazy>x).a                          # what it views: an op node or a leaf
    if type(x) is Lazy:
        row0[0] = (<Lazy>x).row0 + offset
        return (<Lazy>x).src
    if leaf_rows is None:
        row0[0] = offset
        return x
    src, start = leaf_rows[x]
    row0[0] = start + offset
    return src


cdef list _as(list members, int which):
    """Each member's operand a (which 0) or b (1)."""
    return [(<Lazy>m).a if which == 0 else (<Lazy>m).b for m in members]


cdef Variable _located(Lazy member, Variable x, dict leaf_rows, Py_ssize_t* row0):
    """locate(x), for the batched node of `member`: a ValueError when x was discarded."""
    cdef Variable src = locate(x, leaf_rows, row0)
    if src is None:
        raise ValueError(f"autobatch: {member.op_name} reads a recorded value that was "
                         f"discarded before fa.batch evaluated it (its autobatch block "
                         f"ended, or it was recorded in an earlier one)")
    return src


cdef Variable _stacked(list members, list operands, dict leaf_rows):
    """The rows of operands[m], each member m's operand (a recorded value), one member's after
    another (see RowSum.built)."""
    cdef RowSum rows = new_rows(len(members), len(members))
    _add_rows(rows, members, operands, 1, leaf_rows)
    return rows.built()


cdef int _add_rows(RowSum out, list members, list operands, Py_ssize_t blocks,
                   dict leaf_rows) except -1:
    """Add to `out` a run of each operand's rows, operands[m] member m's, block by block:
    block 0 of each operand in turn, then block 1, ..."""
    cdef Py_ssize_t m, k, rows, row0 = 0
    cdef Variable x, src
    for k in range(blocks):
        for m in range(len(members)):
            x = <Variable>operands[m]
            src = _located(<Lazy>members[m], x, leaf_rows, &row0)
            rows = x.size // width_of(x._shape) // blocks
            out.add(src, row0 + k * rows)
            out.close(rows, 1.0)
    return 0


cdef Variable _summed(list members, dict leaf_rows):
    """The sum of each member's terms (a K_SUM's), one member's rows after another."""
    cdef Py_ssize_t row0 = 0
    cdef RowSum out = new_rows(len(members), len(members))
    cdef Lazy member
    for member in members:
        for x in member.terms:
            out.add(_located(member, x, leaf_rows, &row0), row0)
        out.close(member.rows, 1.0)
    return out.built()


cdef int _build_group(list members, dict leaf_rows) except -1:
    """The batched node of one group of recorded nodes; each member learns its rows."""
    cdef Lazy first = <Lazy>members[0], node
    cdef int kind = first.sig.kind
    cdef Variable out
    cdef RowSum rows
    if kind == K_SUM:
        out = _summed(members, leaf_rows)
    elif kind == K_UNARY:
        out = unary_node(first.op_name, first.sig.code, _stacked(members, _as(members, 0), leaf_rows),
                         first.sig.p)
    elif kind == K_BINARY:
        out = binary_node(first.op_name,
                          _stacked(members, _as(members, 0), leaf_rows) if first.sig.recorded & 1 else first.a,
                          _stacked(members, _as(members, 1), leaf_rows) if first.sig.recorded & 2 else first.b)
    elif kind == K_MATMUL:
        out = matmul(_stacked(members, _as(members, 0), leaf_rows), first.b)
    elif kind == K_TAKE:
        ids = IndexInput(np.concatenate([value_array((<Lazy>node).b).reshape(-1) for node in members]))
        if first.op_name == "take":
            out = take(first.a, ids)
        else:
            out = embedding(first.a, ids, padding_idx=None if first.sig.extra < 0 else first.sig.extra)
    elif kind == K_ROWS:
        rows = new_rows(len(members), len(members))
        for node in members:
            _add_rows(rows, [node] * len(node.terms), node.terms, node.sig.extra, leaf_rows)
        out = rows.built()
    elif kind == K_CONCAT:
        out = concat([_stacked(members, [(<Lazy>node).terms[k] for node in members], leaf_rows)
                      for k in range(len(first.terms))], axis=1)
    elif kind == K_FUSED:
        out = _sequence_group(members, leaf_rows) if first.sig.code == 2 else _cell_group(members, leaf_rows)
    else:
        out = _cross_entropy_group(members, leaf_rows)
    if len(out._shape) != 2:
        out = reshape(out, (-1, width_of(first._shape)))
    cdef Py_ssize_t row0 = 0
    for node in members:
        node.src = out
        node.row0 = row0
        row0 += node.rows
    return 0


cdef Variable _cell_group(list members, dict leaf_rows):
    """The batched call of a group of lstm_cell or gru_cell: their inputs' and states' batch
    rows stacked, then each member's rows of the output, one member after another
    (lstm_cell's h' then c')."""
    cdef Lazy first = <Lazy>members[0], node
    cdef tuple weights = <tuple>first.sig.shared
    cdef Py_ssize_t k, l, batch = 0, row = 0
    cdef list inputs = [_stacked(members, [(<Lazy>node).terms[k] for node in members], leaf_rows)
                        for k in range(len(first.terms))]
    cdef list rows = [(<Variable>node.terms[0])._shape[0] for node in members]
    for k in range(len(rows)):
        batch += <Py_ssize_t>rows[k]
    state = inputs[1:] if first.sig.recorded else [None, None]
    if first.sig.code == 1:
        return gru_cell(inputs[0], state[0], *weights)
    out = reshape(lstm_cell(inputs[0], state[0], state[1], *weights), (2 * batch, width_of(first._shape)))
    cdef RowSum gathered = new_rows(2 * len(members), 2 * len(members))
    for k in range(len(members)):
        for l in range(2):
            gathered.add(out, l * batch + row)
            gathered.close(rows[k], 1.0)
        row += <Py_ssize_t>rows[k]
    return gathered.built()


cdef Variable _sequence_group(list members, dict leaf_rows):
    """The batched call of a group of lstm_sequence, of any lengths: one call in the packed
    form, each member's batch rows one sequence each, the sequences longest first (a reverse
    one's steps taken from its last time position down, so that the call runs forward), then
    each member's rows: its states at their time positions, then its final c."""
    cdef Lazy first = <Lazy>members[0]
    cdef Variable x
    cdef bint reverse = first.sig.p != 0
    cdef Py_ssize_t m, k, t, b, n = len(members), row0 = 0, row = 0, total = 0
    cdef list steps = [], batch = [], sources = [], starts = [], sizes = []
    for m in range(n):
        x = (<Lazy>members[m]).terms[0]
        steps.append(x._shape[0])
        batch.append(x._shape[1])
        total += x._shape[0] * x._shape[1]
        sources.append(_located(<Lazy>members[m], x, leaf_rows, &row0))
        starts.append(row0)
    cdef list order = sorted(range(n), key=steps.__getitem__, reverse=True)    # stable
    cdef list seq_row = [0] * n                 # each member's first sequence
    for m in order:
        seq_row[m] = row
        row += <Py_ssize_t>batch[m]
    cdef RowSum packed = new_rows(total, total)
    for k in range(<Py_ssize_t>steps[order[0]]):
        b = 0
        for m in order:
            if <Py_ssize_t>steps[m] <= k:
                break
            t = <Py_ssize_t>steps[m] - 1 - k if reverse else k
            packed.add(<Variable>sources[m], <Py_ssize_t>starts[m] + t * <Py_ssize_t>batch[m])
            packed.close(batch[m], 1.0)
            b += <Py_ssize_t>batch[m]
        sizes.append(b)
    state = ([_stacked([members[m] for m in order], [(<Lazy>members[m]).terms[j] for m in order],
                       leaf_rows) for j in (1, 2)] if first.sig.recorded else [None, None])
    hs, (h, c) = lstm_sequence(packed.built(), state[0], state[1],
                               *<tuple>first.sig.shared, return_state=True, batch_sizes=sizes)
    cdef list step_start = [0] * len(sizes)
    for k in range(1, len(sizes)):
        step_start[k] = <Py_ssize_t>step_start[k - 1] + <Py_ssize_t>sizes[k - 1]
    cdef RowSum out = new_rows(total + n, total + n)
    for m in range(n):
        for t in range(<Py_ssize_t>steps[m]):
            k = <Py_ssize_t>steps[m] - 1 - t if reverse else t
            out.add(hs, <Py_ssize_t>step_start[k] + <Py_ssize_t>seq_row[m])
            out.close(batch[m], 1.0)
        out.add(c, seq_row[m])
        out.close(batch[m], 1.0)
    return out.built()


cdef Variable _cross_entropy_group(list members, dict leaf_rows):
    """The batched cross_entropy of a group: one node over all the members' rows of logits
    (reduction "none"), then each member's loss: its row's, or the sum (reduction "sum") or
    mean (over the rows whose target is not ignore_index) of its rows'."""
    cdef Lazy first = <Lazy>members[0], node
    cdef list ids = [_target_ids(node) for node in members]
    cdef Py_ssize_t k, j, row = 0, n
    cdef double scale
    cdef Variable out = reshape(cross_entropy(_stacked(members, _as(members, 0), leaf_rows),
                                np.concatenate(ids), reduction="none",
                                ignore_index=first.sig.extra, label_smoothing=first.sig.p), (-1, 1))
    cdef RowSum losses = new_rows(out._shape[0], len(members))
    for k in range(len(members)):
        node = <Lazy>members[k]
        n = len(ids[k])
        for j in range(n):
            losses.add(out, row + j)
        row += n
        scale = 1.0
        if node.reduction_mean:
            counted = int(np.count_nonzero(ids[k] != first.sig.extra))
            if counted == 0:
                raise NotImplementedError(
                    "autobatch: cross_entropy with reduction 'mean' of an example whose every "
                    "target is ignore_index is NaN (no row counts); it cannot be batched")
            scale = 1.0 / counted
        losses.close(1, scale)
    return losses.built()


cdef object _target_ids(Lazy node):
    t = node.targets
    return value_array(<Variable>t).reshape(-1) if isinstance(t, Variable) else t


# ---------------------------------------------------------------- RowSum

@cython.no_gc
cdef class RowSum(Variable):
    """Runs of rows, one after another, of 2-D Variables of one width: run r is the sum of
    its terms, each `run_rows[r]` rows of one source from a row on (one term: a gather),
    times run_scale[r] (run_scale NULL: 1). The gradient of a run, times its scale, adds
    into each of its terms' rows."""
    cdef PyObject** sources          # the parents, borrowed (the parents tuple keeps them)
    cdef Py_ssize_t n_sources, n_runs, n_terms, row_bytes
    cdef int64_t* run_rows
    cdef int64_t* run_terms          # run r's terms are run_terms[r] .. run_terms[r + 1] - 1
    cdef int32_t* term_source        # per term: its source and first row there
    cdef int64_t* term_row
    cdef double* run_scale           # NULL, or per run: its factor
    # while it is built (new_rows, add, close, built): its sources, the one of the last term,
    # its arrays' room, its runs' rows so far, the first term of the run being built, and
    # whether its runs are so far exactly the first source's rows in order
    cdef list parts
    cdef Py_ssize_t last, room_terms, room_runs, rows_so_far, run_first
    cdef bint whole

    def __dealloc__(self):
        free(self.sources)
        free(self.run_rows)
        free(self.run_terms)
        free(self.term_source)
        free(self.term_row)
        free(self.run_scale)

    cdef int add(self, Variable src, Py_ssize_t row) except -1:
        """Add a term to the run being built: rows of src from `row` on."""
        cdef Py_ssize_t s = self.last
        if s < 0 or self.parts[s] is not src:
            for s in range(len(self.parts)):
                if self.parts[s] is src:
                    break
            else:
                s = len(self.parts)
                self.parts.append(src)
            self.last = s
        if self.n_terms == self.room_terms:
            self.room_terms = 2 * self.room_terms + 8
            self.term_source = <int32_t*>_grown(self.term_source, self.room_terms * sizeof(int32_t))
            self.term_row = <int64_t*>_grown(self.term_row, self.room_terms * sizeof(int64_t))
        self.term_source[self.n_terms] = s
        self.term_row[self.n_terms] = row
        self.whole = self.whole and s == 0 and row == self.rows_so_far and self.n_terms == self.run_first
        self.n_terms += 1
        return 0

    cdef int close(self, Py_ssize_t rows, double scale) except -1:
        """End the run being built: `rows` rows, the sum of the terms added since the last run
        ended, times `scale`."""
        cdef Py_ssize_t r
        if self.n_runs == self.room_runs:
            self.room_runs = 2 * self.room_runs + 8
            self.run_rows = <int64_t*>_grown(self.run_rows, self.room_runs * sizeof(int64_t))
            self.run_terms = <int64_t*>_grown(self.run_terms, (self.room_runs + 1) * sizeof(int64_t))
            if self.run_scale != NULL:
                self.run_scale = <double*>_grown(self.run_scale, self.room_runs * sizeof(double))
        if scale != 1.0 and self.run_scale == NULL:
            self.run_scale = <double*>_grown(NULL, self.room_runs * sizeof(double))
            for r in range(self.n_runs):
                self.run_scale[r] = 1.0
            self.whole = False
        if self.run_scale != NULL:
            self.run_scale[self.n_runs] = scale
        self.run_rows[self.n_runs] = rows
        self.run_terms[self.n_runs] = self.run_first
        self.n_runs += 1
        self.run_first = self.n_terms
        self.rows_so_far += rows
        return 0

    cdef Variable built(self):
        """The runs, once all are added: the one source itself when they are exactly its
        rows in order (one term each, no scale), else this node, computed."""
        self.run_terms[self.n_runs] = self.n_terms
        cdef Variable only = <Variable>self.parts[0]
        cdef Py_ssize_t s
        if self.whole and self.rows_so_far == only._shape[0]:
            return only
        init_node(self, "autobatch_rows", tuple(self.parts), (self.rows_so_far, only._shape[1]),
                  only.f64)
        self.row_bytes = only._shape[1] * element_size(only.f64)
        self.n_sources = len(self.parts)
        self.sources = <PyObject**>_grown(NULL, self.n_sources * sizeof(PyObject*))
        for s in range(self.n_sources):
            self.sources[s] = <PyObject*>self.parts[s]
        self.parts = None
        self.run_forward()
        return self

    cdef inline char* _term(self, Py_ssize_t t, bint grad) noexcept nogil:
        cdef PyObject* src = self.sources[self.term_source[t]]
        return ((<Variable>src).grad_ptr if grad else (<Variable>src).val_ptr) + self.term_row[t] * self.row_bytes

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef Py_ssize_t r, t, n
        cdef floating scale = 1
        for r in range(self.n_runs):
            n = self.run_rows[r] * self.row_bytes // sizeof(floating)
            t = self.run_terms[r]
            if self.run_scale == NULL:
                memcpy(out, self._term(t, False), n * sizeof(floating))
            else:
                scale = <floating>self.run_scale[r]
                row_scale(out, <const floating*>self._term(t, False), n, scale)
            for t in range(t + 1, self.run_terms[r + 1]):
                row_axpy(out, <const floating*>self._term(t, False), n, scale)
            out += n
        return 0

    cdef int run_backward(self) except -1 nogil:
        cdef Py_ssize_t s
        cdef PyObject* src
        for s in range(self.n_sources):
            src = self.sources[s]
            if (<Variable>src).requires_grad and not (<Variable>src).prepare_grad():
                zero_values((<Variable>src).grad_ptr, (<Variable>src).size, self.f64)
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* g) except -1 nogil:
        cdef Py_ssize_t r, t, n
        cdef floating scale = 1
        for r in range(self.n_runs):
            n = self.run_rows[r] * self.row_bytes // sizeof(floating)
            if self.run_scale != NULL:
                scale = <floating>self.run_scale[r]
            for t in range(self.run_terms[r], self.run_terms[r + 1]):
                if (<Variable>self.sources[self.term_source[t]]).requires_grad:
                    row_axpy(<floating*>self._term(t, True), g, n, scale)
            g += n
        return 0


cdef RowSum new_rows(Py_ssize_t terms, Py_ssize_t runs):
    """A RowSum to build (add, close, built), with room for about `terms` terms and `runs` runs."""
    cdef RowSum node = RowSum.__new__(RowSum)
    node.parts = []
    node.last = -1
    node.whole = True
    node.room_terms, node.room_runs = terms, runs
    node.term_source = <int32_t*>_grown(NULL, terms * sizeof(int32_t))
    node.term_row = <int64_t*>_grown(NULL, terms * sizeof(int64_t))
    node.run_rows = <int64_t*>_grown(NULL, runs * sizeof(int64_t))
    node.run_terms = <int64_t*>_grown(NULL, (runs + 1) * sizeof(int64_t))
    return node


cdef void* _grown(void* block, size_t size) except NULL:
    """`block` (or NULL) reallocated to `size` bytes (at least one); MemoryError when it
    cannot be."""
    cdef void* grown = realloc(block, size if size else 1)
    if grown == NULL:
        raise MemoryError()
    return grown


# ---------------------------------------------------------------- public

class autobatch:
    """`with fa.autobatch():` records the per-example graphs built inside, for `fa.batch`.

    Inside, every `fa.Input` and `fa.IndexInput` made in this thread is an example's data,
    and the ops on them are recorded, not computed (Parameters and Variables made outside
    are shared by all examples). `fa.batch(losses)` evaluates them all at once and returns
    the summed loss, a Variable of one batched graph: ops of one kind, signature and depth
    over all the examples run as one node (see fastad.training.autobatch.BATCHABLE for what
    batches; any other op on a recorded value raises NotImplementedError naming it). One
    block can serve many minibatches: each fa.batch evaluates what was recorded since the
    last one. Leaving the block forgets what was recorded and not evaluated.

    Example::

        with fa.autobatch():
            for trees in minibatches:
                losses = [tree_loss(t) for t in trees]     # recorded, one graph a tree
                total = fa.batch(losses)                    # evaluated as one graph
                total.backward(); opt.step(); opt.zero_grad()
    """

    def __enter__(self):
        self.recording = Recording()
        self.previous = set_recording(self.recording)
        return self

    def __exit__(self, *exc):
        set_recording(self.previous)
        self.recording.discard()
        return False


def batch(losses):
    """Evaluate the recording of `losses` (one-element Variables, each an example's loss,
    recorded under `fa.autobatch()`) as one batched graph; returns their sum, a scalar
    Variable of that graph, whose `backward()` adds into each Parameter the sum of the
    examples' gradients. Only what the losses need is computed. After it, a recorded
    Variable that was computed reads its rows of the batched graph as `.value` (and
    `item()`). Losses may also be ordinary Variables (they are added).

    Raises ValueError for no losses or a loss of more than one element, TypeError for
    losses of different dtypes (naming them), NotImplementedError for a recorded op that
    cannot be batched.
    """
    losses = list(losses)
    if not losses:
        raise ValueError("batch: losses is empty; give the loss of one example or more")
    cdef Recording rec = None
    cdef Variable loss
    cdef Py_ssize_t i
    cdef list recorded = [], ordinary = []
    for i, loss in enumerate(losses):
        if loss.size != 1:
            raise ValueError(f"batch: losses[{i}] ({loss!r}) has shape {loss.shape}; each loss "
                             f"must have one element")
        if loss.f64 != (<Variable>losses[0]).f64:
            raise TypeError(f"batch: losses[0] ({losses[0]!r}) is {losses[0].dtype.name} but "
                            f"losses[{i}] ({loss!r}) is {loss.dtype.name}; an autobatched graph "
                            f"has one dtype")
        if type(loss) is Lazy:
            if rec is None:
                rec = <Recording>loss._storage
            elif loss._storage is not rec:
                raise ValueError(f"batch: losses[{i}] belongs to another recording than the "
                                 f"losses before it; one fa.batch evaluates one recording")
            recorded.append(loss)
        elif loss.on_device:
            raise ValueError(f"batch: losses[{i}] ({loss!r}) is on {loss.device}; an "
                             f"autobatched graph is on the CPU")
        else:
            ordinary.append(loss)
    total = None
    cdef Lazy summed
    if recorded:
        summed = new_lazy(rec, K_SUM, "batch", (), (<Variable>recorded[0]).f64, recorded[0], None)
        summed.depth = 1 + max([depth_of(x) for x in recorded])
        summed.terms = recorded
        previous = set_recording(None)       # the batched graph's own leaves are not recorded
        try:
            rec.evaluate(summed)
        finally:
            set_recording(previous)
        total = reshape(summed.src, ())
    for loss in ordinary:
        total = loss.reshape(()) if total is None else add(total, loss.reshape(()))
    return total
