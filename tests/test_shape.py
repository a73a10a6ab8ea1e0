"""reshape, transpose, getitem, concat, stack: values, gradients, replay, bad input."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import fastad as fa
from fastad.ops.shape import concat, getitem, reshape, stack, transpose
from shape_helpers import (assert_op_of_input_and_parameter_replays, torch_weighted_grads,
                           weighted_sum, weights_for)

rng = np.random.default_rng(0)


def data(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def check_grad(fn, *arrays):
    """fa.gradcheck of sum(w * fn(...)) in float64."""
    assert fa.gradcheck(lambda *ps: weighted_sum(fn(*ps)), *arrays)


# ------------------------------------------------------------------ reshape

RESHAPES = [((3, 4), (2, 6)), ((3, 4), (-1,)), ((3, 4), (2, -1, 3)), ((2, 3, 4), 24),
            ((), (1, 1)), ((1,), ()), ((1, 5), (5, -1)), ((0, 3), (3, 0)), ((0, 3), (-1, 3))]


@pytest.mark.parametrize("shape, target", RESHAPES)
def test_reshape_values_and_gradients(shape, target):
    x = data(*shape)
    y = reshape(fa.Parameter(x, dtype=np.float64), target)
    np.testing.assert_array_equal(y.value, x.reshape(target))
    assert y.shape == x.reshape(target).shape
    check_grad(lambda p: reshape(p, target), x)


def test_reshape_method_forms_and_view():
    p = fa.Parameter(data(2, 3), dtype=np.float64)
    assert p.reshape(3, 2).shape == (3, 2)
    assert p.reshape((6,)).shape == (6,)
    assert p.reshape(-1).shape == (6,)
    assert fa.Parameter(data(1)).reshape().shape == ()
    y = p.reshape(3, 2)
    assert np.shares_memory(y.value, p.value)        # forward is free: a view
    assert not y.value.flags.writeable                # and nobody writes through it
    p.value[0, 0] = 42.0
    assert y.forward().value[0, 0] == 42.0
    for same in (reshape(p, p.shape), p[...], transpose(p, (0, 1))):
        assert not same.value.flags.writeable
    assert p.value.flags.writeable                    # the leaf's own array stays writable


def test_reshape_bad_input():
    p = fa.Parameter(data(3, 4))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        reshape(p, (5,))
    with pytest.raises(ValueError, match="reshape"):
        reshape(p, (-1, -1))
    with pytest.raises(TypeError, match="reshape"):
        reshape(p, (2.5, 2))
    with pytest.raises(TypeError, match="reshape"):
        reshape(p, None)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape integer ids of shape \(2,\)"):
        reshape(fa.IndexInput([1, 2]), (3,))
    with pytest.raises(TypeError, match="Variable"):
        reshape(np.zeros(3), (3,))


def test_reshaped_ids_index_tables_and_follow_their_input():
    """Integer ids reshape (an IndexInput's, an argmax's): the result is ids that index a table,
    a view that follows the input's new ids, and cannot be set itself."""
    table = fa.Parameter(np.arange(12.0).reshape(6, 2), dtype=np.float64)
    ix = fa.IndexInput([0, 5, 2, 3])
    block = ix.reshape(2, 2)
    assert isinstance(block, fa.IndexInput) and block.shape == (2, 2)
    rows = table[block]                               # shape (2, 2, 2)
    np.testing.assert_array_equal(rows.value, table.value[[[0, 5], [2, 3]]])
    ix.set_value([1, 1, 4, 0])
    np.testing.assert_array_equal(rows.forward().value, table.value[[[1, 1], [4, 0]]])
    rows.sum().backward()                             # the gradient reaches the rows the view names
    np.testing.assert_array_equal(table.grad[:, 0], [1, 2, 0, 0, 1, 0])
    with pytest.raises(TypeError, match="reshape: a reshaped integer node shows its input's ids"):
        block.set_value([[0, 0], [0, 0]])
    assert repr(block) == "Variable(op='reshape', shape=(2, 2), dtype=int64)"
    scores = fa.Parameter([[1.0, 5.0], [7.0, 2.0]], dtype=np.float64)
    best = fa.reshape(fa.argmax(scores, axis=1), (2, 1))
    picked = table[best]
    np.testing.assert_array_equal(best.value, [[1], [0]])
    scores.set_value([[9.0, 5.0], [7.0, 8.0]])
    np.testing.assert_array_equal(picked.forward().value, table.value[[[0], [1]]])


# ---------------------------------------------------------------- transpose

TRANSPOSES = [((3, 4), None), ((3, 4), (1, 0)), ((2, 3, 4), None), ((2, 3, 4), (1, 0, 2)),
              ((2, 3, 4), (-1, 0, 1)), ((5,), None), ((), None), ((1, 5), None), ((0, 3), None),
              ((2, 3), (0, 1))]


@pytest.mark.parametrize("shape, axes", TRANSPOSES)
def test_transpose_values_and_gradients(shape, axes):
    x = data(*shape)
    y = transpose(fa.Parameter(x, dtype=np.float64), axes)
    np.testing.assert_array_equal(y.value, np.transpose(x, axes))
    check_grad(lambda p: transpose(p, axes), x)


def test_transpose_method_forms():
    x = data(2, 3, 4)
    p = fa.Parameter(x, dtype=np.float64)
    np.testing.assert_array_equal(p.T.value, x.T)
    np.testing.assert_array_equal(p.transpose().value, x.transpose())
    np.testing.assert_array_equal(p.transpose(2, 0, 1).value, x.transpose(2, 0, 1))
    np.testing.assert_array_equal(p.transpose((2, 0, 1)).value, x.transpose(2, 0, 1))
    np.testing.assert_array_equal(fa.Parameter(data(4)).transpose(0).value.shape, (4,))


@pytest.mark.parametrize("axes", [(0, 0), (0,), (0, 1, 2), (0, 2), (-3, 0)])
def test_transpose_bad_axes(axes):
    with pytest.raises(ValueError, match=r"transpose: axes.*\(3, 4\)"):
        transpose(fa.Parameter(data(3, 4)), axes)


def test_transpose_non_integer_axes():
    with pytest.raises(TypeError, match="transpose"):
        transpose(fa.Parameter(data(3, 4)), (0.0, 1.0))


# ------------------------------------------------------------------ getitem

MASK = data(3, 4) > 0
KEYS = [
    ((3, 4), 1),
    ((3, 4), -1),
    ((3, 4), (-1, -2)),
    ((3, 4), slice(1, None)),
    ((3, 4), (slice(None), slice(None, None, -2))),
    ((3, 4), (slice(2, 0, -1), slice(1, 4, 2))),
    ((3, 4), (None, 1, None)),
    ((3, 4), (Ellipsis, 2)),
    ((3, 4), (Ellipsis, None)),
    ((3, 4), [2, 0, 2, 2]),                                     # repeated rows
    ((3, 4), (1, [3, 3, 0])),
    ((3, 4), np.array([[0, 1], [1, 1]])),
    ((3, 4), (np.array([0, 2, 0]), np.array([3, 3, 3]))),       # repeated elements
    ((2, 3, 4), (np.array([1, 0]), slice(None), np.array([2, 2]))),   # numpy moves the pair first
    ((2, 3, 4), (Ellipsis, [1, 1], slice(None, None, 3))),
    ((3, 4), MASK),
    ((3, 4), (MASK[:, 0],)),
    ((3, 4), slice(2, 2)),                                      # empty
    ((3, 4), (slice(None), [])),                                # empty integer list
    ((0, 4), slice(None)),
    ((), ()),
    ((), None),
    ((), Ellipsis),
    ((), True),                                                 # advanced keys on a 0-d input
    ((3, 4), (True,)),
    ((3, 4), (np.int64(-1), slice(None, 1))),
    ((1, 5), 0),
    ((1, 5), (0, slice(1, None, 2))),
    ((1, 5), (slice(None), -1)),
    ((5,), slice(None, None, -1)),
]


@pytest.mark.parametrize("shape, key", KEYS)
def test_getitem_values_and_gradients(shape, key):
    x = data(*shape)
    y = getitem(fa.Parameter(x, dtype=np.float64), key)
    np.testing.assert_array_equal(y.value, x[key])
    assert y.shape == x[key].shape
    check_grad(lambda p: getitem(p, key), x)


def test_getitem_operator_and_contiguous_runs_are_views():
    x = data(3, 4)
    p = fa.Parameter(x, dtype=np.float64)
    np.testing.assert_array_equal(p[1:, ::2].value, x[1:, ::2])
    np.testing.assert_array_equal(p[None, ..., 1].value, x[None, ..., 1])
    row = p[1]
    assert np.shares_memory(row.value, p.value)
    assert not np.shares_memory(p[:, 1].value, p.value)
    check_grad(lambda q: q[1:3], x)


def test_getitem_gradients_from_several_views_of_one_input_add_up():
    # a View (row 0) and a Gather (rows 1, 1) both send gradient into x.
    check_grad(lambda q: fa.add(q[0], q[[1, 1]]), data(3, 4))
    check_grad(lambda q: fa.mul(q[:, 0], q[:, [1]].reshape(-1)), data(3, 4))


@pytest.mark.parametrize("shape", [(5,), (4, 3), (2, 3, 2)])
def test_an_int_key_picks_the_entry_numpy_picks_with_its_gradient(shape):
    x = data(*shape)
    for key in range(-shape[0], shape[0]):
        p = fa.Parameter(x, dtype=np.float64)
        y = p[key]
        assert y.shape == x[key].shape and np.array_equal(y.value, x[key])
        assert np.shares_memory(y.value, p.value) and not y.value.flags.writeable
        (y * 2.0).sum().backward()
        expected = np.zeros_like(x)
        expected[key] = 2.0
        np.testing.assert_array_equal(p.grad, expected)
    # a bool is a mask to numpy, not the int 1: it takes the general path
    assert getitem(fa.Parameter(x), True).shape == x[True].shape == (1, *shape)
    # a row of an op node: read-only over its buffer, and it follows a replay
    source = fa.Input(x, dtype=np.float64)
    h = source * 2.0
    row = h[-1]
    assert not row.value.flags.writeable and np.shares_memory(row.value, h.value)
    source.set_value(x + 1.0)
    row.forward()
    np.testing.assert_array_equal(row.value, 2.0 * (x[-1] + 1.0))


@pytest.mark.parametrize("shape, key, axis, size", [
    ((3, 4), 3, 0, 3), ((3, 4), -4, 0, 3), ((3, 4), (0, 7), 1, 4), ((3, 4), [0, 9], 0, 3),
    ((3, 4), (slice(None), [-5]), 1, 4), ((0, 4), 0, 0, 0),
])
def test_getitem_out_of_range_names_axis_and_size(shape, key, axis, size):
    with pytest.raises(IndexError, match=rf"getitem.*axis {axis} with size {size}"):
        getitem(fa.Parameter(data(*shape)), key)


def test_getitem_bad_keys():
    p = fa.Parameter(data(3, 4))
    with pytest.raises(IndexError, match="getitem"):
        p[0, 0, 0]
    with pytest.raises(IndexError, match="getitem"):
        p[1.5]
    with pytest.raises(IndexError, match="getitem"):
        p[np.ones((2, 2), dtype=bool)]
    with pytest.raises(TypeError, match="IndexInput alone"):
        p[fa.IndexInput([0]), 1]
    with pytest.raises(TypeError, match="cannot be part of an index"):
        p[fa.Parameter(np.zeros(2))]


# ------------------------------------------------------------ concat, stack

CONCATS = [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 4)], 1), ([(2, 3), (2, 5)], -1),
           ([(5,), (2,)], 0), ([(3,), (0,), (1,)], 0), ([(1, 4)], 0), ([(2, 0, 3), (2, 2, 3)], 1),
           ([(0, 3), (0, 2)], 1), ([(2, 3, 2), (2, 3, 1)], 2)]


@pytest.mark.parametrize("shapes, axis", CONCATS)
def test_concat_values_and_gradients(shapes, axis):
    arrays = [data(*s) for s in shapes]
    y = concat([fa.Parameter(a, dtype=np.float64) for a in arrays], axis=axis)
    np.testing.assert_array_equal(y.value, np.concatenate(arrays, axis=axis))
    check_grad(lambda *ps: concat(list(ps), axis=axis), *arrays)


STACKS = [([(2, 3), (2, 3)], 0), ([(2, 3), (2, 3), (2, 3)], 1), ([(2, 3)] * 2, 2),
          ([(2, 3)] * 2, -1), ([(2, 3)] * 2, -3), ([(), (), ()], 0), ([(0, 2)] * 2, 1), ([(4,)], 0)]


@pytest.mark.parametrize("shapes, axis", STACKS)
def test_stack_values_and_gradients(shapes, axis):
    arrays = [data(*s) for s in shapes]
    y = stack(tuple(fa.Parameter(a, dtype=np.float64) for a in arrays), axis=axis)
    np.testing.assert_array_equal(y.value, np.stack(arrays, axis=axis))
    check_grad(lambda *ps: stack(ps, axis=axis), *arrays)


def test_concat_only_inputs_that_need_gradients_get_them():
    p = fa.Parameter(data(2, 3), dtype=np.float64)
    x = fa.Input(data(2, 2), dtype=np.float64)
    root = weighted_sum(concat([x, p, p], axis=1))
    root.backward()
    w = weights_for((2, 8))
    np.testing.assert_allclose(p.grad, w[:, 2:5] + w[:, 5:8])
    assert x.grad is None


def test_concat_stack_bad_input():
    a = fa.Parameter(data(2, 3))
    with pytest.raises(ValueError, match="empty"):
        concat([])
    with pytest.raises(ValueError, match="empty"):
        stack(())
    with pytest.raises(ValueError, match=r"xs\[2\] has shape \(2, 4\).*\(2, 3\).*axis 0"):
        concat([a, a, fa.Parameter(data(2, 4))], axis=0)
    with pytest.raises(ValueError, match=r"xs\[1\] has shape \(3,\)"):
        concat([a, fa.Parameter(data(3))])
    with pytest.raises(ValueError, match=r"stack: xs\[1\] has shape \(3, 2\)"):
        stack([a, fa.Parameter(data(3, 2))])
    with pytest.raises(TypeError, match="mixed dtypes"):
        concat([a, fa.Parameter(data(2, 3), dtype=np.float64)])
    with pytest.raises(ValueError, match="0-d"):
        concat([fa.Parameter(1.0)])
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        concat([a, a], axis=2)
    with pytest.raises(ValueError, match="axis -4 is out of range"):
        stack([a, a], axis=-4)
    with pytest.raises(TypeError, match="list or tuple"):
        concat(a)
    with pytest.raises(TypeError, match=r"xs\[1\]"):
        concat([a, np.zeros((2, 3))])
    with pytest.raises(TypeError, match="IndexInput"):
        stack([fa.IndexInput([1])])


# ------------------------------------------------------- float32, PyTorch

def test_float32_values_and_gradients():
    x = data(3, 4, dtype=np.float32)
    p = fa.Parameter(x)
    assert p.dtype == np.float32
    outs = [reshape(p, (4, 3)), p.T, p[::-1, [0, 0, 2]], concat([p, p], 1), stack([p, p])]
    expected = [x.reshape(4, 3), x.T, x[::-1, [0, 0, 2]], np.concatenate([x, x], 1), np.stack([x, x])]
    for y, e in zip(outs, expected):
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y.value, e)
    root = weighted_sum(stack([p.T.reshape(-1), p[::-1, [0, 0, 2, 1]].reshape(-1)]))
    root.backward()
    assert p.grad.dtype == np.float32
    w = weights_for((2, 12), np.float32)
    expected_grad = w[0].reshape(4, 3).T.copy()
    np.add.at(expected_grad, (slice(None, None, -1), [0, 0, 2, 1]), w[1].reshape(3, 4))
    np.testing.assert_allclose(p.grad, expected_grad, rtol=1e-6)


TORCH_CASES = [
    ("reshape", lambda v: reshape(v, (2, -1)), lambda t: t.reshape(2, -1)),
    ("transpose", lambda v: transpose(v, (2, 0, 1)), lambda t: t.permute(2, 0, 1)),
    ("getitem", lambda v: v[1, ::2][:, [0, 3, 3]], lambda t: t[1, ::2][:, [0, 3, 3]]),
    ("getitem-neg", lambda v: v[-1, None, :, -2], lambda t: t[-1, None, :, -2]),
    ("concat", lambda v: concat([v, v[:, :1]], axis=1), lambda t: torch_cat([t, t[:, :1]], 1)),
    ("stack", lambda v: stack([v, v * 2.0], axis=-1), lambda t: torch_stack([t, t * 2.0], -1)),
]


def torch_cat(ts, axis):
    import torch
    return torch.cat(ts, axis)


def torch_stack(ts, axis):
    import torch
    return torch.stack(ts, axis)


@pytest.mark.parametrize("name, ours, theirs", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gradients_match_pytorch(name, ours, theirs, dtype):
    torch = pytest.importorskip("torch")
    x = data(2, 3, 4, dtype=dtype)
    p = fa.Parameter(x, dtype=dtype)
    y = ours(p)
    np.testing.assert_allclose(y.value, theirs(torch.tensor(x)).numpy(), rtol=1e-6)
    weighted_sum(y).backward()
    (expected,) = torch_weighted_grads(torch, theirs, x)
    np.testing.assert_allclose(p.grad, expected, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------- replay

@pytest.mark.parametrize("build", [
    lambda x, p: reshape(x * p, (2, -1)),
    lambda x, p: transpose(x * p, (1, 2, 0)),
    lambda x, p: (x * p)[1, ::-1, [0, 0, 3]],
    lambda x, p: (x * p)[0],
    lambda x, p: concat([x * p, p, x[:, :1]], axis=1),
    lambda x, p: stack([x * p, p], axis=2),
], ids=["reshape", "transpose", "getitem", "getitem-view", "concat", "stack"])
def test_replay_after_set_value_matches_fresh_build(build):
    assert_op_of_input_and_parameter_replays(build, data)


def test_non_contiguous_numpy_inputs():
    base = data(4, 3)
    x = fa.Input(base.T, dtype=np.float64)               # a transposed (F-order) array
    np.testing.assert_array_equal(reshape(x, -1).value, base.T.reshape(-1))
    np.testing.assert_array_equal(x[1, ::2].value, base.T[1, ::2])
    np.testing.assert_array_equal(concat([x, x[:, ::-1]], 1).value,
                                  np.concatenate([base.T, base.T[:, ::-1]], 1))
    y = x.T[::2]
    strided = data(6, 8)[::2, ::2]                         # a (3, 4) view, not C-contiguous
    x.set_value(strided)
    np.testing.assert_array_equal(y.forward().value, strided.T[::2])


# ------------------------------------------------ getitem against numpy, at random

@st.composite
def shapes_and_keys(draw):
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=0, max_size=3)))
    parts = []
    used = draw(st.integers(0, len(shape)))
    array_len = draw(st.integers(0, 4))     # integer arrays in one key must broadcast together
    for n in shape[:used]:
        kind = draw(st.sampled_from(["int", "slice", "array", "newaxis"] if n else ["slice", "newaxis"]))
        if kind == "int":
            parts.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            parts.append(slice(draw(st.none() | st.integers(-5, 5)), draw(st.none() | st.integers(-5, 5)),
                               draw(st.none() | st.sampled_from([-3, -2, -1, 1, 2, 3]))))
        elif kind == "array":
            parts.append(draw(st.lists(st.integers(-n, n - 1), min_size=array_len, max_size=array_len)))
        else:
            parts.extend([None, slice(None)])
    if draw(st.booleans()):              # an Ellipsis that stands for the axes left over
        parts.insert(0 if used == len(shape) else len(parts), Ellipsis)
    return shape, tuple(parts)


@settings(max_examples=150, deadline=None)
@given(shapes_and_keys())
def test_getitem_matches_numpy_values_and_add_at_gradients(shape_key):
    shape, key = shape_key
    x = np.arange(1.0, 1.0 + np.prod(shape)).reshape(shape)
    p = fa.Parameter(x, dtype=np.float64)
    y = getitem(p, key)
    np.testing.assert_array_equal(y.value, x[key])
    weighted_sum(y).backward()
    expected = np.zeros(shape)
    np.add.at(expected, key, weights_for(x[key].shape))
    np.testing.assert_array_equal(p.grad, expected)
