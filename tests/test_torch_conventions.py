"""PyTorch's conventions in fa.nn, fa.optim and the Variable API.

A PyTorch user's state dict loads into the fastad layer of the same name
(Linear, LSTM/GRU and their cells, MultiheadAttention) and the outputs and
gradients match; `fa.linear` reads the (out, in) weight transposed in place;
`float(loss)`, `loss.item()`, `Parameter.grad` None before a backward,
`requires_grad` and `Module.requires_grad_`; `apply` and `children` in torch's
order; optimizers' `param_groups`.
"""
import numpy as np
import pytest

import fastad as fa
from fastad import nn
from fastad.ops.linalg import _set_blas_min_work
from vjp import check_vjp

torch = pytest.importorskip("torch")

F32, F64 = np.float32, np.float64
TORCH_DTYPE = {F32: torch.float32, F64: torch.float64}
TOLERANCE = {F32: dict(rtol=2e-5, atol=2e-6), F64: dict(rtol=1e-10, atol=1e-12)}


def rng(seed=0):
    return np.random.default_rng(seed)


@pytest.fixture(params=["blas", "loops"])
def product_path(request):
    """Run a test with every product on BLAS (crossover 0) and on the C loops."""
    old = _set_blas_min_work(0 if request.param == "blas" else 10 ** 12)
    yield request.param
    _set_blas_min_work(old)


# ------------------------------------------------------------------ fa.linear

@pytest.mark.parametrize("x_shape", [(3,), (4, 3), (2, 5, 3), (0, 3)])
def test_linear_values_and_gradients_against_finite_differences(x_shape, product_path):
    g = rng(1)
    x, w, b = g.normal(size=x_shape), g.normal(size=(2, 3)), g.normal(size=2)
    out = check_vjp(lambda x, w, b: fa.linear(x, w, b), x, w, b)
    np.testing.assert_allclose(out.value, x @ w.T + b, rtol=1e-12)
    out = check_vjp(lambda x, w: fa.linear(x, w), x, w)
    np.testing.assert_allclose(out.value, x @ w.T, rtol=1e-12)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_linear_matches_torch(dtype, product_path):
    g = rng(2)
    x, w, b = g.normal(size=(6, 5)), g.normal(size=(4, 5)), g.normal(size=4)
    ours = [fa.Parameter(a, dtype=dtype) for a in (x, w, b)]
    theirs = [torch.tensor(a, dtype=TORCH_DTYPE[dtype], requires_grad=True) for a in (x, w, b)]
    y = fa.linear(*ours)
    ty = torch.nn.functional.linear(*theirs)
    assert y.dtype == dtype
    np.testing.assert_allclose(y.value, ty.detach().numpy(), **TOLERANCE[dtype])
    cot = g.normal(size=y.shape)
    y.backward(cot)
    ty.backward(torch.tensor(cot, dtype=TORCH_DTYPE[dtype]))
    for p, t in zip(ours, theirs):
        assert p.grad.dtype == dtype
        np.testing.assert_allclose(p.grad, t.grad.numpy(), **TOLERANCE[dtype])


def test_linear_reads_the_weight_in_place_in_one_node():
    """No transpose node, no copy: the product node's input is the weight Parameter itself,
    and a replay after the weight changes sees the new values."""
    layer = nn.Linear(3, 2, dtype=F64)
    x = fa.Input(rng(3).normal(size=(4, 3)), dtype=F64)
    y = layer(x)
    product = y.parents[0]
    assert product.op_name == "linear" and product.parents == (x, layer.weight)
    layer.weight.set_value(np.ones((2, 3)))
    np.testing.assert_allclose(y.forward().value, x.value @ np.ones((3, 2)) + layer.bias.value)
    assert nn.Linear(3, 2, bias=False, dtype=F64)(x).op_name == "linear"


def test_linear_errors():
    w = fa.Parameter(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"linear: weight must have shape \(out_features, "
                                         r"in_features\), got \(2, 3, 1\)"):
        fa.linear(fa.Input(np.ones((1, 3))), fa.Parameter(np.ones((2, 3, 1))))
    with pytest.raises(ValueError, match=r"linear: the last axis of x must have size "
                                         r"in_features = 3 .*got x of shape \(4, 2\)"):
        fa.linear(fa.Input(np.ones((4, 2))), w)
    with pytest.raises(ValueError, match=r"linear: the last axis of x .*got x of shape \(\)"):
        fa.linear(fa.Input(1.0), w)
    with pytest.raises(ValueError, match=r"linear: bias must have shape \(out_features,\) = "
                                         r"\(2,\), got \(3,\)"):
        fa.linear(fa.Input(np.ones((1, 3))), w, fa.Parameter(np.ones(3)))
    with pytest.raises(TypeError, match="linear"):
        fa.linear(fa.Input(np.ones((1, 3))), w, np.ones(2))
    with pytest.raises(TypeError, match="mixed dtypes|dtype"):
        fa.linear(fa.Input(np.ones((1, 3)), dtype=F64), w)


# ------------------------------------------------------- layers from torch state dicts

def assert_loads_and_matches(ours, theirs):
    """load_state_dict(theirs.state_dict()) reports no missing or unexpected keys."""
    assert list(ours.state_dict()) == list(theirs.state_dict())
    assert ours.load_state_dict(theirs.state_dict()) == nn.IncompatibleKeys([], [])
    for name, value in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[name], value.numpy())


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("x_shape", [(1, 5), (7, 5), (2, 3, 5)])
def test_linear_loads_a_torch_state_dict(dtype, x_shape):
    torch.manual_seed(0)
    theirs = torch.nn.Linear(5, 4, dtype=TORCH_DTYPE[dtype])
    ours = nn.Linear(5, 4, dtype=dtype)
    assert ours.weight.shape == (4, 5)
    assert_loads_and_matches(ours, theirs)
    x = rng(4).normal(size=x_shape)
    y = ours(fa.Input(x, dtype=dtype))
    ty = theirs(torch.tensor(x, dtype=TORCH_DTYPE[dtype]))
    np.testing.assert_allclose(y.value, ty.detach().numpy(), **TOLERANCE[dtype])
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(ours.weight.grad, theirs.weight.grad.numpy(), **TOLERANCE[dtype])
    np.testing.assert_allclose(ours.bias.grad, theirs.bias.grad.numpy(), **TOLERANCE[dtype])


def test_a_torch_mlp_loads_into_the_same_fastad_sequential():
    torch.manual_seed(1)
    theirs = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 8),
                                 torch.nn.Tanh(), torch.nn.Linear(8, 3, bias=False))
    ours = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.Tanh(),
                         nn.Linear(8, 3, bias=False))
    assert_loads_and_matches(ours, theirs)
    x = rng(5).normal(size=(4, 6))
    np.testing.assert_allclose(ours(fa.Input(x)).value,
                               theirs(torch.tensor(x, dtype=torch.float32)).detach().numpy(),
                               **TOLERANCE[F32])


def run_torch_sequence(module, xs, state):
    """torch's outputs for a list of (batch, in) arrays: a cell stepped, or a layer over the
    stacked (seq, batch, in) tensor."""
    tx = [torch.tensor(x, dtype=torch.float32) for x in xs]
    if isinstance(module, (torch.nn.LSTMCell, torch.nn.GRUCell)):
        outs = []
        for x in tx:
            state = module(x, state)
            outs.append(state[0] if isinstance(state, tuple) else state)
        return outs
    if state is not None:     # a layer takes (layers, batch, hidden) states
        state = tuple(s[None] for s in state) if isinstance(state, tuple) else state[None]
    out, _ = module(torch.stack(tx), state)
    return list(out)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batch, steps, sizes", [(1, 1, (3, 4)), (3, 5, (4, 2)), (2, 4, (1, 6))])
@pytest.mark.parametrize("with_state", [False, True])
def test_recurrent_modules_load_torch_state_dicts_and_match(kind, batch, steps, sizes, with_state):
    torch.manual_seed(2)
    theirs = getattr(torch.nn, kind)(*sizes)
    ours = getattr(nn, kind)(*sizes)
    assert_loads_and_matches(ours, theirs)
    g = rng(6)
    xs = [g.normal(size=(batch, sizes[0])) for _ in range(steps)]
    state_np = None
    if with_state:
        state_np = tuple(g.normal(size=(batch, sizes[1])) for _ in range(2 if "LSTM" in kind else 1))
    t_state = None if state_np is None else tuple(torch.tensor(s, dtype=torch.float32) for s in state_np)
    if t_state is not None and "GRU" in kind:
        t_state = t_state[0]
    t_outs = run_torch_sequence(theirs, xs, t_state)
    state = None if state_np is None else tuple(fa.Input(s) for s in state_np)
    if state is not None and "GRU" in kind:
        state = state[0]
    inputs = [fa.Input(x) for x in xs]
    if kind.endswith("Cell"):
        outs = []
        for x in inputs:
            state = ours(x, state)
            outs.append(state[0] if kind == "LSTMCell" else state)
    else:
        outs = ours(inputs, state)
    for out, t_out in zip(outs, t_outs):
        np.testing.assert_allclose(out.value, t_out.detach().numpy(), **TOLERANCE[F32])
    weights = [g.normal(size=(batch, sizes[1])) for _ in range(steps)]
    loss = None
    for out, w in zip(outs, weights):
        term = fa.sum(out * w)
        loss = term if loss is None else loss + term
    loss.backward()
    sum((t * torch.tensor(w, dtype=torch.float32)).sum() for t, w in zip(t_outs, weights)).backward()
    for (name, p), (t_name, t_p) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert name == t_name
        if p.grad is None:      # weight_hh after one step from a zero state: torch's zeros
            assert name.startswith("weight_hh") and steps == 1 and not with_state
            assert not t_p.grad.any()
            continue
        np.testing.assert_allclose(p.grad, t_p.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=name)


@pytest.mark.parametrize("kind, names", [
    ("LSTM", ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]),
    ("GRUCell", ["weight_ih", "weight_hh", "bias_ih", "bias_hh"])])
def test_recurrent_parameter_names_and_layouts_are_torch_s(kind, names):
    ours, theirs = getattr(nn, kind)(3, 5), getattr(torch.nn, kind)(3, 5)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == \
           [(n, tuple(p.shape)) for n, p in theirs.named_parameters()]
    assert [n for n, _ in ours.named_parameters()] == names


def test_multihead_attention_loads_a_torch_state_dict():
    torch.manual_seed(3)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_bias.normal_()
    ours = nn.MultiheadAttention(8, 2)
    assert_loads_and_matches(ours, theirs)
    x = rng(7).normal(size=(2, 3, 8))
    out, weights = ours(*[fa.Input(x)] * 3)
    t = torch.tensor(x, dtype=torch.float32)
    t_out, t_weights = theirs(t, t, t)
    np.testing.assert_allclose(out.value, t_out.detach().numpy(), **TOLERANCE[F32])
    np.testing.assert_allclose(weights.value, t_weights.detach().numpy(), **TOLERANCE[F32])


# ------------------------------------------------------------------ load_state_dict

def test_load_state_dict_takes_tensors_that_require_grad_and_numpy_arrays():
    layer = nn.Linear(3, 2, dtype=F64)
    weight = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    layer.load_state_dict({"weight": weight, "bias": np.array([1.0, 2.0])})
    np.testing.assert_array_equal(layer.weight.value, weight.detach().numpy())
    np.testing.assert_array_equal(layer.bias.value, [1.0, 2.0])


def test_load_state_dict_errors_name_the_key_and_the_shapes():
    layer = nn.Linear(3, 2)
    before = layer.state_dict()
    good = {"weight": torch.zeros(2, 3), "bias": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"missing \['bias'\], unexpected \['b'\]"):
        layer.load_state_dict({"weight": good["weight"], "b": good["bias"]})
    with pytest.raises(ValueError, match=r"'bias' has shape \(3,\) in the state dict, but the "
                                         r"Parameter has shape \(2,\)$"):
        layer.load_state_dict({**good, "bias": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"'weight' has shape \(3, 2\) in the state dict, but "
                                         r"the Parameter has shape \(2, 3\) \(its transpose: a "
                                         r"checkpoint saved before fastad kept weights as "
                                         r"PyTorch's \(out, in\)\?"):
        layer.load_state_dict({**good, "weight": np.zeros((3, 2))})
    for name, value in layer.state_dict().items():      # nothing was copied
        np.testing.assert_array_equal(value, before[name])
    assert layer.load_state_dict({"weight": good["weight"]}, strict=False) == \
        nn.IncompatibleKeys(["bias"], [])


# ------------------------------------------------------------------ Variable and Parameter

def test_float_and_item_of_a_one_element_variable():
    loss = fa.sum(fa.Parameter(np.array([1.5, 2.0]), dtype=F64))
    assert float(loss) == 3.5 and loss.item() == 3.5 and isinstance(float(loss), float)
    assert float(fa.Input(np.array([[2.5]]))) == 2.5
    many = fa.Input(np.ones((2, 3)))
    for convert, who in ((float, r"float\(\)"), (lambda v: v.item(), r"item\(\)")):
        with pytest.raises(ValueError, match=who + r": only one-element Variables can be "
                                               r"converted to Python scalars; this one has 6 "
                                               r"elements \(shape \(2, 3\)\)"):
            convert(many)
        with pytest.raises(ValueError, match="has 0 elements"):
            convert(fa.Input(np.ones(0)))


def test_parameter_grad_is_none_until_a_backward_reaches_it_and_after_zero_grad():
    w, unused = fa.Parameter(np.ones(3)), fa.Parameter(np.ones(3))
    assert w.grad is None and unused.grad is None
    assert fa.Input(np.ones(2), requires_grad=True).grad is None
    (w * w).sum().backward()
    np.testing.assert_array_equal(w.grad, [2.0, 2.0, 2.0])
    assert unused.grad is None                     # the backward did not reach it
    w.zero_grad()
    assert w.grad is None
    table = fa.Parameter(np.ones((4, 2)))
    assert table.grad is None
    fa.take(table, fa.IndexInput([1])).sum().backward()
    assert table.grad[1].tolist() == [1.0, 1.0] and not table.grad[[0, 2, 3]].any()


def test_requires_grad_freezes_a_parameter_set_before_the_graph_is_built():
    frozen, trained = fa.Parameter(np.ones(2)), fa.Parameter(np.ones(2))
    assert frozen.requires_grad
    frozen.requires_grad = False
    loss = (frozen * trained).sum()
    loss.backward()
    assert frozen.grad is None and trained.grad is not None
    opt = fa.optim.SGD([frozen, trained], lr=0.5)
    opt.step()
    np.testing.assert_array_equal(frozen.value, [1.0, 1.0])
    np.testing.assert_array_equal(trained.value, [0.5, 0.5])
    frozen.requires_grad = False                   # the same value: allowed
    with pytest.raises(RuntimeError, match=r"Parameter.requires_grad cannot change once a graph "
                                           r"is built on it"):
        frozen.requires_grad = True
    assert not frozen.requires_grad
    x = fa.Input(np.ones(2))
    x.requires_grad = True
    (x * 2).sum().backward()
    np.testing.assert_array_equal(x.grad, [2.0, 2.0])
    with pytest.raises(TypeError, match="requires_grad must be"):
        fa.Parameter(np.ones(2)).requires_grad = "yes"
    with pytest.raises(AttributeError):
        loss.requires_grad = False                 # an op node's is fixed by its inputs


def test_module_requires_grad_changes_every_parameter_or_none():
    model = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
    assert model.requires_grad_(False) is model
    assert not any(p.requires_grad for p in model.parameters())
    model[0].requires_grad_(True)
    assert [p.requires_grad for p in model.parameters()] == [True, True, False, False]
    model[1](fa.Input(np.ones((1, 3))))            # a graph on the second layer's Parameters
    with pytest.raises(RuntimeError, match="cannot change once a graph is built"):
        model.requires_grad_(True)
    assert [p.requires_grad for p in model.parameters()] == [True, True, False, False]


def test_apply_and_children_follow_torch_s_order():
    def build(lib):
        inner = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.Tanh())
        shared = lib.nn.Linear(2, 2)
        return lib.nn.Sequential(inner, shared, lib.nn.Sequential(lib.nn.Linear(2, 2), shared))

    def visit(model):
        order = []
        model.apply(lambda m: order.append((type(m).__name__, [c.__class__.__name__
                                                                 for c in m.children()])))
        return order

    ours, theirs = build(fa), build(torch)
    assert visit(ours) == visit(theirs)
    assert [name for name, _ in ours.named_modules()] == [name for name, _ in theirs.named_modules()]


# ------------------------------------------------------------------ optimizers

@pytest.mark.parametrize("make", [
    lambda params, lib: lib.optim.SGD(params, lr=0.1, momentum=0.9),
    lambda params, lib: lib.optim.Adam(params, lr=0.05),
    lambda params, lib: lib.optim.Adagrad(params, lr=0.1)])
def test_param_groups_lr_changes_the_next_step_as_in_torch(make):
    start = rng(8).normal(size=(3, 2))
    w = fa.Parameter(start, dtype=F64)
    tw = torch.tensor(start, requires_grad=True)
    opt, t_opt = make([w], fa), make([tw], torch)
    assert len(opt.param_groups) == 1 and opt.param_groups[0]["params"] == [w]
    assert opt.param_groups[0]["lr"] == t_opt.param_groups[0]["lr"]
    for lr in (None, 0.01, 0.3):
        if lr is not None:
            opt.param_groups[0]["lr"] = lr
            t_opt.param_groups[0]["lr"] = lr
            assert opt.lr == lr and opt.state_dict()["lr"] == lr
        (w * w * w).sum().backward()
        (tw * tw * tw).sum().backward()
        opt.step()
        t_opt.step()
        opt.zero_grad()
        t_opt.zero_grad()
        np.testing.assert_allclose(w.value, tw.detach().numpy(), rtol=1e-12)
    group = opt.param_groups[0]
    opt.lr = 0.125                                 # the group is a live view
    assert group["lr"] == 0.125 and dict(group)["lr"] == 0.125
    assert set(group) == {"params", *opt.hyperparameters()}


def test_param_groups_errors():
    w = fa.Parameter(np.ones(2))
    opt = fa.optim.SGD([{"params": [w]}], lr=0.1, momentum=0.5)   # one torch-style group
    assert opt.params == [w]
    group = opt.param_groups[0]
    with pytest.raises(ValueError, match=r"SGD.param_groups: 'momentum' is fixed when the "
                                         r"optimizer is made; only 'lr' changes"):
        group["momentum"] = 0.9
    with pytest.raises(KeyError, match="no key 'initial_lr'"):
        group["initial_lr"] = 0.1
    with pytest.raises(TypeError, match="cannot be removed"):
        del group["lr"]
    with pytest.raises(ValueError, match=r"SGD: lr must be"):
        group["lr"] = -1.0
    v = fa.Parameter(np.ones(2))
    with pytest.raises(ValueError, match=r"Adam: got 2 parameter groups; a fastad optimizer "
                                         r"takes one .*make one optimizer per group"):
        fa.optim.Adam([{"params": [w]}, {"params": [v], "lr": 0.1}])
    with pytest.raises(ValueError, match=r"Adam: the parameter group sets \['lr'\]; give the "
                                         r"hyper-parameters as arguments"):
        fa.optim.Adam([{"params": [w], "lr": 0.1}])
    with pytest.raises(ValueError, match="Adam: the parameter group has no 'params' key"):
        fa.optim.Adam([{"lr": 0.1}])
