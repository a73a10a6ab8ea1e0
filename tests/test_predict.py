"""fa.predict: a compiled forward-only pass of a per-example graph over many examples."""
import numpy as np
import pytest
import scipy.sparse as sp

import fastad as fa


def _linear_bags(seed=0):
    rng = np.random.default_rng(seed)
    W = fa.Parameter(rng.normal(size=(30, 1)), dtype=np.float64)
    b = fa.Parameter([0.5], dtype=np.float64)
    ids, offs = fa.IndexInput(np.zeros(5, np.int64)), fa.IndexInput([0, 0])
    vals = fa.Input(np.zeros(5), dtype=np.float64)
    logit = fa.embedding_bag(W, ids, offs, mode="sum", include_last_offset=True,
                             per_sample_weights=vals) + b
    lengths = rng.integers(0, 6, 40)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    bag_ids = rng.integers(0, 30, offsets[-1])
    values = rng.uniform(-1, 1, offsets[-1])
    return (W, b), logit, (ids, offs, vals), (bag_ids, offsets, values)


def test_predict_over_bags_is_each_examples_forward():
    (W, b), logit, (ids, offs, vals), (bag_ids, offsets, values) = _linear_bags()
    before = W.numpy().copy()
    got = fa.predict(logit, fa.data.BagSampler(ids, offs, bag_ids, offsets, weights_leaf=vals,
                                               weights=values))
    assert got.shape == (40, 1, 1) and got.dtype == np.float64
    expected = np.array([values[lo:hi] @ W.numpy()[bag_ids[lo:hi], 0] + 0.5
                         for lo, hi in zip(offsets[:-1], offsets[1:])])
    np.testing.assert_allclose(got[:, 0, 0], expected, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(W.numpy(), before)          # nothing trained
    assert W.grad is None


def test_predict_from_feeds_matches_a_python_loop_and_shards():
    rng = np.random.default_rng(1)
    E = fa.Parameter(rng.normal(size=(10, 4)))
    u, i = fa.IndexInput([0]), fa.IndexInput([0])
    score = fa.vector_dot(E[u], E[i])
    users, items = rng.integers(0, 10, 25), rng.integers(0, 10, 25)
    got = fa.predict(score, {u: users[:, None], i: items[:, None]})
    assert got.shape == (25, 1) and got.dtype == np.float32
    by_hand = []
    for uu, ii in zip(users, items):
        u.set_value([uu]), i.set_value([ii])
        score.forward()
        by_hand.append(score.numpy().copy())
    np.testing.assert_array_equal(got, np.array(by_hand))
    shard = fa.predict(score, fa.data.FeedSampler({u: users[:, None], i: items[:, None]},
                                                 rank=1, workers=2))
    np.testing.assert_array_equal(shard, got[1::2])


def test_predict_bad_input():
    (W, b), logit, (ids, offs, vals), (bag_ids, offsets, values) = _linear_bags()
    with pytest.raises(TypeError, match="`output` must be a fastad Variable"):
        fa.predict(np.zeros(3), {})
    with pytest.raises(ValueError, match="shuffles its rows"):
        fa.predict(logit, fa.data.BagSampler(ids, offs, bag_ids, offsets, shuffle=True, seed=0,
                                             weights_leaf=vals, weights=values))
    other = fa.Input(np.zeros(1))
    with pytest.raises(ValueError, match="is not in the output's graph"):
        fa.predict(logit, fa.data.BagSampler(ids, offs, bag_ids, offsets, {other: np.zeros((40, 1))},
                                             weights_leaf=vals, weights=values))
    with pytest.raises(IndexError, match="predict: the sampler writes ids up to 30"):
        fa.predict(logit, fa.data.BagSampler(ids, offs, bag_ids + 1, offsets, weights_leaf=vals,
                                             weights=values))
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    sampler = fa.data.PairwiseSampler(sp.csr_matrix(np.eye(3, dtype=np.float32)), u, i, j, seed=0)
    with pytest.raises(TypeError, match="draws its examples at random"):
        fa.predict(W[u], sampler)
    with pytest.raises(TypeError, match="feeds must be a dict"):
        fa.predict(logit, [1, 2])
