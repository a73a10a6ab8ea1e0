"""fa.train stops at a non-finite loss: a FloatingPointError naming the epoch, the example and
the first non-finite value of the graph, with the examples before it applied and that one not;
check_finite=False trains through."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from fastad import hogwild
from fastad.parallel import WorkerError

ROWS = 12


class PythonSGD:
    """An optimizer that fa.train calls through Python (step and zero_grad)."""

    def __init__(self, params, lr):
        self.inner = fa.optim.SGD(params, lr=lr)

    def step(self):
        self.inner.step()

    def zero_grad(self):
        self.inner.zero_grad()


OPTIMIZERS = {
    "sgd": lambda params: fa.optim.SGD(params, lr=0.05),     # E takes its row steps inside backward
    "momentum": lambda params: fa.optim.SGD(params, lr=0.05, momentum=0.9),
    "adagrad": lambda params: fa.optim.Adagrad(params, lr=0.05),
    "adam": lambda params: fa.optim.Adam(params, lr=0.01),
    "python": lambda params: PythonSGD(params, lr=0.05),
}


def regression(log_term=False):
    """A linear model over a row of E (read only by a row gather) and w; its leaves
    (ids, x, y[, z]), its Parameters and the loss (+ sum(log(z)) with `log_term`)."""
    rng = np.random.default_rng(0)
    E = fa.Parameter(rng.normal(0, 0.1, (10, 3)), dtype=np.float64, name="E")
    w = fa.Parameter(rng.normal(0, 0.1, 3), dtype=np.float64, name="w")
    ids = fa.IndexInput([0])
    x, y = fa.Input(np.zeros(3), dtype=np.float64), fa.Input(np.zeros(1), dtype=np.float64)
    loss = (fa.sum(E[ids] * x) + fa.sum(w * x) - y) ** 2
    leaves = [ids, x, y]
    if log_term:
        z = fa.Input(np.ones(1), dtype=np.float64)
        loss = loss + fa.log(z)
        leaves.append(z)
    return leaves, (E, w), fa.sum(loss)


def data(log_term=False):
    """ROWS examples for `regression`'s leaves, in their order: finite everywhere (float64,
    which the sampler reads in place)."""
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 10, (ROWS, 1)), rng.normal(size=(ROWS, 3)), rng.normal(size=(ROWS, 1))]
    if log_term:
        arrays.append(rng.uniform(0.5, 2.0, (ROWS, 1)))
    return arrays


def trained(optimizer, arrays, log_term=False, **kw):
    """The values of `regression`'s Parameters after fa.train over `arrays` with
    `OPTIMIZERS[optimizer]`."""
    leaves, params, loss = regression(log_term)
    fa.train(loss, OPTIMIZERS[optimizer](list(params)), dict(zip(leaves, arrays)), **kw)
    return [p.value.copy() for p in params]


def stopped(optimizer, arrays, log_term=False, **kw):
    """(the message of the FloatingPointError that fa.train raised, the Parameters' values)."""
    leaves, params, loss = regression(log_term)
    opt = OPTIMIZERS[optimizer](list(params))
    with pytest.raises(FloatingPointError) as info:
        fa.train(loss, opt, dict(zip(leaves, arrays)), **kw)
    return str(info.value), [p.value.copy() for p in params]


def assert_same_bits(got, expected):
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a.view(np.int64), b.view(np.int64))


def prefix(arrays, n):
    return [a[:n] for a in arrays]


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_nan_label_stops_the_run_with_the_examples_before_it_applied(optimizer):
    arrays = data()
    arrays[2][5] = np.nan
    message, weights = stopped(optimizer, arrays)
    assert message.startswith("train: epoch 1, row 5 of the feeds: the loss is nan: the Input of "
                              "shape (1,) that FeedSampler fills (its leaf 2) holds nan.")
    assert "the examples before it were applied" in message and "check_finite=False" in message
    assert_same_bits(weights, trained(optimizer, prefix(arrays, 5)))


def test_an_inf_feature_is_named_with_its_index_before_the_nodes_it_feeds():
    arrays = data()
    arrays[1][7, 1] = np.inf
    message, weights = stopped("sgd", arrays)
    assert message.startswith("train: epoch 1, row 7 of the feeds: the loss is inf: the Input of "
                              "shape (3,) that FeedSampler fills (its leaf 1) holds inf at index (1,).")
    assert_same_bits(weights, trained("sgd", prefix(arrays, 7)))


def test_a_nan_made_inside_the_graph_names_the_op_and_its_finite_inputs():
    arrays = data(log_term=True)
    arrays[3][4] = -1.0
    message, weights = stopped("sgd", arrays, log_term=True)
    assert message.startswith("train: epoch 1, row 4 of the feeds: the loss is nan: 'log' (shape "
                              "(1,)) produced nan from finite inputs ('input').")
    assert_same_bits(weights, trained("sgd", prefix(arrays, 4), log_term=True))


def test_a_parameter_gone_non_finite_is_named():
    leaves, (E, w), loss = regression()
    w.value[1] = -np.inf
    with pytest.raises(FloatingPointError, match=r"train: epoch 1, row 0 of the feeds: the loss is "
                       r"(nan|inf): the Parameter 'w' of shape \(3,\) holds -inf at index \(1,\): an "
                       r"earlier update made it non-finite"):
        fa.train(loss, fa.optim.SGD([E, w], lr=0.05), dict(zip(leaves, data())))


def test_a_shuffled_run_names_the_row_of_the_feeds():
    arrays = data()
    arrays[2][9] = np.nan
    message, _ = stopped("sgd", arrays, shuffle=True, seed=3)
    assert message.startswith("train: epoch 1, row 9 of the feeds: the loss is nan")


def test_the_stopped_example_takes_no_lr_schedule_step():
    arrays = data()
    arrays[2][5] = np.nan
    leaves, params, loss = regression()
    opt = fa.optim.SGD(list(params), lr=0.05)
    schedule = fa.optim.StepLR(opt, step_size=2, gamma=0.5)
    with pytest.raises(FloatingPointError):
        fa.train(loss, opt, dict(zip(leaves, arrays)), lr_schedule=schedule)
    leaves2, params2, loss2 = regression()
    opt2 = fa.optim.SGD(list(params2), lr=0.05)
    schedule2 = fa.optim.StepLR(opt2, step_size=2, gamma=0.5)
    fa.train(loss2, opt2, dict(zip(leaves2, prefix(arrays, 5))), lr_schedule=schedule2)
    assert schedule.last_epoch == schedule2.last_epoch == 5
    assert opt.lr == opt2.lr
    assert_same_bits([p.value for p in params], [p.value for p in params2])


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad"])
def test_check_finite_false_trains_through_as_before(optimizer):
    arrays = data()
    arrays[2][5] = np.nan
    weights = trained(optimizer, arrays, check_finite=False)
    assert all(np.isnan(v).any() for v in weights)


def test_check_finite_must_be_a_flag():
    leaves, params, loss = regression()
    with pytest.raises(TypeError, match="train: check_finite must be True or False, got 'yes'"):
        fa.train(loss, fa.optim.SGD(list(params), lr=0.05), dict(zip(leaves, data())), check_finite="yes")


@settings(max_examples=30, deadline=None)
@given(optimizer=st.sampled_from(sorted(OPTIMIZERS)), epochs=st.integers(1, 3), data_=st.data())
def test_the_error_names_where_the_nan_is_and_keeps_the_prefix(optimizer, epochs, data_):
    """A NaN label written into the feed (which the sampler reads in place) before epoch
    `bad_epoch` at row `row`: the run stops there, with the weights of the run over every
    example before it."""
    bad_epoch = data_.draw(st.integers(1, epochs))
    row = data_.draw(st.integers(0, ROWS - 1))
    arrays = data()
    labels = arrays[2]

    def poison(epoch, loss):
        if epoch == bad_epoch - 1:
            labels[row] = np.nan
    if bad_epoch == 1:
        poison(0, None)
    message, weights = stopped(optimizer, arrays, epochs=epochs, callback=poison)
    assert message.startswith(f"train: epoch {bad_epoch}, row {row} of the feeds: the loss is nan: "
                              f"the Input of shape (1,) that FeedSampler fills (its leaf 2) holds nan.")
    clean = data()
    leaves, params, loss = regression()
    opt = OPTIMIZERS[optimizer](list(params))
    if bad_epoch > 1:
        fa.train(loss, opt, dict(zip(leaves, clean)), epochs=bad_epoch - 1)
    if row:
        fa.train(loss, opt, dict(zip(leaves, prefix(clean, row))))
    assert_same_bits(weights, [p.value for p in params])


def train_a_shard(rank, shared, bad_rank):
    """A Hogwild worker: fa.train over the shared "w" on its rows; rank `bad_rank`'s row 4 has
    a NaN label."""
    w = fa.Parameter(shared["w"])
    x, y = fa.Input(np.zeros(2), dtype=np.float64), fa.Input(np.zeros(1), dtype=np.float64)
    labels = np.zeros((6, 1))
    if rank == bad_rank:
        labels[4] = np.nan
    fa.train(fa.sum((fa.sum(w * x) - y) ** 2), fa.optim.SGD([w], lr=0.01), {x: np.ones((6, 2)), y: labels})
    return rank


@pytest.mark.parametrize("start_method", ["threads", "fork"])
def test_a_hogwild_worker_reports_the_non_finite_loss(start_method):
    with hogwild.share({"w": np.ones(2)}) as shared:
        with pytest.raises(WorkerError) as info:
            hogwild.run(train_a_shard, workers=2, args=(shared, 1), start_method=start_method)
    assert info.value.rank == 1
    assert (" 1 raised FloatingPointError: train: epoch 1, row 4 of the feeds: the loss is nan: "
            "the Input of shape (1,) that FeedSampler fills (its leaf 1) holds nan."
            in str(info.value))
    assert str(info.value).startswith("hogwild worker")


def test_a_fit_names_itself_its_epoch_and_the_parameter():
    likes = fa.data.planted_interactions(60, 40, per_user=5, seed=0)
    model = fa.models.BPR(60, 40, dim=4)

    def poison(epoch, loss):
        if epoch == 1:
            model.U.value[3, 2] = np.nan     # the fit trains the model's arrays in place
    with pytest.raises(FloatingPointError, match=r"^BPR\.fit: epoch 2 of the fit, triple \d+ of the "
                       r"epoch: the loss is nan: the Parameter 'U' of shape \(60, 4\) holds nan at "
                       r"index \(3, 2\)"):
        model.fit(likes, epochs=3, callback=poison)
