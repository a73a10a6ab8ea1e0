"""Comparisons, where, maximum/minimum, clip and pow with a Variable exponent on the
device against the CPU path: values, gradients, replay (the masks change)."""
import numpy as np
import pytest

import fastad as fa
from device_check import check_against_cpu, host

rng = np.random.default_rng(16)
DTYPES = [np.float64, np.float32]
BROADCASTS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)),
              ((2, 1, 3), (4, 1)), ((0, 3), (3,))]
COMPARISONS = [fa.greater, fa.greater_equal, fa.less, fa.less_equal, fa.equal, fa.not_equal]


def ints(*shape):
    return rng.integers(-2, 3, size=shape).astype(np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", COMPARISONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_comparisons(backend, op, shapes, dtype):
    y = check_against_cpu(op, ints(*shapes[0]), ints(*shapes[1]), dtype=dtype)
    assert not y.requires_grad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), ()),
                                    ((3, 1), (1, 4), (3, 4)), ((2, 1, 3), (4, 1), (2, 4, 1)),
                                    ((0, 3), (3,), (1, 3))], ids=str)
def test_where_with_a_comparison_mask(backend, shapes, dtype):
    c, a, b = (rng.standard_normal(s) for s in shapes)
    check_against_cpu(lambda vc, va, vb: fa.where(vc > 0, va, vb * 2.0), c, a, b, dtype=dtype)


def test_where_with_a_host_mask_numbers_and_a_long_broadcast_sum(backend):
    mask = rng.random((700, 3)) > 0.5
    check_against_cpu(lambda a, b: fa.where(mask, a, b), rng.standard_normal((700, 3)),
                      rng.standard_normal(3))
    check_against_cpu(lambda a: fa.where(a > 0.1, a, 0.01 * a), rng.standard_normal((4, 5)))
    check_against_cpu(lambda b: fa.where(mask[:2], 1.5, b), rng.standard_normal((2, 1)))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [fa.maximum, fa.minimum], ids=lambda f: f.__name__)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_maximum_minimum(backend, op, shapes, dtype):
    # small integers: ties split the gradient (the replay moves off them)
    check_against_cpu(op, ints(*shapes[0]), ints(*shapes[1]), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bounds", [(-0.5, 0.5), (None, 0.3), (-0.2, None), (0.4, -0.4)],
                         ids=str)
def test_clip(backend, bounds, dtype):
    x = np.concatenate([rng.standard_normal(9), [-0.5, 0.5, 0.3]]).reshape(3, 4)
    check_against_cpu(lambda v: fa.clip(v, *bounds), x, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_pow_of_two_variables(backend, shapes, dtype):
    x = np.abs(rng.standard_normal(shapes[0])) + 0.5
    check_against_cpu(lambda a, b: a ** b, x, rng.standard_normal(shapes[1]), dtype=dtype)
    check_against_cpu(lambda b: 2.0 ** b, rng.standard_normal(shapes[1]), dtype=dtype)


def test_pow_at_zero_and_negative_bases(backend):
    x = np.array([0.0, 0.0, 0.0, -2.0, -2.0, 2.0])
    y = np.array([2.0, 0.0, -1.0, 2.0, 0.5, 0.0])
    check_against_cpu(lambda a, b: a ** b, x, y, replay=False)


def test_operands_on_two_devices_are_refused(backend):
    cpu = fa.Parameter(np.ones(3))
    dev = fa.Parameter(np.ones(3), device="cuda")
    for build in (lambda: dev > cpu, lambda: fa.maximum(cpu, dev), lambda: dev ** cpu,
                  lambda: fa.where(cpu > 0, dev, 0.0), lambda: fa.where(dev > 0, cpu, 0.0),
                  lambda: fa.where(dev > 0, dev, cpu)):
        with pytest.raises(ValueError, match="inputs on different devices, cpu and cuda:0"):
            build()


def test_a_host_mask_goes_to_the_device(backend):
    dev = fa.Parameter(np.array([-1.0, 2.0]), device="cuda")
    y = fa.where(np.array([True, False]), dev, 5.0)
    assert y.device == "cuda:0"
    np.testing.assert_array_equal(host(y), [-1.0, 5.0])
