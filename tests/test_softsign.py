"""fa.softsign, x / (1 + |x|): the proof op of docs/contributing.md's recipe (its manifest
line, its rule in rules.h, these tests)."""
import numpy as np
import pytest

import fastad as fa
from shape_helpers import assert_matches_torch_for_a_cotangent
from vjp import check_vjp

SHAPES = [(), (1,), (1, 5), (3, 4), (2, 3, 2)]


def softsign(x):
    return x / (1 + np.abs(x))


def sample(shape, seed=0):
    return np.random.default_rng(seed).normal(scale=3.0, size=shape)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_against_finite_differences(shape):
    x = sample(shape, len(shape))
    np.testing.assert_allclose(fa.softsign(fa.Input(x, dtype=np.float64)).value, softsign(x), rtol=1e-15)
    check_vjp(fa.softsign, x)


def test_the_slope_is_one_over_the_square_of_one_plus_abs_x():
    x = np.array([-4.0, -1.0, 0.0, 0.5, 2.0])
    w = fa.Parameter(x, dtype=np.float64)
    fa.softsign(w).sum().backward()
    np.testing.assert_allclose(w.grad, 1 / (1 + np.abs(x)) ** 2, rtol=1e-15)
    numerical, analytic = fa.finite_difference(w, fa.softsign(w).sum())
    np.testing.assert_allclose(analytic, numerical, rtol=1e-6)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    assert_matches_torch_for_a_cotangent(torch, fa.softsign, torch.nn.functional.softsign, sample((3, 4), 11),
                                         grad_rtol=1e-14, grad_atol=0, value_rtol=1e-15)


def test_float32_matches_float64():
    x = sample((4, 5), 3)
    w = fa.Parameter(x, dtype=np.float32)
    y = fa.softsign(w)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, softsign(x), rtol=2e-6, atol=1e-7)
    y.backward(np.ones((4, 5)))
    assert w.grad.dtype == np.float32
    np.testing.assert_allclose(w.grad, 1 / (1 + np.abs(x)) ** 2, rtol=2e-6, atol=1e-7)


def test_extremes_and_nan():
    y = fa.softsign(fa.Input([-np.inf, -1e300, 0.0, 1e300, np.inf, np.nan], dtype=np.float64)).value
    np.testing.assert_array_equal(y[:5], [np.nan, -1.0, 0.0, 1.0, np.nan])  # inf / inf, as torch
    assert np.isnan(y[5])


def test_empty_and_broadcast_shapes():
    w = fa.Parameter(np.zeros((0, 3)), dtype=np.float64)
    y = fa.softsign(w)
    assert y.shape == (0, 3)
    y.backward(np.zeros((0, 3)))
    assert w.grad.shape == (0, 3)
    # composed with a broadcasting op, the gradient sums back over the broadcast axis
    b = fa.Parameter(np.array([0.5, -2.0, 1.0]), dtype=np.float64)
    x = fa.Input(np.arange(6.0).reshape(2, 3), dtype=np.float64)
    fa.softsign(x + b).sum().backward()
    z = np.arange(6.0).reshape(2, 3) + b.value
    np.testing.assert_allclose(b.grad, (1 / (1 + np.abs(z)) ** 2).sum(axis=0), rtol=1e-15)


def test_replays_with_new_values():
    x = fa.Input([1.0, -3.0], dtype=np.float64)
    y = fa.softsign(x)
    x.set_value([-1.0, 3.0])
    np.testing.assert_allclose(y.forward().value, [-0.5, 0.75])


@pytest.mark.parametrize("bad, text", [
    (np.array([1.0, 2.0]), "softsign: x must be a fastad Variable, got ndarray"),
    (2.0, "softsign: x must be a fastad Variable, got float"),
    (fa.IndexInput([1, 2]), "softsign: x is an IndexInput"),
])
def test_refuses_what_is_not_a_float_variable(bad, text):
    with pytest.raises(TypeError, match=text):
        fa.softsign(bad)


def test_is_public_with_a_docstring():
    assert "softsign" in fa.__all__
    assert "x / (1 + |x|), elementwise." in fa.softsign.__doc__
