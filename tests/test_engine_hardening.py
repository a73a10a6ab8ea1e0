"""Regression tests for engine edge cases found in review."""
import pickle
import re

import numpy as np
import pytest

import fastad as fa
from fastad.ops.fastmath import approximate


@pytest.mark.parametrize("dtype,top,bottom", [(np.float64, 709.78, -708.39), (np.float32, 88.72, -87.33)])
def test_fast_exp_is_accurate_up_to_the_overflow_threshold(dtype, top, bottom):
    x = np.array([top, bottom], dtype=dtype)
    got = approximate("exp", x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, ref, rtol=1e-6)


def test_anomaly_in_a_sparse_gradient_is_caught():
    """Repeated ids add two finite float32 rows into an infinite slab row."""
    E = fa.Parameter(np.zeros((4, 2)), dtype=np.float32)
    big = fa.Input(np.full((2, 2), 3e38), dtype=np.float32)
    z = fa.sum(E[fa.IndexInput([2, 2])] * big)
    with fa.detect_anomaly():
        with pytest.raises(FloatingPointError, match="backward of 'take'"):
            z.backward()


def test_variables_cannot_be_made_directly_pickled_or_reinitialised():
    with pytest.raises(TypeError, match="cannot be made directly"):
        fa.Variable()
    p = fa.Parameter(np.ones(2))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(p)
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(p * 2.0)
    with pytest.raises(RuntimeError, match="already initialised"):
        p.__init__(np.ones(5))
    with pytest.raises(RuntimeError, match="already initialised"):
        fa.IndexInput([1]).__init__([1, 2])


class FakeShared:
    def __init__(self, arr):
        self.arr = arr

    def trainable_array(self):
        return self.arr


def test_shared_arrays_must_be_writeable_numpy_arrays():
    ro = np.zeros((2, 2), dtype=np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        fa.Parameter(FakeShared(ro))
    with pytest.raises(TypeError, match="not a numpy array"):
        fa.Parameter(FakeShared([1.0, 2.0]))
    arr = np.zeros((2, 2), dtype=np.float32)
    p = fa.Parameter(FakeShared(arr))
    p.value[0, 0] = 5
    assert arr[0, 0] == 5                    # zero copy


def test_huge_unsigned_ids_are_rejected():
    with pytest.raises(IndexError, match="2\\*\\*63"):
        fa.IndexInput(np.array([2**63 + 5], dtype=np.uint64))


@pytest.mark.parametrize("ids", [[3, 0, 7], np.array([3, 0, 7], dtype=np.int32),
                                 np.array([3, 0, 7], dtype=np.uint8), np.array([3, 9, 0, 9, 7])[::2]])
def test_index_inputs_copy_any_integer_ids_into_int64(ids):
    source = np.array(ids)
    ix = fa.IndexInput(ids)
    assert ix.value.dtype == np.int64 and ix.value.flags.c_contiguous
    np.testing.assert_array_equal(ix.value, [3, 0, 7])
    source[...] = 1                          # a copy: the leaf does not see its source change
    np.testing.assert_array_equal(ix.value, [3, 0, 7])
    assert fa.IndexInput(np.zeros((0, 2))).shape == (0, 2)     # no ids: an empty float array will do


@pytest.mark.parametrize("ids, error, message", [
    ([2, -1], IndexError, "IndexInput: ids must be >= 0, got -1"),
    (np.array([[4, -3], [1, 0]], dtype=np.int16), IndexError, "IndexInput: ids must be >= 0, got -3"),
    (np.array([1.0]), TypeError, "IndexInput: ids must be integers, got dtype float64"),
    (np.array([True]), TypeError, "IndexInput: ids must be integers, got dtype bool"),
    ([[1], [2, 3]], ValueError, "IndexInput: cannot make an array of ids from this data"),
])
def test_index_inputs_refuse_what_are_no_row_ids(ids, error, message):
    with pytest.raises(error, match=re.escape(message)):
        fa.IndexInput(ids)


def test_a_gather_of_no_rows_leaves_an_empty_sparse_gradient():
    E = fa.Parameter(np.ones((4, 2)), dtype=np.float64)
    rows = E[fa.IndexInput(np.zeros(0, dtype=np.int64))]
    rows.backward(np.zeros((0, 2)))
    ids, values = E.sparse_grad()
    assert ids.shape == (0,) and values.shape == (0, 2)
    opt = fa.optim.Adam([E], lr=0.1)
    opt.step()
    np.testing.assert_array_equal(E.value, 1.0)
    np.testing.assert_array_equal(E.grad, 0.0)


def test_optimizer_state_rejects_non_integer_or_huge_step_counts():
    p = fa.Parameter(np.ones(2))
    opt = fa.optim.Adam([p], lr=0.1)
    state = opt.state_dict()
    for bad in (float("inf"), float("nan"), 2.0 ** 64, -1, 1.5):
        state["state.0.step"] = bad
        with pytest.raises(ValueError, match="integer"):
            opt.load_state_dict(state)
