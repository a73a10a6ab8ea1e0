# The graph engine's shared declarations: every op module cimports these.
cimport cython
cimport numpy as cnp
from cpython.ref cimport PyObject
from cpython.pythread cimport PyThread_get_thread_ident

cdef class Plan
from libc.stdint cimport int32_t, int64_t
from fastad._engine.broadcast cimport Bcast

cdef enum GradMode:
    GRAD_NONE = 0      # a leaf holds no gradient (reads as zeros)
    GRAD_SPARSE = 1    # only the rows listed in `touched` hold values
    GRAD_DENSE = 2     # the whole buffer holds the gradient

@cython.no_gc        # graph nodes make no reference cycles: the cyclic collector skips them
cdef class Variable:
    cdef cnp.ndarray _value          # C-contiguous: a leaf's or a view's, made at build time;
                                     # an op node's made when first read (value_array)
    cdef cnp.ndarray _grad           # same shape, made on first gradient
    cdef char* val_ptr
    cdef char* grad_ptr
    cdef readonly Py_ssize_t size
    cdef tuple _shape
    cdef bint f64
    cdef bint requires_grad          # a gradient flows back through this node
    cdef bint has_children           # a node was built on this one (a leaf's requires_grad is fixed)
    cdef bint is_leaf
    cdef unsigned long grad_pass     # == the current pass id: grad holds this pass's value
    cdef unsigned long visit_mark    # scratch for topological sorting
    # The value clock (see mark_changed) when this value was last set: a leaf's by set_value or
    # an optimizer step, an op node's by its last forward. A node whose input's stamp is newer
    # than its own holds a stale value.
    cdef unsigned long long value_stamp
    cdef bint redraws                # its forward draws new random values (a random node)
    cdef readonly tuple parents      # the nodes this one was computed from
    cdef readonly str op_name        # name shown in errors and anomaly reports
    cdef object _plan                # cached Plan for replays rooted here
    cdef object _value_block         # what keeps val_ptr's memory alive while _value is None: the
                                     # block of the value arena (an op node's value: see init_node),
                                     # or an input's array or block (init_view_node); else None
    cdef bint value_read_only        # its array, when made, is read-only (a view of an input's)
    cdef object _grad_block          # the block of a plan's gradients grad_ptr points into (see
                                     # place_grads), or None; _grad is then made on first read
    # Off the host: the storage object of the device package that holds the value and the
    # gradient there (see register_backend); _value/_grad/val_ptr/grad_ptr stay empty. On the
    # host None: the value and gradient are the arrays above, whose raw pointers the passes read.
    cdef object _storage
    cdef bint on_device              # _storage is not None, readable without the GIL (both set
                                     # by set_storage only)

    # A node's passes run without the GIL (so replays can run in several threads at
    # once); a node that needs Python in them takes it with `with gil:`.
    cdef int run_forward(self) except -1 nogil    # recompute _value from the inputs, in place
    cdef int run_backward(self) except -1 nogil   # push _grad into the inputs that need it
    cdef int ensure_grad_buffer(self) except -1
    cdef int prepare_grad(self) except -1 nogil   # ready the grad buffer: 1 to add into it, 0 to write
    # Add rows[k] (row_len elements each) into gradient row ids[k]; ids already checked.
    cdef int add_grad_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                           Py_ssize_t row_len) except -1 nogil
    # Add coefs[k] * x row k // per_x into gradient row ids[k] (the gradient rows of a fused
    # node, which it need not store; each x row serves per_x ids in turn): as add_grad_rows of
    # those rows, written to `scratch` (n rows).
    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil
    cdef Plan _get_plan(self)

@cython.no_gc
cdef class Leaf(Variable):
    cdef int grad_mode
    cdef int clear_grad(self) except -1 nogil  # forget the accumulated gradient

cdef enum:
    SMALL_GROUP = 256      # up to this many ids of a table of more than SMALL_TABLE rows,
    SMALL_TABLE = 65536    # Parameter groups repeats on the stack (groups_on_stack)
    CACHE_LINE = 64        # bytes: buffers that must share no line with another start on one

@cython.no_gc
cdef class Parameter(Leaf):
    cdef public object name
    cdef readonly object shared      # the hogwild handle whose segment holds the value, or None
    # A sparse gradient keeps the touched rows packed in `slab`: slab row k holds
    # the gradient of table row touched[k]; slot_of[r] is r's slab row or -1.
    cdef cnp.ndarray touched         # int64, first n_touched valid
    cdef cnp.ndarray slot_of         # int32 per table row
    cdef int64_t* touched_ptr        # their data, for the passes without the GIL
    cdef int32_t* slot_of_ptr
    cdef cnp.ndarray slab            # (capacity, row_len), grows by doubling
    cdef char* slab_ptr
    cdef Py_ssize_t slab_rows        # the slab's capacity
    cdef Py_ssize_t n_touched
    cdef Py_ssize_t row_len
    # The thread whose compiled training loop uses this Parameter (0: none). Its gradient
    # buffers are one thread's at a time: see claim_parameters.
    cdef unsigned long trainer
    cdef int densify(self) except -1
    cdef bint groups_on_stack(self, Py_ssize_t n) noexcept nogil
    # 1 if an id occurs twice among ids[:n], else 0
    cdef int repeats_among(self, const int64_t* ids, Py_ssize_t n) except -1 nogil
    # 0 when no id repeats among ids[:n], else the distinct ids in touched and their summed
    # rows in the slab (a RowStep's Parameter, whose sparse gradient is empty): how many
    cdef Py_ssize_t sum_repeats(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                                Py_ssize_t row_len) except -1 nogil
    cdef int start_sparse(self) except -1
    cdef int _grow_slab(self) except -1
    cdef int grow_slab_to(self, Py_ssize_t capacity) except -1

@cython.no_gc
cdef class Input(Leaf):
    pass

@cython.no_gc
cdef class IndexInput(Variable):
    pass

# An op of one input x whose backward is a fused pass (reductions, cumsum, softmax, gather,
# pooling, the class-target losses). Its run_backward, when x takes a gradient, readies it and calls _gradient.
@cython.no_gc
cdef class OneInput(Variable):
    cdef Variable x
    # x's gradient: written, or added into (`add`); a subclass's is the one-line float/double
    # dispatch into its fused pass.
    cdef int _gradient(self, bint add) except -1 nogil

# An op of two inputs a and b (binary ops, where, matmul, pair losses). Its run_backward readies
# the gradient of each input that takes one and calls _gradient for it once. `it`, when set (the
# shapes differ), walks the broadcast: the gradient is then summed, into zeros. Freed here.
@cython.no_gc
cdef class TwoInputs(Variable):
    cdef Variable a, b
    cdef Bcast* it
    # The gradient g into a (to_a) or b: written, or added into (`add`); a subclass's is the
    # one-line float/double dispatch into its fused pass.
    cdef int _gradient(self, char* g, bint to_a, bint add) except -1 nogil

# Where a row gather's backward sends the gradient rows of one of its tables: by default
# the table's gradient (add_grad_rows, add_scaled_rows); routed (RowGather.route), a RowStep,
# which an optimizer offers (Optimizer.row_step) to apply its update of each row at once,
# inside backward, keeping no gradient. This is the one extension point of fused training:
# a gather or fused loss sends its rows through send_rows/send_scaled_rows, and an optimizer
# implements a RowStep.
cdef class RowStep:
    cdef Parameter param             # the Parameter whose rows it updates
    # Where it records that a row moved since the optimizer's last step (which then counts
    # the step): a flag of the optimizer `owner` (kept alive with it), in memory of its own
    # (not beside another thread's).
    cdef object owner
    cdef bint* applied
    # Set by the optimizer: the step is exact only when each example sends a row once (a
    # stateful update: two sends of a row take two updates, not one of their sum), so
    # fastad.train routes a table to it only when one source of the graph (one (ids, table)
    # pair of RowGather.sources) reads the table, by a gather that sends it in one call
    # (RowGather.sends_once).
    cdef bint one_source
    # As the table's add_grad_rows and add_scaled_rows, but the rows are applied at once.
    cdef int add_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                      Py_ssize_t row_len) except -1 nogil
    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil
    # The rate r when the update is the plain p[row] -= r * g[row] (no state, no decay): a
    # fused kernel may then take the step itself (and set `applied[0]`); else NULL.
    cdef const double* plain_sgd_rate(self) noexcept nogil


# A node that reads each of its tables in forward only by the rows its ids name, and in
# backward reads none of them and sends each its gradient rows through send_rows or
# send_scaled_rows: the gathers, and the fused losses over gathered rows. A table fills a
# slot (a node has at most 3; one table may fill two). fastad.train routes the rows of a
# Parameter that only such nodes read to its optimizer's RowStep.
@cython.no_gc
cdef class RowGather(Variable):
    cdef tuple tables                # the table of each slot
    cdef tuple sources               # ((ids, table), ...): the ids each table is read by
    cdef tuple routes                # the RowStep of each slot, or None: the table's gradient
    cdef bint dense_grad             # unrouted, it makes its tables' gradients dense
                                     # (embedding_bag(sparse=False)): step() then applies the
                                     # dense rule, so fastad.train routes it to no one_source step
    cdef bint sends_once             # each backward sends each source's rows in one call (set
                                     # by gathers; a node that sends one in parts clears it)
    cdef PyObject* route_ptrs[3]     # the same, borrowed (NULL for None), for the passes
    cdef int gathers(self, tuple tables, tuple sources) except -1   # at build: slots and sources
    # Send the rows of every slot whose table is `table` to `step` (None: back to its gradient).
    cdef int route(self, Variable table, RowStep step) except -1
    cdef int routes_changed(self) except -1    # a subclass's hook, after route


cdef inline int send_rows(RowGather node, int slot, Variable table, const int64_t* ids,
                          Py_ssize_t n, const char* rows, Py_ssize_t row_len) except -1 nogil:
    """table.add_grad_rows, or its slot's RowStep."""
    if node.route_ptrs[slot] == NULL:
        return table.add_grad_rows(ids, n, rows, row_len)
    return (<RowStep>node.route_ptrs[slot]).add_rows(ids, n, rows, row_len)


cdef inline int send_scaled_rows(RowGather node, int slot, Variable table, const int64_t* ids,
                                 Py_ssize_t n, const char* x, const char* coefs, Py_ssize_t row_len,
                                 Py_ssize_t per_x, char* scratch) except -1 nogil:
    """table.add_scaled_rows, or its slot's RowStep."""
    if node.route_ptrs[slot] == NULL:
        return table.add_scaled_rows(ids, n, x, coefs, row_len, per_x, scratch)
    return (<RowStep>node.route_ptrs[slot]).add_scaled_rows(ids, n, x, coefs, row_len, per_x,
                                                             scratch)


cdef class FunctionNode(Variable):
    cdef object fn                   # the op, in Python: fn.forward(node), fn.backward(node)

# Tuples of nodes, which the cyclic collector stops tracking (nodes make no cycles): kept plans
# add nothing to its walks.
@cython.no_gc
cdef class Plan:
    cdef tuple fwd                   # the non-leaf nodes below the root, inputs first
    cdef tuple params                # Parameters below the root, in first-visit order
    cdef tuple grad_leaves           # the leaves below the root that take a gradient
    cdef PyObject** fwd_nodes        # fwd + [root] and [root] + bwd (an op root; borrowed: the
                                     # lists and the root that owns the plan keep them alive)
    cdef PyObject** bwd_nodes
    cdef Py_ssize_t n_fwd, n_bwd
    cdef unsigned long long current_at   # the value clock when every node was last known current
    cdef bint redraws                # a node below the root draws random values on forward
    cdef bint grads_placed           # the bwd nodes' gradient buffers are made (place_grads)

# A compiled training loop claims its Parameters (holding the GIL) for its run, and the passes
# and steps that other threads start check they are not claimed by another thread.
cdef list claim_parameters(str who, object params)   # the ones this call claimed: release them
cdef void release_parameters(list claimed) noexcept
cdef int check_unclaimed(str who, Parameter p) except -1

cdef inline bint claimed_elsewhere(Parameter p) noexcept:
    """Whether another thread's compiled training loop holds p (see claim_parameters): the
    test of check_unclaimed, for a caller that builds its message only when it fails."""
    return p.trainer != 0 and p.trainer != PyThread_get_thread_ident()

# Record that `leaf`'s value was changed from outside the graph (holding the GIL): the nodes
# computed from it are stale until a forward recomputes them, and backward() refuses them.
cdef int mark_changed(Variable leaf) except -1

# Replays, for compiled training loops.
cdef int replay_forward(Variable root) except -1
cdef int replay_plan_forward(Plan plan) except -1 nogil
cdef int seed_scalar_grad(Variable root) except -1 nogil     # begins a pass
cdef int replay_plan_backward(Plan plan) except -1 nogil

# Node construction helpers for op modules.
cdef cnp.ndarray empty_buffer(tuple shape, object dtype)   # scratch written on every example: this thread's own memory
cdef int init_node(Variable node, str op, tuple inputs, tuple shape, bint f64) except -1
cdef int init_node_like(Variable node, str op, tuple inputs, Variable like) except -1
cdef int init_node_on(Variable node, str op, tuple inputs, cnp.ndarray value) except -1  # value: a view the op made
# value: `size` elements of an input's buffer from `data`, kept alive by `owner` (no array until read)
cdef int init_view_node(Variable node, str op, tuple inputs, tuple shape, Py_ssize_t size, bint f64,
                        char* data, object owner) except -1
cdef int set_storage(Variable node, object storage) except -1   # sets _storage and on_device
cdef cnp.ndarray value_array(Variable x)   # x's value as an array on the host (None off it), made when first read
cdef object new_storage(object device, tuple shape, object dtype)  # an empty one, from the device package
cdef object device_of(Variable x)          # None on the host, else the canonical device name
cdef int same_device(str op, Variable a, Variable b) except -1   # ValueError naming both devices
cdef Variable finish(Variable node)       # compute the new node's value (define-by-run)
cdef bint grad_enabled() noexcept
cdef Variable as_variable(object x, Variable like)
cdef Variable as_operand(str op, str argname, object x, Variable like)  # as_variable, or a TypeError
cdef tuple float_operands(str op, object a, object b)  # (a, b) as float Variables, of one dtype
cdef int same_dtype(str op, Variable a, Variable b) except -1
cdef Variable require_float(str op, object x, str argname)   # x, or a TypeError unless a float Variable
# The argument checks that the op modules share (a TypeError or ValueError naming `who` and `name`).
cdef bint check_flag(str who, str name, object value, bint zero_or_one=*) except -1
cdef double check_number(str who, str name, object value, bint bools=*) except? -1.0
cdef double check_above(str who, str name, object value, double low, bint or_equal=*) except? -1.0
cdef Py_ssize_t check_int(str who, str name, object value, Py_ssize_t low) except? -1
cdef bint is_real_number(object value)
cdef double check_real(str who, str name, object value, bint infinite=*) except? -1.0
cdef object device_backend()              # the registered device backend (register_backend); raises if none
cdef object backend_for(Variable x)       # the backend of a Variable off the host: an autobatch
                                           # recording's (set_recording) or device_backend()


cdef inline bint on_device(object x) noexcept:
    return isinstance(x, Variable) and (<Variable>x).on_device


cdef inline cnp.ndarray keep_data(cnp.ndarray array, char** data):
    """array, once its data pointer is in *data: a node keeps both, the array (alive) and the
    pointer (for its passes without the GIL)."""
    data[0] = <char*>cnp.PyArray_DATA(array)
    return array


cdef inline char* val_ptr_or_null(Variable v) noexcept nogil:
    """The values of an optional input: NULL for None."""
    return v.val_ptr if v is not None else NULL


cdef inline object backend_of(object a, object b=None, object c=None):
    """The backend that builds an op on these operands: None for the compiled CPU path (a
    C-level test), else the backend of the first operand off the host (backend_for)."""
    if on_device(a):
        return backend_for(<Variable>a)
    if b is not None and on_device(b):
        return backend_for(<Variable>b)
    if c is not None and on_device(c):
        return backend_for(<Variable>c)
    return None


cdef inline object backend_among(tuple xs):
    """backend_of for any number of operands."""
    for x in xs:
        if on_device(x):
            return backend_for(<Variable>x)
    return None
