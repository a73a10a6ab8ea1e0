"""softmax, log_softmax and every loss on the device against the CPU path: values,
gradients, replay with new values or new targets, and the errors."""
import numpy as np
import pytest

import fastad as fa
from device_check import check_against_cpu, host, tolerance

rng = np.random.default_rng(11)
DTYPES = [np.float64, np.float32]
REDUCTIONS = ["mean", "sum", "none"]


def r(*shape):
    return rng.standard_normal(shape)


def close(dev, cpu, dtype, what):
    np.testing.assert_allclose(host(dev), cpu, **tolerance(dtype), err_msg=what)


# ------------------------------------------------------------ softmax

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("fn", [fa.softmax, fa.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_each_axis(backend, fn, axis, dtype):
    check_against_cpu(lambda x: fn(x, axis=axis), r(3, 4, 5), dtype=dtype)


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (3, 1), (0, 4)])
@pytest.mark.parametrize("fn", [fa.softmax, fa.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_edge_shapes(backend, fn, shape):
    check_against_cpu(fn, r(*shape))


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_large_logits(backend, dtype):
    x = np.array([[1000.0, 0.0, -1000.0], [-3e4, -3e4 + 1, -3e4 + 2]])
    for fn in (fa.softmax, fa.log_softmax):
        y = check_against_cpu(fn, x, dtype=dtype)
        assert np.isfinite(host(y)).all()


def test_softmax_feeds_two_consumers(backend):
    """The gradient of x gets written by the first backward and added by the second."""
    check_against_cpu(lambda x: (fa.softmax(x) * fa.log_softmax(x, axis=0)).sum(), r(4, 3))


def test_softmax_bad_axis(backend):
    x = fa.Parameter(r(2, 3), device="cuda")
    with pytest.raises(np.exceptions.AxisError, match="softmax: axis 2 is out of range"):
        fa.softmax(x, axis=2)
    with pytest.raises(TypeError, match="axis must be one int"):
        fa.log_softmax(x, axis=None)
    with pytest.raises(TypeError, match="x is an IndexInput"):
        fa.softmax(fa.IndexInput([1, 2], device="cuda"))


# --------------------------------------------------- class-target losses

CLASS_LOSSES = {
    "cross_entropy": lambda x, t, **kw: fa.nn.cross_entropy(x, t, **kw),
    "cross_entropy smoothed": lambda x, t, **kw: fa.nn.cross_entropy(x, t, label_smoothing=0.2,
                                                                     **kw),
    "nll_loss": lambda x, t, **kw: fa.nn.nll_loss(fa.log_softmax(x), t, **kw),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(CLASS_LOSSES))
def test_class_losses(backend, name, reduction, dtype):
    loss = CLASS_LOSSES[name]
    targets = np.array([2, 0, -100, 4, 1, -100])         # two ignored rows (the default -100)
    check_against_cpu(lambda x: loss(x, targets, reduction=reduction), r(6, 5), dtype=dtype)


@pytest.mark.parametrize("name", ["cross_entropy", "nll_loss"])
def test_class_losses_one_row(backend, name):
    """(C,) scores with a 0-d target, and one-class rows."""
    fn = getattr(fa.nn, name)
    check_against_cpu(lambda x: fn(x, np.int64(3), label_smoothing=0.1) if name ==
                      "cross_entropy" else fn(x, np.int64(3)), r(5))
    check_against_cpu(lambda x: fn(x, [0, 0], reduction="none"), r(2, 1))


def test_class_losses_ignore_index_in_range(backend):
    """ignore_index may be a real class id: those rows add nothing."""
    check_against_cpu(lambda x: fa.nn.cross_entropy(x, [0, 3, 0, 2], ignore_index=0), r(4, 4))
    check_against_cpu(lambda x: fa.nn.nll_loss(x, [1, 1, 0], ignore_index=1), r(3, 2))


def test_cross_entropy_large_logits(backend):
    x = np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 0.0], [50.0, 50.0, 50.0]])
    for dtype in DTYPES:
        y = check_against_cpu(lambda v: fa.nn.cross_entropy(v, [1, 1, 2], label_smoothing=0.1,
                                                            reduction="none"), x, dtype=dtype)
        assert np.isfinite(host(y)).all()


def test_losses_accumulate_into_one_input(backend):
    """Several losses on one leaf: each backward kernel's write-or-add flag."""
    check_against_cpu(lambda x: fa.nn.cross_entropy(x, [1, 0, 2]) + fa.nn.nll_loss(x, [2, 2, 0])
                      + fa.nn.mse(x, np.ones((3, 3))) + fa.nn.huber(x, x * 2, reduction="sum"),
                      r(3, 3))


def _pair(reduction, ignore_index, dtype, ids):
    """The same loss on the CPU and on the device, with IndexInput targets."""
    x = r(4, 3)
    out = []
    for device in (None, "cuda"):
        logits = fa.Parameter(x, dtype=dtype, device=device)
        targets = fa.IndexInput(ids, device=device)
        loss = fa.nn.cross_entropy(logits, targets, reduction=reduction,
                                   ignore_index=ignore_index, label_smoothing=0.1)
        out.append((logits, targets, loss))
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_index_input_targets_replay(backend, reduction, dtype):
    """New ids through set_value, then forward and backward; ignore_index >= classes
    stays usable, and "mean" divides by the new count of kept rows."""
    (xc, tc, yc), (xd, td, yd) = _pair(reduction, 3, dtype, [0, 2, 1, 3])
    close(yd, yc.value, dtype, "build")
    for ids in ([2, 2, 0, 1], [3, 0, 3, 3], [3, 3, 3, 3]):
        tc.set_value(ids)
        td.set_value(ids)
        yc.forward()
        yd.forward()
        close(yd, yc.value, dtype, f"forward with ids {ids}")
        seed = rng.standard_normal(yc.shape)
        yc.backward(seed)
        yd.backward(seed)
        close(xd.grad, xc.grad, dtype, f"gradient with ids {ids}")


def test_index_input_changed_before_backward(backend):
    """A backward after set_value and before forward refuses the stale graph, as on the CPU."""
    (xc, tc, yc), (xd, td, yd) = _pair("mean", -100, np.float64, [0, 2, 1, 1])
    tc.set_value([1, 1, 1, 1])
    td.set_value([1, 1, 1, 1])
    for y in (yc, yd):
        with pytest.raises(RuntimeError, match="stale: .* before its input 'index_input'"):
            y.backward()
        y.forward()
        y.backward()
    close(xd.grad, xc.grad, np.float64, "gradient")


def assert_new_ids_give_the_cpu_results(id_lists, cpu, dev, run_cpu, run_dev):
    """cpu and dev: (logits Parameter, target IndexInput, loss) on each side. For each list of
    ids, both targets take it by set_value, run_cpu() and run_dev() rerun each side, and the
    device's loss and gradient must be the CPU's (float32 tolerance)."""
    (xc, tc, yc), (xd, td, yd) = cpu, dev
    for ids in id_lists:
        tc.set_value(ids)
        td.set_value(ids)
        run_dev()
        run_cpu()
        close(yd, yc.value, np.float32, f"forward with ids {ids}")
        close(xd.grad, xc.grad, np.float32, f"gradient with ids {ids}")


def test_nll_index_input_replay(backend):
    x = r(3, 4)
    xc, xd = fa.Parameter(x), fa.Parameter(x, device="cuda")
    tc, td = fa.IndexInput([0, 1, 2]), fa.IndexInput([0, 1, 2], device="cuda")
    yc, yd = fa.nn.nll_loss(xc, tc), fa.nn.nll_loss(xd, td)

    def run(y):
        y.forward()
        y.backward()
    assert_new_ids_give_the_cpu_results(([3, 3, 0], [1, 2, 3]), (xc, tc, yc), (xd, td, yd),
                                        lambda: run(yc), lambda: run(yd))


def test_capture_replays_new_targets(backend):
    """A captured forward and backward reads the IndexInput's new ids at each replay."""
    x = r(4, 3)
    xc, xd = fa.Parameter(x), fa.Parameter(x, device="cuda")
    tc, td = fa.IndexInput([0, 1, 2, 0]), fa.IndexInput([0, 1, 2, 0], device="cuda")
    yc, yd = fa.nn.cross_entropy(xc, tc), fa.nn.cross_entropy(xd, td)

    def step():
        yd.forward()
        xd.zero_grad()
        yd.backward()
    replay = fa.cuda.capture(step)

    def run_cpu():
        yc.forward()
        xc.zero_grad()
        yc.backward()
    assert_new_ids_give_the_cpu_results(([2, 2, 1, 0], [1, 0, 0, 0]), (xc, tc, yc), (xd, td, yd),
                                        run_cpu, replay)


def test_id_between_classes_and_ignore_index_gives_nan(backend):
    """An id in [classes, ignore_index) passes set_value's bound; the CPU raises at
    forward, the device never reads out of range and gives NaN for that row."""
    (xc, tc, yc), (xd, td, yd) = _pair("none", 5, np.float64, [0, 1, 2, 5])
    td.set_value([0, 4, 2, 5])
    yd.forward()
    yd.backward(np.ones(4))
    losses, grad = host(yd), host(xd.grad)
    assert np.isnan(losses[1]) and np.isfinite(losses[[0, 2]]).all() and losses[3] == 0
    assert np.isnan(grad[1]).all() and np.isfinite(grad[[0, 2, 3]]).all()


def test_class_target_errors(backend):
    x = fa.Parameter(r(2, 3), device="cuda")
    with pytest.raises(IndexError, match="target 3 at position 1 is out of range for 3 classes"):
        fa.nn.cross_entropy(x, [0, 3])
    with pytest.raises(IndexError, match="target -1 at position 0 is out of range"):
        fa.nn.nll_loss(x, [-1, 0])
    with pytest.raises(IndexError, match="target 7 at position 0 is out of range"):
        fa.nn.cross_entropy(x, fa.IndexInput([7, 0], device="cuda"))
    ix = fa.IndexInput([0, 2], device="cuda")
    fa.nn.cross_entropy(x, ix)
    with pytest.raises(IndexError, match=r"ids must be < 3"):
        ix.set_value([3, 0])
    ix = fa.IndexInput([0, 4], device="cuda")
    fa.nn.nll_loss(x, ix, ignore_index=4)
    with pytest.raises(IndexError, match=r"ids must be < 5"):
        ix.set_value([5, 0])
    with pytest.raises(ValueError, match=r"targets have shape \(3,\), expected \(2,\)"):
        fa.nn.cross_entropy(x, [0, 1, 2])
    with pytest.raises(ValueError, match=r"logits must have shape \(batch, classes\)"):
        fa.nn.cross_entropy(fa.Parameter(r(2, 3, 1), device="cuda"), [0, 1])
    with pytest.raises(TypeError, match="targets must be integer class ids, got dtype float64"):
        fa.nn.cross_entropy(x, [0.0, 1.0])
    with pytest.raises(TypeError, match="got a float Variable"):
        fa.nn.nll_loss(x, fa.Input([0.0, 1.0], device="cuda"))
    with pytest.raises(ValueError, match="reduction must be"):
        fa.nn.cross_entropy(x, [0, 1], reduction="avg")
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        fa.nn.cross_entropy(x, [0, 1], label_smoothing=1.5)
    with pytest.raises(TypeError, match="ignore_index must be an int"):
        fa.nn.nll_loss(x, [0, 1], ignore_index=0.5)


def test_mixed_devices(backend):
    with pytest.raises(ValueError, match="cpu and cuda:0"):
        fa.nn.cross_entropy(fa.Parameter(r(2, 3), device="cuda"), fa.IndexInput([0, 1]))
    with pytest.raises(ValueError, match="cpu and cuda:0"):
        fa.nn.nll_loss(fa.Parameter(r(2, 3)), fa.IndexInput([0, 1], device="cuda"))
    with pytest.raises(ValueError, match="cpu and cuda:0"):
        fa.nn.mse(fa.Parameter(r(3)), fa.Parameter(r(3), device="cuda"))
    with pytest.raises(ValueError, match="cpu and cuda:0"):
        fa.nn.bce_with_logits(fa.Parameter(r(3), device="cuda"), fa.Input(r(3)))


# ------------------------------------------------------- pointwise losses

PAIR_LOSSES = {
    "bce_with_logits": lambda a, b, **kw: fa.nn.bce_with_logits(a, fa.sigmoid(b), **kw),
    "mse": fa.nn.mse,
    "huber": lambda a, b, **kw: fa.nn.huber(a, b, delta=0.7, **kw),
    "soft_margin": fa.nn.soft_margin,
    "hinge": fa.nn.hinge,
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", sorted(PAIR_LOSSES))
def test_pair_losses(backend, name, reduction, dtype):
    check_against_cpu(lambda a, b: PAIR_LOSSES[name](a, b, reduction=reduction),
                      r(3, 4) * 2, r(3, 4), dtype=dtype)


@pytest.mark.parametrize("name", ["bce_with_logits", "mse", "huber"])
def test_pair_losses_host_target_and_edges(backend, name):
    """A host array target is uploaded once; 0-d and empty inputs as on the CPU (the
    mean of nothing is NaN)."""
    fn = getattr(fa.nn, name)
    target = rng.uniform(size=5)
    check_against_cpu(lambda a: fn(a, target), r(5))
    check_against_cpu(lambda a: fn(a, 0.5), r())
    for reduction in ("mean", "sum"):
        check_against_cpu(lambda a: fn(a, np.zeros((0, 2)), reduction=reduction), r(0, 2))


def test_bce_large_logits(backend):
    x = np.array([-1e4, -50.0, 0.0, 50.0, 1e4])
    y = check_against_cpu(lambda a: fa.nn.bce_with_logits(a, [1.0, 0.0, 1.0, 1.0, 0.0],
                                                          reduction="none"), x, dtype=np.float32)
    assert np.isfinite(host(y)).all()


def test_pair_loss_errors(backend):
    a = fa.Parameter(r(2, 3), device="cuda")
    with pytest.raises(ValueError, match=r"mse: pred has shape \(2, 3\) but target has shape"):
        fa.nn.mse(a, np.zeros((3, 2)))
    with pytest.raises(TypeError, match="mixed dtypes"):
        fa.nn.huber(a, fa.Parameter(r(2, 3), dtype=np.float64, device="cuda"))
    with pytest.raises(ValueError, match="delta must be > 0"):
        fa.nn.huber(a, np.zeros((2, 3)), delta=0)
    with pytest.raises(ValueError, match="reduction must be"):
        fa.nn.bce_with_logits(a, np.zeros((2, 3)), reduction=None)
    with pytest.raises(TypeError, match="targets is an IndexInput"):
        fa.nn.bce_with_logits(a, fa.IndexInput([[0, 1, 1], [1, 0, 0]], device="cuda"))
