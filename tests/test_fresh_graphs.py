"""Graphs built anew for every example (define-by-run): a fresh graph's first backward (the plan
made over C arrays, its gradient buffers one block per plan, the staleness walk skipped when
nothing changed since the build) gives the values and gradients of PyTorch in float64, for
random graphs and for graphs that differ from the one before in one op, shape, dtype or leaf;
the buffers outlive the root that made them; kept graphs add nothing to the cyclic collector."""
import gc

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from random_graph_helpers import SHAPES, build, fa_ops, leaf_values, recipes

torch = pytest.importorskip("torch")

def _torch_ops():
    return {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "square": torch.square, "neg": torch.neg,
            "add": torch.add, "sub": torch.sub, "mul": torch.mul,
            "sum": lambda v: v.sum(dim=-1, keepdim=True), "matmul": lambda v, w: v @ w,
            "row": lambda v: v[0] if v.ndim == 2 else v}


def _fastad_run(recipe, values):
    dtype = np.float64 if recipe["f64"] else np.float32
    leaves = [fa.Parameter(values[0], dtype=dtype), fa.Parameter(values[1], dtype=dtype),
              fa.Input(values[2], dtype=dtype), fa.Parameter(values[3], dtype=dtype)]
    nodes, root = build(recipe, leaves, fa_ops())
    root.backward()
    return leaves, nodes, root


def _torch_run(recipe, values):
    leaves = [torch.tensor(values[0], requires_grad=True), torch.tensor(values[1], requires_grad=True),
              torch.tensor(values[2]), torch.tensor(values[3], requires_grad=True)]
    nodes, root = build(recipe, leaves, _torch_ops())
    for n in nodes[4:]:
        if n.requires_grad:
            n.retain_grad()
    root.backward()
    return leaves, nodes, root


def _check_against_torch(recipe, leaves, nodes, root):
    ref_leaves, ref_nodes, ref_root = _torch_run(recipe, leaf_values(recipe))
    tol = 1e-10 if recipe["f64"] else 1e-4
    np.testing.assert_allclose(root.value, ref_root.detach().numpy(), rtol=tol, atol=tol)
    for mine, ref in zip(leaves, ref_leaves):
        if ref.grad is None:
            assert mine.grad is None
        else:
            np.testing.assert_allclose(mine.grad, ref.grad.numpy(), rtol=tol, atol=tol)
    for mine, ref in zip(nodes[4:], ref_nodes[4:]):
        np.testing.assert_allclose(mine.value, ref.detach().numpy(), rtol=tol, atol=tol)
        if ref.grad is not None:        # the node's own gradient, read from the plan's block
            np.testing.assert_allclose(mine.grad, ref.grad.numpy(), rtol=tol, atol=tol)
            assert mine.grad.dtype == (np.float64 if recipe["f64"] else np.float32)


@settings(max_examples=60, deadline=None)
@given(recipes)
def test_a_fresh_graph_gives_torchs_values_and_gradients(recipe):
    _check_against_torch(recipe, *_fastad_run(recipe, leaf_values(recipe)))


@settings(max_examples=40, deadline=None)
@given(recipes, st.data())
def test_a_graph_differing_in_one_op_shape_dtype_or_leaf_from_the_last_is_its_own(recipe, data):
    """Build and differentiate one graph, then one that differs in one thing: each gives its
    own values and gradients (nothing of the first is reused for the second)."""
    _fastad_run(recipe, leaf_values(recipe))
    change = data.draw(st.sampled_from(["op", "shape", "dtype", "leaf"]))
    other = dict(recipe, steps=list(recipe["steps"]))
    if change == "op":
        k = data.draw(st.integers(0, len(other["steps"]) - 1))
        op, i, j = other["steps"][k]
        other["steps"][k] = ({"tanh": "sigmoid"}.get(op, "tanh"), i, j)
    elif change == "shape":
        other["shapes"] = (other["shapes"][1], SHAPES[0] if other["shapes"][0] == SHAPES[1] else SHAPES[1])
    elif change == "dtype":
        other["f64"] = not other["f64"]
    else:
        other["steps"] = [(op, i + 1 if i % 4 < 2 else i, j) for op, i, j in other["steps"]]
    _check_against_torch(other, *_fastad_run(other, leaf_values(other)))


def test_a_second_backward_of_a_fresh_graph_adds_into_the_leaves_and_rewrites_the_nodes():
    w = fa.Parameter(np.array([0.3, -0.7, 1.1]), dtype=np.float64)
    h = fa.tanh(w * 2.0)
    loss = (h * h).sum()
    loss.backward()
    first_h, first_w = h.grad.copy(), w.grad.copy()
    expected_h = 2 * np.tanh(w.value * 2)
    np.testing.assert_allclose(first_h, expected_h)
    np.testing.assert_allclose(first_w, expected_h * (1 - np.tanh(w.value * 2) ** 2) * 2)
    loss.backward()
    np.testing.assert_allclose(h.grad, first_h)          # a node's gradient is this pass's
    np.testing.assert_allclose(w.grad, 2 * first_w)      # a leaf's accumulates


def test_a_seeded_backward_of_a_fresh_graph_writes_then_adds_the_seed_in_the_roots_gradient():
    w = fa.Parameter(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype=np.float64)
    y = w * 3.0
    seed = np.array([[1.0, -1.0], [0.5, 2.0]])
    y.backward(seed)
    np.testing.assert_allclose(y.grad, seed)
    np.testing.assert_allclose(w.grad, 3 * seed)
    y.backward(seed)
    np.testing.assert_allclose(y.grad, seed)
    np.testing.assert_allclose(w.grad, 6 * seed)


def test_node_gradients_outlive_the_root_whose_plan_made_their_buffers():
    w = fa.Parameter(np.linspace(-1, 1, 64), dtype=np.float64)
    hs = [fa.sigmoid(w * k) for k in range(1, 5)]
    root = sum(h.sum() for h in hs[1:]) + hs[0].sum()
    root.backward()
    del root
    gc.collect()
    junk = [fa.tanh(w * 5.0) for _ in range(200)]    # new buffers where a freed block would be
    for j in junk:
        j.value[...] = -1.0
    for k, h in enumerate(hs, start=1):      # read only now: the arrays are made over the block
        np.testing.assert_allclose(h.grad, np.ones(64))
        np.testing.assert_allclose(h.value, 1 / (1 + np.exp(-w.value * k)))


def test_a_node_under_two_roots_keeps_the_buffer_of_the_first_plan():
    w = fa.Parameter(np.array([0.5, -0.25]), dtype=np.float64)
    shared = fa.tanh(w)
    a = (shared * 2.0).sum()
    b = (shared * shared).sum()
    a.backward()
    np.testing.assert_allclose(shared.grad, [2.0, 2.0])
    w.zero_grad()
    b.backward()
    np.testing.assert_allclose(shared.grad, 2 * np.tanh(w.value))
    np.testing.assert_allclose(w.grad, 2 * np.tanh(w.value) * (1 - np.tanh(w.value) ** 2))
    a.backward()                     # a's pass writes the shared buffer again
    np.testing.assert_allclose(shared.grad, [2.0, 2.0])


def test_a_leaf_changed_in_the_middle_of_a_build_is_still_refused_as_stale():
    w = fa.Parameter(np.array([0.5, 1.5]))
    early = fa.tanh(w)
    w.set_value(np.array([2.0, 3.0]))          # early now holds tanh of the old value
    late = (early * w).sum()
    with pytest.raises(RuntimeError, match="stale: 'tanh' was computed before its input"):
        late.backward()
    late.forward()
    late.backward()
    np.testing.assert_allclose(w.grad, np.tanh([2.0, 3.0]) + [2.0, 3.0] * (1 - np.tanh([2.0, 3.0]) ** 2),
                               rtol=1e-6)


def test_kept_graphs_add_nothing_to_the_cyclic_collectors_walk():
    """A plan holds its nodes in tuples of no_gc nodes and is itself untracked: a thousand
    kept graphs, each differentiated, leave the count of tracked objects where it was."""
    w = fa.Parameter(np.ones(8))
    kept = []
    gc.collect()
    before = len(gc.get_objects())
    for k in range(1000):
        h = fa.tanh(w * float(k % 7))
        for _ in range(k % 5):
            h = fa.sigmoid(h + w)
        loss = h.sum()
        loss.backward()
        kept.append(loss)
    gc.collect()
    assert len(gc.get_objects()) - before < 50
