"""The reductions, shape helpers, take_along_axis and einsum of issue 16 on the device
(the kernel emulator without a GPU) against the CPU path: values, gradients, replay."""
import numpy as np
import pytest

import fastad as fa
from device_check import check_against_cpu, host, tolerance

rng = np.random.default_rng(16)
DTYPES = [np.float64, np.float32]


def r(*shape):
    return rng.standard_normal(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (-1, True), ((0, 2), False)],
                         ids=str)
@pytest.mark.parametrize("name", ["min", "norm", "norm1", "var", "std"])
def test_reductions(backend, name, axis, keepdims, dtype):
    fn = {"min": lambda x: fa.min(x, axis, keepdims), "norm": lambda x: fa.norm(x, 2, axis, keepdims),
          "norm1": lambda x: fa.norm(x, 1, axis, keepdims),
          "var": lambda x: fa.var(x, axis, 1, keepdims), "std": lambda x: fa.std(x, axis, 0, keepdims)}
    check_against_cpu(fn[name], r(3, 4, 5), dtype=dtype)


def test_min_ties_and_norm_at_zero(backend):
    check_against_cpu(lambda x: fa.min(x, axis=1), np.array([[1.0, 0.0, 0.0], [2.0, 2.0, 2.0]]),
                      replay=False)
    y = check_against_cpu(lambda x: fa.norm(x, axis=1), np.zeros((2, 3)), replay=False)
    assert np.all(host(y) == 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_cumsum(backend, axis, dtype):
    check_against_cpu(lambda x: fa.cumsum(x, axis), r(3, 4, 2), dtype=dtype)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_argmax_argmin_feed_a_gather_and_follow_replays(backend, name):
    op = getattr(fa, name)
    scores = r(4, 6)
    for device in (None, "cuda"):
        s = fa.Parameter(scores, dtype=np.float64, device=device)
        ids = op(s, axis=1)
        assert ids.device == ("cuda:0" if device else "cpu") and ids.shape == (4,)
        np.testing.assert_array_equal(ids.numpy(), getattr(np, name)(scores, axis=1))
        table = fa.Parameter(r(6, 3), dtype=np.float64, device=device)
        rows = table[ids]
        s.set_value(-scores)
        rows.forward()
        np.testing.assert_array_equal(ids.numpy(), getattr(np, name)(-scores, axis=1))
        np.testing.assert_array_equal(host(rows), table.numpy()[getattr(np, name)(-scores, axis=1)])
    np.testing.assert_array_equal(op(fa.Parameter(scores, device="cuda")).numpy(),
                                  getattr(np, name)(scores))


def test_device_argmax_ids_too_large_for_the_table_are_refused(backend):
    ids = fa.argmax(fa.Parameter(r(2, 6), device="cuda"), axis=1)
    with pytest.raises(IndexError, match="ids from 'argmax' range up to 5, but must be < 4"):
        fa.Parameter(r(4, 2), device="cuda")[ids]


SHAPE_HELPERS = {
    "expand_dims": (lambda x: fa.expand_dims(x, (0, -1)) * 2.0, (2, 3)),
    "squeeze": (lambda x: fa.squeeze(x) * 2.0, (1, 3, 1)),
    "split": (lambda x: fa.concat(fa.split(x, [1, 3], axis=1)[::-1], axis=1) * 2.0, (2, 5)),
    "flip": (lambda x: fa.flip(x, (0, -1)) * 2.0, (3, 4)),
    "tile": (lambda x: fa.tile(x, (2, 1, 3)) * 2.0, (2, 3)),
    "einsum": (lambda x: fa.einsum("bij,bkj->bki", x, x) * 2.0, (2, 3, 4)),
    "einsum trace": (lambda x: fa.einsum("ii", x) * 2.0, (3, 3)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SHAPE_HELPERS))
def test_composed_ops(backend, name, dtype):
    fn, shape = SHAPE_HELPERS[name]
    check_against_cpu(fn, r(*shape), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_take_along_axis_dense(backend, axis, dtype):
    x_shape = (3, 4, 5)
    ids_shape = list(x_shape)
    ids_shape[axis] = 6                      # repeats: the scatter-add must add them
    ids = rng.integers(0, x_shape[axis], size=ids_shape)
    check_against_cpu(lambda x: fa.take_along_axis(x * 1.0, fa.IndexInput(ids, device=x.device),
                                                   axis), r(*x_shape), dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_along_axis_of_a_parameter_along_axis_0_is_sparse(backend, dtype):
    table = r(10, 4)
    ids = np.array([[3, 7, 3, 0], [3, 3, 9, 0]])
    cpu = fa.Parameter(table, dtype=dtype)
    dev = fa.Parameter(table, dtype=dtype, device="cuda")
    ix_cpu, ix_dev = fa.IndexInput(ids), fa.IndexInput(ids, device="cuda")
    w = r(2, 4)
    loss_cpu = (fa.take_along_axis(cpu, ix_cpu, 0) * w).sum()
    loss_dev = (fa.take_along_axis(dev, ix_dev, 0) * w).sum()
    tol = tolerance(dtype)
    for new_ids in (None, [[1, 1, 2, 2], [5, 5, 5, 5]]):
        if new_ids is not None:
            for ix, loss, p in ((ix_cpu, loss_cpu, cpu), (ix_dev, loss_dev, dev)):
                ix.set_value(new_ids)
                loss.forward()
                p.zero_grad()
        np.testing.assert_allclose(host(loss_dev), loss_cpu.value, **tol)
        loss_cpu.backward()
        loss_dev.backward()
        assert dev.is_sparse_grad and cpu.is_sparse_grad
        np.testing.assert_array_equal(dev.sparse_rows(), cpu.sparse_rows())
        np.testing.assert_allclose(host(dev.grad), cpu.grad, **tol)
    with pytest.raises(IndexError, match="< 10"):
        ix_dev.set_value([[1, 1, 2, 10], [5, 5, 5, 5]])


def test_argmax_with_keepdims_feeds_take_along_axis_on_the_device(backend):
    check_against_cpu(lambda x: fa.take_along_axis(x, fa.argmax(x, axis=1, keepdims=True), 1),
                      r(4, 6))
    check_against_cpu(lambda x: fa.take_along_axis(x, fa.argmin(x, axis=0, keepdims=True), 0),
                      r(4, 6))
