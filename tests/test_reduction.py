"""sum/mean/max/logsumexp over any axes and softmax/log_softmax: values, gradients, edge cases."""
import itertools
import warnings

import numpy as np
import pytest

import fastad as fa
from shape_helpers import assert_matches_torch_for_a_cotangent, assert_set_value_replay_matches_fresh
from fastad.ops.reduction import sum as fsum, mean, max as fmax, logsumexp, softmax, log_softmax


def np_logsumexp(x, axis=None, keepdims=False):
    return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))


REDUCTIONS = {
    "sum": (fsum, np.sum),
    "mean": (mean, np.mean),
    "max": (fmax, np.max),
    "logsumexp": (logsumexp, np_logsumexp),
}


def axes_for(ndim):
    """None, (), every single axis (both signs), every pair, and all axes."""
    axes = [None, ()] + list(range(-ndim, ndim))
    axes += list(itertools.combinations(range(ndim), 2))
    if ndim >= 2:
        axes.append((-1, 0))
    if ndim >= 3:
        axes.append(tuple(range(ndim)))
    return axes


CASES = [(shape, axis) for shape in [(), (1, 5), (3, 4, 5)] for axis in axes_for(len(shape))]
# rows of 17 run the 8-lane accumulators and a tail; axis (0, 2) folds two such rows into a slot
CASES += [((2, 3, 17), axis) for axis in [None, 0, 2, (0, 2)]]


def weighted(out, seed):
    """A scalar that depends on every output element with a different weight."""
    w = np.random.default_rng(seed).normal(size=out.shape)
    return fsum(out * w)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_values_shapes_and_gradients(name, shape, axis, keepdims):
    op, ref = REDUCTIONS[name]
    x = np.random.default_rng(len(shape)).normal(size=shape)
    y = op(fa.Input(x, dtype=np.float64), axis, keepdims)
    expected = ref(x, axis=axis, keepdims=keepdims)
    assert y.shape == np.shape(expected)
    np.testing.assert_allclose(y.value, expected, rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda p: weighted(op(p, axis=axis, keepdims=keepdims), 1), x)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_two_reductions_of_one_input_add_their_gradients(name):
    op = REDUCTIONS[name][0]
    x = np.random.default_rng(2).normal(size=(3, 4, 5))
    assert fa.gradcheck(lambda p: weighted(op(p, axis=1), 3) + weighted(op(p, axis=(0, 2)), 4)
                        + weighted(op(p, axis=-1, keepdims=True), 5), x)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_values_and_gradients_match_torch(name, axis):
    torch = pytest.importorskip("torch")
    op = REDUCTIONS[name][0]
    x = np.random.default_rng(4).normal(size=(3, 4, 5))
    dims = tuple(range(3)) if axis is None else axis
    t_op = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax,
            "logsumexp": torch.logsumexp}[name]
    assert_matches_torch_for_a_cotangent(torch, lambda p: op(p, axis),
                                         lambda tx: t_op(tx, dim=dims, keepdim=False), x,
                                         grad_rtol=1e-12, grad_atol=1e-15)


def test_max_splits_the_gradient_among_ties_like_torch_amax():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0], [5.0, 0.0, -1.0]])
    p = fa.Parameter(x, dtype=np.float64)
    fmax(p, axis=1).backward(np.ones(3))
    np.testing.assert_allclose(p.grad, [[0, 0.5, 0.5], [1 / 3] * 3, [1, 0, 0]])
    q = fa.Parameter(x, dtype=np.float64)
    fmax(q).backward()
    np.testing.assert_allclose(q.grad, [[0, 0, 0], [0, 0, 0], [1, 0, 0]])
    torch = pytest.importorskip("torch")
    tx = torch.tensor(x, requires_grad=True)
    torch.amax(tx, dim=0).sum().backward()
    r = fa.Parameter(x, dtype=np.float64)
    fsum(fmax(r, axis=0)).backward()
    np.testing.assert_allclose(r.grad, tx.grad.numpy())


def test_max_propagates_nan_like_numpy():
    x = np.array([[1.0, np.nan, 3.0], [np.nan, 0.0, 1.0], [4.0, 2.0, np.nan]])
    np.testing.assert_array_equal(fmax(fa.Input(x), axis=1).value, np.max(x, axis=1))
    assert np.isnan(fmax(fa.Input(x)).item())
    for where in (0, 7, 20, 39):          # rows long enough for the 8-lane accumulators
        row = np.random.default_rng(where).normal(size=40)
        row[where] = np.nan
        assert np.isnan(fmax(fa.Input(row)).item())
        assert np.isnan(logsumexp(fa.Input(row)).item())


def test_logsumexp_is_stable():
    x = np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [-np.inf, 0.0], [-np.inf, -np.inf]])
    y = logsumexp(fa.Input(x, dtype=np.float64), axis=1)
    np.testing.assert_allclose(y.value, [1000 + np.log(2), -1000 + np.log(2), 0.0, -np.inf])
    p = fa.Parameter(x[:3], dtype=np.float64)
    fsum(logsumexp(p, axis=1)).backward()
    np.testing.assert_allclose(p.grad, [[0.5, 0.5], [0.5, 0.5], [0.0, 1.0]])
    assert logsumexp(fa.Input([np.inf, 1.0], dtype=np.float64)).item() == np.inf
    assert np.isnan(logsumexp(fa.Input([np.nan, 1.0], dtype=np.float64)).item())


def test_empty_inputs():
    x = np.zeros((2, 0, 3))
    v = fa.Input(x, dtype=np.float64)
    assert fsum(v).item() == 0.0
    s = fsum(v, axis=1)
    assert s.shape == (2, 3)
    np.testing.assert_array_equal(s.value, np.zeros((2, 3)))
    with warnings.catch_warnings(), np.errstate(invalid="ignore", divide="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        expected_mean = np.mean(x, axis=1)
    m = mean(v, axis=1)
    assert m.shape == expected_mean.shape and np.isnan(m.value).all()
    assert np.isnan(mean(v).item())
    # reductions that never fold zero elements into one slot are fine even for max
    assert fmax(v, axis=0).shape == np.max(x, axis=0).shape == (0, 3)
    assert fmax(v, axis=(0, 2), keepdims=True).shape == (1, 0, 1)
    for op in (fmax, logsumexp):
        with pytest.raises(ValueError, match=r"zero elements.*\(2, 0, 3\)"):
            op(v, axis=1)
        with pytest.raises(ValueError, match="zero elements"):
            op(v)
    p = fa.Parameter(x, dtype=np.float64)
    fsum(p, axis=1).backward(np.ones((2, 3)))
    assert p.grad.shape == (2, 0, 3)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_float32(name):
    op, ref = REDUCTIONS[name]
    x = np.random.default_rng(6).normal(size=(3, 4, 5))
    p = fa.Parameter(x, dtype=np.float32)
    y = op(p, (0, 2), True)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, ref(x.astype(np.float32).astype(np.float64), axis=(0, 2),
                                            keepdims=True), rtol=1e-5, atol=1e-6)
    fsum(y).backward()
    assert p.grad.dtype == np.float32


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_replay_after_set_value_matches_a_fresh_build(name):
    op = REDUCTIONS[name][0]
    rng = np.random.default_rng(7)
    w, x0, x1 = rng.normal(size=(3, 3, 4, 5))
    x1[0, 0, :2] = 9.0                      # a tie for max along the last axis after replay

    def build(x):
        p = fa.Parameter(w, dtype=np.float64)
        inp = fa.Input(x, dtype=np.float64)
        return p, [inp], weighted(op(p * inp, axis=-1), 8) + weighted(op(p * inp, axis=(0, 1)), 9)

    assert_set_value_replay_matches_fresh(build, [x0], [x1])


def test_methods_take_axis_and_keepdims_positionally():
    x = np.arange(12.0).reshape(3, 4)
    v = fa.Input(x, dtype=np.float64)
    assert v.sum(1, True).shape == (3, 1)
    np.testing.assert_array_equal(v.sum(1, True).value, x.sum(1, keepdims=True))
    np.testing.assert_array_equal(v.mean(axis=(0, 1)).value, x.mean())
    np.testing.assert_array_equal(v.max(0).value, x.max(0))


def test_bad_axes():
    v = fa.Input(np.zeros((3, 4, 5)))
    for op in (fsum, mean, fmax, logsumexp):
        for axis in (3, -4, (0, 3)):
            with pytest.raises(np.exceptions.AxisError, match=r"axis -?\d is out of range .* 3 dim"):
                op(v, axis)
        with pytest.raises(ValueError, match=r"axis -3 repeats axis 0 .*3 dim"):
            op(v, (0, -3))
        for axis in ("1", 1.5, [0, 1]):
            with pytest.raises(TypeError, match="axis must be None, an int or a tuple"):
                op(v, axis)
    assert issubclass(np.exceptions.AxisError, ValueError)
    with pytest.raises(np.exceptions.AxisError, match="0-d input has no axes"):
        fsum(fa.Input(1.0), 0)


def test_bad_inputs():
    with pytest.raises(TypeError, match="x must be a fastad Variable"):
        fsum(np.ones(3))
    with pytest.raises(TypeError, match="IndexInput"):
        fmax(fa.IndexInput([1, 2]))
    with pytest.raises(TypeError, match="IndexInput"):
        softmax(fa.IndexInput([1, 2]))


# ------------------------------------------------------- softmax, log_softmax

def np_softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


SOFTMAX = {"softmax": (softmax, np_softmax),
           "log_softmax": (log_softmax, lambda x, axis: np.log(np_softmax(x, axis)))}
SOFTMAX_CASES = [((), 0), ((), -1), ((5,), 0), ((1, 5), -1), ((1, 5), 0)] + \
    [((3, 4, 5), axis) for axis in range(-3, 3)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES)
@pytest.mark.parametrize("name", sorted(SOFTMAX))
def test_softmax_values_and_gradients(name, shape, axis):
    op, ref = SOFTMAX[name]
    x = np.random.default_rng(10).normal(size=shape)
    y = op(fa.Input(x, dtype=np.float64), axis)
    assert y.shape == shape
    np.testing.assert_allclose(y.value, ref(x.reshape(shape or (1,)), axis).reshape(shape),
                               rtol=1e-12, atol=1e-14)
    assert fa.gradcheck(lambda p: weighted(op(p, axis=axis), 11), x)
    assert fa.gradcheck(lambda p: weighted(op(p, axis=axis), 12) + weighted(op(p), 13), x)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("name", sorted(SOFTMAX))
def test_softmax_matches_torch(name, axis):
    torch = pytest.importorskip("torch")
    op = SOFTMAX[name][0]
    x = np.random.default_rng(14).normal(size=(3, 4, 5))
    cot = np.random.default_rng(15).normal(size=x.shape)
    tx = torch.tensor(x, requires_grad=True)
    ty = getattr(torch, name)(tx, dim=axis)
    ty.backward(torch.tensor(cot))
    p = fa.Parameter(x, dtype=np.float64)
    y = op(p, axis)
    y.backward(cot)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_softmax_is_stable():
    x = fa.Input(np.array([[1000.0, 0.0], [-1000.0, -1000.0], [0.0, -1000.0]]), dtype=np.float64)
    np.testing.assert_allclose(softmax(x).value, [[1, 0], [0.5, 0.5], [1, 0]])
    np.testing.assert_allclose(log_softmax(x).value,
                               [[0, -1000], [-np.log(2), -np.log(2)], [0, -1000]])
    np.testing.assert_allclose(softmax(x, axis=0).value.sum(axis=0), [1, 1])


@pytest.mark.parametrize("name", sorted(SOFTMAX))
def test_softmax_float32_empty_and_replay(name):
    op, ref = SOFTMAX[name]
    rng = np.random.default_rng(16)
    x0, x1 = rng.normal(size=(2, 3, 4))
    y = op(fa.Input(x0, dtype=np.float32), axis=1)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, ref(x0, 1), rtol=1e-5, atol=1e-6)
    for shape in [(0, 5), (2, 0)]:
        p = fa.Parameter(np.zeros(shape), dtype=np.float64)
        e = op(p)
        assert e.shape == shape
        e.backward(np.zeros(shape))
        assert p.grad.shape == shape

    def build(x):
        p = fa.Parameter(np.ones((2, 3, 4)), dtype=np.float64)
        inp = fa.Input(x, dtype=np.float64)
        return p, [inp], weighted(op(p * inp, axis=1), 17)

    assert_set_value_replay_matches_fresh(build, [x0], [x1])


def test_softmax_bad_axis():
    v = fa.Input(np.zeros((2, 3)))
    for axis in (None, (0,), (0, 1)):
        with pytest.raises(TypeError, match="axis must be one int"):
            softmax(v, axis)
    with pytest.raises(np.exceptions.AxisError, match="axis 2 is out of range"):
        log_softmax(v, 2)
    with pytest.raises(np.exceptions.AxisError, match="axis 1 is out of range"):
        softmax(fa.Input(1.0), 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("width", [2, 7, 8, 9, 31, 32, 33, 45, 70])
def test_sum_over_rows_adds_each_column_in_row_order(dtype, width):
    """sum over the leading axis (a column sum, kept in registers block by block) adds row
    after row into each column, as the row-at-a-time loop did: every clone, every width
    (blocks of 32, of 8 and single columns) gives the sequential sum bit for bit."""
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((41, width)) * 10 ** rng.uniform(-3, 3, (41, width))).astype(dtype)
    expected = np.zeros(width, dtype)
    for row in x:
        expected = expected + row
    got = fsum(fa.Input(x, dtype=dtype), axis=0).numpy()
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))
    got3 = fsum(fa.Input(x.reshape(41, 1, width), dtype=dtype), axis=0).numpy()   # two axes
    np.testing.assert_array_equal(got3.reshape(width).view(np.uint8), expected.view(np.uint8))
