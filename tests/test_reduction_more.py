"""min, norm, var, std, argmax/argmin and cumsum: values and gradients against numpy,
PyTorch (float64) and finite differences, axes, keepdims, edge shapes, replay, errors."""
import warnings

import numpy as np
import pytest
import torch

import fastad as fa
from shape_helpers import assert_matches_torch_for_a_cotangent, assert_set_value_replay_matches_fresh
from test_reduction import CASES, weighted


def np_norm1(x, axis=None, keepdims=False):
    return np.sum(np.abs(x), axis=axis, keepdims=keepdims)


def np_norm2(x, axis=None, keepdims=False):
    return np.sqrt(np.sum(x * x, axis=axis, keepdims=keepdims))


OPS = {
    "min": (fa.min, np.min),
    "norm2": (lambda x, axis=None, keepdims=False: fa.norm(x, 2, axis, keepdims), np_norm2),
    "norm1": (lambda x, axis=None, keepdims=False: fa.norm(x, 1, axis, keepdims), np_norm1),
    "var": (fa.var, np.var),
    "var ddof=1": (lambda x, axis=None, keepdims=False: fa.var(x, axis, 1, keepdims),
                   lambda x, axis=None, keepdims=False: np.var(x, axis=axis, ddof=1, keepdims=keepdims)),
    "std": (fa.std, np.std),
    "std ddof=1": (lambda x, axis=None, keepdims=False: fa.std(x, axis, ddof=1, keepdims=keepdims),
                   lambda x, axis=None, keepdims=False: np.std(x, axis=axis, ddof=1, keepdims=keepdims)),
}


def reduced_count(shape, axis):
    axes = range(len(shape)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    return int(np.prod([shape[a] for a in axes]))


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_values_shapes_and_gradients(name, shape, axis, keepdims):
    op, ref = OPS[name]
    if "ddof=1" in name and reduced_count(shape, axis) < 2:
        return                                   # inf/NaN there: test_var_std_without_enough_degrees_of_freedom
    x = np.random.default_rng(len(shape)).normal(size=shape)
    y = op(fa.Input(x, dtype=np.float64), axis=axis, keepdims=keepdims)
    expected = ref(x, axis=axis, keepdims=keepdims)
    assert y.shape == np.shape(expected)
    np.testing.assert_allclose(y.value, expected, rtol=1e-12, atol=1e-12)
    assert fa.gradcheck(lambda p: weighted(op(p, axis=axis, keepdims=keepdims), 1), x)


TORCH = {
    "min": lambda t, dims: torch.amin(t, dim=dims),
    "norm2": lambda t, dims: torch.linalg.vector_norm(t, 2, dim=dims),
    "norm1": lambda t, dims: torch.linalg.vector_norm(t, 1, dim=dims),
    "var": lambda t, dims: torch.var(t, dim=dims, correction=0),
    "var ddof=1": lambda t, dims: torch.var(t, dim=dims, correction=1),
    "std": lambda t, dims: torch.std(t, dim=dims, correction=0),
    "std ddof=1": lambda t, dims: torch.std(t, dim=dims, correction=1),
}


@pytest.mark.parametrize("axis", [None, 1, -1, (0, 2)])
@pytest.mark.parametrize("name", sorted(OPS))
def test_values_and_gradients_match_torch(name, axis):
    x = np.random.default_rng(4).normal(size=(3, 4, 5))
    x[1, 2, :2] = x[1, 2, 3]                     # ties for min
    assert_matches_torch_for_a_cotangent(
        torch, lambda p: OPS[name][0](p, axis=axis),
        lambda tx: TORCH[name](tx, tuple(range(3)) if axis is None else axis), x,
        grad_rtol=1e-10, grad_atol=1e-13)


def test_min_splits_the_gradient_among_ties_like_torch_amin():
    x = np.array([[1.0, -3.0, -3.0], [2.0, 2.0, 2.0], [5.0, 0.0, -1.0]])
    p = fa.Parameter(x, dtype=np.float64)
    fa.min(p, axis=1).backward(np.ones(3))
    np.testing.assert_allclose(p.grad, [[0, 0.5, 0.5], [1 / 3] * 3, [0, 0, 1]])
    tx = torch.tensor(x, requires_grad=True)
    torch.amin(tx, dim=1).sum().backward()
    np.testing.assert_allclose(p.grad, tx.grad.numpy())
    long_row = np.random.default_rng(1).normal(size=40)   # the 8-lane accumulators
    long_row[[3, 30]] = -9.0
    q = fa.Parameter(long_row, dtype=np.float64)
    fa.min(q).backward()
    assert fa.min(q).item() == -9.0 and q.grad[3] == q.grad[30] == 0.5 and q.grad.sum() == 1.0
    long_row[17] = np.nan
    assert np.isnan(fa.min(fa.Input(long_row)).item())


@pytest.mark.parametrize("ord", [1, 2])
def test_norm_gradient_at_zero_is_zero_like_torch(ord):
    p = fa.Parameter(np.zeros((2, 3)), dtype=np.float64)
    y = fa.norm(p, ord, axis=1)
    np.testing.assert_array_equal(y.value, [0.0, 0.0])
    y.backward(np.ones(2))
    tx = torch.zeros((2, 3), dtype=torch.float64, requires_grad=True)
    torch.linalg.vector_norm(tx, ord, dim=1).sum().backward()
    np.testing.assert_array_equal(p.grad, tx.grad.numpy())
    np.testing.assert_array_equal(p.grad, np.zeros((2, 3)))


def test_std_of_a_constant_has_a_zero_gradient_like_torch():
    x = np.full((2, 4), 3.0)
    p = fa.Parameter(x, dtype=np.float64)
    fa.std(p, axis=1, ddof=1).backward(np.ones(2))
    tx = torch.tensor(x, requires_grad=True)
    torch.std(tx, dim=1).sum().backward()
    np.testing.assert_array_equal(p.grad, tx.grad.numpy())
    assert np.isfinite(p.grad).all()


def test_var_std_without_enough_degrees_of_freedom_follow_numpy():
    x = np.array([[1.0, 2.0], [3.0, 3.0]])
    with warnings.catch_warnings(), np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for ddof in (2, 3):
            np.testing.assert_array_equal(fa.var(fa.Input(x, dtype=np.float64), axis=1, ddof=ddof).value,
                                          np.var(x, axis=1, ddof=ddof))
            np.testing.assert_array_equal(fa.std(fa.Input(x, dtype=np.float64), axis=1, ddof=ddof).value,
                                          np.std(x, axis=1, ddof=ddof))
        empty = np.zeros((3, 0))
        np.testing.assert_array_equal(fa.var(fa.Input(empty, dtype=np.float64), axis=1).value,
                                      np.var(empty, axis=1))


def test_empty_inputs():
    x = np.zeros((2, 0, 3))
    v = fa.Input(x, dtype=np.float64)
    with pytest.raises(ValueError, match=r"min: cannot reduce over zero elements .*\(2, 0, 3\)"):
        fa.min(v, axis=1)
    assert fa.min(v, axis=0).shape == (0, 3)
    np.testing.assert_array_equal(fa.norm(v, axis=1).value, np.zeros((2, 3)))
    np.testing.assert_array_equal(fa.norm(v, 1, axis=1).value, np.zeros((2, 3)))
    p = fa.Parameter(x, dtype=np.float64)
    fa.norm(p, axis=1).backward(np.ones((2, 3)))
    assert p.grad.shape == (2, 0, 3)
    with pytest.raises(ValueError, match="argmax: cannot take the argmax of zero elements"):
        fa.argmax(v, axis=1)
    with pytest.raises(ValueError, match="argmin: cannot take the argmin of zero elements"):
        fa.argmin(v)
    assert fa.argmax(v, axis=2).shape == (2, 0)
    c = fa.cumsum(p, axis=1)
    assert c.shape == (2, 0, 3)
    assert fa.cumsum(p).shape == (0,)


@pytest.mark.parametrize("name", sorted(OPS))
def test_float32(name):
    op, ref = OPS[name]
    x = np.random.default_rng(6).normal(size=(3, 4, 5))
    p = fa.Parameter(x, dtype=np.float32)
    y = op(p, axis=(0, 2), keepdims=True)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, ref(x.astype(np.float32).astype(np.float64), axis=(0, 2),
                                            keepdims=True), rtol=1e-5, atol=1e-6)
    fa.sum(y).backward()
    assert p.grad.dtype == np.float32


@pytest.mark.parametrize("name", sorted(OPS) + ["cumsum"])
def test_replay_after_set_value_matches_a_fresh_build(name):
    op = fa.cumsum if name == "cumsum" else OPS[name][0]
    rng = np.random.default_rng(7)
    w, x0, x1 = rng.normal(size=(3, 3, 4, 5))
    x1[0, 0, :2] = -9.0                     # a tie for min along the last axis after replay

    def build(x):
        p = fa.Parameter(w, dtype=np.float64)
        inp = fa.Input(x, dtype=np.float64)
        return p, [inp], weighted(op(p * inp, axis=-1), 8) + weighted(op(p * inp, axis=0), 9)

    assert_set_value_replay_matches_fresh(build, [x0], [x1])


def test_norm_rejects_other_orders():
    v = fa.Input(np.ones(3))
    for ord in (3, 0, np.inf, -1, "fro", None, True, 1.5):
        with pytest.raises(ValueError, match=r"norm: ord must be 1 or 2 \(vector norms\), got"):
            fa.norm(v, ord)
    assert fa.norm(v, 2.0).item() == pytest.approx(np.sqrt(3))


def test_bad_axes_and_arguments():
    v = fa.Input(np.zeros((3, 4, 5)))
    for op in (fa.min, fa.norm, fa.var, fa.std, fa.argmax, fa.argmin, fa.cumsum):
        with pytest.raises(np.exceptions.AxisError, match=r"axis 3 is out of range .* 3 dim"):
            op(v, axis=3)
        with pytest.raises(np.exceptions.AxisError, match=r"axis -4 is out of range"):
            op(v, axis=-4)
        with pytest.raises(TypeError, match="IndexInput"):
            op(fa.IndexInput([1, 2]))
    for op in (fa.argmax, fa.argmin, fa.cumsum):
        with pytest.raises(TypeError, match="axis must be None or one int"):
            op(v, axis=(0, 1))
    for ddof in ("1", None, True):
        with pytest.raises(TypeError, match="var: ddof must be a number"):
            fa.var(v, ddof=ddof)


# ------------------------------------------------------------ argmax, argmin

@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("shape,axis", [((), None), ((5,), 0), ((5,), None), ((3, 4), -1),
                                        ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), None),
                                        ((2, 1, 17), -1)])
def test_argmax_argmin_match_numpy(name, shape, axis):
    x = np.random.default_rng(3).integers(0, 4, size=shape).astype(np.float64)   # many ties
    for dtype in (np.float64, np.float32):
        ids = getattr(fa, name)(fa.Input(x, dtype=dtype), axis=axis)
        expected = getattr(np, name)(x, axis=axis)
        assert ids.shape == np.shape(expected) and ids.dtype == np.int64
        np.testing.assert_array_equal(ids.value, expected)
    tx = torch.tensor(x)
    np.testing.assert_array_equal(ids.value, getattr(torch, name)(tx, dim=axis).numpy())


def test_argmax_picks_nan_like_numpy():
    x = np.array([[1.0, np.nan, 3.0, np.nan], [5.0, 2.0, 5.0, 0.0], [np.nan, 1.0, 0.0, 9.0]])
    for name in ("argmax", "argmin"):
        np.testing.assert_array_equal(getattr(fa, name)(fa.Input(x), axis=1).value,
                                      getattr(np, name)(x, axis=1))
        np.testing.assert_array_equal(getattr(fa, name)(fa.Input(x), axis=0).value,
                                      getattr(np, name)(x, axis=0))


def test_argmax_indexes_a_parameter_and_follows_replays():
    rng = np.random.default_rng(8)
    scores_data = rng.normal(size=(4, 6))
    scores = fa.Parameter(scores_data, dtype=np.float64)
    E = fa.Parameter(rng.normal(size=(6, 3)), dtype=np.float64)
    best = fa.argmax(scores, axis=1)
    assert not best.requires_grad
    rows = E[best]
    loss = fa.sum(rows * fa.max(scores, axis=1, keepdims=True))
    loss.backward()
    picked = np.argmax(scores_data, axis=1)
    np.testing.assert_array_equal(rows.value, E.value[picked])
    assert E.is_sparse_grad
    np.testing.assert_array_equal(sorted(E.sparse_rows()), sorted(set(picked)))

    new = rng.normal(size=(4, 6))
    scores.set_value(new)
    loss.forward()
    np.testing.assert_array_equal(best.value, np.argmax(new, axis=1))
    np.testing.assert_array_equal(rows.value, E.value[np.argmax(new, axis=1)])
    E.zero_grad(); scores.zero_grad()
    loss.backward()
    fresh_E = fa.Parameter(E.value, dtype=np.float64)
    fresh_s = fa.Parameter(new, dtype=np.float64)
    fresh = fa.sum(fresh_E[fa.argmax(fresh_s, axis=1)] * fa.max(fresh_s, axis=1, keepdims=True))
    fresh.backward()
    assert loss.item() == fresh.item()
    np.testing.assert_array_equal(E.grad, fresh_E.grad)
    np.testing.assert_array_equal(scores.grad, fresh_s.grad)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_with_keepdims_feeds_take_along_axis_and_follows_replays(name):
    rng = np.random.default_rng(9)
    x = rng.normal(size=(5, 7))
    p = fa.Parameter(x, dtype=np.float64)
    for axis in (0, 1, -1):
        ids = getattr(fa, name)(p, axis=axis, keepdims=True)
        assert ids.shape == getattr(np, name)(x, axis=axis, keepdims=True).shape
        picked = fa.take_along_axis(p, ids, axis)
        extreme = {"argmax": np.max, "argmin": np.min}[name]
        np.testing.assert_array_equal(picked.value, extreme(x, axis=axis, keepdims=True))
        loss = fa.sum(picked)
        p.zero_grad()
        loss.backward()                      # the gradient of max/min: one 1 per line
        tx = torch.tensor(x, requires_grad=True)
        {"argmax": torch.amax, "argmin": torch.amin}[name](tx, dim=axis).sum().backward()
        np.testing.assert_array_equal(p.grad, tx.grad.numpy())
        new = rng.normal(size=(5, 7))
        p.set_value(new)
        loss.forward()
        np.testing.assert_array_equal(picked.value, extreme(new, axis=axis, keepdims=True))
        p.set_value(x)
    assert getattr(fa, name)(p, keepdims=True).shape == (1, 1)


def test_argmax_nodes_are_not_settable_nor_differentiable():
    v = fa.Parameter(np.ones((2, 3)))
    ids = fa.argmax(v, axis=1)
    with pytest.raises(TypeError, match="argmax: its ids are computed from its input"):
        ids.set_value([0, 1])
    with pytest.raises(RuntimeError, match="does not depend on any Parameter"):
        ids.backward()
    with pytest.raises(TypeError, match="add: x is the integer node of 'argmax' \\(integer ids\\)"):
        fa.add(ids, 1.0)
    with pytest.raises(TypeError, match="exp: x is an IndexInput \\(integer ids\\)"):
        fa.exp(fa.IndexInput([1]))
    assert repr(ids) == "Variable(op='argmax', shape=(2,), dtype=int64)"
    with fa.detect_anomaly():
        fa.argmin(v).forward()


# ------------------------------------------------------------------ cumsum

@pytest.mark.parametrize("shape,axis", [((), None), ((), 0), ((5,), 0), ((5,), None), ((3, 4), -1),
                                        ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), None),
                                        ((2, 0, 3), 1), ((3, 1), 1)])
def test_cumsum_values_and_gradients(shape, axis):
    x = np.random.default_rng(2).normal(size=shape)
    y = fa.cumsum(fa.Input(x, dtype=np.float64), axis)
    expected = np.cumsum(x, axis=axis)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y.value, expected, rtol=1e-12, atol=1e-13)
    assert fa.gradcheck(lambda p: weighted(fa.cumsum(p, axis), 3), x)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.cumsum(tx.reshape(-1) if axis is None else tx, dim=0 if axis is None else axis)
    cot = np.random.default_rng(3).normal(size=y.shape)
    ty.backward(torch.tensor(cot).reshape(ty.shape))
    p = fa.Parameter(x, dtype=np.float64)
    fa.cumsum(p, axis).backward(cot)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-12, atol=1e-13)


def test_cumsum_gradients_add_and_float32():
    x = np.random.default_rng(4).normal(size=(3, 4))
    assert fa.gradcheck(lambda p: weighted(fa.cumsum(p, 0), 1) + weighted(fa.cumsum(p, 1), 2), x)
    p = fa.Parameter(x, dtype=np.float32)
    y = fa.cumsum(p, 1)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, np.cumsum(x.astype(np.float32), axis=1), rtol=1e-6)
    fa.sum(y).backward()
    np.testing.assert_allclose(p.grad, np.tile([4, 3, 2, 1], (3, 1)))
