"""Comparisons (0/1 mask nodes), where, maximum/minimum, clip, and pow with a Variable
exponent or base: values and gradients against PyTorch (float64) and finite
differences, broadcasting, edge shapes, replay, hashing, and bad input."""
import numpy as np
import pytest
import torch

import fastad as fa
from vjp import check_vjp

F64 = np.float64
rng = np.random.default_rng(16)

COMPARISONS = {
    "greater": (fa.greater, np.greater, lambda a, b: a > b),
    "greater_equal": (fa.greater_equal, np.greater_equal, lambda a, b: a >= b),
    "less": (fa.less, np.less, lambda a, b: a < b),
    "less_equal": (fa.less_equal, np.less_equal, lambda a, b: a <= b),
    "equal": (fa.equal, np.equal, lambda a, b: a == b),
    "not_equal": (fa.not_equal, np.not_equal, lambda a, b: a != b),
}
BROADCAST_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((3, 1), (1, 4)),
                   ((), (2, 3)), ((2, 3), ()), ((2, 1, 3), (4, 1)), ((1, 5), (5,)), ((0, 3), (3,))]


def ints(*shape):
    """Small integers as floats: ties and equalities happen often."""
    return rng.integers(-2, 3, size=shape).astype(F64)


def P(x, dtype=F64):
    return fa.Parameter(np.asarray(x, dtype=dtype), dtype=dtype)


# ------------------------------------------------------------ comparisons

@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_are_0_1_masks_in_the_value_dtype(name, shapes, dtype):
    fn, ref, operator = COMPARISONS[name]
    a, b = ints(*shapes[0]), ints(*shapes[1])
    expected = ref(a, b).astype(dtype)
    for y in (fn(P(a, dtype), P(b, dtype)), operator(P(a, dtype), P(b, dtype)),
              operator(P(a, dtype), b), operator(a, P(b, dtype))):
        assert y.dtype == dtype and y.shape == expected.shape
        assert not y.requires_grad
        np.testing.assert_array_equal(y.value, expected)


@pytest.mark.parametrize("name", sorted(COMPARISONS))
def test_comparisons_with_numbers_on_either_side_and_nan(name):
    fn, ref, operator = COMPARISONS[name]
    x = np.array([-1.0, 0.0, 2.0, np.nan])
    v = fa.Input(x, dtype=F64)
    np.testing.assert_array_equal(operator(v, 0.0).value, ref(x, 0.0))
    np.testing.assert_array_equal(operator(0, v).value, ref(0, x))
    np.testing.assert_array_equal(fn(v, v).value, ref(x, x))         # NaN != NaN


def test_a_comparison_passes_no_gradient():
    x = P([-1.0, 2.0, 3.0])
    (fa.where(x > 1, x, 0.0) * (x > 0)).sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 1, 1])
    with pytest.raises(RuntimeError):
        (x > 0).sum().backward()


def test_a_comparison_is_recomputed_on_replay():
    x = fa.Input([-1.0, 2.0], dtype=F64)
    y = fa.where(x > 0, x, 0.01 * x)
    np.testing.assert_allclose(y.value, [-0.01, 2.0])
    x.set_value([3.0, -4.0])
    np.testing.assert_allclose(y.forward().value, [3.0, -0.04])


def test_comparisons_on_0d_and_empty():
    y = fa.Input(2.0) >= fa.Input(2.0)
    assert y.shape == () and y.item() == 1.0
    assert (fa.Input(np.zeros((0, 2))) < 1).shape == (0, 2)


def test_comparisons_reject_bad_operands():
    x = fa.Input([1.0, 2.0])
    with pytest.raises(ValueError, match=r"greater: shapes \(2,\) and \(3,\) cannot be broadcast"):
        x > np.ones(3)
    with pytest.raises(TypeError, match="less: mixed dtypes float32 and float64"):
        x < fa.Input([1.0, 2.0], dtype=F64)
    with pytest.raises(TypeError, match="greater: a is an IndexInput"):
        fa.IndexInput([1, 2]) > 0
    with pytest.raises(TypeError, match="operand b must be a Variable, a number or an array"):
        x > "a"


def test_variables_keep_identity_hashing_with_elementwise_equality():
    a, b = fa.Input([1.0, 2.0]), fa.Input([1.0, 2.0])
    assert hash(a) == object.__hash__(a) and hash(a) != hash(b)
    feeds = {a: 1, b: 2}
    assert feeds[a] == 1 and feeds[b] == 2 and a in feeds and a in {a} and b not in {a}
    assert a in [a] and [a, b].index(a) == 0       # identity first, as for any object
    with pytest.raises(ValueError, match="truth value"):
        b in [a]           # noqa: B015 -- elementwise ==, as in PyTorch: use ids or a dict
    np.testing.assert_array_equal((a == b).value, [1, 1])
    np.testing.assert_array_equal((a != b).value, [0, 0])
    assert (a == None) is False and (a != None) is True         # noqa: E711 (identity)
    assert (a == "x") is False and a != object()
    with pytest.raises(ValueError, match="truth value of a Variable with 2 elements"):
        bool(a == b)


# ------------------------------------------------------------------ where

WHERE_SHAPES = [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), ()), ((3, 1), (1, 4), (3, 4)),
                ((4,), (3, 1), (1,)), ((), (2, 3), (3,)), ((2, 1, 3), (4, 1), (2, 4, 1)),
                ((1, 5), (5,), (1, 1)), ((0, 3), (3,), (1, 3))]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=str)
def test_where_values_and_gradients_against_torch(shapes):
    c = rng.random(shapes[0]) > 0.5
    a, b = rng.normal(size=shapes[1]), rng.normal(size=shapes[2])
    pa, pb = P(a), P(b)
    y = fa.where(c, pa, pb)
    cot = rng.normal(size=y.shape)
    y.backward(cot)
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = torch.where(torch.tensor(c), ta, tb)
    ty.backward(torch.tensor(cot))
    np.testing.assert_array_equal(y.value, ty.detach().numpy())
    np.testing.assert_allclose(pa.grad, ta.grad.numpy(), rtol=1e-12, atol=0)
    np.testing.assert_allclose(pb.grad, tb.grad.numpy(), rtol=1e-12, atol=0)


@pytest.mark.parametrize("shapes", WHERE_SHAPES[:-1], ids=str)
def test_where_with_a_comparison_against_finite_differences(shapes):
    # the mask comes from a comparison of a third Parameter: replayed by check_vjp
    c, a, b = rng.normal(size=shapes[0]), rng.normal(size=shapes[1]), rng.normal(size=shapes[2])
    c = np.where(np.abs(c) < 0.01, 0.5, c)
    check_vjp(lambda vc, va, vb: fa.where(vc > 0, va * va, vb * 3.0), c, a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_where_takes_numbers_arrays_and_any_nonzero_cond(dtype):
    x = fa.Parameter(np.array([-2.0, 0.5, 3.0]), dtype=dtype)
    np.testing.assert_array_equal(fa.where(x > 0, x, 0).value, np.array([0, 0.5, 3], dtype))
    np.testing.assert_array_equal(fa.where([0, 2.5, np.nan], 1.0, x).value,
                                  np.array([-2, 1, 1], dtype))      # nonzero (NaN too) picks a
    y = fa.where(np.array([True, False, True]), 7, x)
    assert y.dtype == dtype
    y.backward(np.ones(3))
    np.testing.assert_array_equal(x.grad, [0, 1, 0])


def test_where_accumulates_into_both_sides_of_one_leaf():
    x = P([-1.0, 2.0])
    y = fa.where(x > 0, x * 2.0, x * 3.0) + fa.where(x > 0, x, 0.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [3.0, 3.0])
    y.sum().backward()            # a second pass writes again, then adds
    np.testing.assert_array_equal(x.grad, [6.0, 6.0])


def test_where_0d_empty_and_replay_of_the_mask():
    s = P(3.0)
    y = fa.where(s > 1, s * s, -s)
    assert y.shape == () and y.item() == 9.0
    y.backward()
    assert s.grad == 6.0
    s.set_value(0.5)
    assert y.forward().item() == -0.5
    s.zero_grad()
    y.backward()
    assert s.grad == -1.0
    e = P(np.zeros((0, 2)))
    z = fa.where(e > 0, e, 1.0)
    assert z.shape == (0, 2)
    z.backward(np.zeros((0, 2)))
    assert e.grad.shape == (0, 2)


def test_where_requires_grad_follows_a_and_b_only():
    c = P([1.0, 0.0])
    y = fa.where(c, fa.Input([1.0, 2.0], dtype=F64), np.zeros(2))
    assert not y.requires_grad
    assert fa.where(c, c, 0.0).requires_grad
    with fa.no_grad():
        assert not fa.where(c, c, 0.0).requires_grad


def test_where_names_the_argument_that_does_not_fit():
    x = fa.Input(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"where: a has shape \(2, 3\), which does not broadcast "
                                         r"with cond's shape \(4,\)"):
        fa.where(np.ones(4), x, 0.0)
    with pytest.raises(ValueError, match=r"where: b has shape \(2,\), which does not broadcast "
                                         r"with the shape \(2, 3\) of cond and a"):
        fa.where(np.ones(3), x, np.ones(2))
    with pytest.raises(TypeError, match="where: a or b must be a fastad Variable"):
        fa.where(x > 0, 1.0, 2.0)
    with pytest.raises(TypeError, match="where: mixed dtypes float32 and float64"):
        fa.where(x > 0, x, fa.Input(np.zeros(3), dtype=F64))
    with pytest.raises(TypeError, match="where: cond has dtype float64, a and b float32"):
        fa.where(fa.Input(np.zeros(3), dtype=F64) > 0, x, 0.0)
    with pytest.raises(TypeError, match="where: cond is an IndexInput"):
        fa.where(fa.IndexInput([0, 1, 1]), x, 0.0)
    with pytest.raises(TypeError, match="where: operand cond must be a Variable, a number or an "
                                        "array"):
        fa.where("yes", x, 0.0)


# -------------------------------------------------------- maximum, minimum

@pytest.mark.parametrize("name", ["maximum", "minimum"])
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS, ids=str)
def test_maximum_minimum_against_torch_with_ties(name, shapes):
    a, b = ints(*shapes[0]), ints(*shapes[1])
    pa, pb = P(a), P(b)
    y = getattr(fa, name)(pa, pb)
    cot = rng.normal(size=y.shape)
    y.backward(cot)
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = getattr(torch, name)(ta, tb)
    ty.backward(torch.tensor(cot))
    np.testing.assert_array_equal(y.value, ty.detach().numpy())
    np.testing.assert_allclose(pa.grad, ta.grad.numpy(), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pb.grad, tb.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("op", [fa.maximum, fa.minimum])
def test_maximum_minimum_against_finite_differences(op):
    a = rng.normal(size=(3, 4))
    b = a[0] + 0.3 * np.sign(rng.normal(size=4))          # no ties, some of each side
    check_vjp(op, a, b)
    check_vjp(lambda v: op(v, 0.2), a)
    check_vjp(lambda v: op(np.linspace(-1, 1, 4), v), a)


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_nan_and_float32_as_torch(name):
    a = np.array([np.nan, 1.0, np.nan, 2.0], dtype=np.float32)
    b = np.array([1.0, np.nan, np.nan, 2.0], dtype=np.float32)
    pa, pb = P(a, np.float32), P(b, np.float32)
    y = getattr(fa, name)(pa, pb)
    y.backward(np.ones(4))
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = getattr(torch, name)(ta, tb)
    ty.sum().backward()
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y.value, ty.detach().numpy())
    np.testing.assert_array_equal(pa.grad, ta.grad.numpy())
    np.testing.assert_array_equal(pb.grad, tb.grad.numpy())


# ------------------------------------------------------------------- clip

CLIPS = [(-0.5, 0.5), (None, 0.3), (-0.2, None), (0.4, -0.4), (0, 0)]


@pytest.mark.parametrize("bounds", CLIPS, ids=str)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_against_torch_clamp_with_values_on_the_bounds(bounds, dtype):
    x = np.concatenate([rng.normal(size=10), [-0.5, 0.5, 0.3, -0.2, 0.0, 0.4, -0.4, np.nan]])
    x = x.astype(dtype).reshape(3, 6)
    p = P(x, dtype)
    y = fa.clip(p, *bounds)
    cot = rng.normal(size=x.shape)
    y.backward(cot)
    t = torch.tensor(x, requires_grad=True)
    ty = torch.clamp(t, *bounds)
    ty.backward(torch.tensor(cot, dtype=t.dtype))
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.value, ty.detach().numpy())
    np.testing.assert_allclose(p.grad, t.grad.numpy(), rtol=1e-6)


def test_clip_against_finite_differences_0d_empty_and_replay():
    x = np.array([-2.0, -0.3, 0.1, 0.7, 3.0])
    check_vjp(lambda v: fa.clip(v, -1.0, 1.0), x)
    check_vjp(lambda v: fa.clip(v, None, 0.0), x)
    s = P(5.0)
    y = fa.clip(s, 0, 1)
    assert y.shape == () and y.item() == 1.0
    s.set_value(0.25)
    assert y.forward().item() == 0.25
    assert fa.clip(P(np.zeros((2, 0))), 0, 1).shape == (2, 0)


@pytest.mark.parametrize("a_min, a_max, error, match", [
    (None, None, ValueError, "clip: give a_min, a_max or both"),
    (float("nan"), None, ValueError, r"clip: a_min must be a number \(not NaN\), got nan"),
    (None, "1", TypeError, "clip: a_max must be a real Python number"),
    (None, [1.0], TypeError, "clip: a_max must be a real Python number"),
    (True, None, TypeError, "clip: a_min must be a real Python number"),
])
def test_clip_rejects_bad_bounds(a_min, a_max, error, match):
    with pytest.raises(error, match=match):
        fa.clip(fa.Input([1.0]), a_min, a_max)


# ------------------------------------------------------------------- pow

@pytest.mark.parametrize("shapes", BROADCAST_PAIRS[:-1], ids=str)
def test_pow_of_two_variables_against_torch_and_finite_differences(shapes):
    x = np.abs(rng.normal(size=shapes[0])) + 0.5
    e = rng.normal(size=shapes[1])
    px, pe = P(x), P(e)
    y = px ** pe
    cot = rng.normal(size=y.shape)
    y.backward(cot)
    tx = torch.tensor(x, requires_grad=True)
    te = torch.tensor(e, requires_grad=True)
    ty = tx ** te
    ty.backward(torch.tensor(cot))
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(px.grad, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(pe.grad, te.grad.numpy(), rtol=1e-12)
    check_vjp(fa.pow, x, e)


def test_pow_with_a_number_or_array_base():
    e = rng.normal(size=(2, 3))
    check_vjp(lambda v: 2.0 ** v, e)
    check_vjp(lambda v: fa.pow(np.array([0.5, 1.5, 3.0]), v), e)
    check_vjp(lambda v: v ** np.array([0.5, 2.0, -1.0]), np.abs(e) + 0.5)
    np.testing.assert_allclose((3 ** fa.Input([0.0, 2.0], dtype=F64)).value, [1.0, 9.0])
    assert (2.0 ** fa.Input([1.0])).dtype == np.float32


def test_pow_at_zero_and_negative_bases_as_torch():
    # x = 0 with y >= 0: no gradient to y; x < 0: NaN where x**y is not real; y = 0: none to x
    x = np.array([0.0, 0.0, 0.0, -2.0, -2.0, 2.0, 0.0])
    y = np.array([2.0, 0.0, -1.0, 2.0, 0.5, 0.0, 0.5])
    px, py = P(x), P(y)
    out = px ** py
    out.backward(np.ones(7))
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.tensor(y, requires_grad=True)
    (tx ** ty).sum().backward()
    np.testing.assert_allclose(out.value, (tx ** ty).detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(px.grad, tx.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(py.grad, ty.grad.numpy(), rtol=1e-12)
    b = P(np.array([-1.0, 0.0, 2.0]))
    (0.0 ** b).sum().backward()
    tb = torch.tensor([-1.0, 0.0, 2.0], dtype=torch.float64, requires_grad=True)
    (0.0 ** tb).sum().backward()
    np.testing.assert_allclose(b.grad, tb.grad.numpy())


def test_pow_float32_replay_and_a_number_exponent_unchanged():
    x, e = P([1.5, 2.0], np.float32), P([2.0, -0.5], np.float32)
    y = x ** e
    np.testing.assert_allclose(y.value, [2.25, 2.0 ** -0.5], rtol=1e-6)
    e.set_value([1.0, 3.0])
    np.testing.assert_allclose(y.forward().value, [1.5, 8.0], rtol=1e-6)
    assert type(x ** 3).__name__ == "Unary" and type(x ** e).__name__ == "Binary"


def test_pow_rejects_bad_operands():
    with pytest.raises(TypeError, match="pow: at least one operand must be a fastad Variable"):
        fa.pow(2.0, 3.0)
    with pytest.raises(ValueError, match=r"pow: shapes \(2,\) and \(3,\) cannot be broadcast"):
        fa.Input([1.0, 2.0]) ** fa.Input([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="pow: operand b must be a Variable, a number or an array"):
        fa.Input([1.0]) ** 1j
    with pytest.raises(TypeError, match="pow\\(\\) with a modulus"):
        pow(2, fa.Input([1.0]), 3)
