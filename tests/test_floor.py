"""fa.floor: the largest integer <= x, elementwise, with a zero gradient (PyTorch's)."""
import numpy as np
import pytest

import fastad as fa
from shape_helpers import assert_matches_torch_for_a_cotangent
from vjp import check_vjp

SHAPES = [(), (1,), (1, 5), (3, 4), (2, 3, 2)]


def sample(shape, seed=0):
    """Values at least 0.01 from an integer, where central differences see the flat steps."""
    x = np.random.default_rng(seed).normal(scale=3.0, size=shape)
    return np.floor(x) + np.clip(x - np.floor(x), 0.01, 0.99)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_against_finite_differences(shape):
    x = sample(shape, len(shape))
    np.testing.assert_array_equal(fa.floor(fa.Input(x, dtype=np.float64)).value, np.floor(x))
    check_vjp(fa.floor, x)


def test_the_gradient_is_zero_and_flows_on():
    w = fa.Parameter([-1.5, 0.0, 2.7], dtype=np.float64)
    (fa.floor(w) * 3 + w).sum().backward()
    np.testing.assert_array_equal(w.grad, [1.0, 1.0, 1.0])     # only the `+ w` term's


def test_matches_torch():
    torch = pytest.importorskip("torch")
    assert_matches_torch_for_a_cotangent(torch, fa.floor, torch.floor, sample((3, 4), 11), grad_rtol=0,
                                         grad_atol=0, value_rtol=0)       # bit for bit


def test_float32_integers_negative_zero_and_specials():
    x = np.array([-2.0, -1.5, -0.5, -0.0, 0.0, 0.5, 1.0, 2.5e7 + 0.5, 3e9, np.inf, -np.inf])
    y = fa.floor(fa.Input(x, dtype=np.float32))
    assert y.dtype == fa.float32
    np.testing.assert_array_equal(y.value, np.floor(x.astype(np.float32)))
    assert np.signbit(y.value[3]) and not np.signbit(y.value[4])
    assert np.isnan(fa.floor(fa.Input([np.nan])).value[0])


def test_empty_and_bad_input():
    w = fa.Parameter(np.zeros((0, 3)), dtype=np.float64)
    y = fa.floor(w)
    assert y.shape == (0, 3)
    y.backward(np.zeros((0, 3)))
    with pytest.raises(TypeError, match="floor: x is an IndexInput"):
        fa.floor(fa.IndexInput([1]))
    with pytest.raises(TypeError, match="floor"):
        fa.floor("1.5")
