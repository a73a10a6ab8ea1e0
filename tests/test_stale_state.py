"""No stale state leaks from a re-used graph: a backward after a leaf changed, without the
forward that recomputes the graph, is refused (RuntimeError), and any backward that runs
equals the backward of a graph freshly built on the same values.

The property test builds random graphs (dense ops, broadcasting, a sparse gather with
repeated ids), then applies random sequences of set_value, optimizer steps, forwards of
the root or of a node inside, and backwards.
"""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa

F64 = np.float64
UNARY = {"tanh": fa.tanh, "sigmoid": fa.sigmoid, "square": fa.square, "neg": fa.neg}
BINARY = {"add": fa.add, "sub": fa.sub, "mul": fa.mul,
          "div": lambda a, b: a / (fa.square(b) + 1.0)}


# --------------------------------------------------------------- the cases

def test_backward_after_set_value_without_forward_is_refused():
    w = fa.Parameter(np.ones(1), dtype=F64)
    x = fa.Input([0.1], dtype=F64)
    loss = fa.sum(fa.tanh(w * x))
    x.set_value([2.0])
    with pytest.raises(RuntimeError, match=r"stale: 'mul' was computed before its input 'input' "
                                           r"\(shape \(1,\)\) was changed .*Call forward\(\)"):
        loss.backward()
    assert w.grad is None                    # refused before any gradient was written
    loss.forward()
    loss.backward()
    np.testing.assert_allclose(w.grad, [2 * (1 - np.tanh(2.0) ** 2)])


def test_index_input_set_value_and_optimizer_step_make_the_graph_stale():
    E = fa.Parameter(np.arange(12.0).reshape(4, 3) / 10, dtype=F64)
    ix = fa.IndexInput([0, 1])
    loss = fa.sum(fa.tanh(E[ix]))
    ix.set_value([2, 2])
    with pytest.raises(RuntimeError, match="before its input 'index_input'"):
        loss.backward()
    loss.forward()
    loss.backward()
    opt = fa.optim.SGD([E], lr=0.5)
    opt.step()
    with pytest.raises(RuntimeError, match="stale"):
        loss.backward()
    opt.zero_grad()
    loss.forward()
    loss.backward()
    fresh = fa.Parameter(E.numpy(), dtype=F64)
    fa.sum(fa.tanh(fresh[fa.IndexInput([2, 2])])).backward()
    np.testing.assert_allclose(E.grad, fresh.grad)


def test_load_state_dict_makes_graphs_over_the_module_stale():
    layer = fa.nn.Linear(3, 2, dtype=F64)
    loss = fa.sum(layer(fa.Input(np.ones((1, 3)), dtype=F64)))
    layer.load_state_dict({"weight": np.zeros((2, 3)), "bias": np.zeros(2)})
    with pytest.raises(RuntimeError, match="stale"):
        loss.backward()


def test_a_graph_built_across_a_set_value_is_refused_until_forward():
    """Nodes built before a leaf changed, beside nodes built after, are caught too."""
    w = fa.Parameter([1.0, 2.0], dtype=F64)
    x = fa.Input([0.5, 0.5], dtype=F64)
    early = fa.tanh(w * x)
    x.set_value([3.0, -1.0])
    loss = fa.sum(early + w * x)
    with pytest.raises(RuntimeError, match="stale: 'mul'"):
        loss.backward()
    loss.forward()
    loss.backward()
    np.testing.assert_allclose(w.grad, (1 - np.tanh([3.0, -2.0]) ** 2) * [3.0, -1.0] + [3.0, -1.0])


def test_forward_of_part_of_the_graph_after_a_change_is_caught():
    w = fa.Parameter([0.3], dtype=F64)
    x = fa.Input([1.0], dtype=F64)
    inner = fa.tanh(w * x)
    loss = fa.sum(fa.square(inner))
    x.set_value([2.0])
    inner.forward()                          # the inside is current, the square is not
    with pytest.raises(RuntimeError, match="'square' was computed before its input 'tanh' .*"
                                           "recomputed by a forward"):
        loss.backward()
    loss.forward()
    loss.backward()


def test_replay_loop_pays_no_check_and_stays_correct():
    """The usual loop (set_value, forward, backward) never trips the check."""
    w = fa.Parameter(np.linspace(-1, 1, 6).reshape(2, 3), dtype=F64)
    x = fa.Input(np.zeros((4, 2)), dtype=F64)
    loss = fa.sum(fa.sigmoid(x @ w))
    rng = np.random.default_rng(0)
    for _ in range(50):
        batch = rng.normal(size=(4, 2))
        x.set_value(batch)
        loss.forward()
        w.zero_grad()
        loss.backward()
        s = 1 / (1 + np.exp(-batch @ w.value))
        np.testing.assert_allclose(w.grad, batch.T @ (s * (1 - s)), rtol=1e-12)


# --------------------------------------------------------------- the property

@st.composite
def recipes(draw):
    """Ops over (3, 4) values; node ids 0-3 are x, y (Parameters), z (an Input) and the rows
    E[ix] of a sparse gather (ix may repeat ids)."""
    steps = []
    for k in range(draw(st.integers(1, 8))):
        kind = draw(st.sampled_from(["unary", "binary", "bcast"]))
        a = draw(st.integers(0, k + 3))
        b = draw(st.integers(0, k + 3))
        name = draw(st.sampled_from(sorted(UNARY if kind == "unary" else BINARY)))
        steps.append((kind, name, a, b))
    return steps


def build(steps, x, y, z, E, ix):
    nodes = [x, y, z, E[ix]]
    for kind, name, a, b in steps:
        u, v = nodes[a], nodes[b]
        if kind == "unary":
            nodes.append(UNARY[name](u))
        elif kind == "binary":
            nodes.append(BINARY[name](u, v))
        else:
            nodes.append(u * fa.mean(v, axis=0, keepdims=True))
    return nodes, fa.sum(nodes[-1] * nodes[len(nodes) // 2] + nodes[0])   # x: always a gradient


def leaves(rng):
    return {"x": rng.normal(size=(3, 4)), "y": rng.normal(size=(3, 4)),
            "z": rng.normal(size=(3, 4)), "E": rng.normal(size=(5, 4)),
            "ix": rng.integers(0, 5, size=3)}


def fresh_gradients(steps, values):
    x, y, E = (fa.Parameter(values[k], dtype=F64) for k in ("x", "y", "E"))
    nodes, loss = build(steps, x, y, fa.Input(values["z"], dtype=F64), E, fa.IndexInput(values["ix"]))
    loss.backward()
    return loss.item(), {"x": x.grad, "y": y.grad, "E": E.grad}


def assert_same_grad(grad, expected, what):
    """Equal gradients, or both None (the leaf takes no part in the recipe)."""
    if expected is None:
        assert grad is None, what
    else:
        np.testing.assert_allclose(grad, expected, rtol=1e-10, atol=1e-12, err_msg=what)


actions = st.lists(st.one_of(
    st.tuples(st.just("set"), st.sampled_from(["x", "y", "z", "E", "ix"]), st.integers(0, 2**31)),
    st.tuples(st.just("step")),
    st.tuples(st.just("forward")),
    st.tuples(st.just("forward_node"), st.integers(0, 20)),
    st.tuples(st.just("backward")),
), min_size=1, max_size=12)


@settings(max_examples=120, deadline=None)
@given(steps=recipes(), script=actions, seed=st.integers(0, 2**31))
def test_every_backward_that_runs_equals_a_fresh_graphs(steps, script, seed):
    values = leaves(np.random.default_rng(seed))
    params = {k: fa.Parameter(values[k], dtype=F64) for k in ("x", "y", "E")}
    z, ix = fa.Input(values["z"], dtype=F64), fa.IndexInput(values["ix"])
    handles = dict(params, z=z, ix=ix)
    nodes, loss = build(steps, params["x"], params["y"], z, params["E"], ix)
    opt = fa.optim.SGD(list(params.values()), lr=0.1)
    changed = False                     # a leaf changed, or part was recomputed, since the root's forward
    for action in script:
        if action[0] == "set":
            name, draw = action[1], np.random.default_rng(action[2])
            new = leaves(draw)[name]
            handles[name].set_value(new)
            values[name] = new
            changed = True
        elif action[0] == "step":
            opt.step()
            for k, p in params.items():
                values[k] = p.numpy()
            changed = True
        elif action[0] == "forward":
            loss.forward()
            changed = False
        elif action[0] == "forward_node":
            nodes[action[1] % len(nodes)].forward()
            changed = True
        else:
            opt.zero_grad()
            try:
                loss.backward()
            except RuntimeError as err:
                assert "stale" in str(err) and changed, f"refused a current graph: {err}"
                continue
            value, grads = fresh_gradients(steps, values)
            np.testing.assert_allclose(loss.item(), value, rtol=1e-12, atol=1e-12)
            for k, p in params.items():
                assert_same_grad(p.grad, grads[k], f"gradient of {k} after {script}")
    loss.forward()                      # after a forward, backward always runs and agrees
    opt.zero_grad()
    loss.backward()
    value, grads = fresh_gradients(steps, values)
    for k, p in params.items():
        assert_same_grad(p.grad, grads[k], f"gradient of {k}")


def test_after_fa_train_the_last_step_leaves_the_graph_stale():
    E = fa.Parameter(np.full((4, 2), 0.5), dtype=F64)
    ix = fa.IndexInput([0])
    loss = fa.sum(fa.square(E[ix]))
    fa.train(loss, fa.optim.Adagrad([E], lr=0.1), {ix: np.arange(4)})
    with pytest.raises(RuntimeError, match="stale"):
        loss.backward()
    loss.forward()
    loss.backward()


def test_a_forward_that_redraws_part_of_the_graph_is_caught():
    """Random nodes change their value on every forward, with no leaf changing: a forward
    of the dropout alone leaves the nodes above it holding the previous mask's values."""
    w = fa.Parameter(np.ones(50), dtype=F64)
    dropped = fa.nn.Dropout(0.5, seed=0)(w)
    loss = fa.sum(fa.square(dropped))
    dropped.forward()
    with pytest.raises(RuntimeError, match="'square' was computed before its input 'mul'"):
        loss.backward()
    loss.forward()
    loss.backward()
    np.testing.assert_allclose(w.grad, 2 * dropped.value * (dropped.value / w.value))
