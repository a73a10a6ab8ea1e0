"""fastad.train (the compiled per-example loop) and the BPR model."""
import numpy as np
import pytest

import fastad as fa
from loop_helpers import train_in_python


def small_bpr(dtype=np.float64, seed=1):
    model = fa.models.BPR(40, 30, dim=4, seed=seed, dtype=dtype)
    loss, feeds = model.example_graph()
    return model, loss, feeds


def triples(n=500, seed=0):
    train, test = fa.data.planted_preferences(40, 30, n_train=n, n_test=2000, rank=3, seed=seed)
    return train, test


@pytest.mark.parametrize("opt_cls,kw", [(fa.optim.SGD, {"lr": 0.1}), (fa.optim.Adagrad, {"lr": 0.1}),
                                        (fa.optim.Adam, {"lr": 0.01}),
                                        (fa.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
                                        (fa.optim.SGD, {"lr": 0.1, "weight_decay": 0.01})])
def test_train_matches_the_python_loop_exactly(opt_cls, kw):
    train, _ = triples(200)
    m1, loss1, feeds1 = small_bpr()
    m2, loss2, feeds2 = small_bpr()
    opt1 = opt_cls(m1.parameters(), **kw)
    opt2 = opt_cls(m2.parameters(), **kw)
    means = fa.train(loss1, opt1, feeds1(train))
    np.testing.assert_allclose(means, [train_in_python(loss2, opt2, feeds2, train)], rtol=1e-12)
    np.testing.assert_array_equal(m1.U.value, m2.U.value)
    np.testing.assert_array_equal(m1.V.value, m2.V.value)


# A float32 row at 1.0 and two gradient rows of 2**-25 each (lr 1): stepped one row at a time,
# each step is half an ulp and rounds back to 1.0; summed first, the step lands on 1 - 2**-24.
HALF_ULP = 2.0 ** -25
ONE_AFTER_SUMMED_STEP = np.float32(1 - 2.0 ** -24)


def row_gathered_twice(separately):
    """A graph that gathers row 0 of W twice in one example, each time with gradient HALF_ULP:
    by one gather of ids [0, 0], or (separately) by two gathers of [0]; and its feeds for
    three examples."""
    W = fa.Parameter(np.ones((1, 1)), dtype=np.float32)
    scale = fa.Input(np.full((1, 1), HALF_ULP), dtype=np.float32)
    if separately:
        first, second = fa.IndexInput([0]), fa.IndexInput([0])
        feeds = {ix: np.zeros((3, 1), dtype=np.int64) for ix in (first, second)}
        return W, feeds, fa.sum(W[first] * scale) + fa.sum(W[second] * scale)
    both = fa.IndexInput([0, 0])
    return W, {both: np.zeros((3, 2), dtype=np.int64)}, fa.sum(W[both] * scale)


def test_plain_sgd_steps_each_gathered_row_as_backward_produces_it():
    W, feeds, loss = row_gathered_twice(separately=True)
    opt = fa.optim.SGD([W], lr=1.0)
    fa.train(loss, opt, feeds)
    assert W.value[0, 0] == 1.0          # each gather's half-ulp step rounded away: one at a time
    assert opt.state_dict()["state.0.step"] == 3      # the steps are counted as step() counts them
    # A row repeated within one gather is summed first and stepped once, as step() does.
    W, feeds, loss = row_gathered_twice(separately=False)
    fa.train(loss, fa.optim.SGD([W], lr=1.0), feeds)
    assert W.value[0, 0] == np.float32(1 - 3 * 2.0 ** -24)
    for separately in (True, False):
        W, _, loss = row_gathered_twice(separately)
        loss.forward()
        loss.backward()
        fa.optim.SGD([W], lr=1.0).step()
        assert W.value[0, 0] == ONE_AFTER_SUMMED_STEP     # step() after backward sums the rows


def test_a_parameter_read_by_more_than_gathers_takes_the_optimizer_step():
    W = fa.Parameter(np.ones((1, 1)), dtype=np.float32)
    ix = fa.IndexInput([0])
    scale = fa.Input(np.full((1, 1), HALF_ULP), dtype=np.float32)
    loss = fa.sum(W[ix] * scale) + fa.sum(W * scale)      # a gather and a dense read of W
    fa.train(loss, fa.optim.SGD([W], lr=1.0), {ix: np.zeros((1, 1), dtype=np.int64)})
    assert W.value[0, 0] == ONE_AFTER_SUMMED_STEP


def test_rows_stepped_in_backward_move_only_the_optimizers_parameters_at_the_scheduled_rate():
    train, _ = triples(300)
    m1, loss1, feeds1 = small_bpr()
    m2, loss2, feeds2 = small_bpr()
    V_before = m1.V.value.copy()
    opt1, opt2 = fa.optim.SGD([m1.U], lr=0.2), fa.optim.SGD([m2.U], lr=0.2)
    decay1, decay2 = (fa.optim.LinearDecay(o, min_lr=0.01, total_steps=300) for o in (opt1, opt2))
    fa.train(loss1, opt1, feeds1(train), lr_schedule=decay1)
    train_in_python(loss2, opt2, feeds2, train, lr_at=decay2.lr_at)
    np.testing.assert_array_equal(m1.V.value, V_before)      # V is not the optimizer's
    np.testing.assert_array_equal(m1.U.value, m2.U.value)
    assert not np.array_equal(m1.U.value, small_bpr()[0].U.value)


def test_after_an_error_in_the_loop_backward_keeps_gradients_again():
    W = fa.Parameter(np.ones((3, 2)))
    ix, x = fa.IndexInput([0]), fa.Input(np.ones(1))
    loss = fa.sum(W[ix] * fa.log(x))
    with fa.detect_anomaly(), pytest.raises(FloatingPointError, match="row 1 of the feeds"):
        fa.train(loss, fa.optim.SGD([W], lr=0.1), {ix: np.array([[0], [1]]), x: np.array([2.0, -1.0])})
    assert W.value[0, 0] == pytest.approx(1 - 0.1 * np.log(2.0))       # the first example was trained
    before = W.value.copy()
    ix.set_value([2])
    x.set_value([np.e])
    loss.forward()
    loss.backward()
    np.testing.assert_array_equal(W.value, before)        # backward alone moves nothing
    np.testing.assert_allclose(W.grad, [[0, 0], [0, 0], [1, 1]])


def test_training_learns_the_planted_preferences():
    train, test = triples(20_000)
    model, loss, feeds = small_bpr(np.float32)
    before = model.auc(test)
    means = fa.train(loss, fa.optim.SGD(model.parameters(), lr=0.1), feeds(train), epochs=3,
                     shuffle=True, seed=0)
    assert len(means) == 3 and means[2] < means[0]
    assert model.auc(test) > max(0.8, before + 0.2)


def test_progress_is_reported_and_a_python_optimizer_works():
    train, _ = triples(250)
    model, loss, feeds = small_bpr()
    seen = []

    class PlainSGD:
        def __init__(self, params):
            self.params = params

        def step(self):
            for p in self.params:
                p.value[...] -= 0.1 * p.grad

        def zero_grad(self):
            for p in self.params:
                p.zero_grad()

    fa.train(loss, PlainSGD(model.parameters()), feeds(train), epochs=2,
             progress=lambda done, per_second: seen.append(done), report_every=100)
    assert seen == [100, 200, 300, 400, 500]


def test_float_feeds_for_inputs():
    w = fa.Parameter(np.zeros(1), dtype=np.float64)
    x, y = fa.Input(np.zeros(1), dtype=np.float64), fa.Input(np.zeros(1), dtype=np.float64)
    loss = fa.sum(fa.square(x * w - y))
    xs = np.linspace(-1, 1, 400)
    fa.train(loss, fa.optim.SGD([w], lr=0.1), {x: xs, y: 3 * xs}, epochs=20)
    assert w.item() == pytest.approx(3.0, abs=1e-3)


def test_bad_feeds_are_rejected_clearly():
    model, loss, feeds = small_bpr()
    opt = fa.optim.SGD(model.parameters(), lr=0.1)
    u, i, j = feeds(triples(10)[0]).keys()
    good = np.zeros(10, dtype=np.int64)
    with pytest.raises(ValueError, match="different numbers of examples"):
        fa.train(loss, opt, {u: good, i: good, j: np.zeros(9, dtype=np.int64)})
    with pytest.raises(TypeError, match="must hold integers"):
        fa.train(loss, opt, {u: good.astype(float), i: good, j: good})
    with pytest.raises(IndexError, match="negative id"):
        fa.train(loss, opt, {u: good - 1, i: good, j: good})
    with pytest.raises(ValueError, match=r"does not fit a leaf of shape \(1,\)"):
        fa.train(loss, opt, {u: np.zeros((10, 2), dtype=np.int64), i: good, j: good})
    with pytest.raises(IndexError, match="id 30 at position 0"):
        fa.train(loss, opt, {u: good, i: good + 30, j: good})
    with pytest.raises(ValueError, match="empty"):
        fa.train(loss, opt, {})
    with pytest.raises(TypeError, match="feeds must be keyed by Input or IndexInput"):
        fa.train(loss, opt, {loss: good})
    with pytest.raises(TypeError, match="one-element"):
        fa.train(model.U * 1.0, opt, {u: good})
    with pytest.raises(TypeError, match="step\\(\\) and zero_grad\\(\\)"):
        fa.train(loss, object(), {u: good})


def _csr():
    import scipy.sparse as sp
    return sp.csr_matrix(np.eye(40, 30))


def test_a_feed_for_a_leaf_outside_the_loss_is_refused_and_nothing_trains():
    model, loss, feeds = small_bpr()
    opt = fa.optim.SGD(model.parameters(), lr=0.1)
    u, i, j = feeds(triples(10)[0]).keys()
    stray = fa.IndexInput([0])                       # in no graph
    ids = np.zeros(10, dtype=np.int64)
    before = model.U.numpy()
    with pytest.raises(ValueError, match=r"leaf 3 of FeedSampler, IndexInput\(shape=\(1,\)\), is "
                                         r"not in the loss's graph"):
        fa.train(loss, opt, {u: ids, i: ids, j: ids, stray: ids})
    with pytest.raises(ValueError, match="leaf 0 of FeedSampler"):
        fa.train(loss, opt, {stray: ids})
    sampler = fa.data.PairwiseSampler(_csr(), fa.IndexInput([0]), i, j, seed=0)
    with pytest.raises(ValueError, match="leaf 0 of PairwiseSampler"):
        fa.train(loss, opt, sampler)
    np.testing.assert_array_equal(model.U.value, before)


def test_feeds_with_no_rows_are_refused():
    model, loss, feeds = small_bpr()
    opt = fa.optim.SGD(model.parameters(), lr=0.1)
    u, i, j = feeds(triples(10)[0]).keys()
    empty = np.zeros(0, dtype=np.int64)
    with pytest.raises(ValueError, match=r"FeedSampler: the feeds have 0 rows \(arrays of shape \(0,\)\)"):
        fa.train(loss, opt, {u: empty, i: empty, j: empty})
    with pytest.raises(ValueError, match="0 rows"):
        fa.data.FeedSampler({u: empty})


def test_embedding_bag_offsets_fed_per_example():
    # offsets are not ids into a table (a leaf full of the largest offset is no valid
    # partition): their op checks them on every example; the ids are still checked up front
    rng = np.random.default_rng(0)
    E = fa.Parameter(rng.normal(size=(8, 2)), dtype=np.float64)
    ids, offsets = fa.IndexInput([0, 0, 0]), fa.IndexInput([0, 1])
    loss = fa.sum(fa.embedding_bag(E, ids, offsets, mode="sum") * fa.Input([[1.0, 2.0], [3.0, 4.0]],
                                                                           dtype=np.float64))
    fed_ids, fed_offsets = np.array([[1, 2, 3], [4, 4, 5]]), np.array([[0, 1], [0, 3]])
    expected = E.numpy().copy()
    for row_ids, row_offsets in zip(fed_ids, fed_offsets):       # the same steps, by hand
        bags = np.split(row_ids, row_offsets[1:])
        for bag, weight in zip(bags, ([1.0, 2.0], [3.0, 4.0])):
            for k in bag:
                expected[k] -= 0.1 * np.array(weight)
    fa.train(loss, fa.optim.SGD([E], lr=0.1), {ids: fed_ids, offsets: fed_offsets})
    np.testing.assert_allclose(E.value, expected)
    with pytest.raises(ValueError, match=r"offsets\[1\] = 4 is past the end of the 3 ids"):
        fa.train(loss, fa.optim.SGD([E], lr=0.1), {ids: fed_ids, offsets: np.array([[0, 1], [0, 4]])})
    before = E.numpy().copy()
    with pytest.raises(IndexError, match="ids up to 8 .*nothing was trained"):
        fa.train(loss, fa.optim.SGD([E], lr=0.1), {ids: fed_ids + 3, offsets: fed_offsets})
    np.testing.assert_array_equal(E.value, before)


def test_errors_inside_the_loop_name_the_feed_row_and_bad_arguments_are_clear():
    E = fa.Parameter(np.zeros((5, 2)))
    ix = fa.IndexInput([0])
    loss = fa.sum(E[ix])
    opt = fa.optim.SGD([E], lr=1.0)
    with pytest.raises(IndexError, match=r"ids up to 9 \(row 2 of its feed\) into leaf 0 .*take: id 9.*nothing was trained"):
        fa.train(loss, opt, {ix: np.array([1, 2, 9, 3])})
    assert not E.value.any() and ix.value.tolist() == [0]     # checked before the first example
    nan_feed = fa.Input(np.ones(1))
    nan_loss = fa.sum(E[ix] + fa.log(nan_feed))
    with fa.detect_anomaly(), pytest.raises(FloatingPointError, match="epoch 1, row 2 of the feeds"):
        fa.train(nan_loss, opt, {ix: np.zeros(4, dtype=np.int64), nan_feed: np.array([1.0, 2.0, -1.0, 3.0])})
    with pytest.raises(TypeError, match="feeds must be a dict"):
        fa.train(loss, opt, [(ix, np.zeros(3, dtype=np.int64))])
    with pytest.raises(TypeError, match="epochs must be an integer"):
        fa.train(loss, opt, {ix: np.zeros(3, dtype=np.int64)}, epochs=2.7)
    with pytest.raises(IndexError, match="too large for int64"):
        fa.train(loss, opt, {ix: np.array([2**63 + 1], dtype=np.uint64)})
    x, row = fa.Input(np.zeros(2)), fa.IndexInput([0])
    with pytest.raises(TypeError, match="must hold real numbers"):
        fa.train(fa.sum(x * E[row]), opt, {x: np.array([["a", "b"]]), row: np.zeros(1, dtype=np.int64)})


def test_the_fused_row_update_is_what_the_optimizer_offers_not_its_type():
    """Two gathers of one row, each stepping it by less than half an ulp: fused inside
    backward (each gather's step alone) the row stays 1.0, stepped after backward (one step
    of their sum) it moves. A subclass of SGD offers the fused update as SGD does."""
    class MySGD(fa.optim.SGD):
        pass

    def trained(make_optimizer):
        W = fa.Parameter(np.ones((2, 1), dtype=np.float32))
        a, b = fa.IndexInput([0]), fa.IndexInput([0])
        loss = (W[a] * 2e-8).sum() + (W[b] * 2e-8).sum()
        row0 = np.zeros((1, 1), np.int64)
        fa.train(loss, make_optimizer([W]), {a: row0, b: row0})
        return W.value[0, 0]

    assert trained(lambda ps: fa.optim.SGD(ps, lr=1.0)) == 1.0
    assert trained(lambda ps: MySGD(ps, lr=1.0)) == 1.0
    assert trained(lambda ps: fa.optim.SGD(ps, lr=1.0, momentum=0.5)) == np.float32(1 - 4e-8)
