"""The conv family: conv1d/conv2d, max/avg/adaptive pooling, batch_norm and their
layers, against PyTorch in float64 and finite differences; replay; bad input."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fastad as fa
from loop_helpers import assert_adam_halves_the_loss
from vjp import check_vjp

rng = np.random.default_rng(0)


def data(*shape):
    return rng.standard_normal(shape)


def params(*arrays, dtype=np.float64):
    return [None if a is None else fa.Parameter(a, dtype=dtype) for a in arrays]


def torch_grads(fn, arrays, cot):
    """(value, grads) of torch fn on float64 tensors, backpropagating the cotangent."""
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts)
    out.backward(torch.tensor(cot))
    return out.detach().numpy(), [None if t is None else t.grad.numpy() for t in ts]


def assert_matches_torch(fa_fn, torch_fn, arrays, rtol=1e-10, atol=1e-10):
    ps = params(*arrays)
    y = fa_fn(*ps)
    cot = rng.standard_normal(y.shape)
    y.backward(cot)
    value, grads = torch_grads(torch_fn, arrays, cot)
    np.testing.assert_allclose(y.value, value, rtol=rtol, atol=atol)
    for k, (p, g) in enumerate(zip(ps, grads)):
        if p is not None:
            np.testing.assert_allclose(p.grad, g, rtol=rtol, atol=atol, err_msg=f"input {k}")
    return y


# ------------------------------------------------------------ convolution

CONV2D_CASES = [
    # (x shape, out_channels, kernel, stride, padding, dilation, groups, bias)
    ((1, 1, 8, 8), 4, (3, 3), 1, 1, 1, 1, True),
    ((2, 3, 7, 9), 4, (3, 2), (2, 1), (1, 0), 1, 1, False),
    ((3, 4, 9, 8), 6, (3, 3), 1, 2, (2, 1), 2, True),
    ((2, 4, 5, 5), 4, (2, 2), 2, 0, 1, 4, True),          # depthwise
    ((1, 2, 4, 4), 3, (4, 4), 1, 0, 1, 1, True),          # kernel as large as the input
    ((2, 2, 3, 3), 2, (1, 1), 1, 0, 1, 1, False),         # 1x1
    ((2, 1, 3, 3), 2, (3, 3), 3, 1, 1, 1, True),          # stride larger than the output
]


@pytest.mark.parametrize("case", CONV2D_CASES)
def test_conv2d_matches_torch(case):
    shape, out_channels, kernel, stride, padding, dilation, groups, bias = case
    arrays = (data(*shape), data(out_channels, shape[1] // groups, *kernel),
              data(out_channels) if bias else None)
    assert_matches_torch(
        lambda x, w, b: fa.conv2d(x, w, b, stride, padding, dilation, groups),
        lambda x, w, b: F.conv2d(x, w, b, stride, padding, dilation, groups), arrays)


CONV1D_CASES = [
    ((1, 1, 10), 3, 3, 1, 0, 1, 1, True),
    ((4, 4, 11), 6, 3, 2, 1, 2, 2, True),
    ((2, 3, 5), 2, 5, 1, 2, 1, 1, False),
    ((3, 2, 7), 2, 2, (3,), (1,), (3,), 1, True),
]


@pytest.mark.parametrize("case", CONV1D_CASES)
def test_conv1d_matches_torch(case):
    shape, out_channels, kernel, stride, padding, dilation, groups, bias = case
    arrays = (data(*shape), data(out_channels, shape[1] // groups, kernel),
              data(out_channels) if bias else None)
    assert_matches_torch(
        lambda x, w, b: fa.conv1d(x, w, b, stride, padding, dilation, groups),
        lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups), arrays)


def test_conv_gradients_match_finite_differences():
    check_vjp(lambda x, w, b: fa.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2),
                                        groups=2), data(2, 4, 5, 6), data(4, 2, 2, 3), data(4))
    check_vjp(lambda x, w: fa.conv1d(x, w, padding=1), data(3, 2, 6), data(3, 2, 3))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv_replays_after_set_value_and_keeps_dtype(dtype):
    x0, x1, w0 = data(2, 3, 6, 6), data(2, 3, 6, 6), data(4, 3, 3, 3)
    x = fa.Input(x0, dtype=dtype)
    w, b = fa.Parameter(w0, dtype=dtype), fa.Parameter(data(4), dtype=dtype)
    loss = fa.sum(fa.square(fa.conv2d(x, w, b, padding=1)))
    assert loss.dtype == dtype
    loss.backward()
    x.set_value(x1)
    w.zero_grad()
    b.zero_grad()
    loss.forward()
    loss.backward()
    tol = 1e-4 if dtype == np.float32 else 1e-10
    tw, tb = (torch.tensor(a.value.astype(np.float64), requires_grad=True) for a in (w, b))
    expected = (F.conv2d(torch.tensor(x1), tw, tb, padding=1) ** 2).sum()
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=tol)
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=tol, atol=tol)
    np.testing.assert_allclose(b.grad, tb.grad.numpy(), rtol=tol, atol=tol)


def test_conv_gradients_add_over_two_uses_and_an_empty_batch():
    x, w = params(data(2, 2, 5, 5), data(3, 2, 3, 3))
    (fa.sum(fa.conv2d(x, w)) + fa.sum(fa.conv2d(x, w, stride=2))).backward()
    tx, tw = (torch.tensor(a.value, requires_grad=True) for a in (x, w))
    (F.conv2d(tx, tw).sum() + F.conv2d(tx, tw, stride=2).sum()).backward()
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=1e-10)
    x, w, b = params(np.zeros((0, 2, 5, 5)), data(3, 2, 3, 3), data(3))
    y = fa.conv2d(x, w, b)
    assert y.shape == (0, 3, 3, 3)
    y.backward(np.zeros(y.shape))
    assert not w.grad.any() and not b.grad.any()


@pytest.mark.parametrize("call, message", [
    (lambda: fa.conv2d(fa.Input(np.ones((1, 1, 4, 4))), fa.Parameter(np.ones((2, 1, 5, 5)))),
     r"kernel height \(5.*larger than the padded input \(4 \+ 2 \* 0.*\(1, 1, 4, 4\)"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 1, 4, 4))), fa.Parameter(np.ones((2, 1, 3, 3))),
                       dilation=2), r"kernel height \(5, dilation included\)"),
    (lambda: fa.conv1d(fa.Input(np.ones((1, 1, 4))), fa.Parameter(np.ones((2, 1, 3))),
                       dilation=3), r"conv1d: the kernel \(7"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 3, 4, 4))), fa.Parameter(np.ones((2, 1, 3, 3))),
                       groups=2), r"3 channels \(x shape \(1, 3, 4, 4\)\) are not divisible by groups=2"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 4, 4, 4))), fa.Parameter(np.ones((3, 2, 3, 3))),
                       groups=2), r"out_channels 3 .* multiple of groups=2"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 4, 4))), fa.Parameter(np.ones((2, 1, 3, 3)))),
     r"x must have shape \(batch, channels, height, width\) \(4-D\), got shape \(1, 4, 4\)"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 2, 4, 4))), fa.Parameter(np.ones((2, 3, 3, 3)))),
     r"weight's axis 1 must be in_channels / groups = 2"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 2, 4, 4))), fa.Parameter(np.ones((2, 2, 3)))),
     r"weight must have shape \(out_channels, in_channels / groups, kernel_height"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 2, 4, 4))), fa.Parameter(np.ones((2, 2, 3, 3))),
                       fa.Parameter(np.ones(3))), r"bias must have shape \(2,\)"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 2, 4, 4))), fa.Parameter(np.ones((2, 2, 3, 3))),
                       stride=0), r"stride must be an int or a tuple of 2 ints, each >= 1, got 0"),
    (lambda: fa.conv2d(fa.Input(np.ones((1, 2, 4, 4))), fa.Parameter(np.ones((2, 2, 3, 3))),
                       padding=(1, 1, 1)), r"padding must be an int or a tuple of 2 ints"),
    (lambda: fa.conv1d(fa.Input(np.ones((1, 2, 4))), fa.Parameter(np.ones((2, 2, 3))),
                       padding=-1), r"padding must be an int >= 0, got -1"),
])
def test_conv_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_conv_type_errors():
    with pytest.raises(TypeError, match="conv2d: mixed dtypes"):
        fa.conv2d(fa.Input(np.ones((1, 1, 3, 3)), dtype=np.float32),
                  fa.Parameter(np.ones((1, 1, 2, 2)), dtype=np.float64))
    with pytest.raises(TypeError, match="conv2d: weight must be a fastad Variable"):
        fa.conv2d(fa.Input(np.ones((1, 1, 3, 3))), np.ones((1, 1, 2, 2)))
    with pytest.raises(TypeError, match="stride must be"):
        fa.conv2d(fa.Input(np.ones((1, 1, 3, 3))), fa.Parameter(np.ones((1, 1, 2, 2))), stride=1.5)


# ---------------------------------------------------------------- pooling

POOL_CASES = [
    # (x shape, kernel, stride, padding)
    ((2, 3, 8, 8), 2, None, 0),
    ((1, 2, 7, 9), 3, 2, 1),
    ((2, 1, 5, 6), (2, 3), (1, 2), (1, 0)),
    ((1, 1, 4, 4), 4, None, 2),
]


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", POOL_CASES)
def test_pool2d_matches_torch(kind, case):
    shape, kernel, stride, padding = case
    assert_matches_torch(lambda x: getattr(fa, f"{kind}_pool2d")(x, kernel, stride, padding),
                         lambda x: getattr(F, f"{kind}_pool2d")(x, kernel, stride, padding),
                         (data(*shape),))


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", [((2, 3, 9), 3, None, 0), ((1, 2, 8), 4, 2, 2)])
def test_pool1d_matches_torch(kind, case):
    shape, kernel, stride, padding = case
    assert_matches_torch(lambda x: getattr(fa, f"{kind}_pool1d")(x, kernel, stride, padding),
                         lambda x: getattr(F, f"{kind}_pool1d")(x, kernel, stride, padding),
                         (data(*shape),))


@pytest.mark.parametrize("shape, size", [((2, 3, 7, 5), (3, 2)), ((1, 2, 4, 4), 1),
                                         ((1, 1, 3, 5), (5, 7)), ((2, 2, 6, 6), 3)])
def test_adaptive_avg_pool2d_matches_torch(shape, size):
    assert_matches_torch(lambda x: fa.adaptive_avg_pool2d(x, size),
                         lambda x: F.adaptive_avg_pool2d(x, size), (data(*shape),))


def test_pool_gradients_match_finite_differences():
    check_vjp(lambda x: fa.max_pool2d(x, 3, 2, 1), data(2, 2, 6, 5))
    check_vjp(lambda x: fa.avg_pool2d(x, (2, 3), 1, (1, 1)), data(1, 2, 4, 5))
    check_vjp(lambda x: fa.adaptive_avg_pool2d(x, (2, 3)), data(1, 2, 5, 4))
    check_vjp(lambda x: fa.max_pool1d(x, 2), data(2, 2, 6))


def test_max_pool_ties_go_to_the_first_and_nan_wins():
    x = fa.Parameter(np.array([[[[1.0, 1.0], [0.0, np.nan]], ]]).reshape(1, 1, 2, 2))
    y = fa.max_pool2d(x, 2)
    assert np.isnan(y.value).all()
    y.backward(np.ones(y.shape))
    np.testing.assert_array_equal(x.grad, [[[[0, 0], [0, 1]]]])
    x = fa.Parameter(np.ones((1, 1, 2, 2)))
    fa.max_pool2d(x, 2).backward(np.ones((1, 1, 1, 1)))
    np.testing.assert_array_equal(x.grad, [[[[1, 0], [0, 0]]]])


def test_pool_replays_after_set_value():
    x = fa.Input(data(2, 2, 6, 6), dtype=np.float64)
    w = fa.Parameter(data(2, 2, 1, 1), dtype=np.float64)
    loss = fa.sum(fa.square(fa.max_pool2d(fa.conv2d(x, w), 2)))
    new = data(2, 2, 6, 6)
    x.set_value(new)
    loss.forward()
    loss.backward()
    tw = torch.tensor(w.value, requires_grad=True)
    expected = (F.max_pool2d(F.conv2d(torch.tensor(new), tw), 2) ** 2).sum()
    expected.backward()
    np.testing.assert_allclose(loss.item(), expected.item(), rtol=1e-10)
    np.testing.assert_allclose(w.grad, tw.grad.numpy(), rtol=1e-10)


@pytest.mark.parametrize("call, message", [
    (lambda: fa.max_pool2d(fa.Input(np.ones((1, 1, 3, 3))), 4),
     r"max_pool2d: the kernel height \(4.*larger than the padded input \(3 \+ 2 \* 0"),
    (lambda: fa.avg_pool2d(fa.Input(np.ones((1, 1, 4, 4))), 2, padding=2),
     r"padding 2 must be at most half of kernel_size 2"),
    (lambda: fa.max_pool2d(fa.Input(np.ones((1, 4, 4))), 2),
     r"max_pool2d: x must have shape \(batch, channels, height, width\) \(4-D\), got shape \(1, 4, 4\)"),
    (lambda: fa.avg_pool1d(fa.Input(np.ones((1, 1, 4, 4))), 2),
     r"avg_pool1d: x must have shape \(batch, channels, length\) \(3-D\)"),
    (lambda: fa.max_pool2d(fa.Input(np.ones((1, 1, 4, 4))), 0), r"kernel_size must be"),
    (lambda: fa.adaptive_avg_pool2d(fa.Input(np.ones((1, 1, 4, 4))), 0),
     r"output_size must be an int or a tuple of 2 ints, each >= 1"),
    (lambda: fa.adaptive_avg_pool2d(fa.Input(np.ones((1, 1, 0, 4))), 2), r"non-empty height"),
])
def test_pool_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------------ batch normalisation

@pytest.mark.parametrize("shape", [(5, 3), (4, 3, 6), (3, 3, 4, 2)])
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_matches_torch(shape, training, affine):
    rm, rv = data(3), rng.random(3) + 0.5
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    arrays = (data(*shape),) + ((data(3), data(3)) if affine else (None, None))
    assert_matches_torch(
        lambda x, w, b: fa.nn.functional.batch_norm(x, rm, rv, w, b, training, 0.3, 1e-4),
        lambda x, w, b: F.batch_norm(x, trm, trv, w, b, training, 0.3, 1e-4), arrays)
    np.testing.assert_allclose(rm, trm.numpy(), rtol=1e-12)
    np.testing.assert_allclose(rv, trv.numpy(), rtol=1e-12)     # unbiased, as PyTorch


def test_batch_norm_gradients_match_finite_differences():
    for training in (True, False):
        rm, rv = np.zeros(2), np.ones(2)
        check_vjp(lambda x, w, b: fa.nn.functional.batch_norm(x, rm, rv, w, b, training),
                  data(4, 2, 3), data(2), data(2))


def test_batch_norm_moves_the_running_averages_at_every_replay():
    norm = fa.nn.BatchNorm1d(2, momentum=0.5, dtype=np.float64)
    torch_norm = torch.nn.BatchNorm1d(2, momentum=0.5).double()
    x = fa.Input(data(6, 2), dtype=np.float64)
    y = norm(x)
    torch_norm(torch.tensor(x.value))
    batch = data(6, 2)
    x.set_value(batch)
    y.forward()
    torch_norm(torch.tensor(batch))
    np.testing.assert_allclose(norm.running_mean.value, torch_norm.running_mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(norm.running_var.value, torch_norm.running_var.numpy(), rtol=1e-12)
    norm.eval()
    torch_norm.eval()
    test = data(3, 2)
    np.testing.assert_allclose(norm(fa.Input(test, dtype=np.float64)).value,
                               torch_norm(torch.tensor(test)).detach().numpy(), rtol=1e-10)


def test_batch_norm_layers_state_dict_and_float32():
    norm = fa.nn.BatchNorm2d(3)
    assert list(norm.state_dict()) == ["weight", "bias", "running_mean", "running_var"]
    y = norm(fa.Input(data(4, 3, 2, 2)))
    assert y.dtype == np.float32 and norm.running_mean.value.dtype == np.float32
    other = fa.nn.BatchNorm2d(3)
    other.load_state_dict(norm.state_dict())
    np.testing.assert_array_equal(other.running_var.value, norm.running_var.value)
    live = other.eval()(fa.Input(np.ones((1, 3, 2, 2))))   # reads the buffers at each replay
    other.load_state_dict({**other.state_dict(), "running_mean": np.ones(3, np.float32)})
    np.testing.assert_allclose(live.forward().value, 0, atol=1e-6)
    no_affine = fa.nn.BatchNorm1d(3, affine=False)
    assert no_affine.parameters() == [] and len(no_affine.state_dict()) == 2


def test_batch_norm_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"BatchNorm1d: training needs more than one value per "
                                         r"channel.*\(1, 4\) \(a batch of one"):
        fa.nn.BatchNorm1d(4)(fa.Input(np.ones((1, 4))))
    fa.nn.BatchNorm1d(4).eval()(fa.Input(np.ones((1, 4))))          # fine in eval mode
    with pytest.raises(ValueError, match=r"batch_norm: training needs more than one value"):
        fa.nn.functional.batch_norm(fa.Input(np.ones((1, 4))), None, None, training=True)
    with pytest.raises(ValueError, match=r"BatchNorm2d: x must be 4-D with 3 channels on axis 1.*"
                                         r"got shape \(2, 3, 4\)"):
        fa.nn.BatchNorm2d(3)(fa.Input(np.ones((2, 3, 4))))
    with pytest.raises(ValueError, match=r"BatchNorm1d: x must be 2-D or 3-D with 3 channels"):
        fa.nn.BatchNorm1d(3)(fa.Input(np.ones((2, 4))))
    with pytest.raises(TypeError, match=r"running_mean must be a writable C-contiguous numpy array "
                                        r"of float32 and shape \(3,\)"):
        fa.nn.functional.batch_norm(fa.Input(np.ones((2, 3))), np.zeros(3), np.ones(3, np.float32))
    with pytest.raises(ValueError, match="training=False normalises with running_mean"):
        fa.nn.functional.batch_norm(fa.Input(np.ones((2, 3))), None, None)
    with pytest.raises(ValueError, match="momentum must be a number in"):
        fa.nn.BatchNorm1d(3, momentum=2)


# ------------------------------------------------------------------ layers

def test_conv_layers_match_torch_modules_and_initialise_like_torch():
    conv = fa.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2, dtype=np.float64,
                        generator=np.random.default_rng(1))
    assert conv.weight.shape == (6, 2, 3, 2) and conv.bias.shape == (6,)
    bound = 1 / np.sqrt(2 * 3 * 2)
    assert np.abs(conv.weight.value).max() <= bound and np.abs(conv.bias.value).max() <= bound
    torch_conv = torch.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, groups=2).double()
    torch_conv.load_state_dict({k: torch.tensor(v) for k, v in conv.state_dict().items()})
    x = data(2, 4, 5, 5)
    np.testing.assert_allclose(conv(fa.Input(x, dtype=np.float64)).value,
                               torch_conv(torch.tensor(x)).detach().numpy(), rtol=1e-10)
    conv1 = fa.nn.Conv1d(2, 3, 3, bias=False)
    assert conv1.bias is None and conv1(fa.Input(np.ones((1, 2, 5)))).shape == (1, 3, 3)
    with pytest.raises(ValueError, match="Conv2d: in_channels 3 and out_channels 4 must both be "
                                         "divisible by groups=2"):
        fa.nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match=r"conv2d: x must have shape \(batch, channels, height, "
                                         r"width\) \(4-D\), got shape \(3, 8, 8\)"):
        fa.nn.Conv2d(3, 4, 3)(fa.Input(np.ones((3, 8, 8))))


def test_pool_layers_and_a_small_cnn_train():
    model = fa.nn.Sequential(fa.nn.Conv2d(1, 4, 3, padding=1), fa.nn.BatchNorm2d(4), fa.nn.ReLU(),
                             fa.nn.MaxPool2d(2), fa.nn.AvgPool2d(2, 1), fa.nn.AdaptiveAvgPool2d(2),
                             fa.nn.Flatten(), fa.nn.Linear(16, 2))
    x = fa.Input(data(8, 1, 8, 8))
    targets = fa.IndexInput(np.arange(8) % 2)
    loss = fa.nn.cross_entropy(model(x), targets)
    assert_adam_halves_the_loss(loss, model.parameters(), steps=30)
    assert fa.nn.MaxPool1d(2)(fa.Input(np.ones((1, 1, 4)))).shape == (1, 1, 2)
    assert fa.nn.AvgPool1d(2)(fa.Input(np.ones((1, 1, 4)))).shape == (1, 1, 2)


def test_module_buffers_are_named_loaded_and_checked():
    model = fa.nn.Sequential(fa.nn.Conv2d(1, 2, 3), fa.nn.BatchNorm2d(2))
    assert [name for name, _ in model.named_buffers()] == ["1.running_mean", "1.running_var"]
    assert all(isinstance(b, fa.Input) for _, b in model.named_buffers())
    state = model.state_dict()
    del state["1.running_var"]
    with pytest.raises(ValueError, match=r"missing \['1.running_var'\]"):
        model.load_state_dict(state)
    with pytest.raises(ValueError, match=r"shape \(3,\) in the state dict"):
        model.load_state_dict({**model.state_dict(), "1.running_mean": np.zeros(3)})
    norm = model[1]
    with pytest.raises(TypeError, match="'running_mean' is a buffer; assign an fa.Input"):
        norm.running_mean = np.zeros(2)
    with pytest.raises(ValueError, match="register_buffer: 'weight' must be a new attribute name"):
        norm.register_buffer("weight", np.zeros(2))
    norm.register_buffer("steps", np.zeros(1))
    assert "1.steps" in model.state_dict()
    del norm.steps
    assert "1.steps" not in model.state_dict()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pool_and_batch_norm_keep_the_dtype_and_match_float64(dtype):
    x = data(3, 2, 6, 6)
    for build in (lambda v: fa.max_pool2d(v, 2), lambda v: fa.avg_pool2d(v, 3, 1, 1),
                  lambda v: fa.adaptive_avg_pool2d(v, 4),
                  lambda v: fa.nn.functional.batch_norm(v, None, None, training=True)):
        y = build(fa.Input(x, dtype=dtype))
        assert y.dtype == dtype
        np.testing.assert_allclose(y.value, build(fa.Input(x, dtype=np.float64)).value,
                                   rtol=1e-5, atol=1e-5)


def test_replays_allocate_no_buffers():
    import tracemalloc
    x = fa.Input(data(8, 4, 16, 16))
    w, b = fa.Parameter(data(8, 4, 3, 3)), fa.Parameter(data(8))
    rm, rv = np.zeros(8, np.float32), np.ones(8, np.float32)
    h = fa.nn.functional.batch_norm(fa.conv2d(x, w, b, padding=1), rm, rv, training=True)
    loss = fa.sum(fa.adaptive_avg_pool2d(fa.avg_pool2d(fa.max_pool2d(h, 2), 3, 1, 1), 3))
    loss.backward()
    tracemalloc.start()
    try:
        for _ in range(3):
            loss.forward()
            loss.backward()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32_000      # one column buffer of the conv alone is 8*4*9*256*4 = 295 KB


def test_pool_layers_keep_their_arguments_and_show_them():
    pool = fa.nn.MaxPool2d((2, 3), stride=1, padding=1)
    assert (pool.kernel_size, pool.stride, pool.padding) == ((2, 3), 1, 1)
    assert repr(pool) == "MaxPool2d(kernel_size=(2, 3), stride=1, padding=1)"
    assert repr(fa.nn.AvgPool1d(2)) == "AvgPool1d(kernel_size=2, stride=None, padding=0)"
    with pytest.raises(ValueError, match="AvgPool2d: kernel_size must be"):
        fa.nn.AvgPool2d(0)
