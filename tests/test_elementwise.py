"""Unary functions and broadcasting + - * / **: values, gradients, edge shapes."""
import numpy as np
import pytest

import fastad as fa
from vjp import check_vjp

UNARY = {
    "neg": (fa.neg, lambda x: -x, None),
    "exp": (fa.exp, np.exp, None),
    "log": (fa.log, np.log, "positive"),
    "tanh": (fa.tanh, np.tanh, None),
    "sigmoid": (fa.sigmoid, lambda x: 1 / (1 + np.exp(-x)), None),
    "relu": (fa.relu, lambda x: np.maximum(x, 0), "away_from_zero"),
    "leaky_relu": (fa.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x), "away_from_zero"),
    "leaky_relu_0.2": (lambda v: fa.leaky_relu(v, negative_slope=0.2),
                       lambda x: np.where(x > 0, x, 0.2 * x), "away_from_zero"),
    "softplus": (fa.softplus, lambda x: np.logaddexp(0, x), None),
    "logsigmoid": (fa.logsigmoid, lambda x: -np.logaddexp(0, -x), None),
    "sqrt": (fa.sqrt, np.sqrt, "positive"),
    "square": (fa.square, np.square, None),
    "abs": (fa.abs, np.abs, "away_from_zero"),
    "pow3": (lambda v: v ** 3, lambda x: x ** 3, None),
    "pow_half": (lambda v: v ** 0.5, np.sqrt, "positive"),
    "pow_neg": (lambda v: v ** -1.5, lambda x: x ** -1.5, "positive"),
}
# rows under 16 elements run elementwise_loops.h's inlined loops, longer ones its cloned loops
SHAPES = [(), (1,), (1, 5), (3, 4), (2, 3, 2), (40,), (4, 9)]
TORCH_UNARY = {"exp": "exp", "log": "log", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu",
               "sqrt": "sqrt", "square": "square", "abs": "abs", "neg": "neg"}


def sample(shape, domain, seed):
    x = np.random.default_rng(seed).normal(size=shape)
    if domain == "positive":
        x = np.abs(x) + 0.5
    elif domain == "away_from_zero":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    return x


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", SHAPES)
def test_unary_values_and_gradients(name, shape):
    op, ref, domain = UNARY[name]
    x = sample(shape, domain, len(name) * 7 + len(shape))
    np.testing.assert_allclose(op(fa.Input(x, dtype=np.float64)).value, ref(x), rtol=1e-12)
    check_vjp(op, x)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_on_empty_arrays(name):
    op = UNARY[name][0]
    w = fa.Parameter(np.zeros((0, 3)), dtype=np.float64)
    y = op(w)
    assert y.shape == (0, 3)
    y.backward(np.zeros((0, 3)))
    assert w.grad.shape == (0, 3)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(), (3,), (4, 5), (40,)])
def test_unary_float32_matches_float64(name, shape):
    op, ref, domain = UNARY[name]
    x = sample(shape, domain, 3)
    y = op(fa.Input(x, dtype=np.float32))
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.value, ref(x), rtol=2e-6, atol=1e-6)


def test_unary_ops_are_stable_at_extremes():
    x = fa.Input(np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0]), dtype=np.float64)
    np.testing.assert_allclose(fa.sigmoid(x).value, [0, 1 / (1 + np.exp(30)), 0.5, 1 / (1 + np.exp(-30)), 1])
    np.testing.assert_allclose(fa.softplus(x).value, np.logaddexp(0, x.value))
    np.testing.assert_allclose(fa.logsigmoid(x).value, -np.logaddexp(0, -x.value))
    assert np.all(np.isfinite(fa.tanh(x).value))


@pytest.mark.parametrize("name", sorted(TORCH_UNARY))
def test_unary_gradients_match_torch(name):
    torch = pytest.importorskip("torch")
    op, _, domain = UNARY[name]
    x = sample((3, 4), domain, 11)
    cot = np.random.default_rng(5).normal(size=(3, 4))
    w = fa.Parameter(x, dtype=np.float64)
    op(w).backward(cot)
    t = torch.tensor(x, requires_grad=True)
    getattr(torch, TORCH_UNARY[name])(t).backward(torch.tensor(cot))
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("slope", [0.01, 0.2, -0.5, 0.0])
def test_leaky_relu_matches_torch(slope):
    torch = pytest.importorskip("torch")
    x = sample((3, 4), "away_from_zero", 13)
    cot = np.random.default_rng(6).normal(size=(3, 4))
    w = fa.Parameter(x, dtype=np.float64)
    y = fa.leaky_relu(w, slope)
    y.backward(cot)
    t = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.leaky_relu(t, slope)
    ty.backward(torch.tensor(cot))
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)


def test_leaky_relu_against_finite_differences_and_at_zero():
    w = fa.Parameter(np.array([-1.5, -0.2, 0.3, 2.0]), dtype=np.float64)
    loss = fa.sum(fa.leaky_relu(w, 0.3) * fa.Input(np.array([1.0, 2.0, 3.0, 4.0]), dtype=np.float64))
    numerical, analytic = fa.finite_difference(w, loss)
    np.testing.assert_allclose(analytic, numerical, rtol=1e-6)
    np.testing.assert_allclose(analytic, [0.3, 0.6, 3.0, 4.0], rtol=1e-12)
    z = fa.Parameter(np.zeros(2), dtype=np.float64)
    fa.leaky_relu(z, 0.3).sum().backward()
    np.testing.assert_array_equal(z.grad, [0.3, 0.3])         # the slope at 0 is negative_slope


@pytest.mark.parametrize("slope", [None, "0.1", True, [0.1], 1j, fa.Input([0.1])])
def test_leaky_relu_refuses_a_slope_that_is_not_a_real_number(slope):
    with pytest.raises(TypeError, match="leaky_relu: negative_slope must be a real Python number"):
        fa.leaky_relu(fa.Input([1.0]), slope)


BINARY = {"add": (fa.add, np.add), "sub": (fa.sub, np.subtract), "mul": (fa.mul, np.multiply),
          "div": (fa.div, np.divide)}
BROADCAST_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((3, 1), (1, 4)),
                   ((), (2, 3)), ((2, 3), ()), ((2, 1, 3), (4, 1)), ((1, 5), (5,)),
                   ((1, 1), (2, 3)), ((5, 1, 1), (1, 2, 1))]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("shapes", BROADCAST_PAIRS)
def test_binary_broadcasting_values_and_gradients(name, shapes):
    op, ref = BINARY[name]
    rng = np.random.default_rng(len(name) + 3 * len(shapes[0]))
    a = rng.normal(size=shapes[0])
    b = rng.normal(size=shapes[1]) + (3.0 if name == "div" else 0.0)
    out = check_vjp(op, a, b)
    np.testing.assert_allclose(out.value, ref(a, b), rtol=1e-12)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_scalars_and_arrays_on_either_side(name):
    op, ref = BINARY[name]
    x = np.array([[1.5, -2.0, 3.0]])
    check_vjp(lambda v: op(v, 2.5), x)
    check_vjp(lambda v: op(2.5, v), x)
    check_vjp(lambda v: op(np.array([1.0, 2.0, 4.0]), v), x)
    v = fa.Input(x, dtype=np.float64)
    np.testing.assert_allclose(op(v, 2.5).value, ref(x, 2.5))
    np.testing.assert_allclose(op(2.5, v).value, ref(2.5, x))


def test_operators_map_to_ops():
    a = fa.Input([2.0, 3.0], dtype=np.float64)
    b = fa.Input([4.0, 5.0], dtype=np.float64)
    np.testing.assert_allclose((a + b).value, [6, 8])
    np.testing.assert_allclose((a - b).value, [-2, -2])
    np.testing.assert_allclose((a * b).value, [8, 15])
    np.testing.assert_allclose((a / b).value, [0.5, 0.6])
    np.testing.assert_allclose((-a).value, [-2, -3])
    np.testing.assert_allclose((a ** 2).value, [4, 9])
    np.testing.assert_allclose((1 - a).value, [-1, -2])
    np.testing.assert_allclose((6 / a).value, [3, 2])
    np.testing.assert_allclose((np.array([1.0, 1.0]) + a).value, [3, 4])


def test_binary_on_empty_broadcast():
    a = fa.Parameter(np.zeros((0, 3)), dtype=np.float64)
    b = fa.Parameter(np.ones(3), dtype=np.float64)
    y = a * b
    assert y.shape == (0, 3)
    y.backward(np.zeros((0, 3)))
    np.testing.assert_array_equal(b.grad, 0)


def test_broadcast_replay_after_set_value():
    x = fa.Input(np.zeros((2, 3)), dtype=np.float64)
    b = fa.Parameter(np.array([1.0, 2.0, 3.0]), dtype=np.float64)
    y = fa.tanh(x * b + b)
    new = np.arange(6.0).reshape(2, 3) / 6
    x.set_value(new)
    y.forward()
    y.backward(np.ones((2, 3)))
    bv = b.value
    np.testing.assert_allclose(y.value, np.tanh(new * bv + bv))
    np.testing.assert_allclose(b.grad, ((1 - np.tanh(new * bv + bv) ** 2) * (new + 1)).sum(0))


def test_binary_gradients_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(3, 1, 4)), rng.normal(size=(5, 1)) + 3
    pa, pb = fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64)
    out = (pa * pb - pa / pb + pb) ** 2
    cot = rng.normal(size=out.shape)
    out.backward(cot)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    ((ta * tb - ta / tb + tb) ** 2).backward(torch.tensor(cot))
    np.testing.assert_allclose(pa.grad, ta.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(pb.grad, tb.grad.numpy(), rtol=1e-10)


def test_incompatible_shapes_name_both():
    a = fa.Input(np.zeros((2, 3)))
    b = fa.Input(np.zeros((4,)))
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        a + b


def test_binary_needs_a_variable():
    with pytest.raises(TypeError, match="at least one operand"):
        fa.add(1.0, 2.0)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_long_rows_give_the_short_rows_bits(name, dtype):
    # A long row runs the cloned loop of the widest vectors the CPU has (AVX-512 here, its
    # multiplies not fused into adds); a row under 16 elements the inlined loop built for
    # any x86-64: every value and slope must be the same, bit for bit.
    op, _, domain = UNARY[name]
    x = sample((400,), domain, 11).astype(dtype)
    x[::7] *= 20
    g = np.random.default_rng(12).normal(size=400).astype(dtype)
    long_in = fa.Parameter(x, dtype=dtype)
    long_out = op(long_in)
    long_out.backward(g)
    for i in range(0, 400, 4):
        short_in = fa.Parameter(x[i:i + 4], dtype=dtype)
        short_out = op(short_in)
        short_out.backward(g[i:i + 4])
        assert short_out.value.tobytes() == long_out.value[i:i + 4].tobytes(), (name, x[i:i + 4])
        assert short_in.grad.tobytes() == long_in.grad[i:i + 4].tobytes(), (name, x[i:i + 4])
