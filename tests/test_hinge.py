"""The hinge, max(0, 1 - target * input): a pointwise loss (fa.nn.hinge) and a ranking loss of
the fused ranking loop (fa.ranking_loss(..., loss="hinge"), fa.margin_loss), the proof of
docs/contributing.md's recipe for a ranking loss: its manifest line, its rule in rules.h, its
line in fastad/ops/ranking.py's RANKING_LOSSES, its place in fa.nn, these tests."""
import numpy as np
import pytest

import fastad as fa
from fused_helpers import assert_fused_matches_composed
from pointwise_loss_checks import (REDUCTIONS, SHAPES, assert_bad_input_raises, assert_matches_torch,
                                   assert_public_in_fa_nn, assert_values_and_gradients)

def hinge(x, y):
    return np.maximum(0.0, 1.0 - y * x)


def away_from_the_kink(shape, seed=0):
    """Inputs whose margins y * x stay at least 0.05 from 1, and targets +-1."""
    rng = np.random.default_rng(seed)
    y = rng.choice([-1.0, 1.0], size=shape)
    m = rng.uniform(-1.5, 3.0, size=shape)
    m = np.where(np.abs(m - 1) < 0.05, m + 0.2, m)
    return m * y, y


# ------------------------------------------------------------------ fa.nn.hinge

@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_against_finite_differences(shape, reduction):
    assert_values_and_gradients(fa.nn.hinge, hinge, *away_from_the_kink(shape, len(shape)), reduction)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_matches_torch(reduction):
    torch = pytest.importorskip("torch")
    assert_matches_torch(fa.nn.hinge, lambda t, y: torch.clamp(1 - y * t, min=0),
                         *away_from_the_kink((3, 4), 11), reduction)


def test_float32_the_kink_and_replay():
    x = np.array([2.0, 1.0, 0.5, -3.0])
    w = fa.Parameter(x, dtype=np.float32)
    loss = fa.nn.hinge(w, np.ones(4, np.float32), reduction="none")
    assert loss.dtype == fa.float32
    np.testing.assert_array_equal(loss.value, [0.0, 0.0, 0.5, 4.0])
    loss.backward(np.ones(4))
    np.testing.assert_array_equal(w.grad, [0.0, 0.0, -1.0, -1.0])     # 0 at the kink (margin 1)
    x_in = fa.Input([0.0, 0.0], dtype=np.float64)
    mean = fa.nn.hinge(x_in, [1.0, -1.0])
    assert mean.item() == 1.0
    x_in.set_value([3.0, -0.5])
    assert mean.forward().item() == 0.25


def test_bad_input_raises():
    assert_bad_input_raises("hinge", fa.nn.hinge)


def test_is_public_in_fa_nn_and_functional():
    assert_public_in_fa_nn("hinge", "max(0, 1 - target * input), elementwise")


# ------------------------------------------------------ the ranking loss "hinge"

def tables(f64=True, seed=0):
    """Tables whose margins are mostly below 1 (the hinge active) and some above."""
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    return (fa.Parameter(rng.normal(scale=0.5, size=(7, 6)), dtype=dtype),
            fa.Parameter(rng.normal(scale=0.5, size=(5, 6)), dtype=dtype),
            fa.Parameter(rng.normal(scale=0.5, size=(5, 1)), dtype=dtype))


def composed(U, users, V, pos, neg, b=None, reduction="mean"):
    """What ranking_loss(loss="hinge") computes in one node: the hinge of the margins."""
    margin = fa.vector_dot(fa.take(U, users), fa.take(V, pos) - fa.take(V, neg))
    if b is not None:
        margin = margin + fa.reshape(fa.take(b, pos) - fa.take(b, neg), margin.shape)
    return fa.nn.hinge(margin, np.ones(margin.shape, dtype=margin.dtype), reduction=reduction)


def fused(U, users, V, pos, neg, b=None, reduction="mean"):
    return fa.ranking_loss(U, users, V, pos, neg, item_bias=b, reduction=reduction, loss="hinge")


IDS = {"rows": ([0, 3, 3, 6], [1, 2, 4, 1], [2, 1, 0, 1]), "one": ([2], [4], [0]),
       "grid": ([[0, 1], [6, 6]], [[4, 4], [3, 0]], [[1, 0], [0, 2]])}


@pytest.mark.parametrize("f64", [True, False])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("case", sorted(IDS))
def test_the_fused_hinge_is_the_hinge_of_the_composed_margins_bit_for_bit(case, reduction, with_bias,
                                                                           f64):
    users, pos, neg = IDS[case]
    results = []
    for build in (composed, fused):
        U, V, b = tables(f64)
        loss = build(U, fa.IndexInput(users), V, fa.IndexInput(pos), fa.IndexInput(neg),
                     b if with_bias else None, reduction=reduction)
        seed = np.linspace(-1.5, 2.0, loss.size).reshape(loss.shape) if reduction == "none" else 0.75
        loss.backward(np.asarray(seed, dtype=loss.dtype))
        results.append((loss.value.copy(), loss.shape, U.grad, V.grad, b.grad))
    assert_fused_matches_composed(results, np.shape(users) if reduction == "none" else (), f64)
    assert np.any(results[1][2]), "the hinge is active on some triples: the test must see gradients"


def test_the_fused_hinge_matches_finite_differences():
    users, pos, neg = IDS["rows"]
    rng = np.random.default_rng(2)
    start = (rng.normal(size=(7, 3)), rng.normal(size=(5, 3)), rng.normal(size=5))
    assert fa.gradcheck(lambda U, V, b: fa.ranking_loss(U, users, V, pos, neg, item_bias=b, loss="hinge",
                                                        regularization=0.2), *start)


def test_margin_loss_is_the_ranking_losses_of_margins_computed_otherwise():
    m = fa.Parameter([-1.0, 0.5, 2.0], dtype=np.float64)
    np.testing.assert_allclose(fa.margin_loss(m, "hinge", "none").value, [2.0, 0.5, 0.0])
    np.testing.assert_allclose(fa.margin_loss(m).value, np.sum(np.logaddexp(0, -m.value)))
    with pytest.raises(ValueError, match=r"margin_loss: loss must be one of \['bpr', 'hinge'\], got 'warp'"):
        fa.margin_loss(m, "warp")
    U, V, _ = tables()
    with pytest.raises(ValueError, match=r"ranking_loss: loss must be one of \['bpr', 'hinge'\], got 'log'"):
        fa.ranking_loss(U, [0], V, [1], [2], loss="log")


def _train(build, batch, f64):
    rng = np.random.default_rng(0)
    dtype = np.float64 if f64 else np.float32
    U = fa.Parameter(rng.normal(0, 0.5, (30, 8)), dtype=dtype)
    V = fa.Parameter(rng.normal(0, 0.5, (6, 8)), dtype=dtype)        # 6 items: rows repeat in a step
    b = fa.Parameter(rng.normal(0, 0.1, (6, 1)), dtype=dtype)
    triples = [rng.integers(0, 30, 320), rng.integers(0, 6, 320), rng.integers(0, 6, 320)]
    leaves = [fa.IndexInput(np.zeros(batch, dtype=np.int64)) for _ in range(3)]
    loss = build(U, leaves[0], V, leaves[1], leaves[2], b, reduction="sum")
    fa.train(loss, fa.optim.SGD([U, V, b], lr=0.05),
             {leaf: ids.reshape(-1, batch) for leaf, ids in zip(leaves, triples)}, epochs=2)
    return [p.value.copy() for p in (U, V, b)]


@pytest.mark.parametrize("batch", [1, 16])
@pytest.mark.parametrize("f64", [True, False])
def test_fa_train_steps_the_fused_hinge_as_the_composed_graph_bit_for_bit(batch, f64):
    """At one triple a step the fused loop takes the triple's SGD steps in one call; at 16 its
    rows go to SGD's row step as they come: either way the composed graph's values."""
    for theirs, ours in zip(_train(composed, batch, f64), _train(fused, batch, f64)):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("weights", [None, [0.5, 0.0, 2.0, 1.5]])    # WARP's rank weights
def test_on_a_device_the_hinge_is_the_composed_ops(weights):
    from fastad.cuda import backend
    backend.set_emulation(True)
    try:
        results = []
        for device in (None, "cuda"):
            U, V, b = (fa.Parameter(t.value, dtype=np.float64, device=device) for t in tables())
            ids = [fa.IndexInput(i, device=device) for i in IDS["rows"]]
            w = None if weights is None else fa.Input(weights, dtype=np.float64, device=device)
            loss = fa.ranking_loss(U, ids[0], V, ids[1], ids[2], item_bias=b, loss="hinge",
                                   regularization=0.1, weights=w)
            loss.backward()
            results.append([loss.numpy()] + [backend.to_host(p.grad) if device else p.grad
                                             for p in (U, V, b)])
        for cpu, dev in zip(*results):
            np.testing.assert_allclose(dev, cpu, rtol=1e-12, atol=1e-13)
    finally:
        backend.set_emulation(None)


def test_bpr_trains_with_the_hinge_and_keeps_it_when_saved(tmp_path):
    likes = fa.data.planted_interactions(200, 80, per_user=10, seed=1)
    train, test = fa.data.train_test_split(likes, 0.2, seed=1)
    model = fa.models.BPR(200, 80, dim=16, loss="hinge", seed=2)
    before = fa.metrics.auc(model.scores(np.arange(200)), test, train=train)
    model.fit(train, epochs=15, lr=0.05)
    after = fa.metrics.auc(model.scores(np.arange(200)), test, train=train)
    assert after > before + 0.08 and after > 0.64, (before, after)      # BPR's loss: 0.641
    loss = model(fa.IndexInput([1]), fa.IndexInput([2]), fa.IndexInput([3]))
    assert loss.op_name == "ranking_loss"
    model.save(tmp_path / "hinge.npz")
    loaded = fa.models.BPR.load(tmp_path / "hinge.npz")
    assert loaded.loss == "hinge" and loaded.settings() == model.settings()
    with pytest.raises(ValueError, match=r"BPR: loss must be one of \['bpr', 'hinge', 'warp', 'warp-kos'\], "
                                         r"got 'wrap'"):
        fa.models.BPR(10, 5, loss="wrap")
