"""fa.nn on the device: Module.to, state dicts, initialisers, layers against the CPU."""
import numpy as np
import pytest

import fastad as fa
from fastad import nn
from device_check import check_against_cpu, host, tolerance


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.encode = nn.Linear(4, 3, dtype=np.float64)
        self.decode = nn.Linear(3, 4, dtype=np.float64)
        self.decode.weight = self.encode.weight          # one Parameter, two places
        self.drop = nn.Dropout(0.5, seed=0)

    def forward(self, x):
        return self.decode(fa.tanh(self.encode(x)) @ self.encode.weight.T @ self.encode.weight)


def test_module_to_moves_every_parameter_and_keeps_ties(backend):
    model = Tied()
    before = model.state_dict()
    assert model.to("cuda") is model
    assert all(p.device == "cuda:0" for p in model.parameters())
    assert model.decode.weight is model.encode.weight
    assert len(model.parameters()) == len(dict(model.named_parameters()))
    after = model.state_dict()
    assert all(isinstance(v, np.ndarray) for v in after.values())
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
    model.to("cpu")
    assert all(p.device == "cpu" for p in model.parameters())


def test_load_state_dict_and_initialisers_on_the_device(backend):
    layer = nn.Linear(3, 2).to("cuda")
    state = {"weight": np.ones((2, 3)), "bias": np.zeros(2)}
    layer.load_state_dict(state)
    np.testing.assert_array_equal(layer.weight.numpy(), np.ones((2, 3)))
    nn.init.zeros_(layer.weight)
    assert not layer.weight.numpy().any()
    nn.init.normal_(layer.bias, generator=np.random.default_rng(0))
    # drawn in the Parameter's dtype (float32), as on the host
    np.testing.assert_array_equal(layer.bias.numpy(),
                                  np.random.default_rng(0).standard_normal(2, dtype=np.float32))
    with pytest.raises(ValueError, match="shape"):
        layer.load_state_dict({"weight": np.ones((2, 2)), "bias": np.zeros(2)})


@pytest.mark.parametrize("make", [
    lambda: nn.Sequential(nn.Linear(5, 6, dtype=np.float64), nn.Linear(6, 2, dtype=np.float64)),
    lambda: nn.LSTMCell(5, 3, dtype=np.float64),
    lambda: nn.GRUCell(5, 3, dtype=np.float64),
    lambda: nn.LayerNorm(5, dtype=np.float64),
], ids=["sequential", "lstm-cell", "gru-cell", "layernorm"])
def test_layers_match_the_cpu(backend, make):
    rng = np.random.default_rng(3)
    cpu = make()
    dev = make()
    dev.load_state_dict(cpu.state_dict())
    dev.to("cuda")
    data = rng.standard_normal((4, 5))
    def run(model, device):
        out = model(fa.Input(data, dtype=np.float64, device=device))
        if isinstance(out, tuple):
            out = out[0]
        loss = (out * out).sum()
        loss.backward()
        return loss
    loss_cpu, loss_dev = run(cpu, "cpu"), run(dev, "cuda")
    np.testing.assert_allclose(loss_dev.item(), loss_cpu.item(), **tolerance(np.float64))
    for (name, p), q in zip(cpu.named_parameters(), dev.parameters()):
        if p.grad is None:          # weight_hh of a cell step from a zero state
            assert q.grad is None, name
            continue
        np.testing.assert_allclose(host(q.grad), p.grad, **tolerance(np.float64), err_msg=name)


def test_embedding_and_dropout_on_the_device(backend):
    emb = nn.Embedding(10, 4, dtype=np.float64).to("cuda")
    drop = nn.Dropout(0.5, seed=1)
    rows = drop(emb(fa.IndexInput([1, 1, 7], device="cuda")))
    assert rows.device == "cuda:0" and rows.shape == (3, 4)
    rows.sum().backward()
    assert emb.weight.is_sparse_grad
    assert sorted(emb.weight.sparse_rows().tolist()) == [1, 7]


class _CupyLike:
    """Stands for a CuPy array in a state dict: a device array with .get()."""
    __cuda_array_interface__ = {}

    def __init__(self, array):
        self.array = array

    def get(self):
        return self.array


def test_load_state_dict_takes_device_arrays():
    layer = nn.Linear(2, 1)
    layer.load_state_dict({"weight": _CupyLike(np.full((1, 2), 3.0)), "bias": np.zeros(1)})
    np.testing.assert_array_equal(layer.weight.value, np.full((1, 2), 3.0))


def r(*shape):
    return np.random.default_rng(len(shape) + sum(shape)).standard_normal(shape)


def test_attention_runs_on_the_device_as_on_the_cpu(backend):
    mask = np.random.default_rng(3).random((4, 5)) > 0.5
    mask[2] = False                               # a row masked out entirely: zeros
    check_against_cpu(lambda q, k, v: fa.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                      r(2, 3, 4, 6), r(2, 3, 5, 6), r(2, 3, 5, 2))
    check_against_cpu(lambda q, k: fa.scaled_dot_product_attention(q, k, k, is_causal=True, scale=0.5),
                      r(2, 4, 3), r(2, 4, 3))


def test_multihead_attention_on_the_device(backend):
    cpu = fa.nn.MultiheadAttention(8, 2, dtype=np.float64, generator=np.random.default_rng(0))
    dev = fa.nn.MultiheadAttention(8, 2, dtype=np.float64, generator=np.random.default_rng(0)).to("cuda")
    x = r(2, 3, 8)
    padding = np.array([[False, False, True], [False, False, False]])
    y_cpu, w_cpu = cpu(*[fa.Input(x, dtype=np.float64)] * 3, key_padding_mask=padding)
    y_dev, w_dev = dev(*[fa.Input(x, dtype=np.float64, device="cuda")] * 3, key_padding_mask=padding)
    np.testing.assert_allclose(host(y_dev), y_cpu.value, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(host(w_dev), w_cpu.value, rtol=1e-10, atol=1e-12)
    y_cpu.sum().backward()
    y_dev.sum().backward()
    np.testing.assert_allclose(host(dev.in_proj_weight.grad), cpu.in_proj_weight.grad, rtol=1e-9)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("norm_type", [2.0, 1.0, np.inf])
def test_embedding_padding_and_max_norm_on_the_device(backend, dtype, norm_type):
    values = r(6, 3) * 2
    cpu = fa.Parameter(values, dtype=dtype)
    dev = fa.Parameter(values, dtype=dtype, device="cuda")
    ids = [1, 4, 1, 0, 4, 4]                      # repeated rows are renormalised once
    ix_cpu, ix_dev = fa.IndexInput(ids), fa.IndexInput(ids, device="cuda")
    y_cpu = fa.embedding(cpu, ix_cpu, padding_idx=4, max_norm=1.2, norm_type=norm_type)
    y_dev = fa.embedding(dev, ix_dev, padding_idx=4, max_norm=1.2, norm_type=norm_type)
    tol = tolerance(dtype)
    for new in (None, [2, 2, 5, 4, 3, 1]):
        if new is not None:
            ix_cpu.set_value(new)
            ix_dev.set_value(new)
            y_cpu.forward(); y_dev.forward()
            cpu.zero_grad(); dev.zero_grad()
        np.testing.assert_allclose(host(y_dev), y_cpu.value, **tol)
        np.testing.assert_allclose(host(dev), cpu.value, **tol)        # the table, renormalised
        seed = r(*y_cpu.shape)
        y_cpu.backward(seed)
        y_dev.backward(seed)
        np.testing.assert_allclose(host(dev.grad), cpu.grad, **tol)
        np.testing.assert_array_equal(host(dev.grad)[4], 0.0)


def test_dropout_draws_a_mask_per_forward_and_follows_eval(backend):
    drop = nn.Dropout(0.5, seed=0)
    x = fa.Parameter(np.arange(1.0, 101.0), dtype=np.float64, device="cuda")
    out = drop(x)
    loss = fa.sum(out * 2.0)
    first = host(out.value)
    kept = first != 0
    assert 20 < kept.sum() < 80 and out.device == "cuda:0"
    np.testing.assert_allclose(first[kept], 2 * np.arange(1.0, 101.0)[kept])
    loss.forward()
    second = host(out.value)
    assert not np.array_equal(second != 0, kept)
    loss.backward()
    np.testing.assert_allclose(host(x.grad), 2.0 * (second != 0) * 2)
    drop.eval()
    loss.forward()
    np.testing.assert_array_equal(host(out.value), np.arange(1.0, 101.0))
