"""fa.optim.FTRL: FTRL-Proximal against a numpy loop of McMahan et al.'s Algorithm 1, its
L1 sparsity, sparse rows, state and bad input (the row step, the GPU kernels and the
in-backward step against step() are in the optimizers' shared tests)."""
import numpy as np
import pytest
from scipy import sparse

import fastad as fa


def _reference(grads, alpha, beta, l1, l2, w0):
    """Per coordinate: the weights after each gradient, as the paper's algorithm gives them."""
    w, z, n = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for g in grads:
        sigma = (np.sqrt(n + g * g) - np.sqrt(n)) / alpha
        z += g - sigma * w
        n += g * g
        w = np.where(np.abs(z) <= l1, 0.0, -(z - np.sign(z) * l1) / ((beta + np.sqrt(n)) / alpha + l2))
    return w, z, n


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-13), (np.float32, 1e-5)])
@pytest.mark.parametrize("l1, l2", [(0.0, 0.0), (1.5, 0.2)])
def test_dense_steps_follow_the_algorithm(dtype, tol, l1, l2):
    rng = np.random.default_rng(0)
    grads = rng.normal(size=(6, 5, 3))
    P = fa.Parameter(np.zeros((5, 3)), dtype=dtype)
    opt = fa.optim.FTRL([P], lr=0.3, beta=0.7, l1=l1, l2=l2)
    x = fa.Input(np.zeros((5, 3)), dtype=dtype)
    loss = fa.sum(P * x)                         # its gradient is x
    for g in grads:
        x.set_value(g)
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
    w, z, n = _reference(grads, 0.3, 0.7, l1, l2, np.zeros((5, 3)))
    np.testing.assert_allclose(P.numpy(), w, rtol=tol, atol=tol)
    np.testing.assert_allclose(opt.state_dict()["state.0.z"], z, rtol=tol, atol=tol)
    np.testing.assert_allclose(opt.state_dict()["state.0.n"], n, rtol=tol, atol=tol)
    if l1:
        assert (P.numpy() == 0).any() and ((P.numpy() == 0) == (np.abs(z) <= l1)).all()


def test_sparse_rows_step_only_the_rows_touched():
    E = fa.Parameter(np.zeros((6, 2)), dtype=np.float64)
    opt = fa.optim.FTRL([E], lr=0.5, l1=0.1)
    rows = fa.IndexInput([1, 4, 1])
    loss = fa.sum(E[rows] * fa.Input([[1.0, -2.0], [0.5, 0.5], [1.0, 1.0]], dtype=np.float64))
    loss.backward()
    opt.step()
    g = np.zeros((6, 2))
    g[1] = [2.0, -1.0]
    g[4] = [0.5, 0.5]
    w, _, _ = _reference([g], 0.5, 1.0, 0.1, 0.0, np.zeros((6, 2)))
    np.testing.assert_allclose(E.numpy(), w, rtol=1e-13)
    assert not E.numpy()[[0, 2, 3, 5]].any()


def test_a_linear_model_trains_with_ftrl_and_its_l1_term_keeps_weights_at_zero():
    rng = np.random.default_rng(1)
    X = sparse.csr_matrix((rng.random((2000, 200)) < 0.05).astype(np.float32))
    truth = np.zeros(200)
    truth[:10] = 3.0
    y = (rng.random(2000) < 1 / (1 + np.exp(-(X @ truth - 0.5)))).astype(int)
    model = fa.models.LinearModel(optimizer="ftrl", lr=0.5, passes=3).fit(X, y)
    assert fa.metrics.roc_auc(y, model.decision_function(X)) > 0.8
    sparse_model = fa.models.LinearModel(optimizer="ftrl", lr=0.5, passes=3,
                                         optimizer_options={"l1": 20.0, "l2": 1.0}).fit(X, y)
    assert fa.metrics.roc_auc(y, sparse_model.decision_function(X)) > 0.8
    assert (sparse_model.weights["W"] == 0).mean() > 0.7      # L1 keeps most noise weights at 0
    assert (sparse_model.weights["W"][:10] != 0).all()        # and the planted ones
    assert (model.weights["W"] == 0).mean() < 0.1
    with pytest.raises(TypeError, match="optimizer_options .* are not ftrl's"):
        fa.models.LinearModel(optimizer="ftrl", optimizer_options={"momentum": 0.9})


def test_bad_arguments():
    W = fa.Parameter(np.zeros(3))
    with pytest.raises(ValueError, match="FTRL: lr \\(alpha\\) must be positive"):
        fa.optim.FTRL([W], lr=0)
    with pytest.raises(ValueError, match="FTRL: l1 must be"):
        fa.optim.FTRL([W], l1=-1)
    assert repr(fa.optim.FTRL([W])).startswith("FTRL(lr=0.1, beta=1.0, l1=0.0, l2=0.0")
