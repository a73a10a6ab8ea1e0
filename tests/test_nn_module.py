"""fastad.nn: Module registration and state dicts, Sequential, Dropout, and fastad.nn.init."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from fastad import nn
from fastad.nn import init

F64 = np.float64


class Affine(nn.Module):
    """y = x * scale + shift, elementwise (a layer built from merged ops only)."""

    def __init__(self, n, dtype=F64):
        super().__init__()
        self.scale = fa.Parameter(np.ones(n), dtype=dtype)
        self.shift = fa.Parameter(np.zeros(n), dtype=dtype)

    def forward(self, x):
        return x * self.scale + self.shift


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = Affine(3)
        self.gain = fa.Parameter(np.array(2.0), dtype=F64)
        self.inner = nn.Sequential(Affine(3), fa.tanh, Affine(3))
        self.config = {"not": "registered"}

    def forward(self, x):
        return self.inner(self.first(x)) * self.gain


# ------------------------------------------------------------------ Module

def test_named_parameters_are_dotted_and_ordered():
    net = Net()
    assert [name for name, _ in net.named_parameters()] == [
        "gain", "first.scale", "first.shift", "inner.0.scale", "inner.0.shift",
        "inner.2.scale", "inner.2.shift"]
    assert [id(p) for p in net.parameters()] == [id(p) for _, p in net.named_parameters()]
    assert len(net.children()) == 2 and net.modules()[0] is net and len(net.modules()) == 5


def test_shared_parameters_and_modules_are_listed_once():
    net = nn.Module()
    layer = Affine(2)
    net.a, net.b = layer, layer
    net.tied = layer.scale
    assert [name for name, _ in net.named_parameters()] == ["tied", "a.shift"]
    assert len(net.parameters()) == 2


def test_reassigning_and_deleting_attributes_updates_registration():
    net = Net()
    net.gain = 3.0                              # no longer a Parameter
    del net.first
    assert [name for name, _ in net.named_parameters()] == [
        "inner.0.scale", "inner.0.shift", "inner.2.scale", "inner.2.shift"]
    net.first = fa.Parameter(np.zeros(1))
    assert net.named_parameters()[0][0] == "first"          # own Parameters come first


def test_assigning_before_init_is_a_clear_error():
    class Forgetful(nn.Module):
        def __init__(self):
            self.w = fa.Parameter(np.zeros(2))

    with pytest.raises(AttributeError, match=r"call super\(\).__init__\(\) before assigning the Parameter or Module 'w'"):
        Forgetful()


def test_call_runs_forward():
    net = Net()
    x = fa.Input(np.array([[0.5, -1.0, 2.0]]), dtype=F64)
    y = net(x)
    np.testing.assert_allclose(y.value, np.tanh(x.value) * 2.0)
    with pytest.raises(NotImplementedError, match="Module does not define forward"):
        nn.Module()(x)


def test_gradients_reach_every_parameter_and_zero_grad_clears_them():
    net = Net()
    y = net(fa.Input(np.array([[0.5, -1.0, 2.0]]), dtype=F64))
    y.backward(np.ones((1, 3)))
    assert all(np.any(p.grad != 0) for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_module_gradient_matches_finite_differences():
    model = nn.Sequential(Affine(1), fa.tanh, Affine(1))
    for p in model.parameters():
        p.value[...] = np.random.default_rng(len(p.value)).uniform(0.5, 1.5, p.shape)
    y = model(fa.Input(np.array([0.7]), dtype=F64))
    for p in model.parameters():
        numerical, analytic = fa.finite_difference(p, y)
        np.testing.assert_allclose(analytic, numerical, rtol=1e-6, atol=1e-9)


def test_state_dict_copies_and_load_state_dict_writes_in_place():
    net, other = Net(), Net()
    for p in other.parameters():
        p.value[...] = np.random.default_rng(0).standard_normal(p.shape)
    state = other.state_dict()
    assert list(state) == [name for name, _ in other.named_parameters()]
    snapshot = other.gain.value.copy()
    other.gain.value[...] = 99.0
    np.testing.assert_array_equal(state["gain"], snapshot)          # a copy, not a view
    other.gain.value[...] = snapshot
    x = fa.Input(np.array([[0.5, -1.0, 2.0]]), dtype=F64)
    y = net(x)
    value_arrays = [p.value for p in net.parameters()]
    result = net.load_state_dict(state)
    assert result == nn.IncompatibleKeys([], [])
    assert all(p.value is arr for p, arr in zip(net.parameters(), value_arrays))
    for name, p in net.named_parameters():
        np.testing.assert_array_equal(p.value, state[name])
    y.forward()                                  # the graph built before sees the new values
    expected = Net()
    expected.load_state_dict(state)
    np.testing.assert_allclose(y.value, expected(x).value)


def test_load_state_dict_checks_names_and_shapes_before_copying():
    net = Net()
    good = net.state_dict()
    before = {name: p.value.copy() for name, p in net.named_parameters()}
    missing = {k: v for k, v in good.items() if k != "first.scale"}
    with pytest.raises(ValueError, match=r"missing \['first.scale'\]"):
        net.load_state_dict(missing)
    extra = dict(good, **{"head.weight": np.zeros(3)})
    with pytest.raises(ValueError, match=r"unexpected \['head.weight'\]"):
        net.load_state_dict(extra)
    wrong = {k: v + 1 for k, v in good.items()}
    wrong["inner.2.shift"] = np.zeros(4)
    with pytest.raises(ValueError, match=r"'inner.2.shift' has shape \(4,\).*\(3,\)"):
        net.load_state_dict(wrong)
    with pytest.raises(TypeError, match="expected numbers"):
        net.load_state_dict(dict(good, gain=np.array("text")))
    with pytest.raises(TypeError, match="dict"):
        net.load_state_dict([("gain", 1.0)])
    for name, p in net.named_parameters():                # nothing was copied
        np.testing.assert_array_equal(p.value, before[name])


def test_load_state_dict_non_strict_and_dtype_cast():
    net = Affine(2, dtype=np.float32)
    result = net.load_state_dict({"scale": np.array([0.1, 0.2]), "other": np.ones(1)}, strict=False)
    assert result.missing_keys == ["shift"] and result.unexpected_keys == ["other"]
    assert net.scale.value.dtype == np.float32
    np.testing.assert_allclose(net.scale.value, [0.1, 0.2], rtol=1e-7)


def test_train_eval_and_to():
    net = Net()
    net.inner.add_dropout = nn.Dropout(0.5)
    assert net.training and net.inner.add_dropout.training
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    assert net.to("cpu") is net


def test_repr_shows_the_tree():
    text = repr(nn.Sequential(Affine(2), fa.tanh, nn.Dropout(0.25)))
    assert "(0): Affine()" in text and "(1): tanh" in text and "(2): Dropout(p=0.25)" in text


# -------------------------------------------------------------- Sequential

def test_sequential_order_indexing_and_errors():
    a, b = Affine(2), Affine(2)
    a.scale.value[...] = 3.0
    b.shift.value[...] = 1.0
    seq = nn.Sequential(a, b)
    x = fa.Input(np.array([1.0, -2.0]), dtype=F64)
    np.testing.assert_array_equal(seq(x).value, [4.0, -5.0])
    assert len(seq) == 2 and seq[1] is b and list(seq) == [a, b]
    assert isinstance(seq[:1], nn.Sequential) and seq[:1][0] is a
    assert nn.Sequential()(x) is x
    with pytest.raises(TypeError, match="layer 1 is a int"):
        nn.Sequential(a, 3)


# ----------------------------------------------------------------- Dropout

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_training_masks_and_scales(dtype):
    drop = nn.Dropout(0.25, seed=1)
    w = fa.Parameter(np.ones((50, 40)), dtype=dtype)
    y = drop(w)
    assert y.dtype == dtype and y.shape == (50, 40)
    values = np.unique(y.value)
    np.testing.assert_allclose(values, [0.0, 1 / 0.75], rtol=1e-6)
    assert abs((y.value == 0).mean() - 0.25) < 0.03
    y.backward(np.ones((50, 40)))
    np.testing.assert_array_equal(w.grad, y.value)       # d(w * mask)/dw = mask
    before = y.value.copy()
    y.forward()                                          # a replay draws a new mask
    np.testing.assert_allclose(np.unique(y.value), [0.0, 1 / 0.75], rtol=1e-6)
    assert (y.value != before).mean() > 0.2


def test_dropout_seeding_and_fresh_masks():
    x = fa.Parameter(np.ones(200), dtype=F64)
    first = nn.Dropout(0.5, seed=7)(x).value
    drop = nn.Dropout(0.5, seed=7)
    again = drop(x).value
    second = drop(x).value
    np.testing.assert_array_equal(first, again)          # same seed, same first mask
    assert not np.array_equal(again, second)             # a new mask on each call


def test_dropout_identity_cases_and_errors():
    x = fa.Parameter(np.ones(3))
    y = nn.Dropout(0.5).eval()(x)            # a node, so that train() reaches the graph later
    np.testing.assert_array_equal(y.value, x.value)
    assert nn.Dropout(0.0)(x) is x
    s = nn.Dropout(0.5, seed=0)(fa.Parameter(np.array(2.0), dtype=F64))   # 0-d works
    assert s.shape == () and s.item() in (0.0, 4.0)
    for p, error in ((-0.1, ValueError), (1.0, ValueError), (1.5, ValueError), ("0.5", TypeError),
                     (True, TypeError)):
        with pytest.raises(error, match=r"p must be a number in \[0, 1\)"):
            nn.Dropout(p)
    with pytest.raises(TypeError, match="float Variable"):
        nn.Dropout(0.5)(np.ones(3))
    with pytest.raises(TypeError, match="float Variable"):
        nn.Dropout(0.5)(fa.IndexInput([1, 2]))


def test_a_replayed_graph_follows_train_and_eval_at_replay_time():
    """The issue's case: a graph built in training mode, replayed after eval(), keeps nothing
    zeroed; after train() it drops again, with a new mask on every forward."""
    model = nn.Sequential(nn.Dropout(0.4, seed=3))
    x = fa.Parameter(np.arange(1.0, 41.0), dtype=F64)
    out = model(x)
    loss = fa.sum(out * out)
    assert (out.value == 0).sum() > 0
    model.eval()
    loss.forward()
    np.testing.assert_array_equal(out.value, x.value)
    loss.backward()
    np.testing.assert_allclose(x.grad, 2 * x.value)       # the identity's gradient
    model.train()
    masks = []
    for _ in range(3):
        loss.forward()
        masks.append(out.value == 0)
        np.testing.assert_allclose(out.value[~masks[-1]], x.value[~masks[-1]] / 0.6)
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    x.zero_grad()
    loss.backward()                          # the gradient of the last forward's mask
    np.testing.assert_allclose(x.grad, 2 * out.value / 0.6 * (out.value != 0))


def test_a_graph_built_in_eval_mode_drops_after_train():
    drop = nn.Dropout(0.5, seed=1).eval()
    x = fa.Input(np.ones(200), dtype=F64)
    out = drop(x)
    assert (out.value == 1).all()
    drop.train()
    out.forward()
    assert 60 < (out.value == 0).sum() < 140


@settings(max_examples=60, deadline=None)
@given(modes=st.lists(st.booleans(), min_size=1, max_size=8), p=st.sampled_from([0.1, 0.5, 0.9]))
def test_dropout_mode_and_mask_are_read_on_every_forward(modes, p):
    """Whatever order of train()/eval() and replays: eval gives the input, training gives
    0 or x / (1 - p), a new mask each time, and backward the current mask's gradient."""
    drop = nn.Dropout(p, seed=0)
    x = fa.Parameter(np.linspace(0.5, 2.0, 300), dtype=F64)
    out = drop(x)
    loss = fa.sum(out * 3.0)
    last = None
    for training in modes:
        drop.train(training)
        loss.forward()
        if training:
            kept = out.value != 0
            np.testing.assert_allclose(out.value[kept], x.value[kept] / (1 - p))
            assert last is None or not np.array_equal(kept, last)
            last = kept
        else:
            np.testing.assert_array_equal(out.value, x.value)
        x.zero_grad()
        loss.backward()
        np.testing.assert_allclose(x.grad, 3.0 * out.value / x.value)


def test_fa_train_draws_a_mask_per_example_and_follows_eval():
    drop = nn.Dropout(0.5, seed=2)
    w = fa.Parameter(np.ones((1, 64)), dtype=F64)
    x = fa.Input(np.ones((1, 64)), dtype=F64)
    out = drop(x * w)
    loss = fa.sum(out)

    class Recorder:                          # an optimizer that looks at each example's output
        def __init__(self):
            self.seen = []

        def step(self):
            self.seen.append(out.value.copy())

        def zero_grad(self):
            w.zero_grad()

    rec = Recorder()
    fa.train(loss, rec, {x: np.ones((6, 1, 64))}, epochs=1)
    zeros = [tuple(np.flatnonzero(v == 0)) for v in rec.seen]
    assert len(rec.seen) == 6 and len(set(zeros)) == 6
    drop.eval()
    rec.seen.clear()
    fa.train(loss, rec, {x: np.ones((3, 1, 64))}, epochs=1)
    assert all((v == 1).all() for v in rec.seen)


def test_dropout_masks_repeat_with_the_seed():
    def masks(seed):
        drop = nn.Dropout(0.5, seed=seed)
        out = drop(fa.Input(np.ones(100)))
        first = out.value.copy()
        out.forward()
        return first, out.value.copy()

    assert all(np.array_equal(a, b) for a, b in zip(masks(4), masks(4)))
    assert not np.array_equal(masks(4)[0], masks(5)[0])


# -------------------------------------------------------------------- init

def rng(seed=0):
    return np.random.default_rng(seed)


def test_fans_follow_the_x_at_w_layout():
    # (fan_in, fan_out) = (shape[0], shape[1]) * receptive field, torch's with axes 0, 1 swapped
    w = fa.Parameter(np.empty((400, 100)), dtype=F64)
    init.kaiming_normal_(w, nonlinearity="relu", generator=rng())
    assert w.value.std() == pytest.approx(math.sqrt(2.0 / 400), rel=0.02)
    init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu", generator=rng())
    assert w.value.std() == pytest.approx(math.sqrt(2.0 / 100), rel=0.02)


def test_init_bounds_and_spreads_match_torch_formulas():
    torch = pytest.importorskip("torch")
    shape = (60, 30, 3)
    torch_shape = (30, 60, 3)          # torch's (out, in, ...) for the same fans
    fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(torch_shape))
    w = fa.Parameter(np.empty(shape), dtype=F64)

    init.xavier_uniform_(w, gain=0.5, generator=rng())
    bound = 0.5 * math.sqrt(6.0 / (fan_in + fan_out))
    assert np.abs(w.value).max() <= bound and np.abs(w.value).max() > 0.98 * bound

    init.kaiming_uniform_(w, a=0.2, generator=rng())
    bound = torch.nn.init.calculate_gain("leaky_relu", 0.2) * math.sqrt(3.0 / fan_in)
    assert np.abs(w.value).max() <= bound and np.abs(w.value).max() > 0.98 * bound

    init.xavier_normal_(w, generator=rng())
    assert w.value.std() == pytest.approx(math.sqrt(2.0 / (fan_in + fan_out)), rel=0.03)

    init.kaiming_normal_(w, mode="fan_out", nonlinearity="tanh", generator=rng())
    assert w.value.std() == pytest.approx(5 / 3 / math.sqrt(fan_out), rel=0.03)

    for name, param in [("linear", None), ("sigmoid", None), ("tanh", None), ("relu", None),
                        ("leaky_relu", None), ("leaky_relu", 0.3), ("selu", None)]:
        assert init.calculate_gain(name, param) == pytest.approx(
            torch.nn.init.calculate_gain(name, param), rel=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_simple_initialisers_in_place(dtype):
    w = fa.Parameter(np.empty((200, 50)), dtype=dtype)
    value = w.value
    assert init.uniform_(w, -0.5, 1.5, generator=rng()) is w
    assert w.value is value and value.dtype == dtype
    assert -0.5 <= value.min() and value.max() <= 1.5 and value.mean() == pytest.approx(0.5, abs=0.02)
    init.normal_(w, mean=3.0, std=0.5, generator=rng())
    assert value.mean() == pytest.approx(3.0, abs=0.01) and value.std() == pytest.approx(0.5, rel=0.02)
    init.zeros_(w)
    assert not value.any()
    init.ones_(w)
    assert (value == 1).all()


def test_generator_makes_draws_reproducible():
    a, b = fa.Parameter(np.empty((5, 4))), fa.Parameter(np.empty((5, 4)))
    init.xavier_uniform_(a, generator=rng(3))
    init.xavier_uniform_(b, generator=rng(3))
    np.testing.assert_array_equal(a.value, b.value)
    init.xavier_uniform_(b, generator=rng(4))
    assert not np.array_equal(a.value, b.value)


def test_init_errors_and_empty_parameters():
    vec = fa.Parameter(np.zeros(5))
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.xavier_uniform_(vec)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.kaiming_normal_(vec)
    w = fa.Parameter(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_uniform_(w, mode="fan_avg")
    with pytest.raises(ValueError, match="nonlinearity"):
        init.kaiming_uniform_(w, nonlinearity="swish")
    with pytest.raises(TypeError, match="Generator"):
        init.normal_(w, generator=42)
    with pytest.raises(TypeError, match="Parameter"):
        init.zeros_(np.zeros(3))
    with pytest.raises(ValueError, match="a <= b"):
        init.uniform_(w, 1.0, 0.0)
    with pytest.raises(ValueError, match="std"):
        init.normal_(w, std=-1.0)
    empty = fa.Parameter(np.zeros((0, 4)))
    assert init.kaiming_uniform_(empty) is empty and init.xavier_normal_(empty) is empty
