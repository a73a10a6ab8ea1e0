"""kl_div, smooth_l1, binary_cross_entropy, poisson_nll, gaussian_nll, margin_ranking,
hinge_embedding, cosine_embedding, triplet_margin and multi_margin against PyTorch in
float64 (values and every input's gradient, each reduction), finite differences,
float32, replay, broadcasting, empty inputs and the bad arguments."""
import numpy as np
import pytest
import torch

import fastad as fa
import fastad.nn.functional as Fa
from vjp import check_vjp

F = torch.nn.functional
rng = np.random.default_rng(3)

X = rng.normal(size=(3, 4))
PROB = rng.uniform(0.05, 0.95, size=(3, 4))
TARGET = rng.uniform(0.05, 0.95, size=(3, 4))
COUNTS = rng.integers(0, 5, size=(3, 4)).astype(float)
VAR = rng.uniform(0.1, 1.0, size=(3, 4))
SIGNS_ROW = np.array([1.0, -1.0, 1.0])
SIGNS = np.sign(rng.normal(size=(3, 4)))
IDS = np.array([0, 3, 2])
WEIGHT = rng.uniform(0.5, 1.5, size=4)

# name -> (fastad loss of the leaves and a reduction, torch's, the leaves' arrays)
CASES = {
    "kl_div": (lambda a, b, r: fa.nn.kl_div(a, b, r), lambda a, b, r: F.kl_div(a, b, reduction=r),
               (X, TARGET)),
    "kl_div log_target": (lambda a, b, r: fa.nn.kl_div(a, b, r, log_target=True),
                          lambda a, b, r: F.kl_div(a, b, reduction=r, log_target=True), (X, 0.5 * X)),
    "smooth_l1": (lambda a, b, r: fa.nn.smooth_l1(a, b, r, beta=0.7),
                  lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.7), (X, TARGET)),
    "smooth_l1 beta 0": (lambda a, b, r: fa.nn.smooth_l1(a, b, r, beta=0.0),
                         lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0), (X, TARGET)),
    "binary_cross_entropy": (lambda a, b, r: fa.nn.binary_cross_entropy(a, b, reduction=r),
                             lambda a, b, r: F.binary_cross_entropy(a, b, reduction=r), (PROB, TARGET)),
    "binary_cross_entropy weight": (
        lambda a, b, r: fa.nn.binary_cross_entropy(a, b, WEIGHT, reduction=r),
        lambda a, b, r: F.binary_cross_entropy(a, b, torch.tensor(WEIGHT), reduction=r), (PROB, TARGET)),
    "poisson_nll": (lambda a, b, r: fa.nn.poisson_nll(a, b, reduction=r),
                    lambda a, b, r: F.poisson_nll_loss(a, b, reduction=r), (X, COUNTS)),
    "poisson_nll full": (lambda a, b, r: fa.nn.poisson_nll(a, b, full=True, reduction=r),
                         lambda a, b, r: F.poisson_nll_loss(a, b, full=True, reduction=r), (X, COUNTS + 0.5)),
    "poisson_nll rate": (lambda a, b, r: fa.nn.poisson_nll(a, b, log_input=False, eps=1e-3, reduction=r),
                         lambda a, b, r: F.poisson_nll_loss(a, b, log_input=False, eps=1e-3, reduction=r),
                         (PROB, COUNTS)),
    "poisson_nll rate full": (
        lambda a, b, r: fa.nn.poisson_nll(a, b, log_input=False, full=True, reduction=r),
        lambda a, b, r: F.poisson_nll_loss(a, b, log_input=False, full=True, reduction=r),
        (PROB, COUNTS + 0.5)),
    "gaussian_nll": (lambda a, b, v, r: fa.nn.gaussian_nll(a, b, v, reduction=r),
                     lambda a, b, v, r: F.gaussian_nll_loss(a, b, v, reduction=r), (X, TARGET, VAR)),
    "gaussian_nll full eps": (lambda a, b, v, r: fa.nn.gaussian_nll(a, b, v, full=True, eps=0.05, reduction=r),
                              lambda a, b, v, r: F.gaussian_nll_loss(a, b, v, full=True, eps=0.05, reduction=r),
                              (X, TARGET, VAR)),
    "gaussian_nll var per row": (lambda a, b, v, r: fa.nn.gaussian_nll(a, b, v, reduction=r),
                                 lambda a, b, v, r: F.gaussian_nll_loss(a, b, v, reduction=r),
                                 (X, TARGET, VAR[:, 0])),
    "gaussian_nll var (B, 1)": (lambda a, b, v, r: fa.nn.gaussian_nll(a, b, v, reduction=r),
                                lambda a, b, v, r: F.gaussian_nll_loss(a, b, v, reduction=r),
                                (X, TARGET, VAR[:, :1])),
    "margin_ranking": (lambda a, b, r: fa.nn.margin_ranking(a, b, SIGNS_ROW, 0.3, r),
                       lambda a, b, r: F.margin_ranking_loss(a, b, torch.tensor(SIGNS_ROW), 0.3, reduction=r),
                       (X[:, 0], X[:, 1])),
    "margin_ranking broadcast": (
        lambda a, b, r: fa.nn.margin_ranking(a, b, SIGNS, -0.2, r),
        lambda a, b, r: F.margin_ranking_loss(a, b, torch.tensor(SIGNS), -0.2, reduction=r),
        (X, X[:1] * 0.5)),
    "hinge_embedding": (lambda a, r: fa.nn.hinge_embedding(a, SIGNS, 0.7, r),
                        lambda a, r: F.hinge_embedding_loss(a, torch.tensor(SIGNS), 0.7, reduction=r),
                        (X,)),
    "cosine_embedding": (lambda a, b, r: fa.nn.cosine_embedding(a, b, SIGNS_ROW, 0.1, r),
                         lambda a, b, r: F.cosine_embedding_loss(a, b, torch.tensor(SIGNS_ROW), 0.1,
                                                                 reduction=r), (X, TARGET)),
    "cosine_embedding 1-D": (lambda a, b, r: fa.nn.cosine_embedding(a, b, np.array(-1.0), -0.5, r),
                             lambda a, b, r: F.cosine_embedding_loss(a, b, torch.tensor(-1.0), -0.5,
                                                                     reduction=r), (X[0], TARGET[0])),
    "triplet_margin": (lambda a, p, n, r: fa.nn.triplet_margin(a, p, n, 0.8, reduction=r),
                       lambda a, p, n, r: F.triplet_margin_loss(a, p, n, 0.8, reduction=r), (X, TARGET, VAR)),
    "triplet_margin p1 swap": (lambda a, p, n, r: fa.nn.triplet_margin(a, p, n, 2.0, p=1, swap=True, reduction=r),
                               lambda a, p, n, r: F.triplet_margin_loss(a, p, n, 2.0, p=1, swap=True, reduction=r),
                               (X, TARGET, VAR)),
    "triplet_margin p3 swap": (lambda a, p, n, r: fa.nn.triplet_margin(a, p, n, 1.5, p=3, swap=True, reduction=r),
                               lambda a, p, n, r: F.triplet_margin_loss(a, p, n, 1.5, p=3, swap=True, reduction=r),
                               (X, TARGET, VAR)),
    "triplet_margin 1-D": (lambda a, p, n, r: fa.nn.triplet_margin(a, p, n, reduction=r),
                           lambda a, p, n, r: F.triplet_margin_loss(a, p, n, reduction=r),
                           (X[0], TARGET[0], VAR[0])),
    "multi_margin": (lambda a, r: fa.nn.multi_margin(a, IDS, reduction=r),
                     lambda a, r: F.multi_margin_loss(a, torch.tensor(IDS), reduction=r), (X,)),
    "multi_margin p2 weight": (lambda a, r: fa.nn.multi_margin(a, IDS, 2, 0.6, WEIGHT, r),
                               lambda a, r: F.multi_margin_loss(a, torch.tensor(IDS), 2, 0.6,
                                                                torch.tensor(WEIGHT), reduction=r), (X,)),
    "multi_margin 1-D": (lambda a, r: fa.nn.multi_margin(a, 2, reduction=r),
                         lambda a, r: F.multi_margin_loss(a, torch.tensor(2), reduction=r), (X[0],)),
}
REDUCTIONS = ["mean", "sum", "none"]


def run_both(name, reduction, dtype=np.float64, arrays=None):
    ours, theirs, default = CASES[name]
    arrays = default if arrays is None else arrays
    leaves = [fa.Parameter(a, dtype=dtype) for a in arrays]
    out = ours(*leaves, reduction)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    ref = theirs(*tensors, reduction)
    cot = np.random.default_rng(1).normal(size=out.shape)
    out.backward(cot)
    ref.backward(torch.tensor(cot))
    return out, ref, leaves, tensors


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name, reduction):
    out, ref, leaves, tensors = run_both(name, reduction)
    assert out.shape == tuple(ref.shape) and out.dtype == np.float64
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=1e-12, atol=1e-14)
    for k, (leaf, t) in enumerate(zip(leaves, tensors)):
        np.testing.assert_allclose(leaf.grad, t.grad.numpy(), rtol=1e-10, atol=1e-13,
                                   err_msg=f"gradient of input {k}")


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients_against_finite_differences(name):
    ours, _, arrays = CASES[name]
    check_vjp(lambda *leaves: ours(*leaves, "none"), *arrays)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("name", sorted(CASES))
def test_float32(name):
    out, ref, leaves, tensors = run_both(name, "mean", dtype=np.float32)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=2e-5, atol=2e-6)
    for leaf, t in zip(leaves, tensors):
        np.testing.assert_allclose(leaf.grad, t.grad.numpy(), rtol=2e-4, atol=2e-6)


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides")
@pytest.mark.parametrize("name", sorted(CASES))
def test_replay_after_set_value(name):
    ours, theirs, arrays = CASES[name]
    leaves = [fa.Parameter(a, dtype=np.float64) for a in arrays]
    out = ours(*leaves, "sum")
    moved = [a * 0.9 + 0.03 for a in arrays]
    for leaf, a in zip(leaves, moved):
        leaf.set_value(a)
    out.forward()
    out.backward()
    tensors = [torch.tensor(a, requires_grad=True) for a in moved]
    ref = theirs(*tensors, "sum")
    ref.backward()
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=1e-12)
    for leaf, t in zip(leaves, tensors):
        np.testing.assert_allclose(leaf.grad, t.grad.numpy(), rtol=1e-10, atol=1e-13)


def test_kl_div_batchmean_and_zero_targets():
    target = TARGET.copy()
    target[0, 1] = 0.0                        # 0 * log 0 counts as 0, as torch's xlogy
    w = fa.Parameter(X, dtype=np.float64)
    out = fa.nn.kl_div(w, target, reduction="batchmean")
    out.backward()
    t = torch.tensor(X, requires_grad=True)
    ref = F.kl_div(t, torch.tensor(target), reduction="batchmean")
    ref.backward()
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)
    scalar = fa.nn.kl_div(fa.Parameter(np.array(-0.5), dtype=np.float64), np.array(0.3), "batchmean")
    np.testing.assert_allclose(scalar.item(), F.kl_div(torch.tensor(-0.5, dtype=torch.float64),
                                                       torch.tensor(0.3, dtype=torch.float64),
                                                       reduction="batchmean").item(), rtol=1e-12)


def test_binary_cross_entropy_floors_its_logs_at_minus_100():
    p = np.array([0.0, 1.0, 0.0, 1.0, 0.5])
    y = np.array([1.0, 0.0, 0.0, 1.0, 0.3])
    w = fa.Parameter(p, dtype=np.float64)
    out = fa.nn.binary_cross_entropy(w, y, reduction="none")
    out.backward(np.ones(5))
    t = torch.tensor(p, requires_grad=True)
    ref = F.binary_cross_entropy(t, torch.tensor(y), reduction="none")
    ref.backward(torch.ones(5))
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(out.value[:2], [100.0, 100.0])
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)


def test_gaussian_nll_floors_the_variance_and_passes_its_gradient():
    var = VAR.copy()
    var[0, :2] = [0.0, 1e-9]
    out, ref, leaves, tensors = run_both("gaussian_nll", "sum", arrays=(X, TARGET, var))
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(leaves[2].grad, tensors[2].grad.numpy(), rtol=1e-10)


def test_multi_margin_reads_an_index_input_at_every_forward():
    ix = fa.IndexInput(IDS)
    w = fa.Parameter(X, dtype=np.float64)
    out = fa.nn.multi_margin(w, ix, reduction="sum")
    ix.set_value([1, 1, 0])
    out.forward()
    np.testing.assert_allclose(out.item(), F.multi_margin_loss(torch.tensor(X), torch.tensor([1, 1, 0]),
                                                               reduction="sum").item(), rtol=1e-12)
    ix.set_value([1, 4, 0])
    with pytest.raises(IndexError, match="id 4 at position 1"):
        out.forward()


@pytest.mark.parametrize("name", ["smooth_l1", "kl_div", "poisson_nll", "binary_cross_entropy",
                                  "hinge_embedding", "margin_ranking"])
def test_empty_inputs_give_nan_mean_and_zero_sum(name):
    ours, theirs, arrays = CASES[name]
    empty = [np.zeros((0,) + np.shape(a)[1:]) if np.ndim(a) else a for a in arrays]
    if name == "hinge_embedding":
        ours = lambda a, r: fa.nn.hinge_embedding(a, np.ones((0, 4)), 0.7, r)
    if name == "margin_ranking":
        ours = lambda a, b, r: fa.nn.margin_ranking(a, b, np.ones(0), 0.3, r)
    leaves = [fa.Parameter(a, dtype=np.float64) for a in empty]
    assert np.isnan(ours(*leaves, "mean").item())
    total = ours(*leaves, "sum")
    assert total.item() == 0.0
    total.backward()
    assert ours(*leaves, "none").shape == leaves[0].shape


def test_broadcasting_where_torch_broadcasts():
    # hinge_embedding: one row of targets for every row of input
    row = SIGNS[:1]
    out, ref, leaves, tensors = run_both("hinge_embedding", "sum")
    w = fa.Parameter(X, dtype=np.float64)
    mine = fa.nn.hinge_embedding(w, row, 0.7, "sum")
    mine.backward()
    t = torch.tensor(X, requires_grad=True)
    theirs = F.hinge_embedding_loss(t, torch.tensor(row).expand(3, 4), 0.7, reduction="sum")
    theirs.backward()
    np.testing.assert_allclose(mine.item(), theirs.item(), rtol=1e-12)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-12)
    # gaussian_nll: input and target broadcast
    a, b = fa.Parameter(X, dtype=np.float64), fa.Parameter(TARGET[:1], dtype=np.float64)
    mine = fa.nn.gaussian_nll(a, b, VAR, reduction="mean")
    mine.backward()
    ta, tb = torch.tensor(X, requires_grad=True), torch.tensor(TARGET[:1], requires_grad=True)
    theirs = F.gaussian_nll_loss(ta, tb, torch.tensor(VAR))
    theirs.backward()
    np.testing.assert_allclose(mine.item(), theirs.item(), rtol=1e-12)
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), rtol=1e-12)


BROADCASTS = {
    "kl_div": (lambda a, b, r: fa.nn.kl_div(a, b, r), lambda a, b, r: F.kl_div(a, b, reduction=r),
               (X, TARGET[0])),
    "kl_div log_target batchmean": (lambda a, b, r: fa.nn.kl_div(a, b, "batchmean" if r == "mean" else r,
                                                                 log_target=True),
                                    lambda a, b, r: F.kl_div(a, b, reduction="batchmean" if r == "mean" else r,
                                                             log_target=True), (X[:, :1], 0.5 * X)),
    "smooth_l1": (lambda a, b, r: fa.nn.smooth_l1(a, b, r, beta=0.7),
                  lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.7), (X[:, :1], TARGET)),
    "poisson_nll": (lambda a, b, r: fa.nn.poisson_nll(a, b, reduction=r),
                    lambda a, b, r: F.poisson_nll_loss(a, b, reduction=r), (X, COUNTS[1])),
}


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(BROADCASTS))
def test_pointwise_losses_broadcast_as_torch(name, reduction):
    ours, theirs, arrays = BROADCASTS[name]
    leaves = [fa.Parameter(a, dtype=np.float64) for a in arrays]
    out = ours(*leaves, reduction)
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    ref = theirs(*tensors, reduction)
    assert out.shape == tuple(ref.shape)
    cot = np.random.default_rng(4).normal(size=out.shape)
    out.backward(cot)
    ref.backward(torch.tensor(cot))
    np.testing.assert_allclose(out.value, ref.detach().numpy(), rtol=1e-12, atol=1e-14)
    for leaf, t in zip(leaves, tensors):
        assert leaf.grad.shape == leaf.shape
        np.testing.assert_allclose(leaf.grad, t.grad.numpy(), rtol=1e-10, atol=1e-13)
    check_vjp(lambda *v: ours(*v, "none"), *arrays)


def test_targets_as_variables_get_gradients_and_replay():
    y = fa.Input(SIGNS_ROW, dtype=np.float64)
    a, b = fa.Parameter(X[:, 0], dtype=np.float64), fa.Parameter(X[:, 1], dtype=np.float64)
    out = fa.nn.margin_ranking(a, b, y, 0.3, "sum")
    y.set_value(-SIGNS_ROW)
    out.forward()
    ref = F.margin_ranking_loss(torch.tensor(X[:, 0]), torch.tensor(X[:, 1]), torch.tensor(-SIGNS_ROW),
                                0.3, reduction="sum")
    np.testing.assert_allclose(out.item(), ref.item(), rtol=1e-12)


def test_functional_forms_are_the_same_functions():
    for name in ("kl_div", "smooth_l1", "binary_cross_entropy", "poisson_nll", "gaussian_nll",
                 "margin_ranking", "hinge_embedding", "cosine_embedding", "triplet_margin",
                 "multi_margin"):
        assert getattr(Fa, name) is getattr(fa.nn, name)


P = fa.Parameter(PROB)


@pytest.mark.parametrize("call, error, message", [
    (lambda: fa.nn.smooth_l1(P, TARGET, beta=-0.1), ValueError, r"smooth_l1: beta must be >= 0, got -0.1"),
    (lambda: fa.nn.smooth_l1(P, TARGET, beta="1"), TypeError, r"smooth_l1: beta must be a number"),
    (lambda: fa.nn.smooth_l1(P, TARGET[:2]), ValueError,
     r"smooth_l1: input has shape \(3, 4\) but target has shape \(2, 4\)"),
    (lambda: fa.nn.kl_div(P, TARGET, "batch"), ValueError, r"kl_div: reduction must be"),
    (lambda: fa.nn.kl_div(P, TARGET, log_target=1), TypeError, r"kl_div: log_target must be True or False"),
    (lambda: fa.nn.kl_div(P, TARGET.T), ValueError,
     r"kl_div: input has shape \(3, 4\) but target has shape \(4, 3\); they must broadcast"),
    (lambda: fa.nn.binary_cross_entropy(P, TARGET[0]), ValueError,
     r"binary_cross_entropy: input has shape \(3, 4\) but target has shape \(4,\); they must be equal"),
    (lambda: fa.nn.binary_cross_entropy(fa.Parameter(X), TARGET), ValueError,
     r"binary_cross_entropy: every element of input must be in \[0, 1\]"),
    (lambda: fa.nn.binary_cross_entropy(P, TARGET + 1), ValueError,
     r"binary_cross_entropy: every element of target must be in \[0, 1\]"),
    (lambda: fa.nn.binary_cross_entropy(P, TARGET, np.ones(3)), ValueError,
     r"binary_cross_entropy: weight has shape \(3,\), which does not broadcast to input's shape \(3, 4\)"),
    (lambda: fa.nn.binary_cross_entropy(P, TARGET, np.ones((2, 3, 4))), ValueError, r"weight has shape"),
    (lambda: fa.nn.poisson_nll(P, COUNTS, eps=0), ValueError, r"poisson_nll: eps must be > 0"),
    (lambda: fa.nn.poisson_nll(P, COUNTS, full="yes"), TypeError, r"poisson_nll: full must be True or False"),
    (lambda: fa.nn.gaussian_nll(P, TARGET, -VAR), ValueError, r"gaussian_nll: var has negative entries"),
    (lambda: fa.nn.gaussian_nll(P, TARGET, VAR[:2]), ValueError,
     r"gaussian_nll: var has shape \(2, 4\); expected input's shape \(3, 4\), \(3,\) or \(3, 1\)"),
    (lambda: fa.nn.gaussian_nll(P, TARGET, VAR, eps=-1), ValueError, r"gaussian_nll: eps must be > 0"),
    (lambda: fa.nn.gaussian_nll(P, TARGET, VAR, reduction="avg"), ValueError, r"gaussian_nll: reduction"),
    (lambda: fa.nn.hinge_embedding(P, np.zeros((3, 4))), ValueError,
     r"hinge_embedding: target must hold only 1 and -1, got 0.0 at flat position 0"),
    (lambda: fa.nn.cosine_embedding(P, P, [1, 2, 1]), ValueError,
     r"cosine_embedding: target must hold only 1 and -1, got 2 at flat position 1"),
    (lambda: fa.nn.cosine_embedding(P, P, [1, 1]), ValueError,
     r"cosine_embedding: target has shape \(2,\), expected \(3,\)"),
    (lambda: fa.nn.cosine_embedding(P, fa.Parameter(X[:2]), [1, 1, 1]), ValueError,
     r"cosine_embedding: input1 and input2 must share a shape"),
    (lambda: fa.nn.cosine_embedding(P, P, [1, 1, 1], margin=1.5), ValueError,
     r"cosine_embedding: margin must be in \[-1, 1\], got 1.5"),
    (lambda: fa.nn.margin_ranking(P, fa.Parameter(X[0]), np.ones(4)), ValueError,
     r"margin_ranking: input1 has shape \(3, 4\) and input2 \(4,\); they must have the same number of axes"),
    (lambda: fa.nn.margin_ranking(P, P, np.ones(3)), ValueError, r"broadcast"),
    (lambda: fa.nn.triplet_margin(P, P, P, margin=-1.0), ValueError,
     r"triplet_margin: margin must be > 0, got -1.0"),
    (lambda: fa.nn.triplet_margin(P, P, P, margin=0), ValueError, r"triplet_margin: margin must be > 0"),
    (lambda: fa.nn.triplet_margin(P, P, P, p=0), ValueError, r"triplet_margin: p must be > 0"),
    (lambda: fa.nn.triplet_margin(P, P, fa.Parameter(X[0])), ValueError,
     r"triplet_margin: anchor, positive and negative must all be 1-D or all 2-D"),
    (lambda: fa.nn.triplet_margin(P, P, np.ones((3, 4))), TypeError,
     r"triplet_margin: negative must be a fastad Variable"),
    (lambda: fa.nn.multi_margin(P, [0, 4, 1]), IndexError, r"multi_margin: target 4 at position 1 is out of range"),
    (lambda: fa.nn.multi_margin(P, [0, -100, 1]), IndexError, r"multi_margin: target -100 is out of range"),
    (lambda: fa.nn.multi_margin(P, [0, 1]), ValueError, r"multi_margin: targets have shape \(2,\), expected \(3,\)"),
    (lambda: fa.nn.multi_margin(P, [0, 1, 1], p=3), ValueError, r"multi_margin: p must be 1 or 2, got 3"),
    (lambda: fa.nn.multi_margin(P, [0, 1, 1], weight=np.ones(3)), ValueError,
     r"multi_margin: weight has shape \(3,\), expected \(4,\)"),
    (lambda: fa.nn.multi_margin(P, [0.0, 1.0, 1.0]), TypeError, r"multi_margin: targets must be integer"),
])
def test_bad_arguments_raise_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
