"""The checks every pointwise loss of the manifest passes (tests/test_<loss>.py call them):
against PyTorch, on bad input, and its place in fa.nn."""
import numpy as np
import pytest

import fastad as fa
from vjp import check_vjp

REDUCTIONS = ["mean", "sum", "none"]
SHAPES = [(), (1,), (5,), (3, 4), (2, 3, 2)]


def assert_values_and_gradients(loss_fn, losses_of, x, y, reduction, target=None):
    """`loss_fn(x, y, reduction=...)` is `losses_of(x, y)` reduced, in float64, and its gradients
    to both operands (at `target`, else y) match finite differences."""
    loss = loss_fn(fa.Input(x, dtype=np.float64), y, reduction=reduction)
    losses = losses_of(x, y)
    expected = {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[reduction](losses)
    np.testing.assert_allclose(loss.value, expected, rtol=1e-14)
    check_vjp(lambda a, b: loss_fn(a, b, reduction=reduction), x, y if target is None else target)


def assert_matches_torch(loss_fn, torch_losses, x, y, reduction):
    """`loss_fn(w, y, reduction=...)` against `torch_losses(t, y)` (the unreduced losses of a
    torch tensor t): values and gradients, with a random cotangent for "none"."""
    torch = pytest.importorskip("torch")
    w = fa.Parameter(x, dtype=np.float64)
    loss = loss_fn(w, y, reduction=reduction)
    t = torch.tensor(x, requires_grad=True)
    losses = torch_losses(t, torch.tensor(y))
    expected = {"mean": losses.mean(), "sum": losses.sum(), "none": losses}[reduction]
    cot = np.random.default_rng(5).normal(size=loss.shape)
    loss.backward(cot if loss.shape else None)
    expected.backward(torch.tensor(cot) if loss.shape else None)
    np.testing.assert_allclose(loss.value, expected.detach().numpy(), rtol=1e-14)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-13)


def assert_bad_input_raises(name, loss_fn):
    """Operands of two shapes, an unknown reduction, an array for the input, mixed dtypes and
    an IndexInput target: each a clear error naming the loss."""
    a = fa.Parameter(np.zeros((2, 3)), dtype=np.float64)
    with pytest.raises(ValueError, match=rf"{name}: input has shape \(2, 3\) but target has shape \(3, 2\)"):
        loss_fn(a, np.zeros((3, 2)))
    with pytest.raises(ValueError, match=f"{name}: reduction must be"):
        loss_fn(a, np.zeros((2, 3)), reduction="batchmean")
    with pytest.raises(TypeError, match=f"{name}: input must be a fastad Variable, got ndarray"):
        loss_fn(np.zeros(3), np.zeros(3))
    with pytest.raises(TypeError, match=f"{name}: mixed dtypes"):
        loss_fn(a, fa.Input(np.zeros((2, 3)), dtype=np.float32))
    with pytest.raises(TypeError, match=f"{name}: target is an IndexInput"):
        loss_fn(a, fa.IndexInput([[0, 1, 1], [1, 0, 0]]))


def assert_public_in_fa_nn(name, doc):
    """fa.nn.<name> is fa.nn.functional.<name>, in both __all__, its docstring saying `doc`."""
    assert getattr(fa.nn, name) is getattr(fa.nn.functional, name)
    assert name in fa.nn.__all__ and name in fa.nn.functional.__all__
    assert doc in getattr(fa.nn, name).__doc__
