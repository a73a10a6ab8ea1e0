"""Losses with PyTorch's semantics: cross_entropy, nll_loss, bce_with_logits, mse, huber."""
import numpy as np
import pytest
from scipy.special import expit

import fastad as fa
from shape_helpers import assert_set_value_replay_matches_fresh
from fastad.ops.losses import cross_entropy, nll_loss, bce_with_logits, mse, huber
from fastad.ops.reduction import sum as fsum, log_softmax

REDUCTIONS = ["mean", "sum", "none"]


def scalar(out, seed=0):
    """out itself if it has one element, else a weighted sum of its elements."""
    if out.shape == ():
        return out
    return fsum(out * np.random.default_rng(seed).normal(size=out.shape))


def torch_backward(torch, out, seed=0):
    """Backward with the same weights that `scalar` uses."""
    if out.dim() == 0:
        out.backward()
    else:
        out.backward(torch.tensor(np.random.default_rng(seed).normal(size=tuple(out.shape))))


def logits_and_targets(batch=6, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(batch, classes)) * 2, rng.integers(0, classes, size=batch)


# ------------------------------------------------------------ cross_entropy

@pytest.mark.parametrize("smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("ignore_index", [-100, 2])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_matches_torch(reduction, ignore_index, smoothing):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x, t = logits_and_targets()
    t[[1, 4]] = ignore_index
    p = fa.Parameter(x, dtype=np.float64)
    y = cross_entropy(p, t, reduction, ignore_index, smoothing)
    tx = torch.tensor(x, requires_grad=True)
    ty = F.cross_entropy(tx, torch.tensor(t), reduction=reduction, ignore_index=ignore_index,
                         label_smoothing=smoothing)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12, atol=1e-15)
    scalar(y).backward()
    torch_backward(torch, ty)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_gradcheck(reduction):
    x, t = logits_and_targets(seed=1)
    t[2] = -100
    assert fa.gradcheck(lambda p: scalar(cross_entropy(p, t, reduction)), x)
    assert fa.gradcheck(lambda p: scalar(cross_entropy(p, t, reduction, label_smoothing=0.3))
                        + scalar(cross_entropy(p * 2.0, t, reduction), 1), x)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_of_one_row_with_a_scalar_target(reduction):
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(2).normal(size=5)
    p = fa.Parameter(x, dtype=np.float64)
    y = cross_entropy(p, 3, reduction, label_smoothing=0.2)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.cross_entropy(tx, torch.tensor(3), reduction=reduction,
                                           label_smoothing=0.2)
    assert y.shape == tuple(ty.shape) == ()
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12)
    y.backward()
    ty.backward()
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-12, atol=1e-15)
    q = fa.Parameter(x, dtype=np.float64)
    assert cross_entropy(q, fa.IndexInput(3), reduction).item() == pytest.approx(
        torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(3)).item(), rel=1e-12)
    assert fa.gradcheck(lambda v: cross_entropy(v, np.int64(1), reduction), x)


def test_cross_entropy_is_stable():
    p = fa.Parameter(np.array([[1000.0, 0.0], [0.0, -1000.0]]), dtype=np.float64)
    y = cross_entropy(p, [1, 1], "none")
    np.testing.assert_allclose(y.value, [1000.0, 1000.0])
    fsum(y).backward()
    np.testing.assert_allclose(p.grad, [[1, -1], [1, -1]])


def test_cross_entropy_when_every_target_is_ignored_or_the_batch_is_empty():
    torch = pytest.importorskip("torch")
    x, _ = logits_and_targets(batch=3)
    ignored = np.full(3, -100)
    assert np.isnan(cross_entropy(fa.Input(x), ignored).item())
    assert np.isnan(torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(ignored)).item())
    p = fa.Parameter(x, dtype=np.float64)
    y = cross_entropy(p, ignored, "sum")
    assert y.item() == 0.0
    y.backward()
    np.testing.assert_array_equal(p.grad, np.zeros_like(x))
    empty = fa.Parameter(np.zeros((0, 4)), dtype=np.float64)
    assert np.isnan(cross_entropy(empty, []).item())
    assert cross_entropy(empty, [], "sum").item() == 0.0
    none = cross_entropy(empty, np.zeros(0, dtype=int), "none")
    assert none.shape == (0,)
    none.backward(np.zeros(0))
    assert empty.grad.shape == (0, 4)


def test_cross_entropy_float32():
    torch = pytest.importorskip("torch")
    x, t = logits_and_targets(seed=3)
    p = fa.Parameter(x, dtype=np.float32)
    y = cross_entropy(p, t, label_smoothing=0.1)
    assert y.dtype == fa.float32
    tx = torch.tensor(x, dtype=torch.float32, requires_grad=True)
    ty = torch.nn.functional.cross_entropy(tx, torch.tensor(t), label_smoothing=0.1)
    np.testing.assert_allclose(y.item(), ty.item(), rtol=1e-6)
    y.backward()
    ty.backward()
    assert p.grad.dtype == np.float32
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("loss", [cross_entropy, nll_loss])
def test_index_input_targets_replay_and_validate_at_forward(loss):
    rng = np.random.default_rng(4)
    w, x0, x1 = rng.normal(size=(3, 4, 5))
    t0, t1 = np.array([0, 4, 2, 1]), np.array([3, 3, 0, 4])

    def build(x, t):
        p = fa.Parameter(w, dtype=np.float64)
        inp = fa.Input(x, dtype=np.float64)
        ix = fa.IndexInput(t)
        return p, [inp, ix], loss(p * inp, ix, ignore_index=0)

    p, (_, ix), root = assert_set_value_replay_matches_fresh(build, [x0, t0], [x1, t1])
    expected_value, expected_grad = root.item(), p.grad.copy()

    ix.set_value([1, 7, 0, 2])
    with pytest.raises(IndexError, match=r"target 7 at position 1 is out of range for 5 classes"):
        root.forward()
    with pytest.raises(RuntimeError, match="out-of-range target"):
        root.backward()
    ix.set_value(t1)
    root.forward()
    p.zero_grad()
    root.backward()
    assert root.item() == expected_value
    np.testing.assert_array_equal(p.grad, expected_grad)


# ----------------------------------------------------------------- nll_loss

@pytest.mark.parametrize("ignore_index", [-100, 1])
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_nll_loss_matches_torch(reduction, ignore_index):
    torch = pytest.importorskip("torch")
    x, t = logits_and_targets(seed=5)
    t[0] = ignore_index
    p = fa.Parameter(x, dtype=np.float64)
    y = nll_loss(p, t, reduction, ignore_index)
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.nn.functional.nll_loss(tx, torch.tensor(t), reduction=reduction,
                                      ignore_index=ignore_index)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12)
    scalar(y).backward()
    torch_backward(torch, ty)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-12)
    assert fa.gradcheck(lambda v: scalar(nll_loss(v, t, reduction, ignore_index)), x)


def test_nll_of_log_softmax_is_cross_entropy():
    x, t = logits_and_targets(seed=6)
    v = fa.Input(x, dtype=np.float64)
    np.testing.assert_allclose(nll_loss(log_softmax(v), t, "none").value,
                               cross_entropy(v, t, "none").value, rtol=1e-12)
    assert fa.gradcheck(lambda p: nll_loss(log_softmax(p), t) + nll_loss(p, t, "sum"), x)
    lp = fa.Parameter(x[0], dtype=np.float64)
    y = nll_loss(lp, 2)
    assert y.shape == () and y.item() == -x[0, 2]


# ------------------------------------------------------------ target checks

@pytest.mark.parametrize("loss", [cross_entropy, nll_loss])
def test_class_target_errors(loss):
    x = fa.Input(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        loss(x, [0, 1, 2], reduction="avg")
    with pytest.raises(ValueError, match="reduction must be"):
        loss(x, [0, 1, 2], reduction=None)
    with pytest.raises(TypeError, match="integer class ids, got dtype float64"):
        loss(x, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(TypeError, match="got a float Variable"):
        loss(x, fa.Input([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"targets have shape \(2,\), expected \(3,\) .*\(3, 4\)"):
        loss(x, [0, 1])
    with pytest.raises(ValueError, match=r"targets have shape \(1,\), expected \(3,\)"):
        loss(x, fa.IndexInput([1]))
    with pytest.raises(IndexError, match="target 4 at position 2 is out of range for 4 classes"):
        loss(x, [0, 1, 4])
    with pytest.raises(IndexError, match="target -1 at position 0"):
        loss(x, [-1, 1, 2])
    with pytest.raises(IndexError, match="target 18446744073709551615 at position 1"):
        loss(x, np.array([0, 2**64 - 1, 1], dtype=np.uint64))
    with pytest.raises(IndexError, match="target 3 at position 0 .* ignore_index=2"):
        loss(fa.Input(np.zeros((1, 3))), fa.IndexInput([3]), ignore_index=2)
    with pytest.raises(ValueError, match=r"shape \(batch, classes\) or \(classes,\), got \(2, 3, 4\)"):
        loss(fa.Input(np.zeros((2, 3, 4))), [0, 1])
    with pytest.raises(TypeError, match="IndexInput"):
        loss(fa.IndexInput([0, 1]), [0, 1])
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        loss(x, [0, 1, 2], ignore_index=1.5)
    assert loss(x, [0, 1, -7], ignore_index=-7, reduction="none").value[2] == 0.0


def test_cross_entropy_label_smoothing_must_be_a_probability():
    x = fa.Input(np.zeros((2, 3)))
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="label_smoothing must be in"):
            cross_entropy(x, [0, 1], label_smoothing=bad)
    with pytest.raises(TypeError, match="label_smoothing must be a number"):
        cross_entropy(x, [0, 1], label_smoothing="a")


# ----------------------------------------------------------- pairwise losses

PAIR = {
    "bce_with_logits": (bce_with_logits, "binary_cross_entropy_with_logits", {}),
    "mse": (mse, "mse_loss", {}),
    "huber": (huber, "huber_loss", {}),
    "huber_delta_0.3": (huber, "huber_loss", {"delta": 0.3}),
    "huber_delta_2": (huber, "huber_loss", {"delta": 2.0}),
}


def pair_data(name, shape, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape) * 2
    b = rng.uniform(size=shape) if name == "bce_with_logits" else rng.normal(size=shape)
    return a, b


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(PAIR))
def test_pair_losses_match_torch_with_gradients_to_both_sides(name, reduction):
    torch = pytest.importorskip("torch")
    op, torch_name, kw = PAIR[name]
    a, b = pair_data(name, (4, 5), 7)
    pa, pb = fa.Parameter(a, dtype=np.float64), fa.Parameter(b, dtype=np.float64)
    y = op(pa, pb, reduction, **kw)
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    ty = getattr(torch.nn.functional, torch_name)(ta, tb, reduction=reduction, **kw)
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12, atol=1e-15)
    scalar(y).backward()
    torch_backward(torch, ty)
    np.testing.assert_allclose(pa.grad, ta.grad.numpy(), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(pb.grad, tb.grad.numpy(), rtol=1e-10, atol=1e-15)


@pytest.mark.parametrize("shape", [(), (1, 4), (3, 4)])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(PAIR))
def test_pair_losses_gradcheck(name, reduction, shape):
    op, _, kw = PAIR[name]
    a, b = pair_data(name, shape, 8)
    assert fa.gradcheck(lambda u, v: scalar(op(u, v, reduction, **kw)), a, b)
    # an array target is a constant; the same loss twice adds gradients
    assert fa.gradcheck(lambda u: scalar(op(u, b, reduction, **kw)) + scalar(op(u * 0.5, b, **kw)), a)


def test_bce_with_logits_is_stable():
    torch = pytest.importorskip("torch")
    x = np.array([-1000.0, -100.0, -20.0, 0.0, 20.0, 100.0, 1000.0])
    t = np.array([1.0, 0.0, 1.0, 0.5, 0.0, 1.0, 0.0])
    p = fa.Parameter(x, dtype=np.float64)
    y = bce_with_logits(p, t, "none")
    ty = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor(x), torch.tensor(t), reduction="none")
    # both formulas round a loss of e**-100 (3.7e-44) to 0 somewhere, in different places
    np.testing.assert_allclose(y.value, ty.numpy(), rtol=1e-12, atol=1e-40)
    fsum(y).backward()
    np.testing.assert_allclose(p.grad, expit(x) - t)


@pytest.mark.parametrize("name", sorted(PAIR))
def test_pair_losses_float32_and_replay(name):
    op, _, kw = PAIR[name]
    a0, b0 = pair_data(name, (3, 4), 9)
    a1, b1 = pair_data(name, (3, 4), 10)
    y = op(fa.Input(a0, dtype=np.float32), b0, **kw)
    assert y.dtype == fa.float32
    np.testing.assert_allclose(y.item(), op(fa.Input(a0, dtype=np.float64), b0, **kw).item(),
                               rtol=1e-5)

    def build(a, b):
        p = fa.Parameter(np.ones((3, 4)), dtype=np.float64)
        ia, ib = fa.Input(a, dtype=np.float64), fa.Input(b, dtype=np.float64)
        return p, [ia, ib], op(p * ia, ib, **kw)

    assert_set_value_replay_matches_fresh(build, [a0, b0], [a1, b1])


@pytest.mark.parametrize("name", sorted(PAIR))
def test_pair_losses_on_empty_arrays(name):
    op, _, kw = PAIR[name]
    p = fa.Parameter(np.zeros((0, 3)), dtype=np.float64)
    assert np.isnan(op(p, np.zeros((0, 3)), **kw).item())          # torch: mean of nothing
    y = op(p, np.zeros((0, 3)), "sum", **kw)
    assert y.item() == 0.0
    y.backward()
    assert p.grad.shape == (0, 3)


@pytest.mark.parametrize("name", sorted(PAIR))
def test_pair_loss_errors(name):
    op, _, kw = PAIR[name]
    a = fa.Parameter(np.zeros((2, 3)), dtype=np.float64)
    with pytest.raises(ValueError, match=r"has shape \(2, 3\) but .* has shape \(3, 2\)"):
        op(a, np.zeros((3, 2)), **kw)
    with pytest.raises(ValueError, match=r"has shape \(2, 3\) but .* has shape \(3,\)"):
        op(a, fa.Input(np.zeros(3), dtype=np.float64), **kw)
    with pytest.raises(TypeError, match="mixed dtypes float64 and float32"):
        op(a, fa.Parameter(np.zeros((2, 3)), dtype=np.float32), **kw)
    with pytest.raises(ValueError, match="reduction must be 'mean', 'sum' or 'none', got 'max'"):
        op(a, np.zeros((2, 3)), "max", **kw)
    with pytest.raises(TypeError, match="IndexInput"):
        op(a, fa.IndexInput([[0, 1, 0], [1, 0, 1]]), **kw)
    with pytest.raises(TypeError, match="must be a fastad Variable"):
        op(np.zeros((2, 3)), a, **kw)


def test_huber_delta_must_be_positive():
    a = fa.Input(np.zeros(3))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="delta must be > 0"):
            huber(a, np.zeros(3), delta=bad)
    with pytest.raises(TypeError, match="delta must be a number"):
        huber(a, np.zeros(3), delta=None)
