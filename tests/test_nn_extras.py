"""Activation modules, Identity/Flatten, ModuleList/ModuleDict, fa.nn.functional and
fa.manual_seed."""
import numpy as np
import pytest

import fastad as fa
import fastad.nn.functional as F
from fastad import random as fastad_random
from fastad.training import sampler


@pytest.fixture
def unseeded():
    """Restore fastad's fresh-entropy default after a test that seeds it."""
    yield
    fastad_random._root = None
    sampler.set_default_seed(None)


def test_activation_modules_call_their_functions():
    x = fa.Input(np.linspace(-2, 2, 12).reshape(3, 4))
    pairs = [(fa.nn.ReLU(), fa.relu(x)), (fa.nn.Tanh(), fa.tanh(x)), (fa.nn.Sigmoid(), fa.sigmoid(x)),
             (fa.nn.Softplus(), fa.softplus(x)), (fa.nn.LogSigmoid(), fa.logsigmoid(x)),
             (fa.nn.LeakyReLU(0.2), fa.leaky_relu(x, 0.2)), (fa.nn.Softmax(axis=0), fa.softmax(x, axis=0)),
             (fa.nn.Softmax(dim=1), fa.softmax(x, axis=1)), (fa.nn.LogSoftmax(), fa.log_softmax(x, axis=-1))]
    for module, expected in pairs:
        assert np.array_equal(module(x).value, expected.value), type(module).__name__
    assert fa.nn.Identity()(x) is x
    assert fa.nn.Flatten()(fa.Input(np.zeros((2, 3, 4)))).shape == (2, 12)
    model = fa.nn.Sequential(fa.nn.Linear(4, 5), fa.nn.ReLU(), fa.nn.Linear(5, 2), fa.nn.LogSoftmax())
    out = model(x)
    assert out.shape == (3, 2) and np.allclose(np.exp(out.value).sum(axis=1), 1, atol=1e-5)
    assert "LeakyReLU(negative_slope=0.2)" in repr(fa.nn.LeakyReLU(0.2))


def test_module_list_and_dict_register_their_modules():
    layers = fa.nn.ModuleList([fa.nn.Linear(2, 2) for _ in range(2)]).append(fa.nn.Linear(2, 1))
    assert len(layers) == 3 and isinstance(layers[1:], fa.nn.ModuleList) and len(layers[1:]) == 2
    assert sorted(layers.state_dict()) == ["0.bias", "0.weight", "1.bias", "1.weight", "2.bias", "2.weight"]
    assert len(list(layers.parameters())) == 6

    class Net(fa.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = layers
            self.heads = fa.nn.ModuleDict({"a": fa.nn.Linear(1, 3), "b": fa.nn.Linear(1, 1)})

    net = Net()
    assert {k for k in net.state_dict() if k.startswith("heads")} == {
        "heads.a.weight", "heads.a.bias", "heads.b.weight", "heads.b.bias"}
    assert list(net.heads.keys()) == ["a", "b"] and "a" in net.heads and net.heads["b"].out_features == 1
    with pytest.raises(TypeError, match="ModuleList: expected a Module"):
        layers.append(fa.tanh)
    with pytest.raises(KeyError, match="keys must be non-empty strings without '.'"):
        fa.nn.ModuleDict({"a.b": fa.nn.Identity()})
    with pytest.raises(TypeError, match="'x' must be a Module"):
        fa.nn.ModuleDict({"x": 3})
    with pytest.raises(TypeError, match="not callable"):
        layers(fa.Input(np.zeros(2)))


def test_functional_forms_and_dropout():
    assert F.relu is fa.relu and F.cross_entropy is fa.nn.cross_entropy and F.softmax is fa.softmax
    x = fa.Input(np.ones((200, 50)))
    assert F.dropout(x, 0.5, training=False) is x and F.dropout(x, 0.0) is x
    y = F.dropout(x, 0.25, generator=np.random.default_rng(0))
    kept = y.value != 0
    assert abs(kept.mean() - 0.75) < 0.02 and np.allclose(y.value[kept], 1 / 0.75)
    module = fa.nn.Dropout(0.25, seed=5)
    assert np.array_equal(module(x).value, F.dropout(x, 0.25, generator=np.random.default_rng(5)).value)
    with pytest.raises(ValueError, match="dropout: p must be a number in \\[0, 1\\)"):
        F.dropout(x, 1.0)
    with pytest.raises(ValueError, match="Dropout: p must be"):
        fa.nn.Dropout(-0.1)


def test_manual_seed_makes_every_random_source_repeat(unseeded):
    def draw():
        layer = fa.nn.Linear(4, 3)
        mask = fa.nn.Dropout(0.5)(fa.Input(np.ones(20))).value
        w = fa.Parameter(np.zeros((5, 2)))
        fa.nn.init.xavier_uniform_(w)
        ix = fa.IndexInput([0])
        rows = [int(a[0]) for (a,) in fa.data.FeedSampler({ix: np.arange(8)}, shuffle=True).epoch()]
        bpr = fa.models.BPR(6, 4, dim=3, seed=None).U.value.copy()       # seed=None: this stream too
        tower = fa.models.TwoTower({"id": np.arange(6)}, {"id": np.arange(4)}, dim=3, seed=None)
        likes = fa.data.planted_interactions(20, 10, per_user=3, seed=None)
        split = fa.data.train_test_split(likes, seed=None)[1]
        return (layer.weight.value.copy(), mask, w.value.copy(), rows, bpr, tower.user_id.value.copy(),
                likes.indices, split.indices)

    fa.manual_seed(7)
    first = draw()
    fa.manual_seed(7)
    again = draw()
    fa.manual_seed(8)
    other = draw()
    for a, b, c in zip(first, again, other):
        assert np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError, match="manual_seed: seed must be an int >= 0"):
        fa.manual_seed(-1)


def test_named_modules_and_apply_follow_torch():
    shared = fa.nn.Linear(3, 3)
    model = fa.nn.Sequential(fa.nn.Linear(2, 3), fa.nn.ReLU(), shared, shared)
    names = [(name, type(m).__name__) for name, m in model.named_modules()]
    assert names == [("", "Sequential"), ("0", "Linear"), ("1", "ReLU"), ("2", "Linear")]
    order = []
    assert model.apply(lambda m: order.append(m)) is model
    assert order[-1] is model and len(order) == 4 and set(map(id, order)) == {id(m) for _, m in model.named_modules()}
    model.apply(lambda m: fa.nn.init.zeros_(m.bias) if isinstance(m, fa.nn.Linear) else None)
    assert not model[0].bias.value.any() and not shared.bias.value.any()
    torch = pytest.importorskip("torch")
    reference = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
    assert [name for name, _ in reference.named_modules()] == [name for name, _ in names]
