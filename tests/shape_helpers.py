"""Helpers for the op tests: a scalar that sees every element, and replay checks."""
import numpy as np

import fastad as fa
from fastad.ops.linalg import vector_dot
from fastad.ops.shape import reshape


def weights_for(shape, dtype=np.float64):
    """Fixed, distinct weights of `shape` (the same ones every call)."""
    return np.random.default_rng(1234).standard_normal(shape).astype(dtype)


def weighted_sum(y):
    """sum(w * y) for fixed weights w: a scalar whose gradient in y is w (an empty y gives 0)."""
    w = fa.Input(weights_for(y.shape, y.dtype), dtype=y.dtype)
    return vector_dot(reshape(y, -1), reshape(w, -1))


def torch_weighted_grads(torch, fn, *arrays):
    """Gradients of sum(w * fn(*tensors)) in PyTorch, with the weights of `weighted_sum`."""
    tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    y = fn(*tensors)
    (y * torch.tensor(weights_for(tuple(y.shape), arrays[0].dtype))).sum().backward()
    return [t.grad.numpy() for t in tensors]


def assert_matches_torch_for_a_cotangent(torch, fn, torch_fn, x, grad_rtol, grad_atol, value_rtol=1e-12):
    """fn of a float64 Parameter of x and torch_fn of a tensor of x: the values agree to
    value_rtol, and the gradients for one random cotangent (seed 5) to grad_rtol/grad_atol
    (0 and 0: bit for bit)."""
    tx = torch.tensor(x, requires_grad=True)
    ty = torch_fn(tx)
    p = fa.Parameter(x, dtype=np.float64)
    y = fn(p)
    cot = np.random.default_rng(5).normal(size=y.shape)
    ty.backward(torch.tensor(cot))
    y.backward(cot)
    np.testing.assert_allclose(y.value, ty.detach().numpy(), rtol=value_rtol, atol=0)
    np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=grad_rtol, atol=grad_atol)


def assert_replay_matches_fresh(build, old_arrays, new_arrays, rtol=1e-12):
    """Build on old data, set_value the new data and replay; compare with a fresh build on it.

    `build(*inputs)` gets float64 Inputs and returns (output, parameters); the
    value, the weighted sum and every parameter's gradient must agree.
    """
    def make(arrays):
        inputs = [fa.Input(a, dtype=np.float64) for a in arrays]
        out, params = build(*inputs)
        return inputs, out, params, weighted_sum(out)

    inputs, out, params, root = make(old_arrays)
    for x, data in zip(inputs, new_arrays):
        x.set_value(data)
    root.forward()
    root.backward()
    _, out2, params2, root2 = make(new_arrays)
    root2.backward()
    np.testing.assert_allclose(out.value, out2.value, rtol=rtol)
    np.testing.assert_allclose(root.item(), root2.item(), rtol=rtol)
    for p, p2 in zip(params, params2):
        np.testing.assert_allclose(p.grad, p2.grad, rtol=rtol)


def assert_op_of_input_and_parameter_replays(build, data, shape=(2, 3, 4)):
    """`build(x, p)` of a float64 Input x and Parameter p, both of `shape` (drawn by
    `data(*shape)`: p's values, then x's old and new ones), passes assert_replay_matches_fresh."""
    param = data(*shape)

    def make(x):
        p = fa.Parameter(param, dtype=np.float64)
        return build(x, p), [p]

    assert_replay_matches_fresh(make, [data(*shape)], [data(*shape)])


def assert_set_value_replay_matches_fresh(build, old, new):
    """`build(*arrays)` -> (parameter, leaves, root): a graph built on `old`, given `new` by
    `set_value` on each leaf and replayed, equals a fresh build on `new` exactly (the value
    and the parameter's gradient). Returns the replayed graph's (parameter, leaves, root)."""
    p, leaves, root = build(*old)
    root.backward()
    for leaf, value in zip(leaves, new):
        leaf.set_value(value)
    root.forward()
    p.zero_grad()
    root.backward()
    p_fresh, _, root_fresh = build(*new)
    root_fresh.backward()
    assert root.item() == root_fresh.item()
    np.testing.assert_array_equal(p.grad, p_fresh.grad)
    return p, leaves, root
