"""Repeated ids within one gather under the in-backward row step: the repeats are grouped
(a hash table on the stack for up to 256 ids of a table of more than 65,536 rows, else the
table-sized row index) and each distinct row takes one step of its rows' sum, as backward,
step() and zero_grad() do."""
import numpy as np
from hypothesis import given, settings, strategies as st

import fastad as fa
from loop_helpers import train_feeds_in_python


def gather_graph(kind, rows, dim, n_ids, dtype, seed):
    rng = np.random.default_rng(seed)
    W = fa.Parameter(rng.normal(0, 1, (rows, dim)), dtype=dtype)
    ids = fa.IndexInput(np.zeros(n_ids, dtype=np.int64))
    x = fa.Input(rng.normal(0, 1, (1, dim)), dtype=dtype)
    if kind == "take":
        out = fa.sum(fa.tanh(W[ids] * x))
    else:
        offsets = fa.IndexInput([0])
        out = fa.sum(fa.tanh(fa.embedding_bag(W, ids, offsets, mode="sum") * x))
    return W, ids, out


def trained_both_ways(kind, rows, dim, id_rows, dtype):
    results = []
    for compiled in (True, False):
        W, ids, loss = gather_graph(kind, rows, dim, id_rows.shape[1], dtype, seed=3)
        opt = fa.optim.SGD([W], lr=0.3)
        feeds = {ids: id_rows}
        if compiled:
            fa.train(loss, opt, feeds)
        else:
            train_feeds_in_python(loss, opt, feeds)
        results.append(W.value.copy())
    return results


@settings(max_examples=30, deadline=None)
@given(kind=st.sampled_from(["take", "embedding_bag"]), n_ids=st.integers(1, 60),
       rows=st.sampled_from([3, 50, 1 << 20]), dtype=st.sampled_from([np.float32, np.float64]),
       seed=st.integers(0, 2 ** 16))
def test_repeats_within_a_gather_train_as_the_python_loop_bit_for_bit(kind, n_ids, rows, dtype, seed):
    rng = np.random.default_rng(seed)
    # a few ids far apart in a large table, drawn with repeats: hash collisions and repeats
    pool = rng.choice(rows, size=min(rows, 7), replace=False)
    id_rows = rng.choice(pool, size=(4, n_ids))
    compiled, python = trained_both_ways(kind, rows, 3, id_rows, dtype)
    np.testing.assert_array_equal(compiled, python)


def test_more_ids_than_the_stack_groups_train_as_the_python_loop():
    rng = np.random.default_rng(0)
    for rows in (700, 1 << 17):        # past 256 ids the row index groups them, on any table
        id_rows = rng.integers(0, 700, size=(3, 2_500))
        for kind in ("take", "embedding_bag"):
            compiled, python = trained_both_ways(kind, rows, 4, id_rows, np.float32)
            np.testing.assert_array_equal(compiled, python)


def test_a_repeated_row_takes_one_step_of_its_summed_rows():
    # Row 0 gathered twice with gradient 2**-25 each (lr 1): one step of their sum moves the
    # float32 1.0 to 1 - 2**-24, where two steps of half an ulp would round back to 1.0.
    W = fa.Parameter(np.ones((1 << 20, 1)), dtype=np.float32)
    ids = fa.IndexInput([0, 5, 0])
    scale = fa.Input(np.full((1, 1), 2.0 ** -25), dtype=np.float32)
    loss = fa.sum(W[ids] * scale)
    fa.train(loss, fa.optim.SGD([W], lr=1.0), {ids: np.array([[0, 123_457, 0]])})
    assert W.value[0, 0] == np.float32(1 - 2.0 ** -24)
    assert W.value[123_457, 0] == 1.0
