"""The optimizers' row steps inside fastad.train: every built-in optimizer updates the rows a
row gather sends inside backward (RuleRowStep; plain SGD's SGDRowStep), and fa.train's
weights, step counts and optimizer state equal those of a Python loop of forward, backward,
step() and zero_grad() bit for bit."""
import numpy as np
import pytest
from hypothesis import example, given, settings, HealthCheck, strategies as st

import fastad as fa
from fastad.optim.optimizers import set_step_hooks
from loop_helpers import train_feeds_in_python

# The stateful optimizers, each with hyperparameters that use every part of its rule.
OPTIMIZERS = {
    "sgd_momentum": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd_dampening": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3),
    "sgd_weight_decay": lambda ps: fa.optim.SGD(ps, lr=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                            weight_decay=0.01),
    "adagrad": lambda ps: fa.optim.Adagrad(ps, lr=0.1, weight_decay=0.01,
                                           initial_accumulator_value=0.1),
    "adam": lambda ps: fa.optim.Adam(ps, lr=0.01, weight_decay=0.01),
    "adamw": lambda ps: fa.optim.AdamW(ps, lr=0.01),
    "rmsprop": lambda ps: fa.optim.RMSprop(ps, lr=0.01, momentum=0.5, weight_decay=0.01),
    "adadelta": lambda ps: fa.optim.Adadelta(ps, weight_decay=0.01),
    "adamax": lambda ps: fa.optim.Adamax(ps, lr=0.01, weight_decay=0.01),
    "nadam": lambda ps: fa.optim.NAdam(ps, lr=0.01, weight_decay=0.01),
    "radam": lambda ps: fa.optim.RAdam(ps, lr=0.01, decoupled_weight_decay=True,
                                       weight_decay=0.01),
    "ftrl": lambda ps: fa.optim.FTRL(ps, lr=0.1, l1=0.01, l2=0.1),
}

N = 40          # examples per run (RAdam's rectified step starts after its sixth)


def table(rng, rows, dim, dtype):
    return fa.Parameter(rng.normal(0, 0.5, (rows, dim)).astype(dtype))


def take_graph(dtype, seed):
    """Indexing and fa.take of two tables by one ids leaf with repeats."""
    rng = np.random.default_rng(seed)
    W, b = table(rng, 12, 3, dtype), table(rng, 12, 1, dtype)
    ix, x = fa.IndexInput([0] * 5), fa.Input(np.zeros((5, 3), dtype))
    rows = W[ix]
    loss = fa.sum(fa.sum(rows, axis=0) ** 2) * 0.1 + fa.sum(rows * x) + fa.sum(fa.take(b, ix))
    feeds = {ix: rng.integers(0, 12, (N, 5)), x: rng.normal(size=(N, 5, 3)).astype(dtype)}
    return loss, [W, b], feeds


def embedding_graph(dtype, seed):
    """fa.embedding with a padding row that occurs before, between and after other ids (the
    node then sends its rows in parts)."""
    rng = np.random.default_rng(seed)
    W = table(rng, 10, 4, dtype)
    ix = fa.IndexInput([0] * 6)
    E = fa.embedding(W, ix, padding_idx=3)
    loss = fa.sum(fa.logsigmoid(fa.sum(E, axis=0))) + fa.sum(E * E) * 0.05
    ids = rng.integers(0, 10, (N, 6))
    ids[::3, 2] = 3
    ids[1::4, 5] = 3
    ids[2::5, 0] = 3
    return loss, [W], {ix: ids}


def embedding_bag_graph(dtype, seed):
    """fa.embedding_bag over 2-D ids (bags of one example, in one send) and over 1-D ids
    with include_last_offset offsets (BagSampler's leaves: a send of part of the ids)."""
    rng = np.random.default_rng(seed)
    W, V = table(rng, 15, 4, dtype), table(rng, 15, 4, dtype)
    bags = fa.IndexInput(np.zeros((2, 3), np.int64))
    ids, offsets = fa.IndexInput([0] * 5), fa.IndexInput([0, 5])
    pooled = fa.embedding_bag(W, bags, mode="mean")
    summed = fa.embedding_bag(V, ids, offsets, mode="sum", include_last_offset=True)
    loss = fa.sum(fa.softplus(pooled)) + fa.sum(summed ** 2) * 0.1
    lengths = rng.integers(1, 6, N)
    feeds = {bags: rng.integers(0, 15, (N, 2, 3)), ids: rng.integers(0, 15, (N, 5)),
             offsets: np.stack([np.zeros(N, np.int64), lengths], axis=1)}
    return loss, [W, V], feeds


def gather_dot_graph(dtype, seed):
    """Skip-gram's scores: fa.gather_dot of a centre table against a context table."""
    rng = np.random.default_rng(seed)
    W, C = table(rng, 9, 4, dtype), table(rng, 9, 4, dtype)
    centre, context = fa.IndexInput([0, 0]), fa.IndexInput(np.zeros((2, 3), np.int64))
    signs = np.array([1.0, -1.0, -1.0], dtype)
    loss = -fa.sum(fa.logsigmoid(fa.gather_dot(W, centre, C, context) * signs))
    return loss, [W, C], {centre: rng.integers(0, 9, (N, 2)), context: rng.integers(0, 9, (N, 2, 3))}


def ranking_graph(dtype, seed):
    """fa.ranking_loss: the user table is one source (routed), the item table and the item
    bias two each (pos and neg: not routed to a stateful step)."""
    rng = np.random.default_rng(seed)
    U, V = table(rng, 8, 4, dtype), table(rng, 10, 4, dtype)
    b = fa.Parameter(rng.normal(0, 0.5, 10).astype(dtype))
    u, i, j = (fa.IndexInput([0, 0, 0]) for _ in range(3))
    loss = fa.ranking_loss(U, u, V, i, j, item_bias=b, reduction="sum", regularization=0.01)
    return loss, [U, V, b], {u: rng.integers(0, 8, (N, 3)), i: rng.integers(0, 10, (N, 3)),
                             j: rng.integers(0, 10, (N, 3))}


GRAPHS = {"take": take_graph, "embedding": embedding_graph, "embedding_bag": embedding_bag_graph,
          "gather_dot": gather_dot_graph, "ranking_loss": ranking_graph}


def assert_same_training(build, make_optimizer, dtype=np.float32, seed=0):
    """fa.train on one copy of the graph, the Python loop on another: the same weights and
    the same optimizer state (step counts included), bit for bit (fuse=False: the graph
    replayed as built, not a fused node that computes a chain of it). Both train through a
    loss that overflows (check_finite=False: the Python loop has no check), to the same
    non-finite weights."""
    loss1, params1, feeds1 = build(dtype, seed)
    loss2, params2, feeds2 = build(dtype, seed)
    opt1, opt2 = make_optimizer(params1), make_optimizer(params2)
    fa.train(loss1, opt1, feeds1, fuse=False, check_finite=False)
    train_feeds_in_python(loss2, opt2, feeds2)
    for p1, p2 in zip(params1, params2):
        np.testing.assert_array_equal(p1.value, p2.value)
    state1, state2 = opt1.state_dict(), opt2.state_dict()
    assert state1.keys() == state2.keys()
    for key in state1:
        np.testing.assert_array_equal(state1[key], state2[key], err_msg=key)
    return opt1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("graph", sorted(GRAPHS))
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_train_equals_the_python_loop_for_every_optimizer(optimizer, graph, dtype):
    assert_same_training(GRAPHS[graph], OPTIMIZERS[optimizer], dtype)


class Watch:
    """A step hook (set_step_hooks) that records, at each step, whether the Parameter
    `param` holds a gradient, then applies the update."""

    def __init__(self, param):
        self.param, self.had_gradient = param, []

    def __call__(self, optimizer, steps):
        self.had_gradient.append(self.param.grad is not None)
        optimizer.apply_update()
        return 1


def gradients_at_steps(loss, param, make_optimizer, feeds):
    """Whether `param` held a gradient at each step of fa.train (False: its rows moved inside
    backward)."""
    watch = Watch(param)
    set_step_hooks(lambda optimizer: watch)
    try:
        optimizer = make_optimizer()
    finally:
        set_step_hooks(None)
    fa.train(loss, optimizer, feeds)
    return watch.had_gradient


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_table_read_by_one_gather_takes_its_rows_update_inside_backward(optimizer):
    loss, (W, b), feeds = take_graph(np.float32, 0)
    assert not any(gradients_at_steps(loss, W, lambda: OPTIMIZERS[optimizer]([W, b]), feeds))
    assert OPTIMIZERS[optimizer]([W]).row_step(W) is not None


def two_gathers_of_one_table(dtype, seed):
    """A table read by two gathers in one example, with the same rows."""
    rng = np.random.default_rng(seed)
    W = table(rng, 6, 2, dtype)
    a, c = fa.IndexInput([0, 0]), fa.IndexInput([0])
    loss = fa.sum(fa.logsigmoid(fa.sum(W[a], axis=0) * fa.sum(W[c]))) + fa.sum(W[c] ** 2)
    ids = rng.integers(0, 3, (N, 2))
    return loss, [W], {a: ids, c: ids[:, :1]}


def one_gather_twice_by_its_table(dtype, seed):
    """gather_dot of a table with itself: one node, the table in both slots."""
    rng = np.random.default_rng(seed)
    W = table(rng, 5, 3, dtype)
    a, bs = fa.IndexInput([0]), fa.IndexInput([[0, 0]])
    loss = -fa.sum(fa.logsigmoid(fa.gather_dot(W, a, W, bs)))
    ids = rng.integers(0, 3, (N, 3))
    return loss, [W], {a: ids[:, :1], bs: ids[:, None, 1:]}


@pytest.mark.parametrize("build", [two_gathers_of_one_table, one_gather_twice_by_its_table])
@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "sgd_momentum", "rmsprop"])
def test_a_table_read_twice_an_example_keeps_the_step_after_backward_and_stays_exact(build,
                                                                                      optimizer):
    assert_same_training(build, OPTIMIZERS[optimizer])
    loss, (W,), feeds = build(np.float32, 0)
    assert all(gradients_at_steps(loss, W, lambda: OPTIMIZERS[optimizer]([W]), feeds))
    # Plain SGD still takes each gather's rows inside backward.
    loss, (W,), feeds = build(np.float32, 0)
    assert not any(gradients_at_steps(loss, W, lambda: fa.optim.SGD([W], lr=0.1), feeds))


def padding_between_ids(dtype, seed):
    """fa.embedding with its padding row between other ids (and a row on both sides of it)."""
    W = table(np.random.default_rng(seed), 6, 2, dtype)
    ix = fa.IndexInput([0, 0, 0])
    loss = fa.sum(fa.embedding(W, ix, padding_idx=5) ** 2)
    return loss, [W], {ix: np.array([[1, 5, 1], [1, 2, 3], [5, 1, 2], [4, 4, 0]] * 3)}


def test_padding_between_ids_still_sends_them_in_one_call():
    """fa.embedding gathers the ids around its padding row into one send, so a stateful
    step takes them inside backward, the one row on both sides of the padding summed first."""
    assert_same_training(padding_between_ids, OPTIMIZERS["adagrad"])
    loss, (W,), feeds = padding_between_ids(np.float32, 0)
    assert not any(gradients_at_steps(loss, W, lambda: fa.optim.Adagrad([W], lr=0.1), feeds))


def bags_of_rows_dotted(dtype, seed):
    """fa.bag_dot of two bags: the A table's rows go bag by bag, one send each."""
    rng = np.random.default_rng(seed)
    A, B = table(rng, 10, 3, dtype), table(rng, 10, 3, dtype)
    bags, offsets = fa.IndexInput([0, 0, 0, 0]), fa.IndexInput([0, 2, 4])
    targets = fa.IndexInput(np.zeros((2, 2), np.int64))
    loss = fa.sum(fa.softplus(fa.bag_dot(A, bags, offsets, B, targets)))
    return loss, [A, B], {bags: rng.integers(0, 10, (N, 4)), targets: rng.integers(0, 10, (N, 2, 2))}


def test_a_gather_that_sends_a_table_in_parts_is_not_routed_to_a_stateful_step():
    assert_same_training(bags_of_rows_dotted, OPTIMIZERS["adam"])
    loss, (A, B), feeds = bags_of_rows_dotted(np.float32, 0)
    assert all(gradients_at_steps(loss, A, lambda: fa.optim.Adam([A, B], lr=0.1), feeds))


def dense_embedding_bag(dtype, seed):
    """embedding_bag(sparse=False): its table's gradient is dense, which step() updates by
    the dense rule (every row: momentum and weight decay move the rows no bag holds)."""
    rng = np.random.default_rng(seed)
    W = table(rng, 15, 4, dtype)
    bags = fa.IndexInput(np.zeros((2, 3), np.int64))
    loss = fa.sum(fa.softplus(fa.embedding_bag(W, bags, mode="mean", sparse=False)))
    return loss, [W], {bags: rng.integers(0, 15, (N, 2, 3))}


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "sgd_momentum"])
def test_a_dense_gradient_keeps_the_dense_rule(optimizer):
    assert_same_training(dense_embedding_bag, OPTIMIZERS[optimizer])
    loss, (W,), feeds = dense_embedding_bag(np.float32, 0)
    assert all(gradients_at_steps(loss, W, lambda: OPTIMIZERS[optimizer]([W]), feeds))


@pytest.mark.parametrize("optimizer", ["adagrad", "adam", "nadam"])
def test_ids_repeated_within_one_gather_take_one_update_of_their_sum(optimizer):
    def build(dtype, seed):
        W = fa.Parameter(np.linspace(-1, 1, 8).reshape(4, 2).astype(dtype))
        ix = fa.IndexInput([0, 0, 0, 0])
        loss = fa.sum(fa.tanh(W[ix]) * np.array([[1.0], [2.0], [3.0], [4.0]], dtype))
        return loss, [W], {ix: np.array([[1, 1, 1, 2], [3, 1, 3, 3], [0, 1, 2, 3]] * 4)}
    opt = assert_same_training(build, OPTIMIZERS[optimizer])
    assert opt.state_dict()["state.0.step"] == 12


def test_step_counts_advance_only_on_examples_that_moved_a_parameters_rows():
    """Adam's lazy rule: a table whose rows an example does not send (its ids all padding)
    takes no step then."""
    def build(dtype, seed):
        rng = np.random.default_rng(seed)
        W, V = table(rng, 5, 2, dtype), table(rng, 5, 2, dtype)
        a, c = fa.IndexInput([0, 0]), fa.IndexInput([0])
        loss = fa.sum(fa.embedding(W, a, padding_idx=0) * 0.5) + fa.sum(V[c] ** 2)
        return loss, [W, V], {a: np.array([[1, 2], [0, 0], [3, 0], [0, 0], [4, 4]]),
                              c: np.array([[1], [2], [3], [4], [0]])}
    opt = assert_same_training(build, OPTIMIZERS["adam"])
    assert opt.state_dict()["state.0.step"] == 3
    assert opt.state_dict()["state.1.step"] == 5


# ------------------------------------------------------------ property test

def make_optimizer(kind, lr, decay, params):
    """One of the stateful optimizers with a drawn lr and weight decay."""
    return {
        "sgd": lambda: fa.optim.SGD(params, lr=lr, momentum=0.8, weight_decay=decay),
        "nesterov": lambda: fa.optim.SGD(params, lr=lr, momentum=0.8, nesterov=True),
        "adagrad": lambda: fa.optim.Adagrad(params, lr=lr, weight_decay=decay),
        "adam": lambda: fa.optim.Adam(params, lr=lr, weight_decay=decay),
        "adamw": lambda: fa.optim.AdamW(params, lr=lr, weight_decay=decay),
        "rmsprop": lambda: fa.optim.RMSprop(params, lr=lr, weight_decay=decay, momentum=0.3),
        "adadelta": lambda: fa.optim.Adadelta(params, lr=lr * 10, weight_decay=decay),
        "adamax": lambda: fa.optim.Adamax(params, lr=lr, weight_decay=decay),
        "nadam": lambda: fa.optim.NAdam(params, lr=lr, weight_decay=decay),
        "radam": lambda: fa.optim.RAdam(params, lr=lr, weight_decay=decay),
        "ftrl": lambda: fa.optim.FTRL(params, lr=lr * 10, l1=decay, l2=decay),
    }[kind]()


GATHERS = ["take", "embedding_padded", "embedding_bag", "gather_dot", "second_take"]
OPS = ["tanh", "square", "sigmoid", "scale"]


def random_graph(spec, dtype):
    """A graph from a drawn spec: gathers of two tables (the second gather of a table reads
    it twice an example), each result through elementwise ops, summed into a loss; and its
    feeds."""
    seed, gathers, ops, ids_seed, n_examples, n_ids = spec
    rng = np.random.default_rng(seed)
    A, B = table(rng, 6, 3, dtype), table(rng, 6, 3, dtype)
    ids_rng = np.random.default_rng(ids_seed)
    feeds, terms = {}, []
    for k, gather in enumerate(gathers):
        ix = fa.IndexInput([0] * n_ids)
        feeds[ix] = ids_rng.integers(0, 4, (n_examples, n_ids))     # few rows: many repeats
        if gather == "take":
            rows = A[ix]
        elif gather == "second_take":
            rows = fa.take(B if k % 2 else A, ix)
        elif gather == "embedding_padded":
            rows = fa.embedding(B, ix, padding_idx=1)
        elif gather == "embedding_bag":
            rows = fa.embedding_bag(B, ix, fa.IndexInput([0]), mode="mean")
        else:
            context = fa.IndexInput(np.zeros((n_ids, 2), np.int64))
            feeds[context] = ids_rng.integers(0, 6, (n_examples, n_ids, 2))
            rows = fa.gather_dot(A, ix, B, context)
        for op in ops:
            rows = {"tanh": fa.tanh, "square": lambda r: r * r, "sigmoid": fa.sigmoid,
                    "scale": lambda r: r * 0.5}[op](rows)
        terms.append(fa.sum(rows))
    loss = terms[0]
    for term in terms[1:]:
        loss = loss + term
    return loss, [A, B], feeds


specs = st.tuples(st.integers(0, 2**16), st.lists(st.sampled_from(GATHERS), min_size=1, max_size=3),
                  st.lists(st.sampled_from(OPS), max_size=3), st.integers(0, 2**16),
                  st.integers(1, 8), st.integers(1, 5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, kind=st.sampled_from(["sgd", "nesterov", "adagrad", "adam", "adamw", "rmsprop",
                                         "adadelta", "adamax", "nadam", "radam", "ftrl"]),
       lr=st.floats(1e-3, 0.3), decay=st.sampled_from([0.0, 0.01, 0.1]),
       dtype=st.sampled_from([np.float32, np.float64]))
@example(spec=(2021, ["take", "take"], ["square", "square", "square"], 0, 3, 2), kind="sgd", lr=0.25,
         decay=0.0, dtype=np.float32)          # x**8 overflows float32 on the third example
def test_random_graphs_and_optimizers_train_as_the_python_loop(spec, kind, lr, decay, dtype):
    assert_same_training(lambda d, s: random_graph(spec, d),
                         lambda params: make_optimizer(kind, lr, decay, params), dtype)
