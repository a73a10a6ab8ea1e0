"""fa.autobatch with the fused recurrent ops (fa.nn.LSTM, GRU, LSTMCell, GRUCell): the examples
of a minibatch run as one fused call per group (one op, weights, direction, state form and,
for an LSTM sequence, length), with the losses, values and summed gradients of the examples
built one by one; what cannot batch says so."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from autobatch_checks import assert_batch_matches_eager, gradients

IN, H, CLASSES = 3, 4, 5


def _model(dtype=np.float64, seed=0):
    gen = np.random.default_rng(seed)
    return {"lstm": fa.nn.LSTM(IN, H, bidirectional=True, dtype=dtype, generator=gen),
            "gru": fa.nn.GRU(IN, H, bidirectional=True, dtype=dtype, generator=gen),
            "lstm_steps": fa.nn.LSTM(IN, H, dtype=dtype, generator=gen),
            "lstm_cell": fa.nn.LSTMCell(IN, H, dtype=dtype, generator=gen),
            "gru_cell": fa.nn.GRUCell(IN, H, dtype=dtype, generator=gen),
            "out": fa.Parameter(gen.normal(0, 0.5, (2 * H, CLASSES)), dtype=dtype, name="out"),
            "state_out": fa.Parameter(gen.normal(0, 0.5, (H, CLASSES)), dtype=dtype, name="state_out")}


def _parameters(model):
    params = {}
    for name, part in model.items():
        if isinstance(part, fa.Parameter):
            params[name] = part
        else:
            params.update({f"{name}.{k}": p for k, p in part.named_parameters()})
    return params


def _loss(example, model, dtype=np.float64):
    """One example's loss through every fused recurrent op: a bidirectional LSTM (from a given
    state or zeros) and GRU over x (T, batch, IN), an LSTM over x's steps as a list, and
    LSTMCell and GRUCell stepped over x's steps; the tokens' mean cross-entropy, and a summed
    cross-entropy of the final states."""
    x, h0, c0, tags, state_tags = example
    T, B = x.shape[:2]
    xs = fa.Input(x, dtype=dtype)
    if h0 is None:
        out, (h_n, _) = model["lstm"](xs, return_state=True)
    else:
        out, (h_n, _) = model["lstm"](xs, state=(fa.tanh(fa.Input(h0, dtype=dtype)),
                                                 fa.Input(c0, dtype=dtype)), return_state=True)
    g_out, g_n = model["gru"](xs, return_state=True)
    states = (out + g_out).reshape((T * B, 2 * H))
    loss = fa.nn.cross_entropy(states @ model["out"], fa.IndexInput(tags))
    hs, (h, c) = model["lstm_steps"]([xs[t] for t in range(T)], return_state=True)
    cell_state, g = None, None
    for t in range(T):
        cell_state = model["lstm_cell"](xs[t], cell_state)
        g = model["gru_cell"](xs[t], g)
    finals = fa.concat([h_n.reshape((2 * B, H)), g_n.reshape((2 * B, H)), h, c,
                        cell_state[0], cell_state[1] * hs[0], g], axis=0)
    return loss + fa.nn.cross_entropy(finals @ model["state_out"], fa.IndexInput(state_tags),
                                      reduction="sum")


@st.composite
def _examples(draw):
    T, B = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    state = draw(st.booleans())
    return (rng.normal(size=(T, B, IN)),
            rng.normal(size=(2, B, H)) if state else None,
            rng.normal(size=(2, B, H)) if state else None,
            rng.integers(0, CLASSES, T * B), rng.integers(0, CLASSES, 9 * B))




def _nodes(root):
    """The nodes of the graph below root."""
    nodes, stack, seen = [], [root], set()
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            nodes.append(node)
            stack.extend(node.parents)
    return nodes


def _node_types(root):
    counts = {}
    for node in _nodes(root):
        counts[type(node).__name__] = counts.get(type(node).__name__, 0) + 1
    return counts


@settings(max_examples=25, deadline=None)
@given(st.lists(_examples(), min_size=1, max_size=6))
def test_batched_recurrent_ops_have_the_losses_and_summed_gradients_of_the_examples(examples):
    model = _model()
    assert_batch_matches_eager(examples, lambda example: _loss(example, model), _parameters(model))


def _tagger_loss(x, tags, lstm, out):
    T = x.shape[0]
    states = lstm(fa.Input(x.reshape(T, 1, IN), dtype=np.float64)).reshape((T, 2 * H))
    return fa.nn.cross_entropy(states @ out, fa.IndexInput(tags))


def test_sequences_of_any_lengths_run_as_one_packed_call_a_direction():
    model = _model()
    rng = np.random.default_rng(1)
    lengths = [3, 5, 3, 1, 5, 3]
    examples = [(rng.normal(size=(T, IN)), rng.integers(0, CLASSES, T)) for T in lengths]
    with fa.autobatch():
        total = fa.batch([_tagger_loss(x, t, model["lstm"], model["out"]) for x, t in examples])
    counts = _node_types(total)
    # three lengths, two directions: one call a direction for the six sentences; one
    # cross_entropy node
    assert counts["LSTMSequence"] == 2 and counts["CrossEntropy"] == 1
    sequences = [n for n in _nodes(total) if type(n).__name__ == "LSTMSequence"]
    assert all(n.shape == (sum(lengths), H) for n in sequences)


def test_cells_of_one_step_run_as_one_call():
    model = _model()
    rng = np.random.default_rng(2)
    with fa.autobatch():
        losses = [_loss((rng.normal(size=(T, 1, IN)), None, None, rng.integers(0, CLASSES, T),
                         rng.integers(0, CLASSES, 9)), model) for T in (2, 4, 4, 1, 3)]
        counts = _node_types(fa.batch(losses))
    # a step a depth: four steps of LSTMCell, and of GRUCell both in the layer's two directions
    # and as a cell; the list-form LSTM's steps are LSTMCell's too
    assert counts["LSTMCell"] == 8 and counts["GRUCell"] == 12


def test_two_layers_of_one_shape_are_two_groups():
    model, other = _model(seed=0), _model(seed=1)
    rng = np.random.default_rng(3)
    examples = [(rng.normal(size=(4, IN)), rng.integers(0, CLASSES, 4)) for _ in range(4)]
    layers = [model, other, model, other]
    params = list(model["lstm"].parameters()) + list(other["lstm"].parameters())
    eager = 0.0
    for (x, t), m in zip(examples, layers):
        loss = _tagger_loss(x, t, m["lstm"], m["out"])
        loss.backward()
        eager += loss.item()
    grads = [p.grad.copy() for p in params]
    for p in params:
        p.zero_grad()
    with fa.autobatch():
        total = fa.batch([_tagger_loss(x, t, m["lstm"], m["out"]) for (x, t), m in zip(examples, layers)])
    assert _node_types(total)["LSTMSequence"] == 4
    total.backward()
    assert total.item() == pytest.approx(eager, rel=1e-12)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(p.grad, g, rtol=1e-10, atol=1e-12)


def test_recorded_states_read_their_values_after_batch():
    model = _model()
    rng = np.random.default_rng(4)
    xs = [rng.normal(size=(T, 2, IN)) for T in (3, 2)]
    eager = [model["lstm"](fa.Input(x, dtype=np.float64), return_state=True) for x in xs]
    with fa.autobatch():
        leaves = [fa.Input(x, dtype=np.float64) for x in xs]
        recorded = [model["lstm"](leaf, return_state=True) for leaf in leaves]
        rows = leaves[0][1]
        fa.batch([fa.nn.cross_entropy(out.reshape((-1, 2 * H)) @ model["out"], np.zeros(len(x) * 2, dtype=np.int64))
                  for (out, _), x in zip(recorded, xs)]
                 + [fa.nn.cross_entropy(c.reshape((4, H)) @ model["state_out"], [0, 1, 2, 3])
                    for _, (_, c) in recorded])
    for (out, (h_n, c_n)), (e_out, (e_h, e_c)) in zip(recorded, eager):
        np.testing.assert_allclose(out.value, e_out.value, rtol=1e-12)
        np.testing.assert_allclose(c_n.value, e_c.value, rtol=1e-12)
    np.testing.assert_array_equal(rows.value, xs[0][1])


def test_float32_batches_within_float32_precision():
    model = _model(np.float32)
    params = {k: p for k, p in _parameters(model).items() if k.startswith(("lstm.", "out"))}
    rng = np.random.default_rng(5)
    examples = [(rng.normal(size=(T, IN)), rng.integers(0, CLASSES, T)) for T in (2, 3, 2)]

    def loss(x, t):
        T = x.shape[0]
        states = model["lstm"](fa.Input(x.reshape(T, 1, IN), dtype=np.float32)).reshape((T, 2 * H))
        return fa.nn.cross_entropy(states @ model["out"], fa.IndexInput(t))

    eager = 0.0
    for x, t in examples:
        out = loss(x, t)
        out.backward()
        eager += out.item()
    grads = gradients(params)
    for p in params.values():
        p.zero_grad()
    with fa.autobatch():
        total = fa.batch([loss(x, t) for x, t in examples])
    total.backward()
    assert total.dtype == np.float32
    assert total.item() == pytest.approx(eager, rel=1e-5)
    for k, g in gradients(params).items():
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, grads[k], rtol=1e-4, atol=1e-6, err_msg=k)


def test_cross_entropy_means_count_the_rows_not_ignored():
    rng = np.random.default_rng(6)
    W = fa.Parameter(rng.normal(size=(IN, CLASSES)), dtype=np.float64)
    examples = [(rng.normal(size=(3, IN)), [1, -100, 2]), (rng.normal(size=(2, IN)), [0, 4]),
                (rng.normal(size=(1, IN)), [3])]
    eager = 0.0
    for x, t in examples:
        out = fa.nn.cross_entropy(fa.Input(x, dtype=np.float64) @ W, t)
        out.backward()
        eager += out.item()
    grad = W.grad.copy()
    W.zero_grad()
    with fa.autobatch():
        total = fa.batch([fa.nn.cross_entropy(fa.Input(x, dtype=np.float64) @ W, t) for x, t in examples])
    total.backward()
    assert total.item() == pytest.approx(eager, rel=1e-12)
    np.testing.assert_allclose(W.grad, grad, rtol=1e-12)
    with fa.autobatch():
        nan = fa.nn.cross_entropy(fa.Input(examples[0][0], dtype=np.float64) @ W, [-100] * 3)
        with pytest.raises(NotImplementedError, match="every target is ignore_index"):
            fa.batch([nan])


def test_mixed_dtypes_raise_naming_the_op_or_the_losses():
    m64, m32 = _model(np.float64), _model(np.float32)
    x = np.zeros((2, 1, IN))
    with fa.autobatch():
        with pytest.raises(TypeError, match="lstm_sequence: mixed dtypes"):
            m64["lstm"](fa.Input(x, dtype=np.float32))
        with pytest.raises(TypeError, match="gru_cell: mixed dtypes"):
            m64["gru_cell"](fa.Input(x[0], dtype=np.float32))
        losses = [_tagger_loss(x[:, 0], [0, 1], m64["lstm"], m64["out"]),
                  fa.nn.cross_entropy(m32["lstm"](fa.Input(x, dtype=np.float32)).reshape((2, 2 * H))
                                      @ m32["out"], [0, 1])]
        with pytest.raises(TypeError, match=r"losses\[0\].*float64.*losses\[1\].*float32"):
            fa.batch(losses)


def test_forms_that_cannot_batch_raise_naming_the_op():
    model = _model()
    shared = fa.Parameter(np.zeros((1, H)), dtype=np.float64)
    with fa.autobatch():
        x = fa.Input(np.zeros((1, IN)), dtype=np.float64)
        with pytest.raises(NotImplementedError, match="gru_cell batches a recorded state.*h .*shared"):
            model["gru_cell"](x, shared)
        h = model["gru_cell"](x)
        with pytest.raises(NotImplementedError, match="stack of recorded values batches along a leading"):
            fa.stack([h, h], axis=2)
        with pytest.raises(NotImplementedError, match="concat batches recorded values only"):
            fa.concat([h, shared], axis=0)
