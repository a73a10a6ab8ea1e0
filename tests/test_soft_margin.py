"""fa.nn.soft_margin, log(1 + exp(-target * input)) as torch.nn.functional.soft_margin_loss:
the proof loss of docs/contributing.md's recipe (its manifest line, its rule in rules.h,
its place in fa.nn, these tests)."""
import numpy as np
import pytest

import fastad as fa
from pointwise_loss_checks import (REDUCTIONS, SHAPES, assert_bad_input_raises, assert_matches_torch,
                                   assert_public_in_fa_nn, assert_values_and_gradients)

def soft_margin(x, y):
    return np.logaddexp(0, -y * x)


def data(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(scale=2.0, size=shape), rng.choice([-1.0, 1.0], size=shape)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_against_finite_differences(shape, reduction):
    x, y = data(shape, len(shape))
    # gradients flow to both operands (a real-valued target gets one too)
    assert_values_and_gradients(fa.nn.soft_margin, soft_margin, x, y, reduction, target=y * 0.7)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_matches_torch(reduction):
    torch = pytest.importorskip("torch")
    assert_matches_torch(fa.nn.soft_margin,
                         lambda t, y: torch.nn.functional.soft_margin_loss(t, y, reduction="none"),
                         *data((3, 4), 11), reduction)


def test_float32_matches_float64_and_large_margins_stay_finite():
    x, y = data((4, 5), 3)
    x[0, :3] = [-1e4, 1e4, 80.0]
    w = fa.Parameter(x, dtype=np.float32)
    loss = fa.nn.soft_margin(w, y.astype(np.float32), reduction="none")
    assert loss.dtype == fa.float32
    np.testing.assert_allclose(loss.value, soft_margin(x, y), rtol=2e-6, atol=1e-7)
    loss.backward(np.ones((4, 5)))
    assert w.grad.dtype == np.float32 and np.isfinite(w.grad).all()
    np.testing.assert_allclose(w.grad, -y / (1 + np.exp(y * x)), rtol=2e-6, atol=1e-7)


def test_empty_input_and_replay():
    empty = fa.Parameter(np.zeros((0, 2)), dtype=np.float64)
    assert np.isnan(fa.nn.soft_margin(empty, np.zeros((0, 2))).value)      # the mean of nothing
    assert fa.nn.soft_margin(empty, np.zeros((0, 2)), reduction="sum").value == 0
    x = fa.Input([0.0, 0.0], dtype=np.float64)
    loss = fa.nn.soft_margin(x, [1.0, -1.0])
    np.testing.assert_allclose(loss.value, np.log(2))
    x.set_value([3.0, -3.0])
    np.testing.assert_allclose(loss.forward().value, np.log1p(np.exp(-3.0)))


def test_bad_input_raises():
    assert_bad_input_raises("soft_margin", fa.nn.soft_margin)


def test_is_public_in_fa_nn_and_functional():
    assert_public_in_fa_nn("soft_margin", "log(1 + exp(-target * input)), elementwise")
