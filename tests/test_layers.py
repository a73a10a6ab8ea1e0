"""fastad.nn layers: Linear, Embedding, LSTMCell, GRUCell, LSTM, GRU (over a list of steps or a
(T, batch, input_size) Variable, one way or both), LayerNorm.

Gradients against finite differences (float64), values and gradients against
PyTorch with the weights copied across, PyTorch's default initialisation,
shapes, replay, float32, state dicts and bad input.
"""
import math

import numpy as np
import pytest

import fastad as fa
from fastad import nn

F64 = np.float64


def rng(seed=0):
    return np.random.default_rng(seed)


def inp(array, dtype=F64, requires_grad=False):
    return fa.Input(np.asarray(array), dtype=dtype, requires_grad=requires_grad)


def seq_inputs(steps, batch, width, seed=1, dtype=F64):
    g = rng(seed)
    return [inp(g.standard_normal((batch, width)), dtype) for _ in range(steps)]


def weighted_sum(outputs, seed=7):
    """A scalar that depends on every element of every output with distinct weights."""
    g = rng(seed)
    total = None
    for out in outputs:
        term = fa.sum(out * g.standard_normal(out.shape))
        total = term if total is None else total + term
    return total


def check_leaf_grads(output, leaves):
    """Analytic gradients of a scalar `output` match finite differences for every leaf."""
    for leaf in leaves:
        numerical, analytic = fa.finite_difference(leaf, output)
        np.testing.assert_allclose(analytic, numerical, rtol=1e-5, atol=1e-7,
                                   err_msg=f"leaf of shape {leaf.shape}")


# ------------------------------------------------------------------ Linear

def test_linear_shapes_and_value():
    layer = nn.Linear(4, 3, dtype=F64, generator=rng())
    W, b = layer.weight.value, layer.bias.value
    assert layer.weight.shape == (3, 4) and layer.bias.shape == (3,)      # torch's (out, in)
    x = rng(1).standard_normal((5, 4))
    np.testing.assert_allclose(layer(inp(x)).value, x @ W.T + b)
    assert layer(inp(x[0])).shape == (3,)                         # 1-D input
    assert layer(inp(rng(2).standard_normal((2, 5, 4)))).shape == (2, 5, 3)
    assert layer(inp(np.zeros((0, 4)))).shape == (0, 3)
    no_bias = nn.Linear(4, 3, bias=False, dtype=F64, generator=rng())
    assert no_bias.bias is None and len(no_bias.parameters()) == 1
    np.testing.assert_allclose(no_bias(inp(x)).value, x @ no_bias.weight.value.T)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradients(bias):
    layer = nn.Linear(3, 2, bias=bias, dtype=F64, generator=rng())
    x = inp(rng(1).standard_normal((4, 3)), requires_grad=True)
    loss = weighted_sum([fa.tanh(layer(x))])
    check_leaf_grads(loss, layer.parameters() + [x])


def test_linear_errors():
    with pytest.raises(ValueError, match="Linear: in_features must be >= 1, got 0"):
        nn.Linear(0, 3)
    with pytest.raises(TypeError, match=r"out_features must be an int, got True \(bool\)"):
        nn.Linear(3, True)
    with pytest.raises(TypeError, match=r"in_features must be an int, got 2.5 \(float\)"):
        nn.Linear(2.5, 3)
    with pytest.raises(TypeError, match="generator must be a numpy Generator"):
        nn.Linear(2, 3, generator=0)
    layer = nn.Linear(4, 3, dtype=F64)
    with pytest.raises(ValueError, match=r"Linear: the last axis of the input must have size 4, got shape \(5, 3\)"):
        layer(inp(np.zeros((5, 3))))
    with pytest.raises(ValueError, match=r"got shape \(\)"):
        layer(inp(1.0))
    with pytest.raises(TypeError, match="expected a float fastad Variable, got IndexInput"):
        layer(fa.IndexInput([1, 2, 3, 0]))
    with pytest.raises(TypeError, match="expected a float fastad Variable, got ndarray"):
        layer(np.zeros((1, 4)))
    with pytest.raises(TypeError, match="mixed dtypes"):
        layer(inp(np.zeros((1, 4)), dtype=np.float32))


def test_linear_float32_and_replay():
    layer = nn.Linear(6, 5, generator=rng())
    assert layer.weight.dtype == np.float32
    x = inp(np.zeros((3, 6)), dtype=np.float32)
    loss = fa.sum(fa.square(layer(x)))
    new = rng(3).standard_normal((3, 6)).astype(np.float32)
    x.set_value(new)
    loss.forward()
    loss.backward()
    replayed = (loss.item(), layer.weight.grad.copy(), layer.bias.grad.copy())
    layer.zero_grad()
    fresh = fa.sum(fa.square(layer(inp(new, dtype=np.float32))))
    fresh.backward()
    assert replayed[0] == pytest.approx(fresh.item(), rel=1e-6)
    np.testing.assert_allclose(replayed[1], layer.weight.grad, rtol=1e-5)
    np.testing.assert_allclose(replayed[2], layer.bias.grad, rtol=1e-5)


# --------------------------------------------------------------- Embedding

def test_embedding_shapes_values_and_sparse_gradient():
    emb = nn.Embedding(10, 3, dtype=F64, generator=rng())
    ids = np.array([[4, 1, 4], [9, 0, 1]])
    out = emb(fa.IndexInput(ids))
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out.value, emb.weight.value[ids])
    assert emb([2, 2]).shape == (2, 3)                           # plain ids are wrapped
    g = rng(5).standard_normal(out.shape)
    out.backward(g)
    assert emb.weight.is_sparse_grad
    assert sorted(emb.weight.sparse_rows()) == [0, 1, 4, 9]
    expected = np.zeros((10, 3))
    np.add.at(expected, ids, g)
    np.testing.assert_allclose(emb.weight.grad, expected)


def test_embedding_gradcheck_and_replay_with_new_ids():
    emb = nn.Embedding(6, 2, dtype=F64, generator=rng())
    ix = fa.IndexInput([1, 3, 1])
    loss = weighted_sum([fa.tanh(emb(ix))])
    check_leaf_grads(loss, [emb.weight])
    ix.set_value([5, 0, 0])
    loss.forward()
    fresh = weighted_sum([fa.tanh(emb(fa.IndexInput([5, 0, 0])))])
    assert loss.item() == pytest.approx(fresh.item(), rel=1e-12)
    ix.set_value([6, 0, 0])
    with pytest.raises(IndexError, match="id 6 at position 0 .* table with 6 rows"):
        loss.forward()


def test_embedding_errors():
    with pytest.raises(ValueError, match="Embedding: num_embeddings must be >= 1, got -1"):
        nn.Embedding(-1, 3)
    with pytest.raises(ValueError, match="embedding_dim must be >= 1, got 0"):
        nn.Embedding(3, 0)
    emb = nn.Embedding(3, 2)
    with pytest.raises(IndexError, match="out of range"):
        emb([3])
    with pytest.raises(IndexError, match=">= 0"):
        emb([-1])
    with pytest.raises(TypeError, match="float Variable"):
        emb(inp([0.0]))


# ------------------------------------------------------------------- cells

def lstm_reference(x, h, c, Wih, Whh, bih, bhh):
    """One LSTM step in numpy (gate order i, f, g, o; weights (4H, in), as torch's)."""
    H = h.shape[1]
    sig = lambda v: 1 / (1 + np.exp(-v))
    gates = x @ Wih.T + bih + h @ Whh.T + bhh
    i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
    c = sig(f) * c + sig(i) * np.tanh(g)
    return sig(o) * np.tanh(c), c


def gru_reference(x, h, Wih, Whh, bih, bhh):
    H = h.shape[1]
    sig = lambda v: 1 / (1 + np.exp(-v))
    gi, gh = x @ Wih.T + bih, h @ Whh.T + bhh
    r = sig(gi[:, :H] + gh[:, :H])
    z = sig(gi[:, H:2 * H] + gh[:, H:2 * H])
    n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1 - z) * n + z * h


@pytest.mark.parametrize("batch", [1, 3])
def test_lstm_cell_values_with_and_without_state(batch):
    cell = nn.LSTMCell(4, 5, dtype=F64, generator=rng())
    weights = tuple(p.value for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
    assert [w.shape for w in weights] == [(20, 4), (20, 5), (20,), (20,)]
    g = rng(1)
    x = g.standard_normal((batch, 4))
    zeros = np.zeros((batch, 5))
    h, c = cell(inp(x))
    ref_h, ref_c = lstm_reference(x, zeros, zeros, *weights)
    np.testing.assert_allclose(h.value, ref_h, rtol=1e-12)
    np.testing.assert_allclose(c.value, ref_c, rtol=1e-12)
    h0, c0 = g.standard_normal((batch, 5)), g.standard_normal((batch, 5))
    h, c = cell(inp(x), (inp(h0), inp(c0)))
    ref_h, ref_c = lstm_reference(x, h0, c0, *weights)
    np.testing.assert_allclose(h.value, ref_h, rtol=1e-12)
    np.testing.assert_allclose(c.value, ref_c, rtol=1e-12)


@pytest.mark.parametrize("batch", [1, 2])
def test_lstm_cell_gradients(batch):
    cell = nn.LSTMCell(3, 4, dtype=F64, generator=rng())
    g = rng(2)
    x = inp(g.standard_normal((batch, 3)), requires_grad=True)
    h0 = inp(g.standard_normal((batch, 4)), requires_grad=True)
    c0 = inp(g.standard_normal((batch, 4)), requires_grad=True)
    h, c = cell(x, (h0, c0))
    check_leaf_grads(weighted_sum([h, c]), cell.parameters() + [x, h0, c0])
    h, c = cell(x)
    check_leaf_grads(weighted_sum([h, c]), cell.parameters() + [x])


def test_gru_cell_values_and_gradients():
    cell = nn.GRUCell(3, 4, dtype=F64, generator=rng())
    weights = tuple(p.value for p in (cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh))
    assert [w.shape for w in weights] == [(12, 3), (12, 4), (12,), (12,)]
    g = rng(3)
    xv, hv = g.standard_normal((2, 3)), g.standard_normal((2, 4))
    np.testing.assert_allclose(cell(inp(xv), inp(hv)).value, gru_reference(xv, hv, *weights),
                               rtol=1e-12)
    np.testing.assert_allclose(cell(inp(xv)).value,
                               gru_reference(xv, np.zeros((2, 4)), *weights), rtol=1e-12)
    x = inp(xv, requires_grad=True)
    h0 = inp(hv, requires_grad=True)
    check_leaf_grads(weighted_sum([cell(x, h0)]), cell.parameters() + [x, h0])


def test_cell_errors():
    with pytest.raises(ValueError, match="LSTMCell: hidden_size must be >= 1, got 0"):
        nn.LSTMCell(3, 0)
    with pytest.raises(ValueError, match="GRUCell: input_size must be >= 1, got 0"):
        nn.GRUCell(0, 3)
    lstm, gru = nn.LSTMCell(3, 4, dtype=F64), nn.GRUCell(3, 4, dtype=F64)
    x = inp(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"LSTMCell: the last axis of the input must have size 3, got shape \(2, 5\)"):
        lstm(inp(np.zeros((2, 5))))
    with pytest.raises(ValueError, match=r"LSTMCell: x must have shape \(batch, 3\), got \(3,\)"):
        lstm(inp(np.zeros(3)))
    with pytest.raises(ValueError, match=r"GRUCell: x must have shape \(batch, 3\), got \(1, 2, 3\)"):
        gru(inp(np.zeros((1, 2, 3))))
    good = inp(np.zeros((2, 4)))
    with pytest.raises(TypeError, match=r"LSTMCell: state must be a pair \(h, c\)"):
        lstm(x, good)
    with pytest.raises(ValueError, match=r"LSTMCell: the state c must have shape \(2, 4\) .*got \(1, 4\)"):
        lstm(x, (good, inp(np.zeros((1, 4)))))
    with pytest.raises(TypeError, match="the state h must be a float fastad Variable, got ndarray"):
        lstm(x, (np.zeros((2, 4)), good))
    with pytest.raises(ValueError, match=r"GRUCell: the state h must have shape \(2, 4\)"):
        gru(x, inp(np.zeros((2, 3))))
    with pytest.raises(TypeError, match="mixed dtypes"):
        lstm(inp(np.zeros((2, 3)), dtype=np.float32))


# ------------------------------------------------------------- sequences

@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_sequence_matches_stepping_the_cell(kind):
    layer = getattr(nn, kind)(3, 4, dtype=F64, generator=rng())
    xs = seq_inputs(5, 2, 3)
    hs, state = layer(xs, return_state=True)
    assert len(hs) == 5 and all(h.shape == (2, 4) for h in hs)
    cell = getattr(nn, kind + "Cell")(3, 4, dtype=F64)
    cell.load_state_dict({name[:-3]: value for name, value in layer.state_dict().items()})
    expected, s = [], None
    for x in xs:
        s = cell(x, s)
        expected.append(s[0] if kind == "LSTM" else s)
    for h, e in zip(hs, expected):
        np.testing.assert_allclose(h.value, e.value, rtol=1e-12)
    assert (state[0] if kind == "LSTM" else state) is hs[-1]
    assert [name for name, _ in layer.named_parameters()] == \
        ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_sequence_gradients_with_a_carried_state(kind):
    """Gradcheck over several steps from a given state, through every output and the final state."""
    layer = getattr(nn, kind)(2, 3, dtype=F64, generator=rng())
    g = rng(4)
    xs = [inp(g.standard_normal((2, 2)), requires_grad=True) for _ in range(4)]
    h0 = inp(g.standard_normal((2, 3)), requires_grad=True)
    c0 = inp(g.standard_normal((2, 3)), requires_grad=True)
    state = (h0, c0) if kind == "LSTM" else h0
    hs, final = layer(xs, state, return_state=True)
    finals = list(final) if kind == "LSTM" else [final]
    loss = weighted_sum(hs + finals)
    leaves = layer.parameters() + xs + ([h0, c0] if kind == "LSTM" else [h0])
    check_leaf_grads(loss, leaves)


def test_lstm_gradcheck_on_the_initial_state():
    layer = nn.LSTM(2, 3, dtype=F64, generator=rng())
    xs = seq_inputs(3, 1, 2)

    def loss(h0, c0):
        hs, (h, c) = layer(xs, (h0, c0), return_state=True)
        return weighted_sum(hs + [c])

    g = rng(6)
    assert fa.gradcheck(loss, g.standard_normal((1, 3)), g.standard_normal((1, 3)))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("tensor", [False, True], ids=["list", "bidirectional tensor"])
def test_sequence_replay_with_new_inputs(kind, tensor):
    """set_value on the inputs, forward() and backward() give a fresh graph's loss and gradients
    (a list of steps, or a (T, batch, input_size) Variable through both directions)."""
    layer = getattr(nn, kind)(3, 4, dtype=F64, generator=rng(), bidirectional=tensor)
    values, new = rng(1).standard_normal((4, 2, 3)), rng(2).standard_normal((4, 2, 3))

    def leaves_of(steps):
        return [inp(steps)] if tensor else [inp(v) for v in steps]

    def loss_of(leaves):
        return weighted_sum([layer(leaves[0])] if tensor else layer(leaves))

    leaves = leaves_of(values)
    loss = loss_of(leaves)
    loss.backward()
    for leaf, v in zip(leaves, [new] if tensor else new):
        leaf.set_value(v)
    layer.zero_grad()
    loss.forward()
    loss.backward()
    replayed = loss.item(), [p.grad.copy() for p in layer.parameters()]
    layer.zero_grad()
    fresh = loss_of(leaves_of(new))
    fresh.backward()
    assert replayed[0] == pytest.approx(fresh.item(), rel=1e-12)
    for got, p in zip(replayed[1], layer.parameters()):
        np.testing.assert_allclose(got, p.grad, rtol=1e-10)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_sequence_float32(kind):
    layer = getattr(nn, kind)(3, 4, generator=rng())
    xs = seq_inputs(3, 2, 3, dtype=np.float32)
    hs = layer(xs)
    assert all(h.dtype == np.float32 for h in hs)
    weighted_sum(hs).backward()
    assert all(p.grad.dtype == np.float32 and np.isfinite(p.grad).all() for p in layer.parameters())
    layer64 = getattr(nn, kind)(3, 4, dtype=F64)
    layer64.load_state_dict(layer.state_dict())
    hs64 = layer64([inp(x.value) for x in xs])
    np.testing.assert_allclose(hs[-1].value, hs64[-1].value, rtol=1e-5, atol=1e-6)


def test_sequence_errors():
    lstm = nn.LSTM(3, 4, dtype=F64)
    with pytest.raises(TypeError, match=r"LSTM: expected a \(T, batch, input_size\) Variable or a "
                                        r"non-empty list of \(batch, input_size\) Variables, got list"):
        lstm([])
    with pytest.raises(TypeError, match="got IndexInput"):
        lstm(fa.IndexInput(np.zeros((2, 3), dtype=np.int64)))
    xs = seq_inputs(3, 2, 3)
    xs[2] = inp(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"LSTM: step 2: the last axis of the input must have size 3"):
        lstm(xs)
    gru = nn.GRU(3, 4, dtype=F64)
    with pytest.raises(ValueError, match=r"GRU: step 0: the state h must have shape \(2, 4\)"):
        gru(seq_inputs(2, 2, 3), inp(np.zeros((1, 4))))


# ------------------------------------------------ sequences as one (T, batch, input_size) Variable

@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_tensor_input_matches_the_list_form(kind):
    """A (T, batch, input_size) Variable gives the list form's states, stacked, and gradients."""
    layer = getattr(nn, kind)(3, 4, dtype=F64, generator=rng())
    xv = rng(1).standard_normal((5, 2, 3))
    x = inp(xv, requires_grad=True)
    out, final = layer(x, return_state=True)
    assert out.shape == (5, 2, 4)
    if kind == "LSTM":
        assert out.op_name == "lstm_sequence"
    xs = [inp(v, requires_grad=True) for v in xv]
    hs, list_final = layer(xs, return_state=True)
    np.testing.assert_allclose(out.value, np.stack([h.value for h in hs]), rtol=1e-12, atol=1e-14)
    finals = final if kind == "LSTM" else (final,)
    list_finals = list_final if kind == "LSTM" else (list_final,)
    for got, want in zip(finals, list_finals):
        assert got.shape == (1, 2, 4)
        np.testing.assert_allclose(got.value[0], want.value, rtol=1e-12, atol=1e-14)
    weights = rng(2).standard_normal((5, 2, 4))
    fa.sum(out * weights).backward()
    grads = [x.grad.copy()] + [p.grad.copy() for p in layer.parameters()]
    layer.zero_grad()
    fa.sum(fa.stack(hs, 0) * weights).backward()
    want = [np.stack([x.grad for x in xs])] + [p.grad for p in layer.parameters()]
    for got, w in zip(grads, want):
        np.testing.assert_allclose(got, w, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_tensor_input_gradcheck(kind, bidirectional):
    """Finite differences through the output and the final state, from a given state, for the
    input, the state and every Parameter of both directions."""
    layer = getattr(nn, kind)(2, 3, dtype=F64, generator=rng(), bidirectional=bidirectional)
    D = 2 if bidirectional else 1
    g = rng(3)
    x = inp(g.standard_normal((4, 2, 2)), requires_grad=True)
    h0 = inp(g.standard_normal((D, 2, 3)), requires_grad=True)
    c0 = inp(g.standard_normal((D, 2, 3)), requires_grad=True)
    out, final = layer(x, (h0, c0) if kind == "LSTM" else h0, return_state=True)
    assert out.shape == (4, 2, 3 * D)
    loss = weighted_sum([out] + (list(final) if kind == "LSTM" else [final]))
    check_leaf_grads(loss, layer.parameters() + [x, h0] + ([c0] if kind == "LSTM" else []))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_bidirectional_runs_the_second_direction_backwards(kind):
    """The second half of each step's output is a layer of the _reverse weights run over the
    flipped sequence; h_n[1] is its state at t = 0."""
    layer = getattr(nn, kind)(3, 4, dtype=F64, generator=rng(), bidirectional=True)
    names = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    assert [n for n, _ in layer.named_parameters()] == names + [n + "_reverse" for n in names]
    forward, backward = getattr(nn, kind)(3, 4, dtype=F64), getattr(nn, kind)(3, 4, dtype=F64)
    state = layer.state_dict()
    forward.load_state_dict({n: state[n] for n in names})
    backward.load_state_dict({n: state[n + "_reverse"] for n in names})
    xv = rng(1).standard_normal((5, 2, 3))
    out, final = layer(inp(xv), return_state=True)
    h_n = final[0] if kind == "LSTM" else final
    ahead, back = forward(inp(xv)), backward(inp(xv[::-1].copy()))
    np.testing.assert_allclose(out.value[..., :4], ahead.value, rtol=1e-12)
    np.testing.assert_allclose(out.value[..., 4:], back.value[::-1], rtol=1e-12)
    np.testing.assert_allclose(h_n.value[1], back.value[-1], rtol=1e-12)
    np.testing.assert_allclose(h_n.value[0], ahead.value[-1], rtol=1e-12)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_tensor_input_one_step_and_float32(kind):
    layer = getattr(nn, kind)(3, 4, generator=rng(), bidirectional=True)
    assert layer.weight_ih_l0_reverse.dtype == np.float32
    xv = rng(1).standard_normal((1, 3, 3))
    out = layer(inp(xv, dtype=np.float32))
    assert out.shape == (1, 3, 8) and out.dtype == np.float32
    weighted_sum([out]).backward()
    layer64 = getattr(nn, kind)(3, 4, dtype=F64, bidirectional=True)
    layer64.load_state_dict(layer.state_dict())
    out64 = layer64(inp(xv))
    np.testing.assert_allclose(out.value, out64.value, rtol=1e-5, atol=1e-6)
    weighted_sum([out64]).backward()
    for p, q in zip(layer.parameters(), layer64.parameters()):
        if q.grad is None:      # weight_hh after one step from a zero state
            assert p.grad is None
        else:
            np.testing.assert_allclose(p.grad, q.grad, rtol=1e-4, atol=1e-5)


def test_tensor_input_errors():
    lstm = nn.LSTM(3, 4, dtype=F64, bidirectional=True)
    with pytest.raises(TypeError, match=r"LSTM: a bidirectional layer takes a \(T, batch, "
                                        r"input_size\) Variable, got list"):
        lstm(seq_inputs(2, 2, 3))
    with pytest.raises(ValueError, match=r"LSTM: x must have shape \(T, batch, 3\), got \(2, 3\)"):
        lstm(inp(np.zeros((2, 3))))
    with pytest.raises(ValueError, match=r"LSTM: the last axis of the input must have size 3, "
                                         r"got shape \(4, 2, 5\)"):
        lstm(inp(np.zeros((4, 2, 5))))
    x = inp(np.zeros((4, 2, 3)))
    state = inp(np.zeros((2, 2, 4)))
    with pytest.raises(ValueError, match=r"LSTM: the state h0 must have shape \(2, 2, 4\) "
                                         r"\(num_directions, batch, hidden_size\), got \(2, 4\)"):
        lstm(x, (inp(np.zeros((2, 4))), state))
    with pytest.raises(ValueError, match=r"LSTM: the state c0 must have shape \(2, 2, 4\)"):
        lstm(x, (state, inp(np.zeros((1, 2, 4)))))
    with pytest.raises(TypeError, match=r"LSTM: state must be a pair \(h0, c0\), got Input"):
        lstm(x, state)
    with pytest.raises(TypeError, match="lstm_sequence: mixed dtypes"):
        lstm(inp(np.zeros((4, 2, 3)), dtype=np.float32))
    with pytest.raises(TypeError, match="LSTM: bidirectional must be True or False, got"):
        nn.LSTM(3, 4, bidirectional="yes")
    gru = nn.GRU(3, 4, dtype=F64)
    with pytest.raises(ValueError, match=r"GRU: the state h0 must have shape \(1, 2, 4\)"):
        gru(x, inp(np.zeros((2, 4))))
    with pytest.raises(ValueError, match=r"GRU: x must have shape \(T, batch, 3\), got \(1, 4, 2, 3\)"):
        gru(inp(np.zeros((1, 4, 2, 3))))


# --------------------------------------------------------------- LayerNorm

@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_values_and_gradients(affine):
    norm = nn.LayerNorm(5, dtype=F64, elementwise_affine=affine)
    assert len(norm.parameters()) == (2 if affine else 0)
    if affine:
        norm.weight.value[...] = rng(1).uniform(0.5, 1.5, 5)
        norm.bias.value[...] = rng(2).standard_normal(5)
    xv = rng(3).standard_normal((2, 3, 5)) * 3 + 1
    y = norm(inp(xv))
    expected = (xv - xv.mean(-1, keepdims=True)) / np.sqrt(xv.var(-1, keepdims=True) + 1e-5)
    if affine:
        expected = expected * norm.weight.value + norm.bias.value
    np.testing.assert_allclose(y.value, expected, rtol=1e-10, atol=1e-12)
    x = inp(xv[0], requires_grad=True)
    check_leaf_grads(weighted_sum([norm(x)]), norm.parameters() + [x])


def test_layer_norm_errors():
    with pytest.raises(TypeError, match=r"LayerNorm: normalized_shape must be an int, got \(5,\)"):
        nn.LayerNorm((5,))
    with pytest.raises(ValueError, match="eps must be a finite number > 0, got 0"):
        nn.LayerNorm(5, eps=0)
    with pytest.raises(ValueError, match=r"LayerNorm: the last axis of the input must have size 5, got shape \(5, 4\)"):
        nn.LayerNorm(5)(inp(np.zeros((5, 4)), dtype=np.float32))


# ---------------------------------------------------------- initialisation

def test_default_initialisation_matches_pytorch_ranges():
    g = rng(0)
    lin = nn.Linear(400, 300, generator=g)
    bound = 1 / math.sqrt(400)
    for p in lin.parameters():
        assert np.abs(p.value).max() <= bound and np.abs(p.value).max() > 0.95 * bound
        assert np.var(p.value) == pytest.approx(bound ** 2 / 3, rel=0.1)
    emb = nn.Embedding(1000, 50, generator=g)
    assert emb.weight.value.mean() == pytest.approx(0, abs=0.02)
    assert emb.weight.value.std() == pytest.approx(1, rel=0.02)
    H = 100
    bound = 1 / math.sqrt(H)
    lstm = nn.LSTMCell(50, H, generator=g)
    for p in lstm.parameters():
        assert np.abs(p.value).max() <= bound and np.abs(p.value).max() > 0.9 * bound
    gru = nn.GRUCell(50, H, generator=g)
    for p in gru.parameters():
        assert np.abs(p.value).max() <= bound and np.abs(p.value).max() > 0.9 * bound
    norm = nn.LayerNorm(7)
    np.testing.assert_array_equal(norm.weight.value, 1)
    np.testing.assert_array_equal(norm.bias.value, 0)


@pytest.mark.parametrize("make", [lambda g: nn.Linear(3, 4, generator=g),
                                  lambda g: nn.Embedding(5, 2, generator=g),
                                  lambda g: nn.LSTM(3, 4, generator=g),
                                  lambda g: nn.GRU(3, 4, generator=g)])
def test_generator_makes_initialisation_reproducible(make):
    first, second, other = make(rng(3)), make(rng(3)), make(rng(4))
    for a, b, c in zip(first.parameters(), second.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.value, b.value)
        assert not np.array_equal(a.value, c.value)


# ------------------------------------------------------------- state dicts

LAYERS = {
    "linear": (lambda g: nn.Linear(3, 4, dtype=F64, generator=g), ["weight", "bias"],
               lambda layer: [layer(inp(np.ones((2, 3))))]),
    "embedding": (lambda g: nn.Embedding(5, 2, dtype=F64, generator=g), ["weight"],
                  lambda layer: [layer([0, 4])]),
    "lstm": (lambda g: nn.LSTM(3, 4, dtype=F64, generator=g),
             ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"],
             lambda layer: layer(seq_inputs(2, 1, 3))),
    "gru": (lambda g: nn.GRU(3, 4, dtype=F64, generator=g),
            ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"],
            lambda layer: layer(seq_inputs(2, 1, 3))),
    "bidirectional lstm": (lambda g: nn.LSTM(3, 4, dtype=F64, generator=g, bidirectional=True),
                           ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
                            "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse",
                            "bias_hh_l0_reverse"],
                           lambda layer: [layer(inp(np.ones((2, 1, 3))))]),
    "layer_norm": (lambda g: nn.LayerNorm(3, dtype=F64), ["weight", "bias"],
                   lambda layer: [layer(inp([[1.0, 2.0, 4.0]]))]),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_state_dict_round_trip(name, tmp_path):
    make, keys, run = LAYERS[name]
    source, target = make(rng(1)), make(rng(2))
    if name == "layer_norm":
        for p in source.parameters():
            p.value[...] = rng(5).standard_normal(p.shape)
    assert list(source.state_dict()) == keys
    path = tmp_path / f"{name}.npz"
    fa.save({"model": source.state_dict()}, path)
    assert target.load_state_dict(fa.load(path)["model"]) == nn.IncompatibleKeys([], [])
    for a, b in zip(run(source), run(target)):
        np.testing.assert_array_equal(a.value, b.value)


def test_reprs():
    assert repr(nn.Linear(3, 4)) == "Linear(in_features=3, out_features=4, bias=True)"
    assert repr(nn.Embedding(10, 2)) == "Embedding(10, 2)"
    assert repr(nn.LSTMCell(3, 4)) == "LSTMCell(3, 4)"
    assert repr(nn.GRU(3, 4)) == "GRU(3, 4)"
    assert repr(nn.LSTM(3, 4, bidirectional=True)) == "LSTM(3, 4, bidirectional=True)"
    assert repr(nn.LayerNorm(8)) == "LayerNorm(8, eps=1e-05, elementwise_affine=True)"


# ---------------------------------------------------------------- PyTorch

def to_torch(torch, array):
    return torch.tensor(np.asarray(array), dtype=torch.float64)


def test_linear_and_layer_norm_match_pytorch():
    torch = pytest.importorskip("torch")
    layer = nn.Linear(5, 3, dtype=F64, generator=rng())
    tl = torch.nn.Linear(5, 3).double()
    with torch.no_grad():
        tl.weight.copy_(to_torch(torch, layer.weight.value))
        tl.bias.copy_(to_torch(torch, layer.bias.value))
    xv = rng(1).standard_normal((4, 5))
    y = layer(inp(xv))
    ty = tl(to_torch(torch, xv))
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=1e-12)
    g = rng(2).standard_normal(y.shape)
    y.backward(g)
    ty.backward(to_torch(torch, g))
    np.testing.assert_allclose(layer.weight.grad, tl.weight.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.bias.grad, tl.bias.grad.numpy(), rtol=1e-12)
    norm = nn.LayerNorm(5, dtype=F64)
    tn = torch.nn.LayerNorm(5).double()
    np.testing.assert_allclose(norm(inp(xv)).value, tn(to_torch(torch, xv)).detach().numpy(),
                               rtol=1e-10, atol=1e-12)


def test_embedding_matches_pytorch_sparse_gradient():
    torch = pytest.importorskip("torch")
    emb = nn.Embedding(8, 3, dtype=F64, generator=rng())
    te = torch.nn.Embedding(8, 3, sparse=True).double()
    with torch.no_grad():
        te.weight.copy_(to_torch(torch, emb.weight.value))
    ids = np.array([2, 7, 2, 0])
    out = emb(fa.IndexInput(ids))
    tout = te(torch.from_numpy(ids))
    np.testing.assert_array_equal(out.value, tout.detach().numpy())
    g = rng(1).standard_normal(out.shape)
    out.backward(g)
    tout.backward(to_torch(torch, g))
    assert te.weight.grad.is_sparse and emb.weight.is_sparse_grad
    np.testing.assert_allclose(emb.weight.grad, te.weight.grad.to_dense().numpy(), rtol=1e-12)


def copy_recurrent_weights(torch, cell, tcell):
    """tcell (a torch cell) gets the weights of cell or of a fastad layer (its "_l0" names)."""
    with torch.no_grad():
        for name, p in cell.named_parameters():
            getattr(tcell, name.removesuffix("_l0")).copy_(to_torch(torch, p.value))


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_sequence_matches_pytorch_cell_loop(kind):
    torch = pytest.importorskip("torch")
    layer = getattr(nn, kind)(3, 4, dtype=F64, generator=rng())
    tcell = getattr(torch.nn, kind + "Cell")(3, 4).double()
    copy_recurrent_weights(torch, layer, tcell)
    g = rng(1)
    xs_np = [g.standard_normal((2, 3)) for _ in range(5)]
    h0, c0 = g.standard_normal((2, 4)), g.standard_normal((2, 4))
    state = (inp(h0), inp(c0)) if kind == "LSTM" else inp(h0)
    hs, final = layer([inp(x) for x in xs_np], state, return_state=True)
    tstate = (to_torch(torch, h0), to_torch(torch, c0)) if kind == "LSTM" else to_torch(torch, h0)
    ths = []
    for x in xs_np:
        tstate = tcell(to_torch(torch, x), tstate)
        ths.append(tstate[0] if kind == "LSTM" else tstate)
    for h, th in zip(hs, ths):
        np.testing.assert_allclose(h.value, th.detach().numpy(), rtol=1e-10, atol=1e-12)
    if kind == "LSTM":
        np.testing.assert_allclose(final[1].value, tstate[1].detach().numpy(), rtol=1e-10)
    # gradients of the same weighted sum
    weights = [rng(20 + t).standard_normal((2, 4)) for t in range(5)]
    loss = None
    for h, w in zip(hs, weights):
        term = fa.sum(h * w)
        loss = term if loss is None else loss + term
    loss.backward()
    tloss = sum((th * to_torch(torch, w)).sum() for th, w in zip(ths, weights))
    tloss.backward()
    for name, p in layer.named_parameters():
        np.testing.assert_allclose(p.grad, getattr(tcell, name[:-3]).grad.numpy(), rtol=1e-9,
                                   atol=1e-12, err_msg=name)


def test_lstm_cell_zero_state_matches_pytorch_default():
    torch = pytest.importorskip("torch")
    cell = nn.LSTMCell(3, 4, dtype=F64, generator=rng())
    tcell = torch.nn.LSTMCell(3, 4).double()
    copy_recurrent_weights(torch, cell, tcell)
    xv = rng(1).standard_normal((2, 3))
    h, c = cell(inp(xv))
    th, tc = tcell(to_torch(torch, xv))
    np.testing.assert_allclose(h.value, th.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c.value, tc.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls, pinned", [
    (nn.LSTMCell, {"weight_ih": [0.1769117054637106, -0.6449633975696526],
                   "weight_hh": [-0.6566472470356749, -0.4886658254906492],
                   "bias_ih": [-0.3286642153908336, 0.0581861501984865],
                   "bias_hh": [0.010991601985923416, -0.49469228727035003]}),
    (nn.GRUCell, {"weight_ih": [0.1769117054637106, 0.41388645534222857],
                  "weight_hh": [0.17278752331598635, 0.0199653672898229],
                  "bias_ih": [-0.0044216300701419575, -0.4234060314209028],
                  "bias_hh": [-0.18450351894359018, 0.5378708903662601]}),
])
def test_recurrent_cell_seeded_weights_are_pinned(cls, pinned):
    # the draws and their order (weight_ih, weight_hh, bias_ih, bias_hh, in torch's layout)
    cell = cls(3, 2, dtype=F64, generator=rng(7))
    got = {name: np.asarray(p.value).ravel()[[0, -1]].tolist() for name, p in cell.named_parameters()}
    assert got == pinned
    assert repr(cell) == f"{cls.__name__}(3, 2)"


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("dtype", [F64, np.float32])
@pytest.mark.parametrize("with_state", [False, True])
def test_tensor_input_matches_pytorch_layer(kind, bidirectional, dtype, with_state):
    """torch.nn.LSTM / GRU over the same (T, batch, input_size) input, its state dict loaded (and
    ours loaded into it): the output, the final state and every gradient."""
    torch = pytest.importorskip("torch")
    tdtype = torch.float64 if dtype == F64 else torch.float32
    tol = dict(rtol=1e-10, atol=1e-12) if dtype == F64 else dict(rtol=2e-5, atol=2e-6)
    theirs = getattr(torch.nn, kind)(3, 4, bidirectional=bidirectional).to(tdtype)
    ours = getattr(nn, kind)(3, 4, dtype=dtype, bidirectional=bidirectional)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.load_state_dict(theirs.state_dict()) == nn.IncompatibleKeys([], [])
    theirs.load_state_dict({k: torch.tensor(v) for k, v in ours.state_dict().items()})
    D, g = (2 if bidirectional else 1), rng(4)
    xv = g.standard_normal((6, 2, 3))
    states = [g.standard_normal((D, 2, 4)) for _ in range(2 if kind == "LSTM" else 1)]
    x = inp(xv, dtype=dtype, requires_grad=True)
    tx = torch.tensor(xv, dtype=tdtype, requires_grad=True)
    leaves = [inp(s, dtype=dtype, requires_grad=True) for s in states]
    tleaves = [torch.tensor(s, dtype=tdtype, requires_grad=True) for s in states]
    state = tstate = None
    if with_state:
        state = tuple(leaves) if kind == "LSTM" else leaves[0]
        tstate = tuple(tleaves) if kind == "LSTM" else tleaves[0]
    out, final = ours(x, state, return_state=True)
    tout, tfinal = theirs(tx, tstate)
    finals, tfinals = (final, tfinal) if kind == "LSTM" else ((final,), (tfinal,))
    np.testing.assert_allclose(out.value, tout.detach().numpy(), **tol)
    for f, tf in zip(finals, tfinals):
        np.testing.assert_allclose(f.value, tf.detach().numpy(), **tol)
    weights = [g.standard_normal(out.shape)] + [g.standard_normal(f.shape) for f in finals]
    loss = None
    for v, w in zip((out,) + tuple(finals), weights):
        loss = fa.sum(v * w) if loss is None else loss + fa.sum(v * w)
    loss.backward()
    sum((v * torch.tensor(w, dtype=tdtype)).sum()
        for v, w in zip((tout,) + tuple(tfinals), weights)).backward()
    grad_tol = tol if dtype == F64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad, tx.grad.numpy(), **grad_tol)
    if with_state:
        for leaf, tleaf in zip(leaves, tleaves):
            np.testing.assert_allclose(leaf.grad, tleaf.grad.numpy(), **grad_tol)
    for (name, p), (tname, tp) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == tname
        assert p.grad.dtype == dtype
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), **grad_tol, err_msg=name)
