"""gelu (exact and tanh), elu, silu and hardtanh: values and gradients against PyTorch
in float64 and finite differences, float32, replay, the Modules and the bad arguments."""
import numpy as np
import pytest
import torch

import fastad as fa
from vjp import check_vjp

F = torch.nn.functional

# name -> (fastad function, torch function)
ACTIVATIONS = {
    "gelu": (fa.gelu, F.gelu),
    "gelu_tanh": (lambda v: fa.gelu(v, approximate="tanh"), lambda t: F.gelu(t, approximate="tanh")),
    "elu": (fa.elu, F.elu),
    "elu_0.3": (lambda v: fa.elu(v, alpha=0.3), lambda t: F.elu(t, alpha=0.3)),
    "elu_neg": (lambda v: fa.elu(v, -1.5), lambda t: F.elu(t, -1.5)),
    "silu": (fa.silu, F.silu),
    "hardtanh": (fa.hardtanh, F.hardtanh),
    "hardtanh_0_6": (lambda v: fa.hardtanh(v, 0.0, 6.0), lambda t: F.hardtanh(t, 0.0, 6.0)),
    "hardtanh_asym": (lambda v: fa.hardtanh(v, min_val=-0.5, max_val=2), lambda t: F.hardtanh(t, -0.5, 2)),
}
SHAPES = [(), (1,), (1, 5), (3, 4), (2, 3, 2), (0, 3)]


def sample(shape, seed):
    x = 3 * np.random.default_rng(seed).normal(size=shape)
    # keep clear of the kinks (0 and the hardtanh bounds), where only one side's slope is right
    for kink in (0.0, -1.0, 1.0, -0.5, 2.0, 6.0):
        x = np.where(np.abs(x - kink) < 0.05, kink + 0.3, x)
    return x


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_values_and_gradients_match_torch(name, shape):
    fn, ref = ACTIVATIONS[name]
    x = sample(shape, len(name) + len(shape))
    cot = np.random.default_rng(1).normal(size=shape)
    w = fa.Parameter(x, dtype=np.float64)
    y = fn(w)
    y.backward(cot)
    t = torch.tensor(x, requires_grad=True)
    ty = ref(t)
    ty.backward(torch.tensor(cot))
    assert y.shape == shape and y.dtype == np.float64
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_gradients_against_finite_differences(name):
    check_vjp(ACTIVATIONS[name][0], sample((3, 4), 5))


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_float32_follows_float64_and_replays(name):
    fn, ref = ACTIVATIONS[name]
    x = sample((4, 5), 2)
    w = fa.Parameter(x, dtype=np.float32)
    y = fn(w)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.value, ref(torch.tensor(x)).numpy(), rtol=2e-6, atol=2e-6)
    x2 = sample((4, 5), 3)
    w.set_value(x2)
    y.forward()
    y.backward(np.ones((4, 5)))
    t = torch.tensor(x2, requires_grad=True)
    ref(t).sum().backward()
    np.testing.assert_allclose(y.value, ref(torch.tensor(x2)).numpy(), rtol=2e-6, atol=2e-6)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=2e-5, atol=2e-6)


def test_slopes_at_the_kinks_follow_torch():
    x = np.array([-1.0, 0.0, 1.0, 6.0, -3.0])
    for fn, ref in [(fa.elu, F.elu), (fa.hardtanh, F.hardtanh),
                    (lambda v: fa.hardtanh(v, 0.0, 6.0), lambda t: F.hardtanh(t, 0.0, 6.0)),
                    (fa.gelu, F.gelu), (fa.silu, F.silu)]:
        w = fa.Parameter(x, dtype=np.float64)
        fn(w).sum().backward()
        t = torch.tensor(x, requires_grad=True)
        ref(t).sum().backward()
        np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)


def test_large_inputs_stay_finite():
    x = np.array([-800.0, -40.0, 40.0, 800.0])
    for fn in (fa.gelu, lambda v: fa.gelu(v, "tanh"), fa.elu, fa.silu):
        w = fa.Parameter(x, dtype=np.float64)
        y = fn(w)
        y.sum().backward()
        assert np.all(np.isfinite(y.value)) and np.all(np.isfinite(w.grad))


def test_modules_and_functional_forms():
    x = sample((2, 3), 9)
    v = fa.Input(x, dtype=np.float64)
    pairs = [(fa.nn.GELU(), F.gelu), (fa.nn.GELU("tanh"), lambda t: F.gelu(t, approximate="tanh")),
             (fa.nn.ELU(0.5), lambda t: F.elu(t, 0.5)), (fa.nn.SiLU(), F.silu),
             (fa.nn.Hardtanh(-2, 0.5), lambda t: F.hardtanh(t, -2, 0.5))]
    for module, ref in pairs:
        np.testing.assert_allclose(module(v).value, ref(torch.tensor(x)).numpy(), rtol=1e-13)
    assert repr(fa.nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(fa.nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    import fastad.nn.functional as Fa
    for name in ("gelu", "elu", "silu", "hardtanh"):
        assert getattr(Fa, name) is getattr(fa, name) is getattr(fa.nn, name)
    seq = fa.nn.Sequential(fa.nn.Linear(3, 4), fa.nn.GELU(), fa.nn.Linear(4, 1), fa.nn.SiLU())
    seq(fa.Input(np.ones((2, 3)))).sum().backward()


def test_bad_arguments_raise_clear_errors():
    v = fa.Input([1.0])
    with pytest.raises(ValueError, match="gelu: approximate must be 'none' or 'tanh', got 'erf'"):
        fa.gelu(v, "erf")
    with pytest.raises(ValueError, match="approximate must be"):
        fa.nn.GELU("fast")
    with pytest.raises(TypeError, match="elu: alpha must be a real Python number"):
        fa.elu(v, "1")
    with pytest.raises(TypeError, match="elu: alpha must be a real Python number"):
        fa.nn.ELU(None)
    with pytest.raises(TypeError, match="hardtanh: max_val must be a real Python number"):
        fa.hardtanh(v, 0.0, [1.0])
    with pytest.raises(ValueError, match="hardtanh: min_val must be <= max_val, got min_val=2, max_val=1"):
        fa.hardtanh(v, 2, 1)
    with pytest.raises(ValueError, match="min_val must be <= max_val"):
        fa.nn.Hardtanh(1.0, -1.0)
    with pytest.raises(TypeError, match="silu"):
        fa.silu(np.ones(3))
    with pytest.raises(TypeError, match="gelu"):
        fa.gelu(fa.IndexInput([1, 2]))


def test_modules_with_arguments_keep_them_and_show_them():
    # LeakyReLU, GELU, ELU, Hardtanh and AdaptiveAvgPool2d share one base: the same
    # attributes, keyword names, reprs and construction-time checks as before
    modules = [(fa.nn.LeakyReLU(negative_slope=0.2), {"negative_slope": 0.2},
                "LeakyReLU(negative_slope=0.2)"),
               (fa.nn.GELU(approximate="none"), {"approximate": "none"},
                "GELU(approximate='none')"),
               (fa.nn.ELU(alpha=2), {"alpha": 2}, "ELU(alpha=2)"),
               (fa.nn.Hardtanh(max_val=3.0), {"min_val": -1.0, "max_val": 3.0},
                "Hardtanh(min_val=-1.0, max_val=3.0)"),
               (fa.nn.AdaptiveAvgPool2d(output_size=(2, 3)), {"output_size": (2, 3)},
                "AdaptiveAvgPool2d(output_size=(2, 3))")]
    for module, kept, text in modules:
        assert {name: getattr(module, name) for name in kept} == kept
        assert repr(module) == text
    assert fa.nn.LeakyReLU()(fa.Input([-1.0, 2.0], dtype=np.float64)).value.tolist() == [-0.01, 2.0]
    with pytest.raises(ValueError, match="AdaptiveAvgPool2d: output_size"):
        fa.nn.AdaptiveAvgPool2d(0)
