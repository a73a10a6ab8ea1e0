"""fa.train replays the fused node in place of a chain of ops that it computes
(fastad.training.fusion): BPR's and skip-gram's losses written from ops train as the ready
models' fused graphs do, and anything else replays as built."""
import numpy as np
import pytest

import fastad as fa
from fastad.training import fusion, loop


def bpr_tables(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    U = fa.Parameter(rng.normal(0, 0.1, (30, 6)), dtype=dtype)
    V = fa.Parameter(rng.normal(0, 0.1, (20, 6)), dtype=dtype)
    return U, V


def bpr_feeds(leaves, n=300, seed=1):
    rng = np.random.default_rng(seed)
    u, i, j = leaves
    b = u.shape[0]
    return {u: rng.integers(0, 30, (n, b)), i: rng.integers(0, 20, (n, b)),
            j: rng.integers(0, 20, (n, b))}


def bpr_chain(U, V, b=1, swapped=False, reduce=fa.sum):
    u, i, j = (fa.IndexInput([0] * b) for _ in range(3))
    dot = fa.vector_dot(V[i] - V[j], U[u]) if swapped else fa.vector_dot(U[u], V[i] - V[j])
    return -reduce(fa.logsigmoid(dot)), (u, i, j)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("b, swapped, reduce, reduction",
                         [(1, False, fa.sum, "sum"), (4, True, fa.sum, "sum"), (3, False, fa.mean, "mean")])
def test_the_bpr_chain_trains_as_ranking_loss_bit_for_bit(dtype, b, swapped, reduce, reduction):
    U1, V1 = bpr_tables(dtype)
    chain, leaves = bpr_chain(U1, V1, b, swapped, reduce)
    means1 = fa.train(chain, fa.optim.SGD([U1, V1], lr=0.1), bpr_feeds(leaves))
    U2, V2 = bpr_tables(dtype)
    u, i, j = (fa.IndexInput([0] * b) for _ in range(3))
    fused = fa.ranking_loss(U2, u, V2, i, j, reduction=reduction)
    means2 = fa.train(fused, fa.optim.SGD([U2, V2], lr=0.1), bpr_feeds((u, i, j)))
    assert means1 == means2
    np.testing.assert_array_equal(U1.value, U2.value)
    np.testing.assert_array_equal(V1.value, V2.value)


def test_fuse_false_replays_the_chain_as_built_and_both_learn_the_same():
    results = []
    for fuse in (True, False):
        U, V = bpr_tables(np.float64)
        chain, leaves = bpr_chain(U, V)
        means = fa.train(chain, fa.optim.SGD([U, V], lr=0.1), bpr_feeds(leaves), epochs=2, fuse=fuse)
        results.append((means, U.value.copy(), V.value.copy()))
    (m1, U1, V1), (m2, U2, V2) = results
    np.testing.assert_allclose(m1, m2, rtol=1e-9)
    np.testing.assert_allclose(U1, U2, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(V1, V2, rtol=1e-9, atol=1e-12)
    assert not np.array_equal(U1, U2)       # the fused node rounds otherwise: it did replay


def test_train_replays_what_fused_loss_returns(monkeypatch):
    U, V = bpr_tables()
    chain, leaves = bpr_chain(U, V)
    monkeypatch.setattr(loop, "fused_loss", lambda loss, fed: 3 * fusion.fused_loss(loss, fed))
    fused_means = fa.train(chain, fa.optim.SGD([U, V], lr=0.0), bpr_feeds(leaves, n=5))
    plain_means = fa.train(chain, fa.optim.SGD([U, V], lr=0.0), bpr_feeds(leaves, n=5), fuse=False)
    np.testing.assert_allclose(fused_means, [3 * m for m in plain_means], rtol=1e-12)


def skipgram_graph(B, mask_on, signs_leaf=None, dtype=np.float64, seed=2):
    rng = np.random.default_rng(seed)
    W = fa.Parameter(rng.normal(0, 0.3, (40, 5)), dtype=dtype)
    C = fa.Parameter(rng.normal(0, 0.3, (40, 5)), dtype=dtype)
    k = 3
    centre = fa.IndexInput(np.zeros(B, dtype=np.int64))
    context = fa.IndexInput(np.zeros((B, 1 + k), dtype=np.int64))
    signs = signs_leaf if signs_leaf is not None else np.array([1.0] + [-1.0] * k)
    logs = fa.logsigmoid(fa.gather_dot(W, centre, C, context) * signs)
    mask = fa.Input(np.ones((B, 1)), dtype=dtype) if mask_on else None
    loss = -fa.sum(logs * mask if mask_on else logs)
    return loss, (W, C), centre, context, mask


@pytest.mark.parametrize("B, mask_on", [(1, False), (8, True)])
def test_the_skipgram_chain_fuses_and_trains_as_the_chain_to_rounding(B, mask_on):
    tokens = np.random.default_rng(3).zipf(1.4, 3_000) % 40
    results = []
    for fuse in (True, False):
        loss, params, centre, context, mask = skipgram_graph(B, mask_on)
        kwargs = {"mask": mask} if mask_on else {}
        sampler = fa.data.SkipGramSampler(tokens, centre, context, window=3, seed=0, **kwargs)
        fa.train(loss, fa.optim.SGD(list(params), lr=0.05), sampler, fuse=fuse)
        results.append([p.value.copy() for p in params])
    for fused, plain in zip(*results):
        np.testing.assert_allclose(fused, plain, rtol=1e-9, atol=1e-12)
    loss, _, _, _, _ = skipgram_graph(B, mask_on)
    assert fusion.fused_loss(loss).op_name in ("bce_with_logits", "sum")


def test_fused_losses_compute_the_chains_value():
    U, V = bpr_tables()
    chain, (u, i, j) = bpr_chain(U, V, b=5)
    for leaf, ids in ((u, [1, 2, 3, 4, 5]), (i, [0, 1, 2, 3, 4]), (j, [9, 8, 7, 6, 5])):
        leaf.set_value(ids)
    chain.forward()
    fused = fusion.fused_loss(chain)
    assert fused.op_name == "ranking_loss"
    np.testing.assert_allclose(fused.forward().item(), chain.item(), rtol=1e-13)
    loss, *_ = skipgram_graph(8, True)
    fused = fusion.fused_loss(loss)
    np.testing.assert_allclose(fused.forward().item(), loss.item(), rtol=1e-13)


def test_graphs_that_are_not_a_whole_chain_are_not_fused():
    U, V = bpr_tables()
    chain, (u, i, j) = bpr_chain(U, V)
    assert fusion.fused_loss(chain + 0.01 * fa.sum(U[u] * U[u])) is None      # more than the chain
    assert fusion.fused_loss(-fa.sum(fa.logsigmoid(fa.vector_dot(U[u], V[i] - U[j])))) is None
    assert fusion.fused_loss(-fa.sum(fa.logsigmoid(fa.vector_dot(U[u], V[i] + V[j])))) is None
    assert fusion.fused_loss(fa.sum(fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])))) is None
    x = fa.Input(np.ones((1, 6)), requires_grad=True, dtype=np.float64)     # not a gather
    assert fusion.fused_loss(-fa.sum(fa.logsigmoid(fa.vector_dot(x, V[i] - V[j])))) is None
    # signs that are not all +-1, or that the sampler writes, cannot become labels
    loss, *_ = skipgram_graph(1, False, signs_leaf=np.array([1.0, -0.5, -1.0, -1.0]))
    assert fusion.fused_loss(loss) is None
    signs = fa.Input(np.array([1.0, -1.0, -1.0, -1.0]), dtype=np.float64)
    loss, *_ = skipgram_graph(1, False, signs_leaf=signs)
    assert fusion.fused_loss(loss) is not None
    assert fusion.fused_loss(loss, fed=[signs]) is None


def test_fuse_must_be_a_flag():
    U, V = bpr_tables()
    chain, leaves = bpr_chain(U, V)
    with pytest.raises(TypeError, match="fuse"):
        fa.train(chain, fa.optim.SGD([U, V], lr=0.1), bpr_feeds(leaves, n=3), fuse="yes")


def test_a_non_finite_loss_in_a_fused_node_says_it_is_fused():
    U, V = bpr_tables(np.float32)
    U.value[:] = 3e19                       # finite rows whose margins overflow
    V.value[:] = -3e19
    chain, leaves = bpr_chain(U, V)
    feeds = bpr_feeds(leaves, n=4)
    feeds[leaves[2]][:] = 0                 # j = 0, i != 0 somewhere: V[i] - V[j] is finite
    V.value[0] = 3e19
    with pytest.raises(FloatingPointError, match="'ranking_loss'.*a fused node that fa.train replays"):
        fa.train(chain, fa.optim.SGD([U, V], lr=0.1), feeds)
    with pytest.raises(FloatingPointError) as err:
        fa.train(chain, fa.optim.SGD([U, V], lr=0.1), feeds, fuse=False)
    assert "fused" not in str(err.value)
