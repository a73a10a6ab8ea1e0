"""embedding_bag(per_sample_weights=): weighted bags (a value per id) as torch's, their
gradients to the table and to the weights, in fa.train through BagSampler(weights=); and
1-D tables (a number a row: a linear model's), bags of shape (bags,)."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from vjp import check_vjp


def _case(seed=0, rows=7, dim=3):
    """A float64 table, ragged bags with a repeated id and empty bags, and a weight per id."""
    rng = np.random.default_rng(seed)
    table = rng.normal(size=(rows, dim))
    ids = np.array([4, 1, 4, 4, 0, 2, 6, 1], dtype=np.int64)
    offsets = np.array([0, 0, 3, 3, 6, 8], dtype=np.int64)
    return table, ids, offsets, rng.normal(size=ids.size)


def _reference(table, ids, bounds, weights):
    """The weighted bags in numpy: bag b = sum over its k of weights[k] * table[ids[k]]."""
    out = np.zeros((len(bounds) - 1, table.shape[1]))
    for b in range(len(bounds) - 1):
        for k in range(bounds[b], bounds[b + 1]):
            out[b] += weights[k] * table[ids[k]]
    return out


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_weighted_bags_and_their_gradients(sparse, include_last_offset):
    table, ids, offsets, weights = _case()
    if include_last_offset:
        offsets = offsets[:-1]            # the last bag ends at 6: ids 6 and 7 are in none
    E, w = fa.Parameter(table, dtype=np.float64), fa.Parameter(weights, dtype=np.float64)
    out = fa.embedding_bag(E, fa.IndexInput(ids), fa.IndexInput(offsets), mode="sum",
                           include_last_offset=include_last_offset, sparse=sparse,
                           per_sample_weights=w)
    bounds = offsets if include_last_offset else np.append(offsets, ids.size)
    np.testing.assert_allclose(out.value, _reference(table, ids, bounds, weights), rtol=1e-13)
    cot = np.random.default_rng(1).normal(size=out.shape)
    out.backward(cot)
    expected_table, expected_w = np.zeros_like(table), np.zeros_like(weights)
    for b in range(len(bounds) - 1):
        for k in range(bounds[b], bounds[b + 1]):
            expected_table[ids[k]] += weights[k] * cot[b]
            expected_w[k] = cot[b] @ table[ids[k]]
    np.testing.assert_allclose(E.grad, expected_table, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(w.grad, expected_w, rtol=1e-13, atol=1e-15)
    if include_last_offset:     # positions past the last bag's end: no gradient
        np.testing.assert_array_equal(w.grad[6:], [0, 0])


def test_matches_torch():
    torch = pytest.importorskip("torch")
    table, ids, offsets, weights = _case(seed=2)
    E, w = fa.Parameter(table, dtype=np.float64), fa.Parameter(weights, dtype=np.float64)
    out = fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=w)
    tE = torch.tensor(table, requires_grad=True)
    tw = torch.tensor(weights, requires_grad=True)
    expected = torch.nn.functional.embedding_bag(torch.tensor(ids), tE, torch.tensor(offsets),
                                                 mode="sum", per_sample_weights=tw)
    np.testing.assert_allclose(out.value, expected.detach().numpy(), rtol=1e-13, atol=1e-15)
    cot = np.random.default_rng(3).normal(size=out.shape)
    out.backward(cot)
    expected.backward(torch.tensor(cot))
    np.testing.assert_allclose(E.grad, tE.grad.numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=1e-13, atol=1e-15)


def test_finite_differences_of_the_table_and_the_weights():
    table, ids, offsets, weights = _case(seed=4)
    check_vjp(lambda t: fa.embedding_bag(t, ids, offsets, mode="sum", per_sample_weights=weights,
                                         sparse=False), table)
    E = fa.Input(table, dtype=np.float64)
    check_vjp(lambda v: fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=v),
              weights)
    fixed = ids[:6].reshape(2, 3)                 # 2-D ids: one bag a row, weights of that shape
    check_vjp(lambda v: fa.embedding_bag(E, fixed, mode="sum", per_sample_weights=v),
              weights[:6].reshape(2, 3))


def test_weights_from_an_op_and_constant_weights():
    table, ids, offsets, weights = _case(seed=5)
    E = fa.Parameter(table, dtype=np.float64)
    raw = fa.Parameter(weights, dtype=np.float64)
    out = fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=fa.exp(raw))
    out.backward(np.ones(out.shape))
    expected_w = np.array([table[i].sum() for i in ids]) * np.exp(weights)
    np.testing.assert_allclose(raw.grad, expected_w, rtol=1e-13)
    constant = fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=np.exp(weights))
    np.testing.assert_allclose(constant.value, out.value, rtol=1e-13)    # numbers, as an Input
    assert constant.dtype == np.float64


def test_replay_after_set_value_of_the_weights():
    table, ids, offsets, weights = _case(seed=6)
    E = fa.Parameter(table.astype(np.float32))
    w = fa.Input(weights.astype(np.float32))
    ix = fa.IndexInput(ids)
    out = fa.embedding_bag(E, ix, offsets, mode="sum", per_sample_weights=w)
    other = np.random.default_rng(7).normal(size=ids.size).astype(np.float32)
    w.set_value(other)
    ix.set_value(ids[::-1].copy())
    out.forward()
    bounds = np.append(offsets, ids.size)
    np.testing.assert_allclose(out.value, _reference(table, ids[::-1], bounds, other), rtol=1e-5,
                               atol=1e-6)


def test_bad_weights():
    table, ids, offsets, weights = _case()
    E = fa.Parameter(table, dtype=np.float64)
    with pytest.raises(ValueError, match=r"per_sample_weights needs mode='sum' \(got 'mean'\)"):
        fa.embedding_bag(E, ids, offsets, mode="mean", per_sample_weights=weights)
    with pytest.raises(ValueError, match=r"per_sample_weights has shape \(7,\), expected the "
                                         r"ids' shape \(8,\)"):
        fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=weights[:7])
    with pytest.raises(TypeError, match="mixed dtypes"):
        fa.embedding_bag(E, ids, offsets, mode="sum",
                         per_sample_weights=fa.Input(weights.astype(np.float32)))
    with pytest.raises(TypeError, match="per_sample_weights is an IndexInput"):
        fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=fa.IndexInput(ids))
    with pytest.raises(TypeError, match="per_sample_weights must be a float Variable or numbers"):
        fa.embedding_bag(E, ids, offsets, mode="sum", per_sample_weights=["a"] * 8)


def _weighted_model(dtype=np.float64, capacity=6, seed=0):
    """Logistic regression over weighted bags: bce(sum of w_k * W[ids_k] + b, y)."""
    rng = np.random.default_rng(seed)
    W = fa.Parameter(rng.normal(size=(20, 1)) * 0.1, dtype=dtype)
    b = fa.Parameter(np.zeros(1), dtype=dtype)
    ids, offs = fa.IndexInput(np.zeros(capacity, np.int64)), fa.IndexInput([0, 0])
    vals, y = fa.Input(np.zeros(capacity), dtype=dtype), fa.Input(np.zeros((1, 1)), dtype=dtype)
    bag = fa.embedding_bag(W, ids, offs, mode="sum", include_last_offset=True,
                           per_sample_weights=vals)
    return (W, b), fa.nn.bce_with_logits(bag + b, y), (ids, offs, vals, y)


def _bags(seed, n=30):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 7, n)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    ids = rng.integers(0, 20, offsets[-1])
    values = rng.uniform(-2, 2, offsets[-1])
    return ids, offsets, values, (rng.random(n) < 0.5).astype(np.float64)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), optimizer=st.sampled_from(["sgd", "adagrad"]))
def test_bag_sampler_weights_train_as_a_python_loop(seed, optimizer):
    """fa.train over BagSampler(weights=) gives the weights of a Python loop that sets each
    bag's ids, offsets and values by hand: forward, backward, step, bit for bit."""
    ids, offsets, values, labels = _bags(seed)
    make = {"sgd": lambda p: fa.optim.SGD(p, lr=0.1),
            "adagrad": lambda p: fa.optim.Adagrad(p, lr=0.1)}[optimizer]
    params, loss, (ix, off, vals, y) = _weighted_model()
    sampler = fa.data.BagSampler(ix, off, ids, offsets, {y: labels[:, None, None]},
                                 weights_leaf=vals, weights=values)
    fa.train(loss, make(list(params)), sampler)
    hand_params, hand_loss, (hix, hoff, hvals, hy) = _weighted_model()
    opt = make(list(hand_params))
    for r in range(labels.size):
        lo, hi = offsets[r], offsets[r + 1]
        ids_row, vals_row = np.zeros(6, np.int64), np.zeros(6)
        ids_row[:hi - lo], vals_row[:hi - lo] = ids[lo:hi], values[lo:hi]
        hix.set_value(ids_row)
        hoff.set_value([0, hi - lo])
        hvals.set_value(vals_row)
        hy.set_value([[labels[r]]])
        hand_loss.forward()
        hand_loss.backward()
        opt.step()
        opt.zero_grad()
    for trained, by_hand in zip(params, hand_params):
        np.testing.assert_array_equal(trained.value, by_hand.value)


def test_bag_sampler_weights_bad_input():
    ids, offsets, values, labels = _bags(1)
    params, loss, (ix, off, vals, y) = _weighted_model()
    feeds = {y: labels[:, None, None]}
    with pytest.raises(ValueError, match="weights_leaf and weights come together"):
        fa.data.BagSampler(ix, off, ids, offsets, feeds, weights=values)
    with pytest.raises(ValueError, match=r"weights must be 1-D with one value per id"):
        fa.data.BagSampler(ix, off, ids, offsets, feeds, weights_leaf=vals, weights=values[1:])
    with pytest.raises(ValueError, match=r"weights_leaf has shape \(5,\), expected ids_leaf's"):
        fa.data.BagSampler(ix, off, ids, offsets, feeds, weights_leaf=fa.Input(np.zeros(5)),
                           weights=values)
    with pytest.raises(TypeError, match="weights_leaf must be an Input"):
        fa.data.BagSampler(ix, off, ids, offsets, feeds, weights_leaf=fa.IndexInput([0] * 6),
                           weights=values)
    bad = values.copy()
    bad[3] = np.nan
    with pytest.raises(ValueError, match=r"weights\[3\] is nan; every weight must be finite"):
        fa.data.BagSampler(ix, off, ids, offsets, feeds, weights_leaf=vals, weights=bad)


@pytest.mark.parametrize("weighted", [False, True])
def test_a_1d_table_is_a_table_of_one_column(weighted):
    """A (rows,) table gives (bags,) sums: the values and gradients of the (rows, 1) table."""
    table, ids, offsets, weights = _case(seed=8, dim=1)
    per = weights if weighted else None
    flat, column = fa.Parameter(table[:, 0], dtype=np.float64), fa.Parameter(table, dtype=np.float64)
    out_flat = fa.embedding_bag(flat, ids, offsets, mode="sum", per_sample_weights=per)
    out_column = fa.embedding_bag(column, ids, offsets, mode="sum", per_sample_weights=per)
    assert out_flat.shape == (offsets.size,) and out_column.shape == (offsets.size, 1)
    np.testing.assert_array_equal(out_flat.value, out_column.value[:, 0])
    cot = np.random.default_rng(9).normal(size=offsets.size)
    out_flat.backward(cot)
    out_column.backward(cot[:, None])
    np.testing.assert_array_equal(flat.grad, column.grad[:, 0])
    assert flat.is_sparse_grad
    check_vjp(lambda t: fa.embedding_bag(t, ids, offsets, mode="mean", sparse=False), table[:, 0])


def test_a_linear_model_over_a_1d_table_trains_as_over_a_column():
    """fa.train of bce(sum of w_k W[ids_k] + b, y) with W (rows,) and labels (N, 1): the weights
    of the same model over W (rows, 1) with labels (N, 1, 1), bit for bit."""
    ids, offsets, values, labels = _bags(3)
    trained = []
    for shape in ((20,), (20, 1)):
        W = fa.Parameter(np.zeros(shape), dtype=np.float64)
        b = fa.Parameter(np.zeros(1), dtype=np.float64)
        ix, off = fa.IndexInput(np.zeros(6, np.int64)), fa.IndexInput([0, 0])
        vals = fa.Input(np.zeros(6), dtype=np.float64)
        y = fa.Input(np.zeros((1,) * len(shape)), dtype=np.float64)
        bag = fa.embedding_bag(W, ix, off, mode="sum", include_last_offset=True,
                               per_sample_weights=vals)
        loss = fa.nn.bce_with_logits(bag + b, y)
        fa.train(loss, fa.optim.Adagrad([W, b], lr=0.1), fa.data.BagSampler(
            ix, off, ids, offsets, {y: labels.reshape((-1,) + (1,) * len(shape))},
            weights_leaf=vals, weights=values), epochs=2)
        trained.append(W.numpy().reshape(-1))
    np.testing.assert_array_equal(trained[0], trained[1])


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_bag_sampler_pad_fills_the_leaves_past_each_bag(seed):
    """With pad=, every example's ids leaf holds its bag's ids then the padding id, and the
    weights leaf its values then zeros, whatever the bags before it (longer or shorter)."""
    ids, offsets, values, labels = _bags(seed)
    pad = 20
    rows = fa.Parameter(np.arange(21, dtype=np.float64)[:, None], dtype=np.float64)
    ix, off = fa.IndexInput(np.zeros(6, np.int64)), fa.IndexInput([0, 0])
    vals = fa.Input(np.zeros(6), dtype=np.float64)
    seen = fa.concat([fa.reshape(fa.embedding(rows, ix), (6,)), vals, fa.embedding_bag(
        rows, ix, off, mode="sum", include_last_offset=True).reshape((1,))])
    sampler = fa.data.BagSampler(ix, off, ids, offsets, weights_leaf=vals, weights=values, pad=pad)
    got = fa.predict(seen, sampler)
    for r in range(labels.size):
        lo, hi = offsets[r], offsets[r + 1]
        np.testing.assert_array_equal(got[r, :6], np.r_[ids[lo:hi], [pad] * (6 - hi + lo)])
        np.testing.assert_array_equal(got[r, 6:12], np.r_[values[lo:hi], [0.0] * (6 - hi + lo)])
        assert got[r, 12] == ids[lo:hi].sum()
    with pytest.raises(IndexError, match="ids up to 20"):          # pad is an id of the table
        ix, off = fa.IndexInput(np.zeros(6, np.int64)), fa.IndexInput([0, 0])
        bags = fa.embedding_bag(fa.Parameter(np.zeros((20, 1))), ix, off, mode="sum",
                                include_last_offset=True)
        fa.predict(bags, fa.data.BagSampler(ix, off, ids, offsets, pad=pad))
    with pytest.raises(ValueError, match="pad"):
        fa.data.BagSampler(ix, off, ids, offsets, pad=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode", ["sum", "weighted", "mean"])
@pytest.mark.parametrize("dim", [1, 7, 16, 83, 130])
def test_bag_loops_give_the_values_of_the_plain_loops(dtype, mode, dim):
    """The forward's tiles of registers (bag_sums.h) give the values of adding each row's
    products to a zero row one row after another, bit for bit, at every width (the tiles of
    8 and 2 vectors and the elements past them), an empty bag zeros; the backward's rows are
    the bag's gradient row times the id's weight (a mean's 1 / its size), one product each."""
    rng = np.random.default_rng(dim)
    table = rng.normal(size=(50, dim)).astype(dtype)
    ids = rng.permutation(50)[:23]          # distinct: each row's gradient is one bag's
    offsets = np.array([0, 1, 1, 9, 23], dtype=np.int64)
    weights = rng.normal(size=ids.size).astype(dtype) if mode == "weighted" else None
    E = fa.Parameter(table, dtype=dtype)
    out = fa.embedding_bag(E, fa.IndexInput(ids), fa.IndexInput(offsets), mode="mean" if mode == "mean" else "sum",
                           include_last_offset=True,
                           per_sample_weights=None if weights is None else fa.Input(weights, dtype=dtype))
    grad = rng.normal(size=out.shape).astype(dtype)
    out.backward(grad)
    expected = np.zeros((offsets.size - 1, dim), dtype)
    expected_grad = np.zeros_like(table)
    for b in range(offsets.size - 1):
        size = offsets[b + 1] - offsets[b]
        for k in range(offsets[b], offsets[b + 1]):
            expected[b] = expected[b] + (table[ids[k]] if weights is None else weights[k] * table[ids[k]])
            scale = weights[k] if weights is not None else dtype(1 / size) if mode == "mean" else dtype(1)
            expected_grad[ids[k]] = grad[b] * scale
        if mode == "mean" and size > 1:
            expected[b] = expected[b] * dtype(1 / size)
    np.testing.assert_array_equal(out.value, expected)
    np.testing.assert_array_equal(np.asarray(E.grad), expected_grad)
