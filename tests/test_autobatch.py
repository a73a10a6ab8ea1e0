"""fa.autobatch / fa.batch: the losses of per-example graphs recorded and evaluated as one
batched graph have the values and the summed gradients of the graphs built one by one;
dtypes and recordings do not mix; an op that cannot batch says so; the eager path is as
before outside the block."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from autobatch_checks import assert_batch_matches_eager, eager, gradients
from test_examples import load_example

DIM, TYPES, CLASSES = 5, 7, 3
root_state = load_example("tree_rnn").root_state


def _params(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"E": (TYPES, DIM), "W": (DIM, DIM), "U": (DIM, DIM), "b": (DIM,),
              "V": (DIM, CLASSES), "c": (CLASSES,)}
    return {k: fa.Parameter(rng.normal(0, 0.5, s), dtype=dtype, name=k) for k, s in shapes.items()}


def _tree_loss(tree, p):
    """The loss of the child-sum tree RNN of examples/tree_rnn.py and bench/autobatch_tree_rnn.py
    (post-order nodes, root last)."""
    types, children, target = tree
    xw = fa.embedding(p["E"], fa.IndexInput(types)) @ p["W"] + p["b"]
    logits = (root_state(xw, children, p["U"]) @ p["V"] + p["c"]).reshape(1, CLASSES)
    return fa.nn.cross_entropy(logits, fa.IndexInput([target]))


@st.composite
def _trees(draw):
    """A random tree in post-order: node i's parent comes after it, the root last."""
    n = draw(st.integers(1, 12))
    parents = [draw(st.integers(i + 1, n - 1)) for i in range(n - 1)]
    children = tuple(tuple(i for i in range(n - 1) if parents[i] == j) for j in range(n))
    types = np.array(draw(st.lists(st.integers(0, TYPES - 1), min_size=n, max_size=n)))
    return types, children, draw(st.integers(0, CLASSES - 1))


def _eager(trees, params):
    """Each tree's loss, and the gradients of their sum, built one tree at a time."""
    return eager(trees, lambda tree: _tree_loss(tree, params), params)


@settings(max_examples=40, deadline=None)
@given(st.lists(_trees(), min_size=1, max_size=9))
def test_batched_sum_has_the_values_and_summed_gradients_of_the_trees_one_by_one(trees):
    params = _params()
    assert_batch_matches_eager(trees, lambda tree: _tree_loss(tree, params), params)


def test_a_batch_of_one_is_the_example_itself():
    params = _params()
    tree = (np.array([1, 2, 3]), ((), (0,), (1,)), 2)
    (loss,), grads = _eager([tree], params)
    with fa.autobatch():
        total = fa.batch([_tree_loss(tree, params)])
    total.backward()
    assert total.item() == pytest.approx(loss, rel=1e-12)
    for k, g in gradients(params).items():
        np.testing.assert_allclose(g, grads[k], rtol=1e-12, atol=1e-14)


def test_nodes_of_one_signature_and_level_run_as_one_node():
    params = _params()
    chain = (np.array([0, 1, 2]), ((), (0,), (1,)), 0)
    with fa.autobatch():
        total = fa.batch([_tree_loss(chain, params) for _ in range(6)])
    ops = {}
    stack, seen = [total], set()
    while stack:
        node = stack.pop()
        if id(node) not in seen:
            seen.add(id(node))
            ops[node.op_name] = ops.get(node.op_name, 0) + 1
            stack.extend(node.parents)
    # one embedding, the W matmul and the V matmul, and the U matmul of each of two levels
    assert ops["embedding"] == 1 and ops["cross_entropy"] == 1
    assert ops["matmul"] == 4 and ops["tanh"] == 3


def test_float_inputs_of_each_example_stack_and_scalar_ops_batch():
    rng = np.random.default_rng(3)
    W = fa.Parameter(rng.normal(size=(4, 3)), dtype=np.float64)
    b = fa.Parameter(rng.normal(size=(3,)), dtype=np.float64)
    xs = [rng.normal(size=(1, 4)) for _ in range(5)]

    def loss(x, y):
        h = fa.sigmoid(fa.Input(x, dtype=np.float64) @ W) * 2.0 - b
        h = (h / 3.0 + 1.0) * fa.tanh(h)
        return fa.nn.cross_entropy(h, fa.IndexInput([y]), label_smoothing=0.1)

    eager = []
    for i, x in enumerate(xs):
        out = loss(x, i % 3)
        out.backward()
        eager.append(out.item())
    gw, gb = W.grad.copy(), b.grad.copy()
    W.zero_grad(), b.zero_grad()
    with fa.autobatch():
        total = fa.batch([loss(x, i % 3) for i, x in enumerate(xs)])
    total.backward()
    assert total.item() == pytest.approx(sum(eager), rel=1e-12)
    np.testing.assert_allclose(W.grad, gw, rtol=1e-10)
    np.testing.assert_allclose(b.grad, gb, rtol=1e-10)


def test_losses_of_two_dtypes_raise_naming_both():
    p64, p32 = _params(np.float64), _params(np.float32)
    tree = (np.array([1, 2]), ((), (0,)), 1)
    with fa.autobatch():
        losses = [_tree_loss(tree, p64), _tree_loss(tree, p32)]
        with pytest.raises(TypeError, match=r"losses\[0\].*float64.*losses\[1\].*float32"):
            fa.batch(losses)


def test_an_op_mixing_dtypes_raises_naming_the_op():
    p64, p32 = _params(np.float64), _params(np.float32)
    with fa.autobatch():
        rows = fa.embedding(p32["E"], fa.IndexInput([1, 2]))
        with pytest.raises(TypeError, match="add"):
            rows + p64["b"]
        with pytest.raises(TypeError, match="matmul"):
            rows @ p64["W"]


def test_values_of_two_recordings_do_not_mix():
    params = _params()
    with fa.autobatch():
        first = fa.embedding(params["E"], fa.IndexInput([1]))
    with fa.autobatch():
        second = fa.embedding(params["E"], fa.IndexInput([2]))
        with pytest.raises(ValueError, match="another recording"):
            first + second


def test_ops_that_cannot_batch_raise_naming_the_op():
    params = _params()
    with fa.autobatch():
        rows = fa.embedding(params["E"], fa.IndexInput([1, 2]))
        with pytest.raises(NotImplementedError, match="reduce.*batchable"):
            rows.sum()
        with pytest.raises(NotImplementedError, match="matmul"):
            rows @ rows.T
        with pytest.raises(NotImplementedError, match="matmul"):
            fa.Parameter(np.ones((3, 2)), dtype=np.float64) @ rows
        with pytest.raises(NotImplementedError, match="shared operand must broadcast"):
            rows * fa.Parameter(np.ones((2, DIM)), dtype=np.float64)
        with pytest.raises(NotImplementedError, match="cross_entropy with reduction 'none' batches one row"):
            fa.nn.cross_entropy(rows @ params["V"], [0, 1], reduction="none")


def test_no_losses_and_big_losses_raise():
    with pytest.raises(ValueError, match="empty"):
        fa.batch([])
    params = _params()
    with fa.autobatch():
        rows = fa.embedding(params["E"], fa.IndexInput([1, 2]))
        with pytest.raises(ValueError, match=r"losses\[0\].*one element"):
            fa.batch([rows])


def test_a_recorded_value_has_no_value_before_batch_and_losses_discarded_raise():
    params = _params()
    tree = (np.array([1, 2]), ((), (0,)), 1)
    with fa.autobatch():
        loss = _tree_loss(tree, params)
        with pytest.raises(RuntimeError, match="recorded, not computed"):
            loss.value
        with pytest.raises(TypeError, match="fa.batch"):
            loss.backward()
    with pytest.raises(ValueError, match="discarded"):
        fa.batch([loss])


def test_one_block_serves_many_minibatches_and_leaves_eager_mode_after():
    params = _params()
    trees = [(np.array([1, 2, 3]), ((), (), (0, 1)), k % CLASSES) for k in range(4)]
    losses, grads = _eager(trees, params)
    with fa.autobatch():
        for half in (trees[:2], trees[2:]):
            fa.batch([_tree_loss(tree, params) for tree in half]).backward()
    for k, g in gradients(params).items():
        np.testing.assert_allclose(g, grads[k], rtol=1e-10, err_msg=k)
    ix = fa.IndexInput([1])
    assert ix.device == "cpu" and ix.storage is None
    assert fa.embedding(params["E"], ix).value.shape == (1, DIM)


def test_shared_variables_made_inside_the_block_are_computed_at_once():
    params = _params()
    with fa.autobatch():
        scaled = params["W"] * 2.0                  # no recorded operand: an ordinary node
        np.testing.assert_allclose(scaled.value, params["W"].value * 2.0)
        loss = fa.nn.cross_entropy(
            (fa.embedding(params["E"], fa.IndexInput([3])) @ scaled) @ params["V"], [1])
        total = fa.batch([loss])
    total.backward()
    assert params["W"].grad is not None and params["E"].grad is not None


def test_nn_linear_layers_batch_across_examples():
    rng = np.random.default_rng(4)
    layer = fa.nn.Linear(4, 3)
    E = fa.Parameter(rng.normal(size=(6, 4)))
    examples = [(rng.integers(0, 6, size=1), k % 3) for k in range(5)]

    def loss(ids, y):
        return fa.nn.cross_entropy(fa.tanh(layer(fa.embedding(E, fa.IndexInput(ids)))),
                                   fa.IndexInput([y]))

    params = [E] + list(layer.parameters())
    eager = 0.0
    for ids, y in examples:
        out = loss(ids, y)
        out.backward()
        eager += out.item()
    grads = [p.grad.copy() if not p.is_sparse_grad else np.array(p.grad) for p in params]
    for p in params:
        p.zero_grad()
    with fa.autobatch():
        total = fa.batch([loss(ids, y) for ids, y in examples])
    ops = set()
    stack = [total]
    matmuls = 0
    while stack:
        node = stack.pop()
        if id(node) not in ops:
            ops.add(id(node))
            matmuls += node.op_name == "matmul"
            stack.extend(node.parents)
    assert matmuls == 1                       # the five examples' weight.T products are one
    total.backward()
    assert total.item() == pytest.approx(eager, rel=1e-5)
    for p, g in zip(params, grads):
        np.testing.assert_allclose(np.array(p.grad), g, rtol=1e-4, atol=1e-6)


def test_row_slices_of_recorded_values_are_views_and_other_slices_raise():
    rng = np.random.default_rng(8)
    E = fa.Parameter(rng.normal(size=(TYPES, DIM)), dtype=np.float64)
    V = fa.Parameter(rng.normal(size=(DIM, CLASSES)), dtype=np.float64)
    examples = [(rng.integers(0, TYPES, 5), rng.normal(size=(4, DIM)), k % CLASSES) for k in range(3)]

    def loss(ids, x, y):
        rows, data = fa.embedding(E, fa.IndexInput(ids)), fa.Input(x, dtype=np.float64)
        total = rows[1:3] + rows[-2:] + data[0:2] + fa.getitem(data, slice(2, 4))
        return fa.nn.cross_entropy((total[1:2] + rows[0:1]) @ V, fa.IndexInput([y]))

    eager = 0.0
    for example in examples:
        out = loss(*example)
        out.backward()
        eager += out.item()
    grads = [E.grad.copy() if not E.is_sparse_grad else np.array(E.grad), V.grad.copy()]
    E.zero_grad(), V.zero_grad()
    with fa.autobatch():
        total = fa.batch([loss(*example) for example in examples])
        rows = fa.embedding(E, fa.IndexInput([1, 2, 3]))
        for key in (slice(None, None, 2), slice(None, None, -1), (slice(0, 2), slice(0, 2))):
            with pytest.raises(NotImplementedError, match="getitem of a recorded value batches whole rows"):
                rows[key]
    total.backward()
    assert total.item() == pytest.approx(eager, rel=1e-12)
    np.testing.assert_allclose(np.array(E.grad), grads[0], rtol=1e-10)
    np.testing.assert_allclose(V.grad, grads[1], rtol=1e-10)
