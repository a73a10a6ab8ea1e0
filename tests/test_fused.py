"""fastad.ops.fused: lstm_cell and gru_cell, one recurrent step as one node, and lstm_sequence, a
whole LSTM sequence as one node, against finite differences, numpy and the stepped cells."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from fastad.ops.fused import SequenceWeights, gru_cell, lstm_cell, lstm_sequence

F64 = np.float64


def sig(v):
    return 1 / (1 + np.exp(-v))


def reference(x, h, c, w_ih, w_hh, b_ih, b_hh):
    """One LSTM step in numpy, the weights in PyTorch's layout (4H, in)."""
    H = b_ih.shape[0] // 4
    gates = x @ w_ih.T + b_ih + b_hh + (h @ w_hh.T if h is not None else 0)
    i, f, g, o = (gates[:, k * H:(k + 1) * H] for k in range(4))
    c_new = sig(i) * np.tanh(g) + (sig(f) * c if c is not None else 0)
    return np.stack([sig(o) * np.tanh(c_new), c_new])


def arrays(batch, n_in, H, seed=0):
    g = np.random.default_rng(seed)
    return (g.standard_normal((batch, n_in)), g.standard_normal((batch, H)),
            g.standard_normal((batch, H)), g.standard_normal((4 * H, n_in)) * 0.5,
            g.standard_normal((4 * H, H)) * 0.5, g.standard_normal(4 * H) * 0.5,
            g.standard_normal(4 * H) * 0.5)


def weighted(v, seed=9):
    return fa.sum(v * np.random.default_rng(seed).standard_normal(v.shape))


def weighted_over_three_steps(step, state):
    """Three recurrent steps, `step(state) -> (h, new state)`, from `state`: (the sum of
    weighted(h) over the steps, the last state)."""
    total = None
    for _ in range(3):
        h, state = step(state)
        total = weighted(h) if total is None else total + weighted(h)
    return total, state


def assert_empty_batch_output(out, shape, params):
    """An empty batch's output has `shape`; its sum gives every parameter a zero gradient."""
    assert out.shape == shape
    fa.sum(out).backward()
    for p in params:
        np.testing.assert_array_equal(p.grad, 0)

@pytest.mark.parametrize("batch", [1, 3])
def test_values_match_numpy(batch):
    x, h, c, w_ih, w_hh, b_ih, b_hh = arrays(batch, 4, 5)
    P = lambda a: fa.Parameter(a, dtype=F64)
    hc = lstm_cell(P(x), P(h), P(c), P(w_ih), P(w_hh), P(b_ih), P(b_hh))
    assert hc.shape == (2, batch, 5) and hc.op_name == "lstm_cell"
    np.testing.assert_allclose(hc.value, reference(x, h, c, w_ih, w_hh, b_ih, b_hh), rtol=1e-12,
                               atol=1e-14)
    zero = lstm_cell(P(x), None, None, P(w_ih), P(w_hh), P(b_ih), P(b_hh))
    np.testing.assert_allclose(zero.value, reference(x, None, None, w_ih, w_hh, b_ih, b_hh), rtol=1e-12)
    np.testing.assert_allclose(zero.value, reference(x, 0 * h, 0 * c, w_ih, w_hh, b_ih, b_hh),
                               rtol=1e-12)


@pytest.mark.parametrize("batch", [1, 2])
def test_gradcheck_with_state(batch):
    assert fa.gradcheck(lambda *p: weighted(lstm_cell(*p)), *arrays(batch, 3, 4))


def test_gradcheck_without_state_and_weight_hh_untouched():
    x, _, _, w_ih, w_hh, b_ih, b_hh = arrays(2, 3, 4)
    assert fa.gradcheck(lambda x_, w, bi, bh: weighted(
        lstm_cell(x_, None, None, w, fa.Parameter(w_hh, dtype=F64), bi, bh)), x, w_ih, b_ih, b_hh)
    W = fa.Parameter(w_hh, dtype=F64)
    out = lstm_cell(fa.Parameter(x, dtype=F64), None, None, fa.Parameter(w_ih, dtype=F64), W,
                    fa.Parameter(b_ih, dtype=F64), fa.Parameter(b_hh, dtype=F64))
    weighted(out).backward()
    assert not any(p is W for p in out.parameters())      # Variables compare elementwise with ==
    assert W.grad is None


@pytest.mark.parametrize("part", [0, 1])
def test_gradients_through_one_half_only(part):
    """Only h' (or only c') used downstream: the other half's gradient is zero."""
    assert fa.gradcheck(lambda *p: weighted(fa.tanh(lstm_cell(*p)[part])), *arrays(2, 3, 4, seed=1))


def test_gradients_add_into_shared_inputs_over_steps():
    """Three steps sharing the weights; state flows from step to step."""
    x, h, c, w_ih, w_hh, b_ih, b_hh = arrays(2, 3, 4, seed=2)

    def three_steps(x_, h_, c_, wi, wh, bi, bh):
        def step(state):
            hc = lstm_cell(x_, *state, wi, wh, bi, bh)
            h, c = hc[0], hc[1]
            return h, (h, c)
        total, (_, c_last) = weighted_over_three_steps(step, (h_, c_))
        return total + weighted(c_last, seed=4)

    assert fa.gradcheck(three_steps, x, h, c, w_ih, w_hh, b_ih, b_hh)


def test_replay_after_set_value_matches_a_fresh_build():
    x, h, c, *weights = arrays(3, 4, 5, seed=3)
    xi, hi, ci = fa.Input(x, dtype=F64), fa.Input(h, dtype=F64), fa.Input(c, dtype=F64)
    params = [fa.Parameter(a, dtype=F64) for a in weights]
    loss = weighted(lstm_cell(xi, hi, ci, *params))
    new = arrays(3, 4, 5, seed=4)[:3]
    for leaf, value in zip((xi, hi, ci), new):
        leaf.set_value(value)
    loss.forward()
    loss.backward()
    replayed = loss.item(), [p.grad.copy() for p in params]
    for p in params:
        p.zero_grad()
    fresh = weighted(lstm_cell(*[fa.Input(v, dtype=F64) for v in new], *params))
    fresh.backward()
    assert replayed[0] == pytest.approx(fresh.item(), rel=1e-12)
    for got, p in zip(replayed[1], params):
        np.testing.assert_allclose(got, p.grad, rtol=1e-12)


def test_float32_matches_float64():
    a = arrays(2, 3, 4, seed=5)
    out32 = lstm_cell(*[fa.Parameter(v, dtype=np.float32) for v in a])
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.value, reference(*a), rtol=1e-5, atol=1e-6)
    weighted(out32).backward()
    p64 = [fa.Parameter(v, dtype=F64) for v in a]
    weighted(lstm_cell(*p64)).backward()
    for leaf32, leaf64 in zip(out32.parents, (p64[0], p64[3], p64[5], p64[6], p64[4], p64[1], p64[2])):
        np.testing.assert_allclose(leaf32.grad, leaf64.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype, atol", [(F64, 1e-15), (np.float32, 1.2e-7)])
def test_saturated_gates_stay_within_an_ulp_of_one(dtype, atol):
    """The sigmoid gates, taken from tanh(x / 2), over pre-activations from -60 to 60: within an
    ulp of 1 of the exact gates, with no NaN."""
    H = 8
    x = np.linspace(-60, 60, 4 * H)[None]
    w_ih = np.eye(4 * H)
    c = np.linspace(-3, 3, H)[None]
    zero = np.zeros(4 * H)
    hc = lstm_cell(*(fa.Parameter(a, dtype=dtype) for a in (x, c, c, w_ih, np.eye(4 * H, H), zero,
                                                            zero)))
    want = reference(x, c, c, w_ih, np.eye(4 * H, H), zero, zero)
    assert np.isfinite(hc.value).all()
    np.testing.assert_allclose(hc.value, want, rtol=0, atol=atol * 4)


def test_empty_batch():
    W = [fa.Parameter(v, dtype=F64) for v in arrays(1, 3, 4)[3:]]
    empty = fa.Input(np.zeros((0, 3)), dtype=F64)
    state = fa.Input(np.zeros((0, 4)), dtype=F64)
    assert_empty_batch_output(lstm_cell(empty, state, state, *W), (2, 0, 4), W)


def test_bad_input():
    x, h, c, w_ih, w_hh, b, b2 = (fa.Input(a, dtype=F64) for a in arrays(2, 3, 4))
    with pytest.raises(ValueError, match=r"lstm_cell: x must have shape \(batch, input_size\), got \(3,\)"):
        lstm_cell(fa.Input(np.zeros(3), dtype=F64), h, c, w_ih, w_hh, b, b2)
    with pytest.raises(ValueError, match=r"bias_ih must have shape \(4 \* hidden_size,\), got \(15,\)"):
        lstm_cell(x, h, c, w_ih, w_hh, fa.Input(np.zeros(15), dtype=F64), b2)
    with pytest.raises(ValueError, match=r"bias_hh must have shape \(16,\), got \(15,\)"):
        lstm_cell(x, h, c, w_ih, w_hh, b, fa.Input(np.zeros(15), dtype=F64))
    with pytest.raises(ValueError, match=r"weight_ih must have shape \(16, 3\), got \(3, 16\)"):
        lstm_cell(x, h, c, fa.Input(np.zeros((3, 16)), dtype=F64), w_hh, b, b2)
    with pytest.raises(ValueError, match=r"weight_hh must have shape \(16, 4\), got \(4, 16\)"):
        lstm_cell(x, h, c, w_ih, fa.Input(np.zeros((4, 16)), dtype=F64), b, b2)
    with pytest.raises(ValueError, match=r"c must have shape \(2, 4\), got \(1, 4\)"):
        lstm_cell(x, h, fa.Input(np.zeros((1, 4)), dtype=F64), w_ih, w_hh, b, b2)
    with pytest.raises(ValueError, match="give both h and c, or neither"):
        lstm_cell(x, h, None, w_ih, w_hh, b, b2)
    with pytest.raises(TypeError, match="lstm_cell: mixed dtypes"):
        lstm_cell(x, h, c, w_ih, w_hh, b, fa.Input(np.zeros(16), dtype=np.float32))
    with pytest.raises(TypeError, match="lstm_cell: x must be a fastad Variable"):
        lstm_cell(np.zeros((2, 3)), h, c, w_ih, w_hh, b, b2)
    with pytest.raises(TypeError, match="h is an IndexInput"):
        lstm_cell(x, fa.IndexInput(np.zeros((2, 4), dtype=np.int64)), c, w_ih, w_hh, b, b2)
    with pytest.raises(ValueError, match=r"x has no features"):
        lstm_cell(fa.Input(np.zeros((2, 0)), dtype=F64), h, c,
                  fa.Input(np.zeros((16, 0)), dtype=F64), w_hh, b, b2)


# ------------------------------------------------------------------- GRU

def gru_reference(x, h, w_ih, w_hh, b_ih, b_hh):
    """One GRU step in numpy, the weights in PyTorch's layout (3H, in)."""
    H = b_ih.shape[0] // 3
    gi = x @ w_ih.T + b_ih
    gh = (h @ w_hh.T if h is not None else np.zeros((x.shape[0], 3 * H))) + b_hh
    r = sig(gi[:, :H] + gh[:, :H])
    z = sig(gi[:, H:2 * H] + gh[:, H:2 * H])
    n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1 - z) * n + (z * h if h is not None else 0)


def gru_arrays(batch, n_in, H, seed=0):
    g = np.random.default_rng(seed)
    return (g.standard_normal((batch, n_in)), g.standard_normal((batch, H)),
            g.standard_normal((3 * H, n_in)) * 0.5, g.standard_normal((3 * H, H)) * 0.5,
            g.standard_normal(3 * H) * 0.5, g.standard_normal(3 * H) * 0.5)


@pytest.mark.parametrize("batch", [1, 3])
def test_gru_values_match_numpy(batch):
    x, h, w_ih, w_hh, b_ih, b_hh = gru_arrays(batch, 4, 5)
    P = lambda a: fa.Parameter(a, dtype=F64)
    out = gru_cell(P(x), P(h), P(w_ih), P(w_hh), P(b_ih), P(b_hh))
    assert out.shape == (batch, 5) and out.op_name == "gru_cell"
    np.testing.assert_allclose(out.value, gru_reference(x, h, w_ih, w_hh, b_ih, b_hh), rtol=1e-12)
    zero = gru_cell(P(x), None, P(w_ih), P(w_hh), P(b_ih), P(b_hh))
    np.testing.assert_allclose(zero.value, gru_reference(x, None, w_ih, w_hh, b_ih, b_hh), rtol=1e-12)
    np.testing.assert_allclose(zero.value, gru_reference(x, 0 * h, w_ih, w_hh, b_ih, b_hh), rtol=1e-12)


@pytest.mark.parametrize("batch", [1, 2])
def test_gru_gradcheck(batch):
    x, h, w_ih, w_hh, b_ih, b_hh = gru_arrays(batch, 3, 4)
    assert fa.gradcheck(lambda *p: weighted(gru_cell(*p)), x, h, w_ih, w_hh, b_ih, b_hh)
    assert fa.gradcheck(lambda x_, wi, bi, bh: weighted(
        gru_cell(x_, None, wi, fa.Parameter(w_hh, dtype=F64), bi, bh)), x, w_ih, b_ih, b_hh)


def test_gru_gradients_over_steps_with_shared_weights():
    x, h, w_ih, w_hh, b_ih, b_hh = gru_arrays(2, 3, 4, seed=2)

    def three_steps(x_, h_, wi, wh, bi, bh):
        def step(h):
            h = gru_cell(x_, h, wi, wh, bi, bh)
            return h, h
        return weighted_over_three_steps(step, h_)[0]

    assert fa.gradcheck(three_steps, x, h, w_ih, w_hh, b_ih, b_hh)


def test_gru_replay_float32_and_empty_batch():
    x, h, w_ih, w_hh, b_ih, b_hh = gru_arrays(3, 4, 5, seed=3)
    xi, hi = fa.Input(x, dtype=F64), fa.Input(h, dtype=F64)
    params = [fa.Parameter(a, dtype=F64) for a in (w_ih, w_hh, b_ih, b_hh)]
    loss = weighted(gru_cell(xi, hi, *params))
    new_x, new_h = gru_arrays(3, 4, 5, seed=4)[:2]
    xi.set_value(new_x)
    hi.set_value(new_h)
    loss.forward()
    assert loss.item() == pytest.approx(
        weighted(gru_cell(fa.Input(new_x, dtype=F64), fa.Input(new_h, dtype=F64), *params)).item(),
        rel=1e-12)
    out32 = gru_cell(*[fa.Parameter(v, dtype=np.float32) for v in (x, h, w_ih, w_hh, b_ih, b_hh)])
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32.value, gru_reference(x, h, w_ih, w_hh, b_ih, b_hh),
                               rtol=1e-5, atol=1e-6)
    empty = gru_cell(fa.Input(np.zeros((0, 4)), dtype=F64), fa.Input(np.zeros((0, 5)), dtype=F64),
                     *params)
    for p in params:
        p.zero_grad()
    assert_empty_batch_output(empty, (0, 5), params)


def test_gru_bad_input():
    x, h, w_ih, w_hh, b_ih, b_hh = (fa.Input(a, dtype=F64) for a in gru_arrays(2, 3, 4))
    with pytest.raises(ValueError, match=r"gru_cell: bias_ih must have shape \(3 \* hidden_size,\), got \(13,\)"):
        gru_cell(x, h, w_ih, w_hh, fa.Input(np.zeros(13), dtype=F64), b_hh)
    with pytest.raises(ValueError, match=r"gru_cell: bias_hh must have shape \(12,\), got \(15,\)"):
        gru_cell(x, h, w_ih, w_hh, b_ih, fa.Input(np.zeros(15), dtype=F64))
    with pytest.raises(ValueError, match=r"gru_cell: h must have shape \(2, 4\), got \(2, 3\)"):
        gru_cell(x, fa.Input(np.zeros((2, 3)), dtype=F64), w_ih, w_hh, b_ih, b_hh)
    with pytest.raises(ValueError, match=r"gru_cell: weight_hh must have shape \(12, 4\)"):
        gru_cell(x, h, w_ih, w_ih, b_ih, b_hh)
    with pytest.raises(TypeError, match="gru_cell: mixed dtypes"):
        gru_cell(x, fa.Input(np.zeros((2, 4)), dtype=np.float32), w_ih, w_hh, b_ih, b_hh)


# ------------------------------------------------------- steps sharing one SequenceWeights

def sequence_loss(kind, sequence, x, weights, steps=3):
    """`steps` steps of one cell from a zero state, all on x, each step's output weighted."""
    total, state = None, None
    for t in range(steps):
        if kind == "lstm":
            hc = lstm_cell(x, *(state or (None, None)), *weights, sequence)
            out, state = hc, (hc[0], hc[1])
        else:
            out = state = gru_cell(x, state, *weights, sequence)
        total = weighted(out, seed=t) if total is None else total + weighted(out, seed=t)
    return total


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("batch", [1, 3])
def test_steps_sharing_sequence_weights_match_steps_reading_the_weights(kind, batch):
    """The steps read one transposed copy of the weights, which the first step makes on every
    forward pass: the values and gradients of steps that read the weights, and a replay
    follows weights changed by set_value or in place (as Hogwild workers change them)."""
    a = arrays(batch, 3, 4) if kind == "lstm" else gru_arrays(batch, 3, 4)
    x = fa.Input(a[0], dtype=F64)
    shared = [fa.Parameter(w, dtype=F64) for w in a[-4:]]
    plain = [fa.Parameter(w, dtype=F64) for w in a[-4:]]
    loss = sequence_loss(kind, SequenceWeights(), x, shared)
    reference = sequence_loss(kind, None, x, plain)
    assert loss.item() == pytest.approx(reference.item(), rel=1e-12)
    loss.backward()
    reference.backward()
    for p, q in zip(shared, plain):
        np.testing.assert_allclose(p.grad, q.grad, rtol=1e-12, atol=1e-14)
    g = np.random.default_rng(5)
    for p, q in zip(shared, plain):
        new = p.value + g.standard_normal(p.shape) * 0.1
        p.set_value(new)
        q.set_value(new)
    assert loss.forward().item() == pytest.approx(reference.forward().item(), rel=1e-12)
    shared[1].value[...] *= 0.5              # weight_hh, in place: no set_value
    plain[1].value[...] *= 0.5
    assert loss.forward().item() == pytest.approx(reference.forward().item(), rel=1e-12)
    assert not np.isclose(loss.item(), sequence_loss(kind, None, x, [fa.Parameter(w, dtype=F64)
                                                                     for w in a[-4:]]).item())


def test_sequence_weights_errors():
    x, _, _, *weights = (fa.Parameter(a, dtype=F64) for a in arrays(2, 3, 4))
    sequence = SequenceWeights()
    lstm_cell(x, None, None, *weights, sequence)
    other = [fa.Parameter(w.value, dtype=F64) for w in weights]
    with pytest.raises(ValueError, match="lstm_cell: the SequenceWeights belongs to the steps "
                                         "of other weights"):
        lstm_cell(x, None, None, *other, sequence)
    with pytest.raises(TypeError, match="lstm_cell: sequence must be a SequenceWeights or None, "
                                        "got dict"):
        lstm_cell(x, None, None, *weights, {})


# --------------------------------------------------------------- lstm_sequence

def sequence_arrays(steps, batch, n_in, H, seed=0):
    """x (T, batch, n_in), then h0, c0 and the weights as arrays() gives them."""
    g = np.random.default_rng(seed)
    return (g.standard_normal((steps, batch, n_in)),) + arrays(batch, n_in, H, seed + 1)[1:]


def stepped_cells(x, h, c, w_ih, w_hh, b_ih, b_hh, reverse=False):
    """lstm_cell stepped over x[t] (from T - 1 down when `reverse`): (the hidden states stacked at
    their time positions, the final h, the final c)."""
    steps = x.shape[0]
    hs = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        hc = lstm_cell(x[t], h, c, w_ih, w_hh, b_ih, b_hh)
        h, c = hc[0], hc[1]
        hs[t] = h
    return fa.stack(hs, 0), h, c


def sequence_and_state_loss(sequence, x, h0, c0, *weights, reverse):
    """A scalar of every hidden state and of the final h and c, with distinct weights, and the
    hidden states."""
    hs, (h, c) = sequence(x, h0, c0, *weights, reverse=reverse, return_state=True)
    return weighted(hs) + weighted(h, seed=3) + weighted(c, seed=4), hs


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_sequence_gradcheck(reverse, batch):
    """Finite differences for x, h0, c0 and every weight, through the hidden states and the final
    (h, c), each way."""
    assert fa.gradcheck(lambda *p: sequence_and_state_loss(lstm_sequence, *p, reverse=reverse)[0],
                        *sequence_arrays(4, batch, 3, 4))


@pytest.mark.parametrize("reverse", [False, True])
def test_sequence_gradcheck_from_a_zero_state_and_through_c_alone(reverse):
    x, _, _, *weights = sequence_arrays(3, 2, 3, 4, seed=2)
    assert fa.gradcheck(lambda x_, *w: weighted(lstm_sequence(x_, None, None, *w, reverse=reverse)),
                        x, *weights)
    # only the final c used: its gradient alone starts the backward
    assert fa.gradcheck(lambda *p: weighted(lstm_sequence(*p, reverse=reverse,
                                                          return_state=True)[1][1]),
                        *sequence_arrays(3, 2, 3, 4, seed=3))


def test_sequence_gradients_add_into_inputs_used_elsewhere():
    """One leaf as h0 and c0, and x and the weights used again: every contribution adds."""
    x, s, _, *weights = sequence_arrays(3, 2, 3, 4, seed=9)

    def loss(x_, s_, w_ih, w_hh, b_ih, b_hh):
        hs = lstm_sequence(x_, s_, s_, w_ih, w_hh, b_ih, b_hh, reverse=True)
        again = lstm_sequence(x_, hs[0], s_, w_ih, w_hh, b_ih, b_hh)
        return weighted(hs) + weighted(again, seed=5) + weighted(s_, seed=6) + weighted(x_, seed=7)

    assert fa.gradcheck(loss, x, s, *weights)


@pytest.mark.parametrize("other_first", [False, True])
def test_sequence_bias_gradients_add_when_a_bias_takes_others(other_first):
    """b_hh takes a copy of the column sums written into b_ih only as its first gradient of
    the pass: a b_hh used elsewhere too (its gradient from there written before the
    sequence's backward, or after it) and one Parameter as both biases add up."""
    x, _, _, *weights = sequence_arrays(4, 2, 3, 4, seed=11)

    def loss(x_, w_ih, w_hh, b_ih, b_hh):
        other = weighted(fa.tanh(b_hh), seed=2)
        sequence = weighted(lstm_sequence(x_, None, None, w_ih, w_hh, b_ih, b_hh))
        # the backward runs the right-hand term's nodes first
        return sequence + other if other_first else other + sequence

    assert fa.gradcheck(loss, x, *weights)
    assert fa.gradcheck(lambda x_, w_ih, w_hh, b: weighted(lstm_sequence(x_, None, None, w_ih, w_hh, b, b)),
                        x, *weights[:3])


def step_against_sequence(arrays_, reverse, with_state, dtype=F64):
    """(the sequence node's outputs, the stepped cells' outputs): [hs, h, c, then the gradients
    of x, h0, c0 and the weights] of one weighted loss each."""
    results = []
    for sequence in (lstm_sequence, None):
        leaves = [fa.Parameter(a, dtype=dtype) for a in arrays_]
        x, h0, c0, *weights = leaves
        if not with_state:
            h0 = c0 = None
        if sequence is None:
            hs, h, c = stepped_cells(x, h0, c0, *weights, reverse=reverse)
        else:
            hs, (h, c) = sequence(x, h0, c0, *weights, reverse=reverse, return_state=True)
        (weighted(hs) + weighted(h, seed=3) + weighted(c, seed=4)).backward()
        results.append([hs.value, h.value, c.value] + [leaf.grad for leaf in leaves])
    return results


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("steps, batch", [(5, 3), (1, 3), (2, 1), (3, 9)])
def test_sequence_matches_stepping_the_cell(reverse, with_state, steps, batch):
    """(batch 9: the recurrent products read weight_hh's transposed copy)"""
    fused, stepped = step_against_sequence(sequence_arrays(steps, batch, 3, 4, seed=4), reverse,
                                           with_state)
    for got, want in zip(fused, stepped):
        if want is None:        # h0 and c0 without a state; weight_hh after one step from zeros
            assert got is None
        else:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def poison_freed_memory():
    """Free blocks of NaN of a few sizes: the allocations right after (a sequence node's work
    block, which is not zeroed) likely reuse them, so a buffer read before it is written
    shows as NaN."""
    blocks = [np.full(n, np.nan) for n in (96, 256, 512, 1024, 2048, 4096, 8192)]
    del blocks


@settings(max_examples=40, deadline=None)
@given(steps=st.integers(1, 6), batch=st.integers(1, 9), n_in=st.integers(1, 5), H=st.integers(1, 6),
       reverse=st.booleans(), with_state=st.booleans(), f64=st.booleans(), seed=st.integers(0, 99))
def test_sequence_over_reused_memory_matches_stepping_the_cell(steps, batch, n_in, H, reverse,
                                                               with_state, f64, seed):
    """The sequence's work buffers (gates, their gradients, the carried dh and dc, the input's
    transposed copy) are not zeroed: over memory that held NaNs its values and every gradient
    still equal the stepped cells', at build and after a replay from new values."""
    dtype = np.float64 if f64 else np.float32
    arrays_ = sequence_arrays(steps, batch, n_in, H, seed=seed)
    poison_freed_memory()
    fused, stepped = step_against_sequence(arrays_, reverse, with_state, dtype)
    tol = dict(rtol=1e-10, atol=1e-12) if f64 else dict(rtol=2e-4, atol=2e-5)
    for got, want in zip(fused, stepped):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, **tol)
    leaves = [fa.Parameter(a, dtype=dtype) for a in arrays_]
    x, h0, c0, *weights = leaves
    state = (h0, c0) if with_state else (None, None)
    loss = sequence_and_state_loss(lstm_sequence, x, *state, *weights, reverse=reverse)[0]
    loss.backward()
    for leaf, a in zip(leaves, sequence_arrays(steps, batch, n_in, H, seed=seed + 100)):
        leaf.set_value(a.astype(dtype))
        leaf.zero_grad()
    poison_freed_memory()
    loss.forward()
    loss.backward()
    fresh = [fa.Parameter(a, dtype=dtype) for a in sequence_arrays(steps, batch, n_in, H, seed=seed + 100)]
    fx, fh0, fc0, *fweights = fresh
    fresh_loss = sequence_and_state_loss(lstm_sequence, fx, *((fh0, fc0) if with_state else (None, None)),
                                         *fweights, reverse=reverse)[0]
    fresh_loss.backward()
    assert loss.value.tobytes() == fresh_loss.value.tobytes()
    for leaf, f in zip(leaves, fresh):
        assert (leaf.grad is None) == (f.grad is None)
        if f.grad is not None:
            assert leaf.grad.tobytes() == f.grad.tobytes()


def test_sequence_too_big_for_the_transposed_input_copy_matches_stepping_the_cell():
    """80 rows of 50 into 4 x 64 gates (over 10^6 multiply-adds): the input product reads x
    in place instead of a transposed copy, with the same results."""
    fused, stepped = step_against_sequence(sequence_arrays(40, 2, 50, 64, seed=8), False, True)
    for got, want in zip(fused, stepped):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_sequence_reverse_runs_from_the_last_step():
    """hs[t] of the reverse direction is the forward direction's over the flipped sequence."""
    x, h0, c0, *weights = sequence_arrays(4, 2, 3, 4, seed=5)
    P = lambda a: fa.Parameter(a, dtype=F64)
    back, (h, c) = lstm_sequence(P(x), P(h0), P(c0), *map(P, weights), reverse=True,
                                 return_state=True)
    flipped = lstm_sequence(P(x[::-1].copy()), P(h0), P(c0), *map(P, weights))
    np.testing.assert_allclose(back.value, flipped.value[::-1], rtol=1e-12)
    np.testing.assert_array_equal(h.value, back.value[0])
    assert not np.allclose(back.value, lstm_sequence(P(x), P(h0), P(c0), *map(P, weights)).value)


def test_sequence_float32_matches_float64():
    a = sequence_arrays(6, 2, 3, 4, seed=6)
    for reverse in (False, True):
        fused32, _ = step_against_sequence(a, reverse, True, dtype=np.float32)
        fused64, _ = step_against_sequence(a, reverse, True)
        for got, want in zip(fused32, fused64):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sequence_replay_after_set_value_matches_a_fresh_build():
    """Replays reuse the node's buffers: the same value array, and the same results as a new
    graph, for new inputs and new weights, backward after backward."""
    x, h0, c0, *weights = sequence_arrays(5, 2, 3, 4, seed=7)
    xi, hi, ci = (fa.Input(a, dtype=F64) for a in (x, h0, c0))
    params = [fa.Parameter(a, dtype=F64) for a in weights]
    loss, hs = sequence_and_state_loss(lstm_sequence, xi, hi, ci, *params, reverse=True)
    assert hs.op_name == "lstm_sequence" and hs.shape == (5, 2, 4)
    value = hs.value
    loss.backward()
    new_x, new_h, new_c = sequence_arrays(5, 2, 3, 4, seed=8)[:3]
    for leaf, v in zip((xi, hi, ci), (new_x, new_h, new_c)):
        leaf.set_value(v)
    params[1].set_value(params[1].value * 0.5)
    for p in params:
        p.zero_grad()
    loss.forward()
    loss.backward()
    assert hs.value is value
    replayed = loss.item(), [p.grad.copy() for p in params]
    for p in params:
        p.zero_grad()
    fresh, _ = sequence_and_state_loss(lstm_sequence, *(fa.Input(v, dtype=F64)
                                                        for v in (new_x, new_h, new_c)),
                                       *params, reverse=True)
    fresh.backward()
    assert replayed[0] == pytest.approx(fresh.item(), rel=1e-12)
    for got, p in zip(replayed[1], params):
        np.testing.assert_allclose(got, p.grad, rtol=1e-12)


def test_sequence_replays_allocate_nothing():
    """The node's buffers (here 12.8 KB each for the activations and their gradients) are made
    once: replays leave the traced memory flat, far below one buffer's size."""
    import tracemalloc
    x, _, _, *weights = sequence_arrays(50, 2, 3, 4, seed=10)
    xi = fa.Input(x, dtype=F64)
    hs, (_, c) = lstm_sequence(xi, None, None, *(fa.Parameter(w, dtype=F64) for w in weights),
                               reverse=True, return_state=True)
    loss = weighted(hs) + weighted(c)
    loss.backward()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            xi.set_value(x)
            loss.forward()
            loss.backward()
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 4096 and peak - before < 4096


def test_sequence_one_step_from_zeros_leaves_weight_hh_out():
    x, _, _, w_ih, w_hh, b_ih, b_hh = sequence_arrays(1, 3, 3, 4)
    W = fa.Parameter(w_hh, dtype=F64)
    hs = lstm_sequence(fa.Parameter(x, dtype=F64), None, None, fa.Parameter(w_ih, dtype=F64), W,
                       fa.Parameter(b_ih, dtype=F64), fa.Parameter(b_hh, dtype=F64))
    np.testing.assert_allclose(hs.value[0], reference(x[0], None, None, w_ih, w_hh, b_ih, b_hh)[0],
                               rtol=1e-12)
    weighted(hs).backward()
    assert not any(p is W for p in hs.parents) and W.grad is None


def test_sequence_empty_batch():
    W = [fa.Parameter(v, dtype=F64) for v in arrays(1, 3, 4)[3:]]
    state = fa.Input(np.zeros((0, 4)), dtype=F64)
    hs, (h, c) = lstm_sequence(fa.Input(np.zeros((3, 0, 3)), dtype=F64), state, state, *W,
                               return_state=True)
    assert h.shape == c.shape == (0, 4)
    assert_empty_batch_output(hs, (3, 0, 4), W)


def test_sequence_bad_input():
    x, h, c, w_ih, w_hh, b, b2 = (fa.Input(a, dtype=F64) for a in sequence_arrays(3, 2, 3, 4))
    weights = (w_ih, w_hh, b, b2)
    with pytest.raises(ValueError, match=r"lstm_sequence: x must have shape \(T, batch, input_size\), "
                                         r"got \(2, 3\)"):
        lstm_sequence(fa.Input(np.zeros((2, 3)), dtype=F64), h, c, *weights)
    with pytest.raises(ValueError, match=r"lstm_sequence: weight_ih must have shape \(16, 5\), "
                                         r"got \(16, 3\)"):
        lstm_sequence(fa.Input(np.zeros((3, 2, 5)), dtype=F64), h, c, *weights)
    with pytest.raises(ValueError, match=r"lstm_sequence: x has no time steps \(shape \(0, 2, 3\)\)"):
        lstm_sequence(fa.Input(np.zeros((0, 2, 3)), dtype=F64), h, c, *weights)
    with pytest.raises(ValueError, match=r"lstm_sequence: h0 must have shape \(2, 4\), got \(1, 4\)"):
        lstm_sequence(x, fa.Input(np.zeros((1, 4)), dtype=F64), c, *weights)
    with pytest.raises(ValueError, match=r"lstm_sequence: c0 must have shape \(2, 4\), got \(1, 2, 4\)"):
        lstm_sequence(x, h, fa.Input(np.zeros((1, 2, 4)), dtype=F64), *weights)
    with pytest.raises(ValueError, match="lstm_sequence: give both h0 and c0, or neither"):
        lstm_sequence(x, h, None, *weights)
    with pytest.raises(TypeError, match="lstm_sequence: mixed dtypes"):
        lstm_sequence(fa.Input(np.zeros((3, 2, 3)), dtype=np.float32), None, None, *weights)
    with pytest.raises(TypeError, match="lstm_sequence: mixed dtypes"):
        lstm_sequence(x, h, fa.Input(np.zeros((2, 4)), dtype=np.float32), *weights)
    with pytest.raises(ValueError, match=r"lstm_sequence: bias_hh must have shape \(16,\), got \(12,\)"):
        lstm_sequence(x, h, c, w_ih, w_hh, b, fa.Input(np.zeros(12), dtype=F64))
    with pytest.raises(TypeError, match="lstm_sequence: x must be a fastad Variable"):
        lstm_sequence(np.zeros((3, 2, 3)), h, c, *weights)
    with pytest.raises(TypeError, match="lstm_sequence: reverse must be True or False, got"):
        lstm_sequence(x, h, c, *weights, reverse="yes")
    with pytest.raises(TypeError, match="lstm_sequence: return_state must be True or False, got"):
        lstm_sequence(x, h, c, *weights, return_state=None)


# ------------------------------------------------------ lstm_sequence, the packed form

def packed_arrays(lengths, n_in=3, H=4, seed=0):
    """Sequences of `lengths` (longest first), one row each: x packed (N, n_in), the
    batch_sizes, each sequence's rows of x (its (T, 1, n_in) input), then h0, c0 and the
    weights as arrays() gives them."""
    g = np.random.default_rng(seed)
    xs = [g.standard_normal((T, 1, n_in)) for T in lengths]
    sizes = [sum(T > k for T in lengths) for k in range(lengths[0])]
    packed = np.concatenate([xs[s][k] for k in range(lengths[0]) for s in range(sizes[k])])
    return (packed, sizes, xs) + arrays(len(lengths), n_in, H, seed + 1)[1:]


def packed_rows(lengths, sizes):
    """rows[s][t]: the packed row of sequence s at time t."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    return [[starts[t] + s for t in range(T)] for s, T in enumerate(lengths)]


@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("lengths", [[4, 2, 2, 1], [3, 3], [1, 1, 1], [5], [4] * 3 + [3] * 5 + [1] * 2])
def test_packed_sequences_match_one_call_each(with_state, lengths):
    """Values, final states and every gradient of the packed call equal those of one
    lstm_sequence a sequence (each from its row of h0 and c0)."""
    packed, sizes, xs, h0, c0, *weights = packed_arrays(lengths, seed=len(lengths))
    rows = packed_rows(lengths, sizes)
    g = np.random.default_rng(7)
    g_hs, g_h, g_c = (g.standard_normal((len(packed), 4)), g.standard_normal(h0.shape),
                      g.standard_normal(c0.shape))
    W = [fa.Parameter(w, dtype=F64) for w in weights]
    state = [fa.Parameter(h0, dtype=F64), fa.Parameter(c0, dtype=F64)] if with_state else [None, None]
    x = fa.Parameter(packed, dtype=F64)
    hs, (h, c) = lstm_sequence(x, *state, *W, return_state=True, batch_sizes=sizes)
    assert hs.shape == (len(packed), 4) and h.shape == c.shape == (len(lengths), 4)
    (fa.sum(hs * g_hs) + fa.sum(h * g_h) + fa.sum(c * g_c)).backward()
    W1 = [fa.Parameter(w, dtype=F64) for w in weights]
    for s, T in enumerate(lengths):
        x1 = fa.Parameter(xs[s], dtype=F64)
        state1 = ([fa.Parameter(h0[s:s + 1], dtype=F64), fa.Parameter(c0[s:s + 1], dtype=F64)]
                  if with_state else [None, None])
        hs1, (h1, c1) = lstm_sequence(x1, *state1, *W1, return_state=True)
        np.testing.assert_allclose(hs.value[rows[s]], hs1.value[:, 0], rtol=1e-12)
        np.testing.assert_allclose(h.value[s], h1.value[0], rtol=1e-12)
        np.testing.assert_allclose(c.value[s], c1.value[0], rtol=1e-12)
        (fa.sum(hs1 * g_hs[rows[s]][:, None]) + fa.sum(h1 * g_h[s:s + 1])
         + fa.sum(c1 * g_c[s:s + 1])).backward()
        np.testing.assert_allclose(x.grad[rows[s]], x1.grad[:, 0], rtol=1e-10, atol=1e-12)
        if with_state:
            np.testing.assert_allclose(state[0].grad[s], state1[0].grad[0], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(state[1].grad[s], state1[1].grad[0], rtol=1e-10, atol=1e-12)
    for w, w1 in zip(W, W1):
        if w1.grad is None:         # weight_hh, from zeros over single steps
            assert w.grad is None
        else:
            np.testing.assert_allclose(w.grad, w1.grad, rtol=1e-10, atol=1e-12)


def test_packed_sequence_gradcheck():
    packed, sizes, _, h0, c0, *weights = packed_arrays([3, 2, 2, 1], seed=11)

    def loss(x, h, c, *w):
        hs, (hn, cn) = lstm_sequence(x, h, c, *w, return_state=True, batch_sizes=sizes)
        return weighted(hs) + weighted(hn, seed=3) + weighted(cn, seed=4)

    assert fa.gradcheck(loss, packed, h0, c0, *weights)


def test_packed_sequence_float32_and_replay():
    packed, sizes, _, h0, c0, *weights = packed_arrays([3, 1], seed=12)
    out = {}
    for dtype in (np.float32, F64):
        x = fa.Input(packed, dtype=dtype)
        hs = lstm_sequence(x, None, None, *(fa.Parameter(w, dtype=dtype) for w in weights),
                           batch_sizes=sizes)
        out[dtype] = hs.value.copy()
        assert hs.dtype == dtype
        x.set_value(packed * 2)
        hs.forward()
        fresh = lstm_sequence(fa.Input(packed * 2, dtype=dtype), None, None,
                              *(fa.Parameter(w, dtype=dtype) for w in weights), batch_sizes=sizes)
        np.testing.assert_array_equal(hs.value, fresh.value)
    np.testing.assert_allclose(out[np.float32], out[F64], rtol=1e-5, atol=1e-6)


def test_packed_sequence_bad_input():
    packed, sizes, _, h0, c0, *weights = packed_arrays([3, 2], seed=13)
    x = fa.Input(packed, dtype=F64)
    W = [fa.Parameter(w, dtype=F64) for w in weights]
    with pytest.raises(ValueError, match=r"lstm_sequence: batch_sizes must be at least 1 and "
                                         r"non-increasing .* got \[1, 2, 2\]"):
        lstm_sequence(x, None, None, *W, batch_sizes=[1, 2, 2])
    with pytest.raises(ValueError, match=r"at least 1 and non-increasing .* got \[5, 0\]"):
        lstm_sequence(x, None, None, *W, batch_sizes=[5, 0])
    with pytest.raises(ValueError, match="lstm_sequence: batch_sizes add up to 4, but x has 5 rows"):
        lstm_sequence(x, None, None, *W, batch_sizes=[2, 2])
    with pytest.raises(TypeError, match="lstm_sequence: batch_sizes must be a non-empty 1-D sequence"):
        lstm_sequence(x, None, None, *W, batch_sizes=[2.0, 2.0, 1.0])
    with pytest.raises(ValueError, match="lstm_sequence: the packed form .* takes no reverse"):
        lstm_sequence(x, None, None, *W, batch_sizes=sizes, reverse=True)
    with pytest.raises(ValueError, match=r"lstm_sequence: x must have shape \(rows, input_size\)"):
        lstm_sequence(fa.Input(packed[None], dtype=F64), None, None, *W, batch_sizes=sizes)
    with pytest.raises(ValueError, match=r"lstm_sequence: h0 must have shape \(2, 4\)"):
        lstm_sequence(x, fa.Input(h0[:1], dtype=F64), fa.Input(c0[:1], dtype=F64), *W,
                      batch_sizes=sizes)
