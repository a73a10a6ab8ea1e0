"""PairwiseSampler with K negatives a positive: in a (b, K) neg leaf, or with the positive in one
(b, 1 + K) leaf that one node scores ([positive, K negatives]); fa.train over such a graph."""
import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa
from fastad.data import PairwiseSampler, WarpSampler


def likes(users=40, items=25, seed=0):
    rng = np.random.default_rng(seed)
    dense = (rng.random((users, items)) < 0.25).astype(np.float64)
    dense[np.arange(users), rng.integers(0, items, users)] = 1.0      # every user has a like
    return sp.csr_matrix(dense)


def ids(*shape):
    return fa.IndexInput(np.zeros(shape, dtype=np.int64))


@pytest.mark.parametrize("negatives", ["uniform", "popularity"])
def test_k_negatives_are_unliked_and_drawn_by_their_law(negatives):
    m = likes()
    u, i, j = ids(3), ids(3), ids(3, 5)
    sampler = PairwiseSampler(m, u, i, j, negatives=negatives, examples=2_000, seed=1)
    assert sampler.negs == 5
    counts = np.zeros(m.shape[1])
    for users, pos, neg in sampler.epoch():
        assert neg.shape == (3, 5)
        assert np.all(m[users, pos].A1 > 0)
        assert not np.any(m[np.repeat(users, 5), neg.ravel()].A1 > 0)    # never a liked item
        np.add.at(counts, neg.ravel(), 1)
    popularity = np.asarray(m.sum(axis=0)).ravel()
    if negatives == "uniform":
        assert counts.min() > 0                          # every item is drawn
    else:                                                # the popular half is drawn more
        order = np.argsort(popularity)
        assert counts[order[-8:]].sum() > counts[order[:8]].sum()


def test_one_negative_gives_the_stream_of_before():
    """K = 1 draws exactly as the sampler always has (the same seed, the same triples)."""
    m = likes()
    a = [tuple(x.copy() for x in t) for t in PairwiseSampler(m, ids(2), ids(2), ids(2), examples=50, seed=3).epoch()]
    b = [tuple(x.copy() for x in t) for t in PairwiseSampler(m, ids(2), ids(2), ids(2, 1), examples=50, seed=3).epoch()]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x[2], y[2].ravel())
        np.testing.assert_array_equal(x[0], y[0])


def test_positive_and_negatives_in_one_leaf():
    m = likes()
    u, items = ids(2), ids(2, 4)
    sampler = PairwiseSampler(m, u, items, negatives="popularity", examples=300, seed=0)
    assert sampler.negs == 3 and sampler.leaves == (u, items)
    for users, block in sampler.epoch():
        assert np.all(m[users, block[:, 0]].A1 > 0)
        assert not np.any(m[np.repeat(users, 3), block[:, 1:].ravel()].A1 > 0)


def test_fa_train_over_scores_of_a_positive_and_its_negatives():
    """A sampled-softmax loss over gather_dot's (b, 1 + K) block: fa.train's steps (each row's
    update inside backward) equal the graph replayed by hand over the same stream with SGD."""
    m = likes()
    rng = np.random.default_rng(0)
    U0, V0 = rng.normal(scale=0.1, size=(m.shape[0], 4)), rng.normal(scale=0.1, size=(m.shape[1], 4))

    def graph():
        U, V = fa.Parameter(U0.copy(), dtype=np.float64), fa.Parameter(V0.copy(), dtype=np.float64)
        u, items = ids(2), ids(2, 6)
        loss = -fa.log_softmax(fa.gather_dot(U, u, V, items), axis=1)[:, 0].sum()
        return U, V, u, items, loss

    U, V, u, items, loss = graph()
    fa.train(loss, fa.optim.SGD([U, V], lr=0.1), PairwiseSampler(m, u, items, examples=200, seed=4))
    U2, V2, u2, items2, loss2 = graph()
    opt = fa.optim.SGD([U2, V2], lr=0.1)
    for users, block in PairwiseSampler(m, ids(2), ids(2, 6), examples=200, seed=4).epoch():
        u2.set_value(users)
        items2.set_value(block)
        loss2.forward()
        loss2.backward()
        opt.step()
        opt.zero_grad()
    np.testing.assert_allclose(U.value, U2.value, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(V.value, V2.value, rtol=1e-10, atol=1e-12)
    assert not np.allclose(V.value, V0)


def test_bad_negative_counts_are_refused_naming_the_argument():
    m = likes()
    with pytest.raises(ValueError, match=r"PairwiseSampler: neg holds 5 ids, expected K >= 1 negatives "
                                         r"for each of the 2 ids of users"):
        PairwiseSampler(m, ids(2), ids(2), ids(5))
    with pytest.raises(ValueError, match=r"PairwiseSampler: without neg, pos holds each positive and its "
                                         r"K >= 1 negatives, b \* \(1 \+ K\) ids for b = 2"):
        PairwiseSampler(m, ids(2), ids(2))
    with pytest.raises(ValueError, match="PairwiseSampler: pos holds 3 ids, expected 2"):
        PairwiseSampler(m, ids(2), ids(3), ids(2, 2))
    with pytest.raises(TypeError, match=r"PairwiseSampler: negatives names the negatives' law.*give neg "
                                        r"10 ids per id of users"):
        PairwiseSampler(m, ids(2), ids(2), ids(2), negatives=10)
    U, V = fa.Parameter(np.zeros((40, 2))), fa.Parameter(np.zeros((25, 2)))
    with pytest.raises(ValueError, match="WarpSampler: neg holds 4 ids, expected 2: WARP draws one"):
        WarpSampler(m, ids(2), ids(2), ids(2, 2), fa.Input(np.zeros(2)), U, V)
