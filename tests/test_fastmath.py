"""The fast-math approximations keep the error bounds that fastmath.h documents."""
import numpy as np
import pytest

import fastad as fa
from fastad.ops.fastmath import approximate, enabled

BOUNDS = {np.float64: 1e-8, np.float32: 1e-6}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_exp_and_log_relative_error(dtype):
    x = np.linspace(-80, 80, 100_001).astype(dtype)
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(approximate("exp", x) - ref) / ref) <= BOUNDS[dtype]
    y = ref.astype(dtype)
    ref_log = np.log(y.astype(np.float64))
    err = np.abs(approximate("log", y) - ref_log) / np.maximum(np.abs(ref_log), 1.0)
    assert np.max(err) <= BOUNDS[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,ref", [("tanh", np.tanh), ("sigmoid", lambda x: 1 / (1 + np.exp(-x)))])
def test_tanh_and_sigmoid_absolute_error(dtype, name, ref):
    x = np.linspace(-30, 30, 100_001).astype(dtype)
    assert np.max(np.abs(approximate(name, x) - ref(x.astype(np.float64)))) <= BOUNDS[dtype]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_special_values_propagate(dtype):
    e = approximate("exp", np.array([np.nan, np.inf, -np.inf, 1e4, -1e4], dtype))
    assert np.isnan(e[0]) and e[1] == np.inf and e[2] == 0 and e[3] == np.inf and e[4] == 0
    lg = approximate("log", np.array([np.nan, np.inf, 0.0, -1.0], dtype))
    assert np.isnan(lg[0]) and lg[1] == np.inf and lg[2] == -np.inf and np.isnan(lg[3])
    assert np.isnan(approximate("tanh", np.array([np.nan], dtype))[0])


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown function"):
        approximate("sin", np.zeros(2))
    with pytest.raises(TypeError, match="float32 or float64"):
        approximate("exp", np.zeros(2, dtype=np.int64))
    assert isinstance(enabled(), bool)


@pytest.mark.skipif(enabled(), reason="a FASTAD_FAST_MATH build approximates tanh")
def test_float_tanh_within_one_ulp_and_special_values():
    # fa.tanh in float32 runs a vectorised double exp of its own, not the C library's
    x = np.concatenate([np.linspace(-12, 12, 400_001), np.geomspace(1e-6, 1e-3, 1001)]).astype(np.float32)
    y = fa.tanh(fa.Input(x)).value
    ref = np.tanh(x.astype(np.float64))
    assert np.max(np.abs(y - ref) / np.spacing(np.abs(ref).astype(np.float32))) <= 1.0
    assert np.array_equal(fa.tanh(fa.Input(-x)).value, -y)
    special = fa.tanh(fa.Input(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 3e38], np.float32))).value
    assert np.isnan(special[0])
    assert list(special[1:]) == [1.0, -1.0, 0.0, 0.0, np.float32(1e-30), 1.0]
    assert np.signbit(special[4])


@pytest.mark.skipif(enabled(), reason="a FASTAD_FAST_MATH build approximates exp")
def test_float_sigmoid_and_softplus_within_a_few_ulps_and_special_values():
    # their e**-|x| comes from the same vectorised double exp as tanh's
    x = np.linspace(-100, 30, 400_001).astype(np.float32)
    ref = 1 / (1 + np.exp(-x.astype(np.float64)))
    y = fa.sigmoid(fa.Input(x)).value
    assert np.max(np.abs(y - ref) / np.spacing(ref.astype(np.float32))) <= 3
    soft = np.logaddexp(0, x.astype(np.float64))
    assert np.max(np.abs(fa.softplus(fa.Input(x)).value - soft) / np.spacing(soft.astype(np.float32))) <= 2
    special = fa.sigmoid(fa.Input(np.array([np.nan, np.inf, -np.inf, -300, 0], np.float32))).value
    assert np.isnan(special[0]) and list(special[1:]) == [1.0, 0.0, 0.0, 0.5]
