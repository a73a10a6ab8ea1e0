"""The conv family on the device (cuda/conv.cu, fastad/cuda/ops/conv.py) against the
CPU (which tests/test_conv.py checks against PyTorch): values, gradients, replays."""
import numpy as np
import pytest

import fastad as fa
from fastad import nn
from device_check import check_against_cpu, host, tolerance
from loop_helpers import assert_adam_halves_the_loss

rng = np.random.default_rng(0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("stride, padding, dilation, groups, bias", [
    (1, 1, 1, 1, True), ((2, 1), (1, 0), (1, 2), 2, False), (2, 0, 1, 4, True)])
def test_conv2d_matches_the_cpu(backend, dtype, stride, padding, dilation, groups, bias):
    arrays = [rng.standard_normal((2, 4, 6, 5)), rng.standard_normal((4, 4 // groups, 3, 2))]
    if bias:
        arrays.append(rng.standard_normal(4))
    check_against_cpu(lambda x, w, *b: fa.conv2d(x, w, *b, stride=stride, padding=padding,
                                                 dilation=dilation, groups=groups),
                      *arrays, dtype=dtype)


def test_conv1d_matches_the_cpu(backend):
    check_against_cpu(lambda x, w, b: fa.conv1d(x, w, b, stride=2, padding=2, dilation=2),
                      rng.standard_normal((3, 2, 9)), rng.standard_normal((5, 2, 3)),
                      rng.standard_normal(5))


def test_conv_with_an_empty_batch_on_the_device(backend):
    w = fa.Parameter(np.ones((2, 1, 3, 3)), device="cuda")
    y = fa.conv2d(fa.Input(np.zeros((0, 1, 4, 4)), device="cuda"), w)
    assert y.shape == (0, 2, 2, 2)
    y.backward(np.zeros(y.shape))
    assert not host(w.grad).any()


@pytest.mark.parametrize("build", [
    lambda x: fa.max_pool2d(x, 3, 2, 1),
    lambda x: fa.avg_pool2d(x, (2, 3), 1, (1, 1)),
    lambda x: fa.adaptive_avg_pool2d(x, (4, 2)),
    lambda x: fa.max_pool1d(x.reshape((2, 3, 30)), 4, 3, 2),
    lambda x: fa.avg_pool1d(x.reshape((2, 3, 30)), 3),
], ids=["max2d", "avg2d", "adaptive", "max1d", "avg1d"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_pooling_matches_the_cpu(backend, build, dtype):
    check_against_cpu(build, rng.standard_normal((2, 3, 6, 5)), dtype=dtype)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 4, 5)])
def test_batch_norm_matches_the_cpu_and_moves_the_running_averages(backend, training, shape):
    layers = {}
    for device in ("cpu", "cuda"):
        layer = (nn.BatchNorm1d if len(shape) == 2 else nn.BatchNorm2d)(3, momentum=0.3,
                                                                        dtype=np.float64)
        layer.load_state_dict({**layer.state_dict(), "running_mean": np.arange(3.0),
                               "running_var": np.arange(1.0, 4.0)})
        layers[device] = layer.to(device).train(training)
    check_against_cpu(lambda x, *_: layers[x.device.split(":")[0]](x) * (x + 1.0),
                      rng.standard_normal(shape))
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(host(getattr(layers["cuda"], name)),
                                   getattr(layers["cpu"], name).value, **tolerance(np.float64))
    assert layers["cuda"].running_mean.device == "cuda:0"
    dev = layers["cuda"]
    y = dev(fa.Input(rng.standard_normal(shape), dtype=np.float64, device="cuda"))
    y.backward(np.ones(shape))
    assert host(dev.weight.grad).shape == (3,)


def test_batch_norm_rejects_host_running_averages_for_a_device_input(backend):
    with pytest.raises(TypeError, match=r"batch_norm: on cuda:0, running_mean must be an array "
                                        r"on that device"):
        fa.nn.functional.batch_norm(fa.Input(np.ones((2, 3)), device="cuda"), np.zeros(3),
                                    np.ones(3), training=True)


def test_the_example_cnn_trains_on_the_device(backend):
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 2)).to("cuda")
    x = fa.Input(rng.standard_normal((6, 1, 4, 4)), device="cuda")
    loss = fa.nn.cross_entropy(model(x), fa.IndexInput(np.arange(6) % 2, device="cuda"))
    assert_adam_halves_the_loss(loss, model.parameters(), steps=20)
