"""expand_dims, squeeze, split, flip, tile: values against numpy, gradients against
PyTorch and finite differences, views, replay, bad input."""
import numpy as np
import pytest
import torch

import fastad as fa
from fastad.ops.shape import View, Gather
from shape_helpers import assert_op_of_input_and_parameter_replays, torch_weighted_grads, weighted_sum

rng = np.random.default_rng(16)


def data(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def torch_tile(t, reps):
    return torch.tile(t, reps)


# (name, our op, numpy's, torch's, input shape)
CASES = [
    ("expand_dims 0", lambda v: fa.expand_dims(v, 0), lambda a: np.expand_dims(a, 0),
     lambda t: t.unsqueeze(0), (2, 3)),
    ("expand_dims -1", lambda v: fa.expand_dims(v, -1), lambda a: np.expand_dims(a, -1),
     lambda t: t.unsqueeze(-1), (2, 3)),
    ("expand_dims tuple", lambda v: fa.expand_dims(v, (0, 3, -1)),
     lambda a: np.expand_dims(a, (0, 3, -1)), lambda t: t[None, :, :, None, None], (2, 3)),
    ("expand_dims 0-d", lambda v: fa.expand_dims(v, 0), lambda a: np.expand_dims(a, 0),
     lambda t: t.unsqueeze(0), ()),
    ("squeeze all", lambda v: fa.squeeze(v), np.squeeze, lambda t: t.squeeze(), (1, 3, 1, 2)),
    ("squeeze -2", lambda v: fa.squeeze(v, -2), lambda a: np.squeeze(a, -2),
     lambda t: t.squeeze(-2), (1, 3, 1, 2)),
    ("squeeze tuple", lambda v: fa.squeeze(v, (0, 2)), lambda a: np.squeeze(a, (0, 2)),
     lambda t: t.squeeze(2).squeeze(0), (1, 3, 1, 2)),
    ("squeeze to 0-d", lambda v: fa.squeeze(v), np.squeeze, lambda t: t.squeeze(), (1, 1)),
    ("squeeze 0-d", lambda v: fa.squeeze(v), np.squeeze, lambda t: t.squeeze(), ()),
    ("flip all", lambda v: fa.flip(v), np.flip, lambda t: torch.flip(t, (0, 1, 2)), (2, 3, 4)),
    ("flip -1", lambda v: fa.flip(v, -1), lambda a: np.flip(a, -1),
     lambda t: torch.flip(t, (-1,)), (2, 3, 4)),
    ("flip (0, 2)", lambda v: fa.flip(v, (0, 2)), lambda a: np.flip(a, (0, 2)),
     lambda t: torch.flip(t, (0, 2)), (2, 3, 4)),
    ("flip 0-d", lambda v: fa.flip(v), np.flip, lambda t: t, ()),
    ("tile int", lambda v: fa.tile(v, 3), lambda a: np.tile(a, 3), lambda t: torch_tile(t, (3,)),
     (2, 3)),
    ("tile longer reps", lambda v: fa.tile(v, (2, 1, 3)), lambda a: np.tile(a, (2, 1, 3)),
     lambda t: torch_tile(t, (2, 1, 3)), (2, 3)),
    ("tile shorter reps", lambda v: fa.tile(v, (2,)), lambda a: np.tile(a, (2,)),
     lambda t: torch_tile(t, (2,)), (2, 3)),
    ("tile ones", lambda v: fa.tile(v, (1, 1)), lambda a: np.tile(a, (1, 1)),
     lambda t: torch_tile(t, (1, 1)), (2, 3)),
    ("tile zero", lambda v: fa.tile(v, (0, 2)), lambda a: np.tile(a, (0, 2)),
     lambda t: torch_tile(t, (0, 2)), (2, 3)),
    ("tile 0-d", lambda v: fa.tile(v, (2, 2)), lambda a: np.tile(a, (2, 2)),
     lambda t: torch_tile(t, (2, 2)), ()),
    ("tile empty", lambda v: fa.tile(v, (2, 2)), lambda a: np.tile(a, (2, 2)),
     lambda t: torch_tile(t, (2, 2)), (0, 3)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, ours, numpys, torchs, shape", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients(name, ours, numpys, torchs, shape, dtype):
    x = data(*shape, dtype=dtype)
    p = fa.Parameter(x, dtype=dtype)
    y = ours(p)
    expected = numpys(x)
    assert y.shape == expected.shape and y.dtype == dtype
    np.testing.assert_array_equal(y.value, expected)
    np.testing.assert_array_equal(y.value, torchs(torch.tensor(x)).numpy())
    weighted_sum(y).backward()
    (expected_grad,) = torch_weighted_grads(torch, torchs, x)
    np.testing.assert_allclose(p.grad, expected_grad, rtol=1e-6)
    if dtype == np.float64:
        assert fa.gradcheck(lambda q: weighted_sum(ours(q)), x)


@pytest.mark.parametrize("sections, axis", [(3, 0), (2, 1), (1, -1), ([1, 3], 1), ([2], -1),
                                           ([0, 0, 4], 1), ([3, 10], 1), ([-2], 1), ([], 0),
                                           (np.array([1, 2]), 0)], ids=str)
def test_split_matches_numpy_and_gradients_add_back(sections, axis):
    x = data(3, 4, 2)
    parts = fa.split(fa.Input(x, dtype=np.float64), sections, axis)
    expected = np.split(x, sections, axis)
    assert isinstance(parts, list) and len(parts) == len(expected)
    for part, e in zip(parts, expected):
        assert part.shape == e.shape and part.op_name == "split"
        np.testing.assert_array_equal(part.value, e)

    def scalar(p):
        pieces = fa.split(p, sections, axis)
        return sum((weighted_sum(q) * float(i + 1) for i, q in enumerate(pieces)),
                   fa.Input(0.0, dtype=np.float64))
    assert fa.gradcheck(scalar, x)


def test_split_along_axis_0_gives_views_and_against_torch():
    x = data(6, 3)
    p = fa.Parameter(x, dtype=np.float64)
    parts = fa.split(p, 3)
    assert all(isinstance(q, View) for q in parts)        # contiguous runs: no copy
    assert all(isinstance(q, Gather) for q in fa.split(p, 3, axis=1))
    loss = fa.sum(parts[0] * 1.0) + fa.sum(parts[2] * 3.0)
    loss.backward()
    tx = torch.tensor(x, requires_grad=True)
    a, _, c = torch.split(tx, 2)
    (a.sum() + 3 * c.sum()).backward()
    np.testing.assert_array_equal(p.grad, tx.grad.numpy())


def test_expand_dims_and_squeeze_are_views():
    p = fa.Parameter(data(2, 3))
    assert isinstance(fa.expand_dims(p, 1), View)
    assert isinstance(fa.squeeze(fa.expand_dims(p, 1), 1), View)
    assert fa.expand_dims(p, 1).op_name == "expand_dims"
    assert fa.squeeze(fa.expand_dims(p, 1)).op_name == "squeeze"


@pytest.mark.parametrize("build", [
    lambda x, p: fa.expand_dims(x * p, (0, 2)),
    lambda x, p: fa.squeeze(fa.reshape(x * p, (1, 2, 1, 12))),
    lambda x, p: fa.concat(fa.split(x * p, [1, 3], axis=-1)[::-1], axis=-1),
    lambda x, p: fa.flip(x * p, (0, -1)),
    lambda x, p: fa.tile(x * p, (2, 1, 2)),
], ids=["expand_dims", "squeeze", "split", "flip", "tile"])
def test_replay_after_set_value_matches_fresh_build(build):
    assert_op_of_input_and_parameter_replays(build, data)


def test_bad_input():
    v = fa.Input(np.zeros((2, 1, 3)))
    with pytest.raises(ValueError, match=r"squeeze: axis 2 has length 3, not 1 \(input shape \(2, 1, 3\)\)"):
        fa.squeeze(v, 2)
    with pytest.raises(ValueError, match=r"squeeze: axis 0 has length 2"):
        fa.squeeze(v, (1, 0))
    with pytest.raises(np.exceptions.AxisError, match="squeeze: axis 3 is out of range"):
        fa.squeeze(v, 3)
    with pytest.raises(np.exceptions.AxisError, match="expand_dims: axis 4 is out of range"):
        fa.expand_dims(v, 4)
    with pytest.raises(ValueError, match="expand_dims: axis 1 repeats"):
        fa.expand_dims(v, (1, 1))
    with pytest.raises(ValueError, match=r"split: 2 sections do not divide axis 2 of length 3 "
                                         r"\(input shape \(2, 1, 3\)\)"):
        fa.split(v, 2, axis=2)
    with pytest.raises(ValueError, match="split: 0 sections"):
        fa.split(v, 0)
    with pytest.raises(ValueError, match="split: axis 3 is out of range"):
        fa.split(v, 1, axis=3)
    with pytest.raises(ValueError, match="split: x is 0-d"):
        fa.split(fa.Input(1.0), 1)
    with pytest.raises(TypeError, match="split: indices must be integers"):
        fa.split(v, [1.5])
    with pytest.raises(TypeError, match="split: indices_or_sections must be an int"):
        fa.split(v, 1.5)
    with pytest.raises(np.exceptions.AxisError, match="flip: axis -4 is out of range"):
        fa.flip(v, -4)
    with pytest.raises(ValueError, match=r"tile: reps must be >= 0, got \(2, -1\)"):
        fa.tile(v, (2, -1))
    with pytest.raises(TypeError, match="tile: reps must be an int or a tuple of ints"):
        fa.tile(v, 1.5)
    for op in (lambda x: fa.expand_dims(x, 0), fa.squeeze, fa.flip, lambda x: fa.tile(x, 2),
               lambda x: fa.split(x, 1)):
        with pytest.raises(TypeError, match="IndexInput"):
            op(fa.IndexInput([1, 2]))
