"""fa.detach: x's value, no gradient through it, in built and replayed graphs and in fa.train."""
import numpy as np
import pytest

import fastad as fa


def test_the_value_passes_and_no_gradient_flows():
    w = fa.Parameter([2.0, -3.0], dtype=np.float64)
    d = fa.detach(w)
    np.testing.assert_array_equal(d.value, w.value)
    (d * w).sum().backward()                 # the gradient of c * w with c = w's value
    np.testing.assert_array_equal(w.grad, [2.0, -3.0])
    assert np.shares_memory(d.value, w.value) and not d.value.flags.writeable
    with pytest.raises(RuntimeError, match="does not depend on any Parameter"):
        (fa.detach(w) * 2).sum().backward()


def test_matches_torch():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(1).normal(size=(3, 4))
    w = fa.Parameter(x, dtype=np.float64)
    y = fa.sigmoid(fa.detach(w) * 2) * fa.tanh(w)
    y.backward(np.ones((3, 4)))
    t = torch.tensor(x, requires_grad=True)
    (torch.sigmoid(t.detach() * 2) * torch.tanh(t)).backward(torch.ones(3, 4))
    np.testing.assert_allclose(y.value, (torch.sigmoid(t.detach() * 2) * torch.tanh(t)).detach().numpy(),
                               rtol=1e-15)
    np.testing.assert_allclose(w.grad, t.grad.numpy(), rtol=1e-14)


def test_replay_follows_the_input():
    x = fa.Input([1.0, 2.0], dtype=np.float64)
    w = fa.Parameter([0.5, 0.5], dtype=np.float64)
    loss = (fa.detach(x * w) * w).sum()
    x.set_value([3.0, 4.0])
    loss.forward()
    assert loss.item() == pytest.approx(3.0 * 0.25 + 4.0 * 0.25)
    w.zero_grad()
    loss.backward()
    np.testing.assert_array_equal(w.grad, [1.5, 2.0])      # x * w held constant


def test_a_detached_weight_under_fa_train():
    """A rank-weight style loss: each example's loss times a weight computed from the model's
    own rows but not trained; fa.train's steps equal plain per-example SGD's."""
    rng = np.random.default_rng(0)
    U0 = rng.normal(size=(6, 3))
    ids = rng.integers(0, 6, size=(20, 1))
    U = fa.Parameter(U0.copy(), dtype=np.float64)
    ix = fa.IndexInput([0])
    row = U[ix]
    weight = fa.sigmoid(fa.detach(row).sum())
    loss = weight * fa.square(row).sum()
    fa.train(loss, fa.optim.SGD([U], lr=0.1), {ix: ids}, epochs=1)
    ref = U0.copy()
    for (i,) in ids:                         # d/dU[i] of w * |U[i]|^2, w constant: 2 w U[i]
        w = 1 / (1 + np.exp(-ref[i].sum()))
        ref[i] -= 0.1 * 2 * w * ref[i]
    np.testing.assert_allclose(U.value, ref, rtol=1e-12)


def test_autobatch_refuses_to_detach_a_recorded_value():
    """A recorded value's gradient would flow on through its batched view: refused, named."""
    W = fa.Parameter(np.ones((3, 2)))
    with fa.autobatch():
        h = fa.Input(np.ones(3)) @ W
        with pytest.raises(NotImplementedError, match="autobatch: detach of a recorded Variable"):
            fa.detach(h)
        fa.detach(W)                            # a shared value is not recorded: it detaches


def test_shapes_and_bad_input():
    assert fa.detach(fa.Input(np.zeros((0, 3)))).shape == (0, 3)
    assert fa.detach(fa.Input(1.5)).shape == ()
    with pytest.raises(TypeError, match="detach: x is an IndexInput"):
        fa.detach(fa.IndexInput([1]))
    with pytest.raises(TypeError, match="detach: x must be a fastad Variable"):
        fa.detach(np.zeros(3))
