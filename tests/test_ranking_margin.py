"""fa.ranking_margin: U[users] . (V[pos] - V[neg]) (+ b[pos] - b[neg]) in one node, the same
values and gradients as the ops it fuses, bit for bit, in passes and in fa.train; and
fa.ranking_loss, the logistic loss of those margins in the same node, bit for bit
bce_with_logits of them against ones."""
import numpy as np
import pytest

import fastad as fa
from fastad.models import bpr_loss, margin_loss
from fused_helpers import assert_constant_and_input_table_grads_match, assert_fused_matches_composed


def tables(f64=True, users=7, items=5, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    return (fa.Parameter(rng.normal(size=(users, dim)), dtype=dtype),
            fa.Parameter(rng.normal(size=(items, dim)), dtype=dtype),
            fa.Parameter(rng.normal(size=(items, 1)), dtype=dtype))


def composed(U, users, V, pos, neg, b=None):
    """The ops ranking_margin fuses, as BPR's forward built them before it."""
    margin = fa.vector_dot(fa.take(U, users), fa.take(V, pos) - fa.take(V, neg))
    if b is None:
        return margin
    return margin + fa.reshape(fa.take(b, pos) - fa.take(b, neg), margin.shape)


IDS = {  # users, pos, neg: repeated users, an item that is both a positive and a negative
    "rows": ([0, 3, 3, 6], [1, 2, 4, 1], [2, 1, 0, 1]),
    "one": ([2], [4], [0]),
    "scalar": (2, 4, 0),
    "grid": ([[0, 1], [6, 6]], [[4, 4], [3, 0]], [[1, 0], [0, 2]]),
    "empty": (np.zeros(0, int), np.zeros(0, int), np.zeros(0, int)),
}


@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("case", sorted(IDS))
def test_values_and_gradients_are_those_of_the_composed_ops_bit_for_bit(case, with_bias, f64):
    users, pos, neg = IDS[case]
    results = []
    for build in (composed, fa.ranking_margin):
        U, V, b = tables(f64)
        margin = build(U, fa.IndexInput(users), V, fa.IndexInput(pos), fa.IndexInput(neg),
                       b if with_bias else None)
        seed = np.linspace(-1.5, 2.0, margin.size).reshape(margin.shape)
        margin.backward(seed.astype(margin.dtype))
        results.append((margin.value.copy(), margin.shape, U.grad, V.grad, b.grad))
    assert_fused_matches_composed(results, np.shape(users), f64)


def test_gradients_match_finite_differences():
    users, pos, neg = ([0, 3, 3, 6], [1, 2, 4, 1], [2, 1, 0, 1])
    rng = np.random.default_rng(1)
    weights = rng.normal(size=4)
    assert fa.gradcheck(
        lambda U, V, b: fa.sum(fa.ranking_margin(U, users, V, pos, neg, item_bias=b) * weights),
        rng.normal(size=(7, 3)), rng.normal(size=(5, 3)), rng.normal(size=5))


LOSSES = {  # name: (the loss of the margins, its reduction)
    "ranking_margin": (lambda U, users, V, pos, neg, b:
                       -fa.sum(fa.logsigmoid(fa.ranking_margin(U, users, V, pos, neg, item_bias=b))), "sum"),
    "ranking_loss mean": (lambda U, users, V, pos, neg, b:
                          fa.ranking_loss(U, users, V, pos, neg, item_bias=b), "mean"),
    "ranking_loss sum": (lambda U, users, V, pos, neg, b:
                         fa.ranking_loss(U, users, V, pos, neg, item_bias=b, reduction="sum"), "sum"),
}


@pytest.mark.parametrize("build", sorted(LOSSES))
def test_matches_pytorch(build):
    torch = pytest.importorskip("torch")
    U, V, b = tables(f64=True)
    users, pos, neg = IDS["rows"]
    make, reduction = LOSSES[build]
    loss = make(U, users, V, pos, neg, b)
    loss.backward()
    tU, tV, tb = (torch.tensor(p.value.copy(), requires_grad=True) for p in (U, V, b))
    t_margin = (tU[users] * (tV[pos] - tV[neg])).sum(-1) + (tb[pos] - tb[neg])[:, 0]
    t_losses = -torch.nn.functional.logsigmoid(t_margin)
    t_loss = t_losses.mean() if reduction == "mean" else t_losses.sum()
    t_loss.backward()
    np.testing.assert_allclose(loss.value, t_loss.item(), rtol=1e-12)
    for ours, theirs in ((U, tU), (V, tV), (b, tb)):
        np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_gradients_are_sparse_rows_of_parameters():
    U, V, b = tables()
    fa.ranking_margin(U, [0, 3], V, [1, 2], [2, 1], item_bias=b).sum().backward()
    assert U.is_sparse_grad and sorted(U.sparse_rows()) == [0, 3]
    assert V.is_sparse_grad and sorted(V.sparse_rows()) == [1, 2]
    assert sorted(b.sparse_rows()) == [1, 2]


def test_tables_that_are_not_parameters_get_dense_gradients_or_none():
    """A constant user table takes no gradient (reads as zeros); an Input item table with
    requires_grad a dense one: as with the composed ops."""
    users, pos, neg = IDS["rows"]
    results = []
    for build in (composed, fa.ranking_margin):
        U, V, _ = tables()
        frozen_users = fa.Input(U.value, dtype=np.float64)
        items = fa.Input(V.value, dtype=np.float64, requires_grad=True)
        margin = build(frozen_users, fa.IndexInput(users), items, fa.IndexInput(pos), fa.IndexInput(neg))
        margin.backward(np.arange(1.0, 5.0))
        results.append((margin.value.copy(), frozen_users.grad, items.grad))
    assert_constant_and_input_table_grads_match(results)


def margin_and_its_sum(U, users, V, pos, neg, b):
    margin = fa.ranking_margin(U, users, V, pos, neg, item_bias=b)
    return margin, fa.sum(margin)


def summed_loss_twice(U, users, V, pos, neg, b):
    loss = fa.ranking_loss(U, users, V, pos, neg, item_bias=b, reduction="sum")
    return loss, loss


#: name: the node of the triples and the loss backpropagated from it
REPLAYED = {"ranking_margin": margin_and_its_sum, "ranking_loss": summed_loss_twice}


@pytest.mark.parametrize("op", sorted(REPLAYED))
def test_replay_after_set_value_reads_the_new_ids_and_rows(op):
    U, V, b = tables()
    users, pos, neg = fa.IndexInput([0, 1]), fa.IndexInput([2, 3]), fa.IndexInput([4, 4])
    node, loss = REPLAYED[op](U, users, V, pos, neg, b)
    users.set_value([5, 5])
    pos.set_value([0, 1])
    V.set_value(V.value * 2)
    loss.forward()
    loss.backward()
    U2, V2, b2 = tables()
    V2.set_value(V2.value * 2)
    fresh, fresh_loss = REPLAYED[op](U2, [5, 5], V2, [0, 1], [4, 4], b2)
    fresh_loss.backward()
    np.testing.assert_array_equal(node.value, fresh.value)
    for ours, theirs in ((U, U2), (V, V2), (b, b2)):
        np.testing.assert_array_equal(ours.grad, theirs.grad)


def _train(build, optimizer, batch, f64, n_items, bias):
    rng = np.random.default_rng(0)
    dtype = np.float64 if f64 else np.float32
    U = fa.Parameter(rng.normal(0, 0.1, (30, 8)), dtype=dtype)
    V = fa.Parameter(rng.normal(0, 0.1, (n_items, 8)), dtype=dtype)
    b = fa.Parameter(rng.normal(0, 0.1, (n_items, 1)), dtype=dtype) if bias else None
    examples = 320
    triples = [rng.integers(0, 30, examples), rng.integers(0, n_items, examples),
               rng.integers(0, n_items, examples)]
    leaves = [fa.IndexInput(np.zeros(batch, dtype=np.int64)) for _ in range(3)]
    if build == "ranking_loss":
        loss = fa.ranking_loss(U, leaves[0], V, leaves[1], leaves[2], item_bias=b, reduction="sum")
    elif build == "ranking_margin":
        loss = margin_loss(fa.ranking_margin(U, leaves[0], V, leaves[1], leaves[2], item_bias=b))
    else:
        biases = (fa.take(b, leaves[1]) - fa.take(b, leaves[2])) if bias else None
        loss = bpr_loss(fa.take(U, leaves[0]), fa.take(V, leaves[1]), fa.take(V, leaves[2]), biases)
    params = [U, V] + ([b] if bias else [])
    opt = optimizer(params, lr=0.05)
    fa.train(loss, opt, {leaf: ids.reshape(-1, batch) for leaf, ids in zip(leaves, triples)},
             epochs=2)
    return [p.value.copy() for p in params]


@pytest.mark.parametrize("optimizer", [fa.optim.SGD, fa.optim.Adagrad])
@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("n_items", [6, 400])          # few items: rows repeat within a step
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("build", ["ranking_margin", "ranking_loss"])
def test_fa_train_gives_the_composed_ops_parameters_bit_for_bit(build, optimizer, batch, f64, n_items,
                                                               bias):
    """With plain SGD the loop steps the rows as their gradients come (no gradient row is
    stored); with Adagrad through the optimizer. Either way, as with the composed ops."""
    composed_params = _train("composed", optimizer, batch, f64, n_items, bias)
    fused_params = _train(build, optimizer, batch, f64, n_items, bias)
    for theirs, ours in zip(composed_params, fused_params):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("build", ["ranking_margin", "ranking_loss"])
def test_one_table_for_users_and_items_trains_as_the_composed_ops_at_one_triple_a_step(build, f64):
    """At one triple a step the loop takes the triple's steps in one call, element by element
    in the separate calls' order; with one table for users and items (a user row may be an
    item row, and rows often coincide) the result is still the composed ops' bit for bit."""
    rng = np.random.default_rng(4)
    dtype = np.float64 if f64 else np.float32
    triples = [rng.integers(0, 5, 200) for _ in range(3)]     # 5 rows: ids often coincide
    results = []
    for fused in (False, True):
        W = fa.Parameter(np.random.default_rng(5).normal(0, 0.1, (5, 4)), dtype=dtype)
        leaves = [fa.IndexInput([0]) for _ in range(3)]
        if fused and build == "ranking_loss":
            loss = fa.ranking_loss(W, leaves[0], W, leaves[1], leaves[2], reduction="sum")
        elif fused:
            loss = margin_loss(fa.ranking_margin(W, leaves[0], W, leaves[1], leaves[2]))
        else:
            loss = bpr_loss(fa.take(W, leaves[0]), fa.take(W, leaves[1]), fa.take(W, leaves[2]))
        fa.train(loss, fa.optim.SGD([W], lr=0.1),
                 {leaf: ids.reshape(-1, 1) for leaf, ids in zip(leaves, triples)})
        results.append(W.value.copy())
    np.testing.assert_array_equal(results[1], results[0])


def test_bpr_model_loss_is_one_ranking_loss_node():
    model = fa.models.BPR(10, 8, dim=4, biases=True)
    loss = model(fa.IndexInput([1, 2]), fa.IndexInput([3, 4]), fa.IndexInput([5, 6]))
    assert loss.op_name == "ranking_loss" and loss.shape == ()
    assert set(map(id, loss.parents)) >= {id(model.U), id(model.V), id(model.item_bias)}


@pytest.mark.parametrize("make, error, message", [
    (lambda U, V, b: fa.ranking_margin(U, [0], V, [0], [7]), IndexError,
     "ranking_margin: id 7 at position 0 of the IndexInput is out of range for a table with 5 rows"),
    (lambda U, V, b: fa.ranking_margin(U, [-1], V, [0], [1]), IndexError,
     "ids must be >= 0, got -1"),
    (lambda U, V, b: fa.ranking_margin(U, [7], V, [0], [1]), IndexError,
     "id 7 at position 0 of the IndexInput is out of range for a table with 7 rows"),
    (lambda U, V, b: fa.ranking_margin(U, [0, 1], V, [0], [1]), ValueError,
     r"users, pos and neg must have one shape, got \(2,\), \(1,\) and \(1,\)"),
    (lambda U, V, b: fa.ranking_margin(U, [0], fa.Parameter(np.zeros((5, 4))), [0], [1]), ValueError,
     r"must be 2-D with one row length, got shapes \(7, 6\) and \(5, 4\)"),
    (lambda U, V, b: fa.ranking_margin(U, [0], fa.Parameter(np.zeros(5)), [0], [1]), ValueError,
     r"must be 2-D with one row length, got shapes \(7, 6\) and \(5,\)"),
    (lambda U, V, b: fa.ranking_margin(U, [0], fa.Parameter(np.zeros((5, 6)), dtype=np.float32), [0], [1]),
     TypeError, "mixed dtypes"),
    (lambda U, V, b: fa.ranking_margin(U, [0], V, [0], [1], item_bias=fa.Parameter(np.zeros((4, 1)))),
     ValueError, r"item_bias must have shape \(5,\) or \(5, 1\) \(one value per row of item_table\), "
                 r"got \(4, 1\)"),
    (lambda U, V, b: fa.ranking_margin(U.value, [0], V, [0], [1]), TypeError,
     "user_table must be a fastad Variable, got ndarray"),
    (lambda U, V, b: fa.ranking_margin(U, [0], V, fa.Input([0.0]), [1]), TypeError,
     "pos must be an IndexInput or integers, got a float Variable"),
    (lambda U, V, b: fa.ranking_loss(U, [0], V, [0], [1], reduction="avg"), ValueError,
     "ranking_loss: reduction must be 'mean', 'sum' or 'none', got 'avg'"),
    (lambda U, V, b: fa.ranking_loss(U, [0], V, [0], [7]), IndexError,
     "ranking_loss: id 7 at position 0 of the IndexInput is out of range for a table with 5 rows"),
    (lambda U, V, b: fa.ranking_loss(U, [0, 1], V, [0], [1]), ValueError,
     r"ranking_loss: users, pos and neg must have one shape"),
    (lambda U, V, b: fa.ranking_loss(U.value, [0], V, [0], [1]), TypeError,
     "ranking_loss: user_table must be a fastad Variable, got ndarray"),
])
def test_bad_input_is_a_clear_error_and_changes_nothing(make, error, message):
    U, V, b = tables()
    before = [p.value.copy() for p in (U, V, b)]
    with pytest.raises(error, match=message):
        make(U, V, b)
    for p, value in zip((U, V, b), before):
        np.testing.assert_array_equal(p.value, value)


def test_an_id_made_bad_after_the_build_fails_the_replay_before_any_write():
    U, V, b = tables()
    neg = fa.IndexInput([1, 2])
    loss = fa.sum(fa.ranking_margin(U, [0, 1], V, [3, 4], neg, item_bias=b))
    opt = fa.optim.SGD([U, V, b], lr=0.1)
    before = [p.value.copy() for p in (U, V, b)]
    with pytest.raises(IndexError, match=r"ids up to 9 .* out of range for the graph \(ranking_margin: "
                                         r"id 9 .* 5 rows\); nothing was trained"):
        fa.train(loss, opt, {neg: np.array([[1, 9]])}, epochs=1)
    neg.value[1] = -3                      # written into the array, not through set_value
    with pytest.raises(IndexError, match="id -3 at position 1"):
        loss.forward()
    for p, value in zip((U, V, b), before):
        np.testing.assert_array_equal(p.value, value)


@pytest.mark.parametrize("leaf, bad", [(0, 7), (1, 5), (2, 5), (0, -1), (2, -1)])
@pytest.mark.parametrize("op", ["ranking_margin", "ranking_loss"])
def test_one_triple_with_an_id_just_out_of_range_fails_the_replay(op, leaf, bad):
    """One triple's ids are compared without the general check's calls: the first id out
    of range (the table's row count, or -1) still fails forward and backward, nothing written."""
    U, V, b = tables()                                   # 7 users, 5 items
    ids = [fa.IndexInput([1]), fa.IndexInput([2]), fa.IndexInput([3])]
    loss = fa.sum(getattr(fa, op)(U, ids[0], V, ids[1], ids[2], item_bias=b))
    before = [p.value.copy() for p in (U, V, b)]
    ids[leaf].value[0] = bad                             # written into the array, not through set_value
    with pytest.raises(IndexError, match=f"{op}: id {bad} at position 0"):
        loss.forward()
    with pytest.raises(IndexError, match=f"{op}: id {bad} at position 0"):
        loss.backward()
    for p, value in zip((U, V, b), before):
        np.testing.assert_array_equal(p.value, value)
        assert not np.any(p.grad)


def test_an_id_made_bad_between_forward_and_backward_fails_the_backward_before_any_write():
    U, V, b = tables()
    users = fa.IndexInput([0, 1])
    loss = fa.sum(fa.ranking_margin(U, users, V, [3, 4], [1, 2], item_bias=b))
    users.value[0] = 12
    with pytest.raises(IndexError, match="ranking_margin: id 12 at position 0 .* 7 rows"):
        loss.backward()
    for p in (U, V, b):
        assert not np.any(p.grad)


def assert_device_matches_cpu(arrays, build):
    """Run by the kernel emulator (no GPU needed): `build(params, ids, device)`, the output and
    the scalar to backpropagate, gives on the device the CPU's output and gradients."""
    from fastad.cuda import backend
    backend.set_emulation(True)
    try:
        results = []
        for device in (None, "cuda"):
            params = [fa.Parameter(a, dtype=np.float64, device=device) for a in arrays]
            ids = [fa.IndexInput(i, device=device) for i in IDS["rows"]]
            out, scalar = build(params, ids, device)
            scalar.backward()
            results.append([out.numpy()] + [backend.to_host(p.grad) if device else p.grad
                                            for p in params])
        for cpu, dev in zip(*results):
            np.testing.assert_allclose(dev, cpu, rtol=1e-12, atol=1e-13)
    finally:
        backend.set_emulation(None)


@pytest.mark.parametrize("bias_shape", [None, (5,), (5, 1)])
def test_on_a_device_it_is_the_composed_ops(bias_shape):
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(7, 4)), rng.normal(size=(5, 4))]
    if bias_shape is not None:
        arrays.append(rng.normal(size=bias_shape))

    def build(params, ids, device):
        margin = fa.ranking_margin(params[0], ids[0], params[1], ids[1], ids[2],
                                   item_bias=params[2] if bias_shape else None)
        return margin, fa.sum(margin * fa.Input(np.arange(1.0, 5.0), dtype=np.float64, device=device))
    assert_device_matches_cpu(arrays, build)


# ---------------------------------------------------------------- ranking_loss

def composed_loss(U, users, V, pos, neg, b=None, reduction="mean"):
    """What ranking_loss computes in one node: bce_with_logits of the margins against ones."""
    margin = fa.ranking_margin(U, users, V, pos, neg, item_bias=b)
    return fa.nn.bce_with_logits(margin, np.ones(margin.shape, dtype=margin.dtype), reduction=reduction)


@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("case", sorted(IDS))
def test_ranking_loss_is_bce_of_the_margins_bit_for_bit(case, reduction, with_bias, f64):
    users, pos, neg = IDS[case]
    results = []
    for build in (composed_loss, fa.ranking_loss):
        U, V, b = tables(f64)
        loss = build(U, fa.IndexInput(users), V, fa.IndexInput(pos), fa.IndexInput(neg),
                     b if with_bias else None, reduction=reduction)
        seed = np.linspace(-1.5, 2.0, loss.size).reshape(loss.shape) if reduction == "none" else 0.75
        loss.backward(np.asarray(seed, dtype=loss.dtype))
        value = loss.value.copy()
        results.append((value, loss.shape, U.grad, V.grad, b.grad))
    assert_fused_matches_composed(results, np.shape(users) if reduction == "none" else (), f64)
    if case == "empty" and reduction == "mean":
        assert np.isnan(results[1][0])          # the mean of no losses, as bce_with_logits gives


def test_ranking_loss_gradients_match_finite_differences():
    users, pos, neg = ([0, 3, 3, 6], [1, 2, 4, 1], [2, 1, 0, 1])
    rng = np.random.default_rng(2)
    weights = rng.normal(size=4)
    start = (rng.normal(size=(7, 3)), rng.normal(size=(5, 3)), rng.normal(size=5))
    assert fa.gradcheck(lambda U, V, b: fa.ranking_loss(U, users, V, pos, neg, item_bias=b), *start)
    assert fa.gradcheck(lambda U, V, b: fa.sum(fa.ranking_loss(U, users, V, pos, neg, item_bias=b,
                                                               reduction="none") * weights), *start)


@pytest.mark.parametrize("regularization", [0.0, 0.3])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ranking_loss_on_a_device_is_the_composed_ops(reduction, regularization):
    rng = np.random.default_rng(3)
    arrays = [rng.normal(size=(7, 4)), rng.normal(size=(5, 4)), rng.normal(size=5)]

    def build(params, ids, device):
        loss = fa.ranking_loss(params[0], ids[0], params[1], ids[1], ids[2], item_bias=params[2],
                               reduction=reduction, regularization=regularization)
        return loss, fa.sum(loss * 1.5)
    assert_device_matches_cpu(arrays, build)


# ---------------------------------------------------------------- ranking_loss's regularization

def penalized_loss(U, users, V, pos, neg, b=None, reduction="mean", regularization=0.0):
    """ranking_loss with its L2 term composed: each triple's loss plus r/2 * its rows' squares."""
    rows = [fa.take(U, users), fa.take(V, pos), fa.take(V, neg)]
    penalty = sum(fa.vector_dot(row, row) for row in rows)
    if b is not None:
        penalty = penalty + sum(fa.reshape(fa.take(b, ids) * fa.take(b, ids), penalty.shape)
                                for ids in (pos, neg))
    loss = composed_loss(U, users, V, pos, neg, b, reduction="none") + penalty * (regularization / 2)
    return {"none": loss, "sum": fa.sum(loss), "mean": fa.mean(loss)}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_regularization_adds_the_l2_term_of_each_triples_rows(reduction, with_bias):
    users, pos, neg = IDS["rows"]
    results = []
    for build in (penalized_loss, fa.ranking_loss):
        U, V, b = tables()
        loss = build(U, fa.IndexInput(users), V, fa.IndexInput(pos), fa.IndexInput(neg),
                     b if with_bias else None, reduction=reduction, regularization=0.3)
        seed = np.linspace(-1.5, 2.0, loss.size).reshape(loss.shape) if reduction == "none" else 0.75
        loss.backward(np.asarray(seed, dtype=loss.dtype))
        results.append([loss.value.copy(), U.grad, V.grad, b.grad])
    for theirs, ours in zip(*results):
        if theirs is None:
            assert ours is None
        else:
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_regularized_gradients_match_finite_differences():
    users, pos, neg = ([0, 3, 3, 6], [1, 2, 4, 1], [2, 1, 0, 1])
    rng = np.random.default_rng(2)
    weights = rng.normal(size=4)
    start = (rng.normal(size=(7, 3)), rng.normal(size=(5, 3)), rng.normal(size=5))
    assert fa.gradcheck(lambda U, V, b: fa.ranking_loss(U, users, V, pos, neg, item_bias=b,
                                                        regularization=0.2), *start)
    assert fa.gradcheck(lambda U, V, b: fa.sum(fa.ranking_loss(
        U, users, V, pos, neg, item_bias=b, reduction="none", regularization=0.2) * weights), *start)


def implicit_step(U, V, b, user, pos, neg, lr, reg):
    """One triple's update as implicit's bpr.pyx takes it (its item bias is its item factors'
    last column; z = 1 - sigmoid(margin)), in float64 numpy."""
    U, V, b = U.copy(), V.copy(), b.copy()
    z = 1 / (1 + np.exp(U[user] @ (V[pos] - V[neg]) + b[pos] - b[neg]))
    u, p, n = U[user].copy(), V[pos].copy(), V[neg].copy()
    U[user] += lr * (z * (p - n) - reg * u)
    V[pos] += lr * (z * u - reg * p)
    V[neg] += lr * (-z * u - reg * n)
    b[pos] += lr * (z - reg * b[pos])
    b[neg] += lr * (-z - reg * b[neg])
    return U, V, b


@pytest.mark.parametrize("batch", [1, 3])
def test_one_sgd_step_is_implicits_regularized_update(batch):
    """At one triple a step (the fused step inside backward) and in a batch of distinct rows
    (the general path), plain SGD on ranking_loss(..., regularization=r, reduction="sum")
    takes implicit's update, r * row subtracted from each touched row's step."""
    rng = np.random.default_rng(7)
    U0, V0, b0 = rng.normal(0, 0.3, (6, 5)), rng.normal(0, 0.3, (9, 5)), rng.normal(0, 0.3, 9)
    triples = ([1, 4, 0][:batch], [2, 5, 7][:batch], [3, 6, 8][:batch])
    U, V, b = (fa.Parameter(a, dtype=np.float64) for a in (U0, V0, b0))
    leaves = [fa.IndexInput(ids) for ids in triples]
    loss = fa.ranking_loss(U, leaves[0], V, leaves[1], leaves[2], item_bias=b, reduction="sum",
                           regularization=0.25)
    fa.train(loss, fa.optim.SGD([U, V, b], lr=0.1), {leaf: [ids] for leaf, ids in zip(leaves, triples)})
    expected = (U0, V0, b0)
    for user, pos, neg in zip(*triples):
        expected = implicit_step(*expected, user, pos, neg, lr=0.1, reg=0.25)
    for ours, theirs in zip((U, V, b), expected):
        np.testing.assert_allclose(ours.value, theirs, rtol=1e-13, atol=1e-15)
    assert not np.array_equal(U.value, implicit_step(U0, V0, b0, 1, 2, 3, lr=0.1, reg=0.0)[0])


@pytest.mark.parametrize("f64", [True, False])
def test_the_regularized_fused_step_is_the_general_paths(f64):
    """One triple a step (the fused step) and the same steps through the optimizer (Adagrad
    with no accumulator does not fuse; SGD on a graph of composed ops does neither): with rows
    that coincide (one table for users and items), both take the gradient at the forward's
    values."""
    rng = np.random.default_rng(4)
    dtype = np.float64 if f64 else np.float32
    triples = [rng.integers(0, 5, 200) for _ in range(3)]
    results = []
    for fused in (False, True):
        W = fa.Parameter(np.random.default_rng(5).normal(0, 0.1, (5, 4)), dtype=dtype)
        leaves = [fa.IndexInput([0]) for _ in range(3)]
        if fused:
            loss = fa.ranking_loss(W, leaves[0], W, leaves[1], leaves[2], reduction="sum",
                                   regularization=0.2)
        else:
            loss = penalized_loss(W, leaves[0], W, leaves[1], leaves[2], reduction="sum",
                                  regularization=0.2)
        fa.train(loss, fa.optim.SGD([W], lr=0.1),
                 {leaf: ids.reshape(-1, 1) for leaf, ids in zip(leaves, triples)})
        results.append(W.value.copy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5 if not f64 else 1e-12, atol=1e-6)


@pytest.mark.parametrize("bad, error", [(-0.1, ValueError), (float("nan"), ValueError),
                                        ("0.1", TypeError), (None, TypeError)])
def test_bad_regularization_is_a_clear_error(bad, error):
    U, V, b = tables()
    with pytest.raises(error, match="ranking_loss: regularization"):
        fa.ranking_loss(U, [0], V, [1], [2], regularization=bad)
