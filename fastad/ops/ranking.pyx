"""Pairwise ranking in one node: `fastad.ranking_margin` (how much each user's positive item
outscores its negative) and `fastad.ranking_loss` (a ranking loss of each margin, reduced, with
an optional L2 term of the rows it touches): the gathers, the difference, the dot product and
the loss of composed ops, with their values and gradients, in one pass each way.

The loss of a margin is a hook, as scikit-learn's SGD loop takes a `LossFunction`: one of the
pointwise losses of the op manifest (its value and derivative written once, in rules.h, for
the CPU and CUDA), against a target of one. `RANKING_LOSSES` names them: "bpr" (BPR's
-log sigmoid(m), the logits' binary cross-entropy) and "hinge" (max(0, 1 - m)). `margin_loss`
takes the same loss of margins computed any other way (a two-tower model's; on a device, the
ranking node's composition): the loss is composed once.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport int64_t, uint64_t

from fastad._engine.graph cimport (Variable, IndexInput, RowGather, RowStep, empty_buffer, init_node,
                                   finish, require_float, same_dtype, backend_among,
                                   val_ptr_or_null, check_real, send_rows, send_scaled_rows,
                                   keep_data)
from fastad._engine.loops cimport element_size
from fastad.ops.op_codes cimport P_BCE, P_HINGE
from fastad.ops.pointwise_loss cimport (RED_NONE, loss_backward, loss_forward, reduction_code,
                                        reduction_name, reduction_scale)
from fastad.ops.sparse cimport as_ids, check_ids, fa_ids_out_of_range, row_tables
from fastad.ops.losses import bce_with_logits, hinge

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["ranking_margin", "ranking_loss", "margin_loss"]

cdef extern from "ranking.h":
    void fa_margin_rows_f(const float* U, const float* V, const float* bias, const int64_t* users,
                          const int64_t* pos, const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,
                          float* user_rows, float* differences, float* margins,
                          float* penalties) noexcept nogil
    void fa_margin_rows_d(const double* U, const double* V, const double* bias,
                          const int64_t* users, const int64_t* pos, const int64_t* neg,
                          Py_ssize_t n, Py_ssize_t dim, double* user_rows, double* differences,
                          double* margins, double* penalties) noexcept nogil
    void fa_margin_step_f(float* user_row, float* pos_row, float* neg_row, float* bias,
                          int64_t pos, int64_t neg, const float* u, const float* d, float g,
                          bint regularized, float r, Py_ssize_t dim, float a_user, float a_item,
                          float a_bias) noexcept nogil
    void fa_margin_step_d(double* user_row, double* pos_row, double* neg_row, double* bias,
                          int64_t pos, int64_t neg, const double* u, const double* d, double g,
                          bint regularized, double r, Py_ssize_t dim, double a_user, double a_item,
                          double a_bias) noexcept nogil
    void fa_regularized_grads_f(const float* V, const float* bias, const int64_t* pos,
                                const int64_t* neg, const float* user_rows, const float* differences,
                                const float* g, const float* r, Py_ssize_t n, Py_ssize_t dim,
                                float* user_grads, float* pos_grads, float* neg_grads,
                                float* pos_bias, float* neg_bias) noexcept nogil
    void fa_regularized_grads_d(const double* V, const double* bias, const int64_t* pos,
                                const int64_t* neg, const double* user_rows,
                                const double* differences, const double* g, const double* r,
                                Py_ssize_t n, Py_ssize_t dim, double* user_grads, double* pos_grads,
                                double* neg_grads, double* pos_bias, double* neg_bias) noexcept nogil


#: The losses of a margin m that `ranking_loss` takes: name -> (the pointwise loss's code in the
#: op manifest, against a target of one; its function, for margins computed otherwise).
RANKING_LOSSES = {
    "bpr": (P_BCE, bce_with_logits),     # -log sigmoid(m): BPR's
    "hinge": (P_HINGE, hinge),           # max(0, 1 - m)
}


cdef int loss_code(str op, object loss) except -2:
    if not isinstance(loss, str) or loss not in RANKING_LOSSES:
        raise ValueError(f"{op}: loss must be one of {sorted(RANKING_LOSSES)}, got {loss!r}")
    return RANKING_LOSSES[loss][0]


# The kernels of ranking.h, each picked for the buffers' precision once.

cdef inline void margin_rows(const floating* U, const floating* V, const floating* bias,
                             const int64_t* users, const int64_t* pos, const int64_t* neg, Py_ssize_t n,
                             Py_ssize_t dim, floating* user_rows, floating* differences,
                             floating* margins, floating* penalties) noexcept nogil:
    """The margins, keeping each triple's user row and difference (and, unless penalties is
    NULL, the squared norms of its rows)."""
    if floating is float:
        fa_margin_rows_f(U, V, bias, users, pos, neg, n, dim, user_rows, differences, margins, penalties)
    else:
        fa_margin_rows_d(U, V, bias, users, pos, neg, n, dim, user_rows, differences, margins, penalties)


cdef inline void margin_step(floating* user_row, floating* pos_row, floating* neg_row,
                             floating* bias, int64_t pos, int64_t neg, const floating* u,
                             const floating* d, floating g, bint regularized, floating r,
                             Py_ssize_t dim, floating a_user, floating a_item,
                             floating a_bias) noexcept nogil:
    """One triple's plain SGD steps, with the L2 term's when `regularized`."""
    if floating is float:
        fa_margin_step_f(user_row, pos_row, neg_row, bias, pos, neg, u, d, g, regularized, r, dim,
                         a_user, a_item, a_bias)
    else:
        fa_margin_step_d(user_row, pos_row, neg_row, bias, pos, neg, u, d, g, regularized, r, dim,
                         a_user, a_item, a_bias)


cdef inline void regularized_grads(const floating* V, const floating* bias, const int64_t* pos,
                                   const int64_t* neg, const floating* user_rows,
                                   const floating* differences, const floating* g, const floating* r,
                                   Py_ssize_t n, Py_ssize_t dim, floating* user_grads,
                                   floating* pos_grads, floating* neg_grads, floating* pos_bias,
                                   floating* neg_bias) noexcept nogil:
    """The gradient rows with the L2 terms', from the tables' values before any is stepped."""
    if floating is float:
        fa_regularized_grads_f(V, bias, pos, neg, user_rows, differences, g, r, n, dim, user_grads,
                               pos_grads, neg_grads, pos_bias, neg_bias)
    else:
        fa_regularized_grads_d(V, bias, pos, neg, user_rows, differences, g, r, n, dim, user_grads,
                               pos_grads, neg_grads, pos_bias, neg_bias)


# A Ranking node's buffers: one vector per triple of each kind, and rows of dim per triple.
cdef enum:
    V_MARGINS, V_KEPT, V_ONES, V_COEFS, V_NEGATED, V_PENALTIES, V_RATES, V_POS_BIAS, V_NEG_BIAS, V_LOSSES
    N_VECTORS
cdef enum:
    R_USERS, R_DIFFERENCES, R_GRADS     # R_GRADS: the user gradient rows (or the scaled rows'
    N_ROWS = 3                          # scratch), then with an L2 term the pos and neg ones
    N_ROWS_REGULARIZED = 5


@cython.no_gc
@cython.final
cdef class Ranking(RowGather):
    """y[k] = U[users[k]] . (V[pos[k]] - V[neg[k]]) (+ b[pos[k]] - b[neg[k]]) in one node:
    what the gathers, differences, vector_dot (and sum) compute, with the same values and
    gradients, without storing the gathered item rows or any gradient row. The backward
    sends each table its gradient rows as scaled rows (send_scaled_rows), and when every
    table's rows go to a plain SGD row step, takes one triple's steps in one call.

    With a loss (`ranking_loss`), its value is that loss of each margin against a target of
    one, reduced, plus each triple's L2 term: what the loss's PairLoss node computes of the
    margins, by the same loops (pointwise_loss.pxd), and the backward's coefficient of each
    triple is the loss's gradient instead of y's. With `weights`, each triple's loss (its L2
    term included) is multiplied by its weight, a constant (WARP's rank weight)."""
    cdef Variable user_table, item_table, item_bias    # item_bias: None or n_items values
    cdef Variable weights            # None, or one constant per triple that scales its loss
    cdef IndexInput users, pos, neg
    cdef Py_ssize_t dim, n_users, n_items
    cdef Py_ssize_t n_triples        # the size of users, pos and neg (the node's too, unless reduced)
    cdef int loss                    # the pointwise loss code of each margin, or -1: the margins
    cdef int reduction
    cdef double scale, regularization     # the reduction's factor; the L2 term's r (0: none)
    cdef bint steps_in_place         # every table's rows go to a plain SGD row step
    cdef cnp.ndarray vectors, rows   # (N_VECTORS, n_triples), (N_ROWS[_REGULARIZED], n_triples, dim)
    cdef char* vectors_ptr
    cdef char* rows_ptr

    cdef inline char* vector(self, int kind) noexcept nogil:
        return self.vectors_ptr + kind * self.n_triples * element_size(self.f64)

    cdef inline char* block(self, int kind) noexcept nogil:
        return self.rows_ptr + kind * self.n_triples * self.dim * element_size(self.f64)

    cdef int routes_changed(self) except -1:
        self.steps_in_place = all(slot is not None and (<RowStep>slot).plain_sgd_rate() != NULL
                                  for slot in self.routes)
        return 0

    cdef int run_forward(self) except -1 nogil:
        self._check_ids()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """The margins (y itself without a loss), then their losses, each (with its L2 term)
        into y for reduction "none", else their sum times the reduction's scale."""
        cdef Py_ssize_t k, n = self.n_triples
        cdef floating* margins = y if self.loss < 0 else <floating*>self.vector(V_MARGINS)
        cdef floating* penalties = NULL
        cdef double total, half_r = 0.5 * self.regularization
        if self.regularization != 0:
            penalties = <floating*>self.vector(V_PENALTIES)
        margin_rows(<const floating*>self.user_table.val_ptr, <const floating*>self.item_table.val_ptr,
                    <const floating*>val_ptr_or_null(self.item_bias), <const int64_t*>self.users.val_ptr,
                    <const int64_t*>self.pos.val_ptr, <const int64_t*>self.neg.val_ptr, n, self.dim,
                    <floating*>self.block(R_USERS), <floating*>self.block(R_DIFFERENCES), margins,
                    penalties)
        if self.loss < 0:
            return 0
        if self.weights is not None:
            return self._weighted_forward(y, margins, penalties)
        total = loss_forward(self.loss, <char*>margins, self.vector(V_ONES), n, 0.0, self.vector(V_KEPT),
                             <char*>y if self.reduction == RED_NONE else NULL, self.f64)
        if penalties != NULL:
            for k in range(n):
                total += half_r * penalties[k]
                if self.reduction == RED_NONE:
                    y[k] += <floating>(half_r * penalties[k])
        if self.reduction != RED_NONE:
            y[0] = <floating>(total * self.scale)
        return 0

    cdef int _weighted_forward(self, floating* y, const floating* margins,
                               const floating* penalties) except -1 nogil:
        """The losses of the margins (with their L2 terms), each times its weight, into y for
        reduction "none", else their sum times the reduction's scale."""
        cdef Py_ssize_t k, n = self.n_triples
        cdef const floating* w = <const floating*>self.weights.val_ptr
        cdef floating* losses = y if self.reduction == RED_NONE else <floating*>self.vector(V_LOSSES)
        cdef double total = 0.0, half_r = 0.5 * self.regularization
        loss_forward(self.loss, <const char*>margins, self.vector(V_ONES), n, 0.0, self.vector(V_KEPT),
                     <char*>losses, self.f64)
        for k in range(n):
            if penalties != NULL:
                losses[k] += <floating>(half_r * penalties[k])
            losses[k] *= w[k]
            total += losses[k]
        if self.reduction != RED_NONE:
            y[0] = <floating>(total * self.scale)
        return 0

    cdef int run_backward(self) except -1 nogil:
        self._check_ids()
        return (self._backward(<const double*>self.grad_ptr) if self.f64
                else self._backward(<const float*>self.grad_ptr))

    cdef int _backward(self, const floating* gy) except -1 nogil:
        """The gradient rows g[k] * (V[pos] - V[neg]) for U, g[k] * U[users] for V[pos] and
        -g[k] * U[users] for V[neg] (g[k] and -g[k] for the biases), each table's in the
        order the separate ops' backwards add them. g is the margins' gradient: the node's
        own, or (with a loss) the loss's, through its backward."""
        cdef Py_ssize_t k, n = self.n_triples
        cdef const floating* g = gy
        cdef floating* negated = <floating*>self.vector(V_NEGATED)
        if self.loss >= 0:
            loss_backward(self.loss, True, self.vector(V_MARGINS), self.vector(V_ONES),
                          self.vector(V_KEPT), n, 0.0, <const char*>gy,
                          1 if self.reduction == RED_NONE else 0, self.scale,
                          self.vector(V_COEFS), False, self.f64)
            g = <const floating*>self.vector(V_COEFS)
            if self.weights is not None:
                self._weigh(<floating*>self.vector(V_COEFS))
            if self.regularization != 0:
                self._fill_rates(gy)
                if n == 1 and self.steps_in_place:
                    return self._step_one_triple(g)
                return self._add_regularized_grads(g)
        if n == 1 and self.steps_in_place:
            return self._step_one_triple(g)
        for k in range(n):
            negated[k] = -g[k]
        if self.item_bias is not None and self.item_bias.requires_grad:
            send_rows(self, 2, self.item_bias, <const int64_t*>self.neg.val_ptr, n, <char*>negated, 1)
            send_rows(self, 2, self.item_bias, <const int64_t*>self.pos.val_ptr, n, <const char*>g, 1)
        if self.item_table.requires_grad:
            send_scaled_rows(self, 1, self.item_table, <const int64_t*>self.neg.val_ptr, n,
                             self.block(R_USERS), <char*>negated, self.dim, 1, self.block(R_GRADS))
            send_scaled_rows(self, 1, self.item_table, <const int64_t*>self.pos.val_ptr, n,
                             self.block(R_USERS), <const char*>g, self.dim, 1, self.block(R_GRADS))
        if self.user_table.requires_grad:
            send_scaled_rows(self, 0, self.user_table, <const int64_t*>self.users.val_ptr, n,
                             self.block(R_DIFFERENCES), <const char*>g, self.dim, 1,
                             self.block(R_GRADS))
        return 0

    cdef int _weigh(self, floating* coefficients) except -1 nogil:
        """Each triple's coefficient times its weight."""
        cdef Py_ssize_t k
        cdef const floating* w = <const floating*>self.weights.val_ptr
        for k in range(self.n_triples):
            coefficients[k] *= w[k]
        return 0

    cdef int _fill_rates(self, const floating* gy) except -1 nogil:
        """rates[k] = the coefficient of triple k's rows in its L2 term's gradient: r times
        the loss's gradient (its k-th under reduction "none") and the reduction's scale (and
        the triple's weight)."""
        cdef Py_ssize_t k, step = 1 if self.reduction == RED_NONE else 0
        cdef double r = self.regularization * self.scale
        cdef floating* rates = <floating*>self.vector(V_RATES)
        for k in range(self.n_triples):
            rates[k] = <floating>(r * gy[k * step])
        if self.weights is not None:
            self._weigh(rates)
        return 0

    cdef int _add_regularized_grads(self, const floating* g) except -1 nogil:
        """The gradient rows with the L2 terms' (every row computed from the tables' values
        before any is sent, for a row step updates them as they come), sent to the tables
        in the order of the plain path."""
        cdef Py_ssize_t n = self.n_triples, block = n * self.dim
        cdef floating* grads = <floating*>self.block(R_GRADS)
        regularized_grads(<const floating*>self.item_table.val_ptr,
                          <const floating*>val_ptr_or_null(self.item_bias),
                          <const int64_t*>self.pos.val_ptr, <const int64_t*>self.neg.val_ptr,
                          <const floating*>self.block(R_USERS), <const floating*>self.block(R_DIFFERENCES),
                          g, <const floating*>self.vector(V_RATES), n, self.dim, grads, grads + block,
                          grads + 2 * block, <floating*>self.vector(V_POS_BIAS),
                          <floating*>self.vector(V_NEG_BIAS))
        if self.item_bias is not None and self.item_bias.requires_grad:
            send_rows(self, 2, self.item_bias, <const int64_t*>self.neg.val_ptr, n,
                      self.vector(V_NEG_BIAS), 1)
            send_rows(self, 2, self.item_bias, <const int64_t*>self.pos.val_ptr, n,
                      self.vector(V_POS_BIAS), 1)
        if self.item_table.requires_grad:
            send_rows(self, 1, self.item_table, <const int64_t*>self.neg.val_ptr, n,
                      <char*>(grads + 2 * block), self.dim)
            send_rows(self, 1, self.item_table, <const int64_t*>self.pos.val_ptr, n,
                      <char*>(grads + block), self.dim)
        if self.user_table.requires_grad:
            send_rows(self, 0, self.user_table, <const int64_t*>self.users.val_ptr, n,
                      <char*>grads, self.dim)
        return 0

    cdef int _step_one_triple(self, const floating* g) except -1 nogil:
        """One triple's SGD steps of b's values, V's and U's rows in one call (ranking.h's
        fa_margin_step) from its margin's gradient g, the values of the general path's
        calls bit for bit."""
        cdef int64_t user = (<const int64_t*>self.users.val_ptr)[0]
        cdef int64_t pos = (<const int64_t*>self.pos.val_ptr)[0], neg = (<const int64_t*>self.neg.val_ptr)[0]
        cdef double lr_u = (<RowStep>self.route_ptrs[0]).plain_sgd_rate()[0]
        cdef double lr_v = (<RowStep>self.route_ptrs[1]).plain_sgd_rate()[0]
        cdef double lr_b = 0.0
        cdef floating* bias = NULL
        cdef floating* U = <floating*>self.user_table.val_ptr
        cdef floating* V = <floating*>self.item_table.val_ptr
        cdef Py_ssize_t dim = self.dim
        if self.item_bias is not None:
            bias, lr_b = <floating*>self.item_bias.val_ptr, (<RowStep>self.route_ptrs[2]).plain_sgd_rate()[0]
        margin_step(U + user * dim, V + pos * dim, V + neg * dim, bias, pos, neg,
                        <const floating*>self.block(R_USERS), <const floating*>self.block(R_DIFFERENCES),
                        g[0], self.regularization != 0,
                        (<const floating*>self.vector(V_RATES))[0] if self.regularization != 0 else 0, dim,
                        <floating>-lr_u, <floating>-lr_v, <floating>-lr_b)
        (<RowStep>self.route_ptrs[0]).applied[0] = True
        (<RowStep>self.route_ptrs[1]).applied[0] = True
        if self.item_bias is not None:
            (<RowStep>self.route_ptrs[2]).applied[0] = True
        return 0

    cdef inline int _check_ids(self) except -1 nogil:
        if self.n_triples == 1 and not (        # one triple: its three ids in one test, no calls
                fa_ids_out_of_range(<const uint64_t*>self.users.val_ptr, 1, self.n_users)
                | fa_ids_out_of_range(<const uint64_t*>self.pos.val_ptr, 1, self.n_items)
                | fa_ids_out_of_range(<const uint64_t*>self.neg.val_ptr, 1, self.n_items)):
            return 0
        check_ids(self, self.users, self.n_users)
        check_ids(self, self.pos, self.n_items)
        check_ids(self, self.neg, self.n_items)
        return 0


def ranking_margin(user_table, users, item_table, pos, neg, item_bias=None):
    """The margins of pairwise ranking examples: `U[users] . (V[pos] - V[neg])` row by row,
    plus `b[pos] - b[neg]` with item biases b.

    `user_table` (U) and `item_table` (V) are float Variables of shapes (n_users,
    dim) and (n_items, dim), usually Parameters; `item_bias` (optional) one of
    shape (n_items,) or (n_items, 1); `users`, `pos` and `neg` are IndexInputs (or
    integer ids) of one shape, which is the result's. It is
    `vector_dot(take(U, users), take(V, pos) - take(V, neg))` (+ `reshape(take(b,
    pos) - take(b, neg), shape)`) with the same values and gradients bit for bit,
    in one node that stores no gathered item row and no gradient row. Gradients are
    sparse (rows of U, V and b), and repeated ids add, as with `take`. On a GPU it is
    composed of those ops.

    >>> U = fa.Parameter(np.random.randn(100, 8)); V = fa.Parameter(np.random.randn(50, 8))
    >>> margins = fa.ranking_margin(U, [3, 7], V, [1, 2], [4, 4])       # shape (2,)
    >>> loss = -fa.sum(fa.logsigmoid(margins))
    """
    return _ranking_node("ranking_margin", user_table, users, item_table, pos, neg, item_bias, None,
                         -1, 0.0, None)


def ranking_loss(user_table, users, item_table, pos, neg, item_bias=None, reduction="mean",
                 regularization=0.0, loss="bpr", weights=None):
    """A pairwise ranking loss of each `ranking_margin` m: `loss` "bpr" (the default, BPR's
    -log sigmoid(m)) or "hinge" (max(0, 1 - m)), averaged ("mean", the default), summed
    ("sum") or one per example ("none").

    `regularization` r >= 0 adds to each triple's loss the L2 term r / 2 * (|U[user]|^2 +
    |V[pos]|^2 + |V[neg]|^2 (+ b[pos]^2 + b[neg]^2)) of the rows it touches, whose
    gradient r * row joins each row's: under per-example SGD at rate lr each touched row
    takes `row += lr * (its loss's gradient step - r * row)`, with "bpr" implicit's
    BayesianPersonalizedRanking update (its `regularization`) exactly.

    `weights` (optional), a float Variable of the ids' shape that takes no gradient (an
    `Input`: constants a sampler writes), multiplies each triple's loss, its L2 term
    included, before the reduction: WARP's rank weight of each triple
    (`fastad.data.WarpSampler` writes them; a weight 0 leaves its triple's rows as they are).

    It is `margin_loss(ranking_margin(...), loss, reduction)` (for "bpr",
    `bce_with_logits(margins, ones, reduction)`) with the same values and gradients bit for
    bit, in one node: the arguments are ranking_margin's, the margins are not a node of
    their own, and the loss's gradient reaches the tables without a pass of its own (under
    `fastad.train`'s plain SGD at one triple a step, the backward takes the triple's steps
    of U, V and b at once). `fastad.models.BPR`'s loss is this with reduction="sum". On a
    GPU it is composed of those ops.

    >>> U = fa.Parameter(np.random.randn(100, 8)); V = fa.Parameter(np.random.randn(50, 8))
    >>> loss = fa.ranking_loss(U, [3, 7], V, [1, 2], [4, 4], reduction="sum")   # shape ()
    >>> loss.backward()
    """
    cdef double r = check_real("ranking_loss", "regularization", regularization)
    if r < 0:
        raise ValueError(f"ranking_loss: regularization must be >= 0, got {regularization!r}")
    return _ranking_node("ranking_loss", user_table, users, item_table, pos, neg, item_bias, loss,
                         reduction_code("ranking_loss", reduction), r, weights)


def margin_loss(margins, loss="bpr", reduction="sum"):
    """`ranking_loss`'s loss of margins computed any other way (a float Variable of any
    shape; a margin is how much a positive item outscores a negative): "bpr" -log sigmoid(m)
    or "hinge" max(0, 1 - m) of each, summed ("sum", the default), averaged ("mean") or one
    per margin ("none"). The pointwise loss node of `RANKING_LOSSES`, against ones: on a GPU
    its kernels.

    >>> m = fa.vector_dot(user_rows, pos_rows - neg_rows)
    >>> loss = fa.margin_loss(m)                      # BPR's loss, summed
    """
    require_float("margin_loss", margins, "margins")
    loss_code("margin_loss", loss)
    ones = np.ones((<Variable>margins)._shape, dtype=(<Variable>margins).dtype)
    return RANKING_LOSSES[loss][1](margins, ones, reduction)


cdef object _ranking_node(str op, object user_table, object users, object item_table, object pos,
                          object neg, object item_bias, object loss, int reduction,
                          double regularization, object weights):
    """ranking_margin's node (reduction -1: no loss), or ranking_loss's with that loss,
    reduction code, L2 term and weights (None or a float Variable of the ids' shape)."""
    cdef int code = -1 if reduction < 0 else loss_code(op, loss)
    cdef Variable U, V
    U, V = row_tables(op, "user_table", user_table, "item_table", item_table)
    cdef Variable b = None
    if item_bias is not None:
        b = require_float(op, item_bias, "item_bias")
        if b._shape not in ((V._shape[0],), (V._shape[0], 1)):
            raise ValueError(f"{op}: item_bias must have shape ({V._shape[0]},) or ({V._shape[0]}, 1) "
                             f"(one value per row of item_table), got {b._shape}")
        same_dtype(op, V, b)
    cdef IndexInput user_ids = as_ids(op, "users", users, U.device)
    cdef IndexInput pos_ids = as_ids(op, "pos", pos, V.device)
    cdef IndexInput neg_ids = as_ids(op, "neg", neg, V.device)
    if not (user_ids._shape == pos_ids._shape == neg_ids._shape):
        raise ValueError(f"{op}: users, pos and neg must have one shape, got {user_ids._shape}, "
                         f"{pos_ids._shape} and {neg_ids._shape}")
    cdef Variable w = None
    if weights is not None:
        w = require_float(op, weights, "weights")
        same_dtype(op, U, w)
        if w._shape != user_ids._shape:
            raise ValueError(f"{op}: weights must have the ids' shape {user_ids._shape} (one weight "
                             f"per triple), got {w._shape}")
        if w.requires_grad:
            raise ValueError(f"{op}: weights must take no gradient (an Input of constants, such as "
                             f"WARP's rank weights), got a {type(w).__name__} that requires one")
    if (dev := backend_among((U, V, b, user_ids, pos_ids, neg_ids, w))) is not None:
        return dev.ranking(U, user_ids, V, pos_ids, neg_ids, b,
                           None if reduction < 0 else reduction_name(reduction), regularization, loss, w)
    cdef Ranking node = Ranking.__new__(Ranking)
    node.user_table, node.item_table, node.item_bias = U, V, b
    node.users, node.pos, node.neg = user_ids, pos_ids, neg_ids
    node.n_users, node.n_items, node.dim = U._shape[0], V._shape[0], U._shape[1]
    node.n_triples = user_ids.size
    node.loss = code
    node.reduction = reduction
    node.scale = reduction_scale(reduction, user_ids.size)
    node.regularization = regularization
    node.weights = w
    inputs = (U, V, user_ids, pos_ids, neg_ids) if b is None else (U, V, b, user_ids, pos_ids, neg_ids)
    if w is not None:
        inputs += (w,)
    init_node(node, op, inputs, () if code >= 0 and reduction != RED_NONE else user_ids._shape, U.f64)
    sources = ((user_ids, U), (pos_ids, V), (neg_ids, V))
    node.gathers((U, V) if b is None else (U, V, b),
                 sources if b is None else sources + ((pos_ids, b), (neg_ids, b)))
    dtype = np.float64 if U.f64 else np.float32
    node.vectors = keep_data(empty_buffer((N_VECTORS, user_ids.size), dtype), &node.vectors_ptr)
    node.vectors[V_ONES] = 1
    node.rows = keep_data(empty_buffer((N_ROWS_REGULARIZED if regularization != 0 else N_ROWS,
                                        user_ids.size, node.dim), dtype), &node.rows_ptr)
    return finish(node)
