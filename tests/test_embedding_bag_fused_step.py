"""fastad.train under plain SGD steps an embedding_bag's table rows inside backward (the
bag is a row gather, as take is): the same parameters as backward + step + zero_grad."""
import numpy as np
import pytest

import fastad as fa


def _bag_classifier(rows, dim, classes, n_ids, n_offsets, mode, include_last_offset, sparse=True,
                    dtype=np.float64, seed=0):
    """embedding_bag -> linear -> cross_entropy over an ids leaf and an offsets leaf."""
    rng = np.random.default_rng(seed)
    E = fa.Parameter(rng.normal(size=(rows, dim)), dtype=dtype)
    W = fa.Parameter(rng.normal(size=(classes, dim)), dtype=dtype)
    b = fa.Parameter(rng.normal(size=classes), dtype=dtype)
    ids = fa.IndexInput(np.zeros(n_ids, dtype=np.int64))
    offsets = fa.IndexInput(np.arange(n_offsets, dtype=np.int64) * 0)
    bags = n_offsets - 1 if include_last_offset else n_offsets
    labels = fa.IndexInput(np.zeros(bags, dtype=np.int64))
    bag = fa.embedding_bag(E, ids, offsets, mode=mode, include_last_offset=include_last_offset,
                           sparse=sparse)
    loss = fa.nn.functional.cross_entropy(fa.linear(bag, W, b), labels)
    return (E, W, b), loss, (ids, offsets, labels)


def _by_hand(params, loss, leaves, feeds, lr):
    opt = fa.optim.SGD(list(params), lr=lr)
    for row in range(len(feeds[0])):
        for leaf, feed in zip(leaves, feeds):
            leaf.set_value(feed[row])
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()


def _check_same_as_by_hand(feeds, mode, include_last_offset, sparse=True, rows=12):
    n_ids, n_offsets = feeds[0].shape[1], feeds[1].shape[1]
    build = dict(rows=rows, dim=3, classes=4, n_ids=n_ids, n_offsets=n_offsets, mode=mode,
                 include_last_offset=include_last_offset, sparse=sparse)
    fused_params, fused_loss, fused_leaves = _bag_classifier(**build)
    hand_params, hand_loss, hand_leaves = _bag_classifier(**build)
    fa.train(fused_loss, fa.optim.SGD(list(fused_params), lr=0.3), dict(zip(fused_leaves, feeds)),
             epochs=2)
    _by_hand(hand_params, hand_loss, hand_leaves, [np.concatenate([f, f]) for f in feeds], lr=0.3)
    for fused, hand in zip(fused_params, hand_params):
        np.testing.assert_allclose(fused.value, hand.value, rtol=0, atol=1e-12)
    return fused_params


def _feeds(n_rows, n_ids, offsets, rows=12, classes=4, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, rows, size=(n_rows, n_ids))
    offs = np.tile(np.asarray(offsets, dtype=np.int64), (n_rows, 1))
    bags = len(offsets)
    return [ids, offs, rng.integers(0, classes, size=(n_rows, bags))]


@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("sparse", [True, False])
def test_fused_rows_match_backward_then_step(mode, sparse):
    feeds = _feeds(20, 7, [0, 3, 3, 5])           # bags of 3, 0, 2 and 2 ids
    _check_same_as_by_hand(feeds, mode, False, sparse=sparse)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_repeated_ids_in_one_bag_take_one_step_of_their_sum(mode):
    feeds = _feeds(15, 6, [0, 4])
    feeds[0][:, 1] = feeds[0][:, 0]                # ids repeat within the first bag
    feeds[0][:, 3] = feeds[0][:, 0]
    feeds[0][:, 5] = feeds[0][:, 0]                # and across the bags
    _check_same_as_by_hand(feeds, mode, False)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_include_last_offset_leaves_the_tail_ids_untrained(mode):
    # two offsets: one bag, ids[0:3]; ids 3..5 of each row lie past its end
    rows = 12
    feeds = _feeds(10, 6, [0, 3], rows=rows)
    feeds[1][:, 1] = 3
    feeds[2] = feeds[2][:, :1]
    feeds[0][:, :3] = np.random.default_rng(2).integers(0, 6, size=(10, 3))
    feeds[0][:, 3:] = np.random.default_rng(3).integers(6, rows, size=(10, 3))
    before = _bag_classifier(rows, 3, 4, 6, 2, mode, True)[0][0].numpy()
    E = _check_same_as_by_hand(feeds, mode, True, rows=rows)[0]
    assert not np.array_equal(E.value[:6], before[:6])
    np.testing.assert_array_equal(E.value[6:], before[6:])     # only ever past the bag's end


def test_the_bag_is_a_row_gather_stepped_inside_backward():
    """Two bags of one row, each stepping it by less than half an ulp: fused inside
    backward (each bag's step alone) the row stays 1.0; stepped after backward (one step
    of their sum) it would move. The table's rows are also loaded ahead during the run."""
    W = fa.Parameter(np.ones((3, 1), dtype=np.float32))
    a, b = fa.IndexInput([0, 0]), fa.IndexInput([0, 0])
    offsets = fa.IndexInput([0])
    loss = ((fa.embedding_bag(W, a, offsets, mode="mean") * 2e-8).sum()
            + (fa.embedding_bag(W, b, offsets, mode="sum") * 1e-8).sum())
    rows = np.zeros((1, 2), np.int64)
    sampler = fa.data.FeedSampler({a: rows, b: rows, offsets: np.zeros((1, 1), np.int64)})
    prefetched = []
    fa.train(loss, fa.optim.SGD([W], lr=1.0), sampler,
             callback=lambda epoch, mean: prefetched.extend(sampler._row_prefetch_targets()))
    assert W.value[0, 0] == 1.0
    assert {(leaf, address) for leaf, address, _ in prefetched} == {
        (0, W.value.ctypes.data), (1, W.value.ctypes.data)}
    W.value[...] = 1.0
    fa.train(loss, fa.optim.SGD([W], lr=1.0, momentum=0.5), sampler)   # no fused update
    assert W.value[0, 0] == np.float32(1 - 4e-8)


def test_a_table_read_by_a_bag_and_a_dense_op_is_not_fused():
    # W is read by embedding_bag and by a matmul (whose backward reads W): no fused update,
    # the same result as by hand
    rng = np.random.default_rng(4)
    E = fa.Parameter(rng.normal(size=(5, 2)), dtype=np.float64)
    ids, offsets = fa.IndexInput([0, 0, 0]), fa.IndexInput([0, 1])
    loss = fa.sum(fa.embedding_bag(E, ids, offsets, mode="sum") @ fa.transpose(E) ** 2)
    feeds = [rng.integers(0, 5, size=(6, 3)), np.tile([0, 2], (6, 1))]
    E2 = fa.Parameter(E.numpy(), dtype=np.float64)
    ids2, offsets2 = fa.IndexInput([0, 0, 0]), fa.IndexInput([0, 1])
    loss2 = fa.sum(fa.embedding_bag(E2, ids2, offsets2, mode="sum") @ fa.transpose(E2) ** 2)
    fa.train(loss, fa.optim.SGD([E], lr=0.01), {ids: feeds[0], offsets: feeds[1]})
    _by_hand([E2], loss2, [ids2, offsets2], feeds, lr=0.01)
    np.testing.assert_allclose(E.value, E2.value, rtol=0, atol=1e-12)
