"""Row gathers (`p[ix]`, `fa.take`) and the sparse gradient accumulator."""
import numpy as np
import pytest

import fastad as fa
from vjp import check_vjp


def table(rows=6, dim=3, seed=0):
    return fa.Parameter(np.random.default_rng(seed).normal(size=(rows, dim)), dtype=np.float64)


def test_gather_values_and_shapes():
    E = table()
    ix = fa.IndexInput([4, 0, 4])
    rows = E[ix]
    assert rows.shape == (3, 3)
    np.testing.assert_array_equal(rows.value, E.value[[4, 0, 4]])
    ix2 = fa.IndexInput([[1, 2], [3, 4]])
    assert fa.take(E, ix2).shape == (2, 2, 3)
    v = fa.Parameter(np.arange(5.0), dtype=np.float64)
    np.testing.assert_array_equal(v[fa.IndexInput([3, 1])].value, [3.0, 1.0])


def test_repeated_ids_add_and_only_touched_rows_are_listed():
    E = table()
    rows = E[fa.IndexInput([4, 0, 4, 4])]
    cot = np.arange(12.0).reshape(4, 3)
    rows.backward(cot)
    assert E.is_sparse_grad
    assert sorted(E.sparse_rows()) == [0, 4]
    expected = np.zeros((6, 3))
    np.add.at(expected, [4, 0, 4, 4], cot)
    np.testing.assert_allclose(E.grad, expected)
    assert E.is_sparse_grad                # reading .grad changes nothing
    assert not E.grad.flags.writeable      # a dense copy of a sparse gradient


def test_sparse_gradients_accumulate_across_backward_calls():
    E = table()
    ix = fa.IndexInput([1, 2])
    rows = E[ix]
    rows.backward(np.ones((2, 3)))
    ix.set_value([2, 5])
    rows.forward()
    rows.backward(np.ones((2, 3)))
    assert sorted(E.sparse_rows()) == [1, 2, 5]
    expected = np.zeros((6, 3))
    expected[[1, 5]] = 1
    expected[2] = 2
    np.testing.assert_allclose(E.grad, expected)


def test_dense_and_sparse_contributions_add_in_either_order():
    for dense_first in (True, False):
        E = table()
        sparse_part = E[fa.IndexInput([3, 3, 1])]
        dense_part = E * 2.0
        if dense_first:
            dense_part.backward(np.ones((6, 3)))
            sparse_part.backward(np.ones((3, 3)))
        else:
            sparse_part.backward(np.ones((3, 3)))
            dense_part.backward(np.ones((6, 3)))
        expected = np.full((6, 3), 2.0)
        expected[3] += 2
        expected[1] += 1
        np.testing.assert_allclose(E.grad, expected)


def test_sparse_and_dense_use_in_one_graph_matches_finite_differences():
    ids = np.array([2, 0, 2])
    check_vjp(lambda E:
              fa.tanh(fa.take(E, ids)) * fa.take(E, [1, 1, 2]), np.random.default_rng(1).normal(size=(3, 2)))
    check_vjp(lambda E: fa.take(E, ids) * 3.0 + fa.take(fa.exp(E), ids),
              np.random.default_rng(2).normal(size=(3, 2)))


def test_zero_grad_forgets_sparse_rows():
    E = table()
    E[fa.IndexInput([1])].backward(np.ones((1, 3)))
    E.zero_grad()
    assert E.sparse_rows() is None
    E[fa.IndexInput([2])].backward(np.ones((1, 3)))
    assert list(E.sparse_rows()) == [2]
    np.testing.assert_allclose(E.grad.sum(axis=1), [0, 0, 3, 0, 0, 0])


def test_gather_from_a_computed_table_scatters_densely():
    E = table()
    doubled = E * 2.0
    doubled[fa.IndexInput([0, 0])].backward(np.ones((2, 3)))
    expected = np.zeros((6, 3))
    expected[0] = 4
    np.testing.assert_allclose(E.grad, expected)


def test_out_of_range_ids_raise_at_build_and_at_replay():
    E = table(rows=6)
    with pytest.raises(IndexError, match="id 6 at position 1 .* 6 rows"):
        E[fa.IndexInput([0, 6])]
    ix = fa.IndexInput([0, 1])
    rows = E[ix]
    ix.set_value([5, 9])
    with pytest.raises(IndexError, match="id 9 at position 1"):
        rows.forward()
    with pytest.raises(IndexError, match="id 9"):
        rows.backward(np.ones((2, 3)))
    ix.set_value([5, 2])
    rows.forward()
    np.testing.assert_array_equal(rows.value, E.value[[5, 2]])


def test_take_rejects_bad_arguments():
    E = table()
    with pytest.raises(TypeError, match="integers"):
        fa.take(E, [0.5])
    with pytest.raises(ValueError, match="at least one axis"):
        fa.take(fa.Parameter(1.0), [0])
    with pytest.raises(TypeError, match="float Variable"):
        fa.take(E, fa.Input([1.0]))


def test_sparse_gradient_float32():
    E = fa.Parameter(np.ones((4, 2)), dtype=np.float32)
    E[fa.IndexInput([3, 3])].backward(np.ones((2, 2), dtype=np.float32))
    np.testing.assert_array_equal(E.grad, [[0, 0], [0, 0], [0, 0], [2, 2]])


def test_reading_grad_does_not_change_what_the_optimizer_does():
    def run(read_grad):
        E = fa.Parameter(np.ones((4, 2)), dtype=np.float64)
        ix = fa.IndexInput([1])
        loss = fa.sum(E[ix])
        opt = fa.optim.Adam([E], lr=0.1)
        loss.backward(); opt.step(); opt.zero_grad()
        ix.set_value([2]); loss.forward(); loss.backward()
        if read_grad:
            np.linalg.norm(E.grad)
        opt.step(); opt.zero_grad()
        if read_grad:
            E.grad                         # no gradient now: zeros, and the next step skips E
        opt.step()
        return E.value.copy()
    np.testing.assert_array_equal(run(False), run(True))
