"""take_along_axis: values against numpy and torch.gather, gradients (dense, and sparse
along axis 0 of a Parameter) against torch and finite differences, replay, bad ids."""
import numpy as np
import pytest
import torch

import fastad as fa
from shape_helpers import weighted_sum, weights_for

rng = np.random.default_rng(17)


def data(*shape):
    return rng.standard_normal(shape)


CASES = [((5, 4), (7, 4), 0), ((5, 4), (5, 9), 1), ((5, 4), (5, 2), -1), ((6,), (10,), 0),
         ((2, 3, 4), (2, 5, 4), 1), ((2, 3, 4), (1, 3, 4), 0), ((2, 3, 4), (2, 3, 6), -1),
         ((2, 3, 4), (2, 0, 4), 1), ((3, 2), (3, 1), 1)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("x_shape, ids_shape, axis", CASES, ids=str)
def test_values_and_gradients_match_numpy_and_torch_gather(x_shape, ids_shape, axis, dtype):
    x = data(*x_shape).astype(dtype)
    ids = rng.integers(0, x_shape[axis], size=ids_shape)        # repeats are likely
    for leaf in (fa.Parameter, lambda a, dtype: fa.Input(a, dtype=dtype, requires_grad=True)):
        p = leaf(x, dtype=dtype)
        y = fa.take_along_axis(p, ids, axis)
        assert y.shape == ids_shape and y.dtype == dtype
        np.testing.assert_array_equal(y.value, np.take_along_axis(x, ids, axis))
        weighted_sum(y).backward()
        tx = torch.tensor(x, requires_grad=True)
        ty = torch.gather(tx, axis, torch.tensor(ids))
        np.testing.assert_array_equal(y.value, ty.detach().numpy())
        (ty * torch.tensor(weights_for(ids_shape, dtype))).sum().backward()
        np.testing.assert_allclose(p.grad, tx.grad.numpy(), rtol=1e-6, atol=1e-6)
    if dtype == np.float64:
        assert fa.gradcheck(lambda q: weighted_sum(fa.take_along_axis(q, ids, axis)), x)


def test_axis_none_takes_from_the_flattened_input():
    x = data(3, 4)
    ids = np.array([11, 0, 5, 5])
    p = fa.Parameter(x, dtype=np.float64)
    y = fa.take_along_axis(p, ids, None)
    np.testing.assert_array_equal(y.value, np.take_along_axis(x, ids, None))
    fa.sum(y).backward()
    expected = np.zeros(12)
    np.add.at(expected, ids, 1.0)
    np.testing.assert_array_equal(p.grad, expected.reshape(3, 4))


def test_along_axis_0_of_a_parameter_the_gradient_is_sparse_over_touched_rows():
    table = data(100, 3)
    ids = np.array([[7, 2, 7], [7, 50, 2]])
    E = fa.Parameter(table, dtype=np.float64)
    w = data(2, 3)
    loss = fa.sum(fa.take_along_axis(E, ids, 0) * w)
    loss.backward()
    assert E.is_sparse_grad
    assert sorted(E.sparse_rows()) == [2, 7, 50]
    expected = np.zeros_like(table)
    np.add.at(expected, (ids, np.arange(3)[None, :]), w)
    np.testing.assert_array_equal(E.grad, expected)
    # a dense contribution to the same Parameter adds to the sparse one
    E.zero_grad()
    both = loss + fa.sum(E * 2.0)
    both.backward()
    np.testing.assert_allclose(E.grad, expected + 2.0)
    # along another axis the gradient is dense
    F = fa.Parameter(table, dtype=np.float64)
    fa.sum(fa.take_along_axis(F, np.zeros((100, 1), dtype=np.int64), 1)).backward()
    assert not F.is_sparse_grad


def test_replay_after_set_value_follows_new_ids_and_matches_a_fresh_build():
    x = data(6, 4)
    ix = fa.IndexInput(rng.integers(0, 6, size=(3, 4)))
    E = fa.Parameter(x, dtype=np.float64)
    inp = fa.Input(data(3, 4), dtype=np.float64)
    loss = weighted_sum(fa.take_along_axis(E, ix, 0) * inp)
    loss.backward()
    new_ids, new_inp = rng.integers(0, 6, size=(3, 4)), data(3, 4)
    ix.set_value(new_ids)
    inp.set_value(new_inp)
    loss.forward()
    E.zero_grad()
    loss.backward()
    E2 = fa.Parameter(x, dtype=np.float64)
    fresh = weighted_sum(fa.take_along_axis(E2, new_ids, 0) * fa.Input(new_inp, dtype=np.float64))
    fresh.backward()
    assert loss.item() == fresh.item()
    np.testing.assert_array_equal(E.grad, E2.grad)
    np.testing.assert_array_equal(sorted(E.sparse_rows()), sorted(E2.sparse_rows()))


def test_ids_out_of_bounds_are_refused_before_any_gather():
    x = fa.Parameter(data(4, 3))
    with pytest.raises(IndexError, match=r"take_along_axis: id 3 at position \(1, 2\) of ids is out "
                                         r"of range for axis 1 of x, of length 3 \(shape \(4, 3\)\)"):
        fa.take_along_axis(x, [[0, 1, 2], [0, 0, 3], [0, 0, 0], [1, 1, 1]], 1)
    ix = fa.IndexInput([[0, 1, 2]])
    y = fa.take_along_axis(x, ix, 0)
    ix.set_value([[0, 4, 2]])                 # in range for an IndexInput, not for x's axis 0
    with pytest.raises(IndexError, match=r"id 4 at position \(0, 1\) .* axis 0 of x, of length 4"):
        y.forward()
    with pytest.raises(IndexError, match=r"id 4 at position \(0, 1\)"):
        fa.sum(y).backward()
    with pytest.raises(IndexError, match=">= 0"):
        fa.take_along_axis(x, [[-1, 0, 0]], 0)


def test_bad_shapes_and_types():
    x = fa.Parameter(data(4, 3))
    with pytest.raises(ValueError, match=r"ids has 1 axes \(shape \(3,\)\) but x has 2 "
                                         r"\(shape \(4, 3\)\); they need the same number"):
        fa.take_along_axis(x, [0, 1, 2], 1)
    with pytest.raises(ValueError, match=r"every axis but axis 1 must match \(axis 0: 2 vs 4\)"):
        fa.take_along_axis(x, [[0], [1]], 1)
    with pytest.raises(np.exceptions.AxisError, match="take_along_axis: axis 2 is out of range"):
        fa.take_along_axis(x, [[0, 1, 2]], 2)
    with pytest.raises(TypeError, match="ids must be an IndexInput or integers, got a float Variable"):
        fa.take_along_axis(x, fa.Input(np.zeros((1, 3))), 0)
    with pytest.raises(TypeError, match="ids must be integers"):
        fa.take_along_axis(x, np.zeros((1, 3)), 0)
    with pytest.raises(TypeError, match="x is an IndexInput"):
        fa.take_along_axis(fa.IndexInput([1]), [0], 0)


def test_a_sparse_gradient_of_a_1d_parameter_reads_as_a_dense_gradient():
    bias = fa.Parameter(np.arange(5.0), dtype=np.float64)      # p[ix] and take_along_axis alike
    (fa.sum(bias[fa.IndexInput([1, 3, 1])]) + fa.sum(fa.take_along_axis(bias, [4], 0))).backward()
    assert bias.is_sparse_grad
    np.testing.assert_array_equal(bias.grad, [0.0, 2.0, 0.0, 1.0, 1.0])
