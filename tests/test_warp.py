"""WARP and k-OS WARP in the compiled loop: `fa.ranking_loss(..., weights=)` (each triple's loss
times a constant), `fa.data.WarpSampler` (negatives drawn against the current scores, LightFM's
rank weight) and `BPR(loss="warp" | "warp-kos")`."""
import numpy as np
import pytest

import fastad as fa

# ------------------------------------------------------------------ ranking_loss(weights=)

IDS = ([0, 1, 4], [1, 2, 3], [5, 5, 0])


def _tables(f64=True, seed=0):
    rng = np.random.default_rng(seed)
    dtype = np.float64 if f64 else np.float32
    return [fa.Parameter(rng.normal(size=shape), dtype=dtype) for shape in ((5, 3), (6, 3), (6, 1))]


def _composed_weighted(U, V, b, w, loss, reduction, regularization):
    """The weighted loss of composed ops: margin_loss "none", the L2 term, times the weights."""
    u, i, j = (fa.IndexInput(ids) for ids in IDS)
    losses = fa.margin_loss(fa.ranking_margin(U, u, V, i, j, item_bias=b), loss, "none")
    if regularization:
        squares = (fa.vector_dot(U[u], U[u]) + fa.vector_dot(V[i], V[i]) + fa.vector_dot(V[j], V[j])
                   + fa.reshape(b[i] * b[i], (3,)) + fa.reshape(b[j] * b[j], (3,)))
        losses = losses + squares * (0.5 * regularization)
    losses = losses * w
    return {"sum": losses.sum(), "mean": losses.mean(), "none": losses}[reduction]


@pytest.mark.parametrize("loss", ["hinge", "bpr"])
@pytest.mark.parametrize("reduction", ["sum", "mean", "none"])
@pytest.mark.parametrize("regularization", [0.0, 0.1])
def test_weights_scale_each_triples_loss_and_gradient_as_the_composed_ops(loss, reduction, regularization):
    results = []
    for fused in (True, False):
        U, V, b = _tables()
        w = fa.Input([0.5, 0.0, 2.0], dtype=np.float64)
        if fused:
            out = fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], item_bias=b, reduction=reduction,
                                  regularization=regularization, loss=loss, weights=w)
        else:
            out = _composed_weighted(U, V, b, w, loss, reduction, regularization)
        out.backward(np.ones(3) if reduction == "none" else None)
        results.append([out.numpy()] + [p.grad for p in (U, V, b)])
    for ours, theirs in zip(*results):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-14)


def test_a_weight_of_zero_leaves_its_rows_alone_and_a_weight_scales_the_gradient():
    U, V, b = _tables()
    w = fa.Input([1.0, 1.0, 1.0], dtype=np.float64)
    loss = fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], item_bias=b, reduction="sum", loss="hinge",
                           weights=w)
    loss.backward()
    ones = U.grad.copy()
    w.set_value([3.0, 0.0, 0.0])
    loss.forward()
    U.zero_grad()
    loss.backward()
    expected = np.zeros_like(ones)
    expected[0] = 3 * ones[0]           # user 0 is only in triple 0
    np.testing.assert_allclose(U.grad, expected)


def test_weights_on_the_device_path_are_the_composed_ops():
    from fastad.cuda import backend
    backend.set_emulation(True)
    try:
        results = []
        for device in (None, "cuda"):
            U, V, b = (fa.Parameter(t.value, dtype=np.float64, device=device) for t in _tables())
            ids = [fa.IndexInput(i, device=device) for i in IDS]
            w = fa.Input([0.5, 0.0, 2.0], dtype=np.float64, device=device)
            loss = fa.ranking_loss(U, ids[0], V, ids[1], ids[2], item_bias=b, loss="hinge",
                                   regularization=0.1, weights=w)
            loss.backward()
            results.append([loss.numpy()] + [backend.to_host(p.grad) if device else p.grad
                                             for p in (U, V, b)])
        for cpu, dev in zip(*results):
            np.testing.assert_allclose(dev, cpu, rtol=1e-12, atol=1e-13)
    finally:
        backend.set_emulation(None)


def test_bad_weights_raise():
    U, V, b = _tables()
    with pytest.raises(ValueError, match=r"ranking_loss: weights must have the ids' shape \(3,\)"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Input(np.ones(2), dtype=np.float64))
    with pytest.raises(ValueError, match="ranking_loss: weights must take no gradient"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Parameter(np.ones(3), dtype=np.float64))
    with pytest.raises(TypeError, match="ranking_loss: mixed dtypes"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=fa.Input(np.ones(3), dtype=np.float32))
    with pytest.raises(TypeError, match="ranking_loss: weights must be a fastad Variable"):
        fa.ranking_loss(U, IDS[0], V, IDS[1], IDS[2], weights=np.ones(3))
