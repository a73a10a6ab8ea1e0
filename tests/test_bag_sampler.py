"""fa.data.BagSampler: bags of ids of any length filled into an embedding_bag's leaves by
fa.train's compiled loop, with rows of other feeds beside them."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa


def _bags(rng, n, rows, longest, empty=True):
    lengths = rng.integers(0 if empty else 1, longest + 1, n)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    return rng.integers(0, rows, offsets[-1]), offsets


def _classifier(rows, dim, classes, capacity, seed=0, mode="mean"):
    rng = np.random.default_rng(seed)
    E = fa.Parameter(rng.normal(size=(rows, dim)) * 0.3, dtype=np.float64)
    W = fa.Parameter(rng.normal(size=(classes, dim)) * 0.3, dtype=np.float64)
    ids = fa.IndexInput(np.zeros(capacity, dtype=np.int64))
    offsets = fa.IndexInput([0, 0])
    label = fa.IndexInput([0])
    hidden = fa.embedding_bag(E, ids, offsets, mode=mode, include_last_offset=True)
    return E, W, ids, offsets, label, fa.nn.cross_entropy(fa.linear(hidden, W), label)


def _by_hand(E0, W0, bag_ids, bag_offsets, labels, order, lr, mode="mean"):
    """The same SGD steps, one graph built per example."""
    E, W = fa.Parameter(E0, dtype=np.float64), fa.Parameter(W0, dtype=np.float64)
    opt = fa.optim.SGD([E, W], lr=lr)
    for r in order:
        bag = np.asarray(bag_ids[bag_offsets[r]:bag_offsets[r + 1]], dtype=np.int64)
        hidden = fa.embedding_bag(E, fa.IndexInput(bag if bag.size else np.zeros(1, np.int64)),
                                  fa.IndexInput([0, bag.size]), mode=mode, include_last_offset=True)
        loss = fa.nn.cross_entropy(fa.linear(hidden, W), fa.IndexInput([labels[r]]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return E.numpy(), W.numpy()


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("mode", ["mean", "sum"])
def test_train_equals_one_graph_per_example(dtype, mode):
    rng = np.random.default_rng(1)
    bag_ids, bag_offsets = _bags(rng, 60, 40, 9)
    labels = rng.integers(0, 3, 60)
    E, W, ids, offsets, label, loss = _classifier(40, 6, 3, 9, mode=mode)
    E0, W0 = E.numpy(), W.numpy()
    sampler = fa.data.BagSampler(ids, offsets, bag_ids.astype(dtype), bag_offsets, {label: labels})
    fa.train(loss, fa.optim.SGD([E, W], lr=0.2), sampler, epochs=2)
    hand_E, hand_W = _by_hand(E0, W0, bag_ids, bag_offsets, labels, list(range(60)) * 2, 0.2, mode)
    np.testing.assert_allclose(E.numpy(), hand_E, rtol=0, atol=1e-12)
    np.testing.assert_allclose(W.numpy(), hand_W, rtol=0, atol=1e-12)


def _visits(n, rank=0, workers=1, shuffle=False, seed=0, epochs=1):
    """Train a graph whose loss is feed x times the bag's one row: SGD at lr 1 takes x from
    that row at each visit, so -table[r] is x summed over the visits of bag r."""
    table = fa.Parameter(np.zeros((n, 1)), dtype=np.float64)
    ids, offsets = fa.IndexInput(np.zeros(1, np.int64)), fa.IndexInput([0, 0])
    x = fa.Input(np.zeros(1), dtype=np.float64)
    loss = (fa.embedding_bag(table, ids, offsets, mode="sum", include_last_offset=True) * x).sum()
    sampler = fa.data.BagSampler(ids, offsets, np.arange(n), np.arange(n + 1), {x: np.arange(n) + 1.0},
                                 shuffle=shuffle, seed=seed, rank=rank, workers=workers)
    fa.train(loss, fa.optim.SGD([table], lr=1.0), sampler, epochs=epochs)
    return -table.numpy()[:, 0], sampler


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), workers=st.integers(1, 4), shuffle=st.booleans(), seed=st.integers(0, 9),
       epochs=st.integers(1, 3), data=st.data())
def test_each_bag_goes_with_its_own_feed_row_once_an_epoch(n, workers, shuffle, seed, epochs, data):
    rank = data.draw(st.integers(0, workers - 1))
    seen, sampler = _visits(n, rank, workers, shuffle, seed, epochs)
    mine = (np.arange(n) % workers) == rank
    # bag r met the feed's row r (value r + 1) once each epoch, and only on its own shard
    np.testing.assert_array_equal(seen, np.where(mine, (np.arange(n) + 1.0) * epochs, 0.0))
    assert sampler.examples_per_epoch == mine.sum()


def test_shuffle_changes_the_order_by_seed():
    def order(seed):
        rng = np.random.default_rng(0)
        bag_ids, bag_offsets = _bags(rng, 30, 20, 5, empty=False)
        labels = rng.integers(0, 2, 30)
        E, W, ids, offsets, label, loss = _classifier(20, 4, 2, 5)
        fa.train(loss, fa.optim.SGD([E, W], lr=0.5),
                 fa.data.BagSampler(ids, offsets, bag_ids, bag_offsets, {label: labels}, shuffle=True, seed=seed))
        return E.numpy()
    assert np.array_equal(order(3), order(3))
    assert not np.allclose(order(3), order(4))


def test_positions_past_the_bag_are_not_trained():
    # a long bag, then a short one: the short one's leaf still holds the long one's tail ids
    E, W, ids, offsets, label, loss = _classifier(10, 3, 2, 6, mode="sum")
    E0, W0 = E.numpy(), W.numpy()
    sampler = fa.data.BagSampler(ids, offsets, [1, 2, 3, 4, 5, 6, 7], [0, 6, 7], {label: [0, 1]})
    fa.train(loss, fa.optim.SGD([E, W], lr=0.1), sampler)
    hand_E, _ = _by_hand(E0, W0, [1, 2, 3, 4, 5, 6, 7], [0, 6, 7], [0, 1], [0, 1], 0.1, "sum")
    np.testing.assert_allclose(E.numpy(), hand_E, atol=1e-12)
    np.testing.assert_array_equal(E.numpy()[[0, 8, 9]], E0[[0, 8, 9]])


def test_an_empty_bag_is_a_zero_row():
    table = fa.Parameter(np.ones((4, 2)), dtype=np.float64)
    ids, offsets = fa.IndexInput(np.zeros(2, np.int64)), fa.IndexInput([0, 0])
    loss = fa.embedding_bag(table, ids, offsets, mode="mean", include_last_offset=True).sum()
    means = fa.train(loss, fa.optim.SGD([table], lr=0.0), fa.data.BagSampler(ids, offsets, [1, 2], [0, 2, 2]))
    assert means[0] == pytest.approx((2.0 + 0.0) / 2)     # the bag [1, 2] sums to 2, the empty one to 0


def test_an_id_out_of_the_table_fails_before_training_naming_the_bag():
    E, W, ids, offsets, label, loss = _classifier(10, 3, 2, 4)
    before = E.numpy()
    sampler = fa.data.BagSampler(ids, offsets, [1, 2, 3, 10], [0, 2, 4], {label: [0, 1]})
    with pytest.raises(IndexError, match=r"up to 10 \(bag 1\)"):
        fa.train(loss, fa.optim.SGD([E, W], lr=0.1), sampler)
    np.testing.assert_array_equal(E.numpy(), before)


@pytest.mark.parametrize("ids, offsets, match", [
    ([1, 2, 3], [0, 2], "end at len\\(ids\\) = 3"),
    ([1, 2, 3], [1, 3], "start at 0"),
    ([1, 2, 3], [0, 2, 1, 3], "must not decrease, got offsets\\[1\\] = 2 and offsets\\[2\\] = 1"),
    ([1, 2, 3], [3], "one entry per bag and one more"),
    ([[1, 2], [3, 4]], [0, 4], "ids must be 1-D"),
    ([1, 2, 3, 4, 5, 6], [0, 1, 6], "bag 1 holds 5 ids, more than ids_leaf's capacity of 4"),
])
def test_bad_bags_are_refused_naming_what_is_wrong(ids, offsets, match):
    leaf, offsets_leaf = fa.IndexInput(np.zeros(4, np.int64)), fa.IndexInput([0, 0])
    with pytest.raises(ValueError, match=match):
        fa.data.BagSampler(leaf, offsets_leaf, ids, offsets)


def test_negative_ids_are_refused():
    with pytest.raises(IndexError, match=r"ids holds a negative id \(-2\) at position 1"):
        fa.data.BagSampler(fa.IndexInput(np.zeros(4, np.int64)), fa.IndexInput([0, 0]), [1, -2, 3], [0, 3])


def test_float_ids_are_refused():
    with pytest.raises(TypeError, match="ids"):
        fa.data.BagSampler(fa.IndexInput(np.zeros(4, np.int64)), fa.IndexInput([0, 0]), [0.5, 1.0], [0, 2])


def test_bad_leaves_are_refused():
    ids, offsets = fa.IndexInput(np.zeros(4, np.int64)), fa.IndexInput([0, 0])
    with pytest.raises(TypeError, match="ids_leaf must be an IndexInput"):
        fa.data.BagSampler(fa.Input(np.zeros(4)), offsets, [1], [0, 1])
    with pytest.raises(ValueError, match=r"offsets_leaf must have shape \(2,\)"):
        fa.data.BagSampler(ids, fa.IndexInput([0, 0, 0]), [1], [0, 1])
    with pytest.raises(ValueError, match="ids_leaf must be 1-D"):
        fa.data.BagSampler(fa.IndexInput(np.zeros((2, 2), np.int64)), offsets, [1], [0, 1])
    with pytest.raises(ValueError, match="two leaves"):
        fa.data.BagSampler(offsets, offsets, [1], [0, 1])
    with pytest.raises(ValueError, match="a leaf is filled twice"):
        fa.data.BagSampler(ids, offsets, [1], [0, 1], {ids: np.zeros((1, 4), np.int64)})
    with pytest.raises(ValueError, match="different numbers of examples"):
        fa.data.BagSampler(ids, offsets, [1, 2], [0, 1, 2], {fa.IndexInput([0]): [1, 2, 3]})
    with pytest.raises(TypeError, match="feeds must be a dict"):
        fa.data.BagSampler(ids, offsets, [1], [0, 1], [1])


def test_int32_bags_are_read_in_place():
    # the bags of a corpus (hundreds of MB of ids) are not copied each epoch: int32 ids stay
    # int32, read where they lie (an int64 copy of these would take 8 MB)
    import tracemalloc
    E, W, ids, offsets, label, loss = _classifier(10, 3, 2, 4)
    bag_ids = np.random.default_rng(0).integers(0, 10, 1_000_000).astype(np.int32)
    bag_offsets = np.arange(0, 1_000_001, 4, dtype=np.int64)
    labels = np.zeros(250_000, dtype=np.int64)
    tracemalloc.start()
    try:
        fa.data.BagSampler(ids, offsets, bag_ids, bag_offsets, {label: labels})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, f"{peak} bytes allocated: the int32 ids were copied"
