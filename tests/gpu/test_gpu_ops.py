"""Every op on the device against the CPU path: values, gradients, replay."""
import numpy as np
import pytest

import fastad as fa
from device_check import check_against_cpu, host, tolerance

rng = np.random.default_rng(7)
DTYPES = [np.float64, np.float32]


def r(*shape, positive=False):
    a = rng.standard_normal(shape)
    return np.abs(a) + 0.5 if positive else a


UNARY = {
    "neg": (fa.neg, False), "exp": (fa.exp, False), "log": (fa.log, True),
    "tanh": (fa.tanh, False), "sigmoid": (fa.sigmoid, False), "relu": (fa.relu, False),
    "leaky_relu": (fa.leaky_relu, False), "leaky_relu 0.3": (lambda x: fa.leaky_relu(x, 0.3), False),
    "softplus": (fa.softplus, False), "logsigmoid": (fa.logsigmoid, False),
    "sqrt": (fa.sqrt, True), "square": (fa.square, False), "abs": (fa.abs, False),
    "pow 2.5": (lambda x: x ** 2.5, True), "pow 0": (lambda x: x ** 0, False),
    "pow 1": (lambda x: x ** 1, False), "pow -1": (lambda x: x ** -1, True),
    "x + 2": (lambda x: x + 2, False), "2 - x": (lambda x: 2 - x, False),
    "3 * x": (lambda x: 3 * x, False), "x / 4": (lambda x: x / 4, False),
    "2 / x": (lambda x: 2 / x, True), "x - 1": (lambda x: x - 1, False),
    "gelu": (fa.gelu, False), "gelu tanh": (lambda x: fa.gelu(x, "tanh"), False),
    "elu": (fa.elu, False), "elu 0.4": (lambda x: fa.elu(x, 0.4), False), "silu": (fa.silu, False),
    "hardtanh": (fa.hardtanh, False), "hardtanh 0 6": (lambda x: fa.hardtanh(x * 4, 0, 6), False),
    "softsign": (fa.softsign, False), "floor": (lambda x: fa.floor(x * 3), False),
    "detach": (lambda x: fa.detach(x) * x, False),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary(backend, name, dtype):
    fn, positive = UNARY[name]
    check_against_cpu(fn, r(3, 5, positive=positive), dtype=dtype)


BROADCASTS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((1, 5), (5,)),
              ((2, 1, 3), (4, 1)), ((0, 3), (3,)), ((1,), ())]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", [fa.add, fa.sub, fa.mul, fa.div])
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
def test_binary_broadcasting(backend, op, shapes, dtype):
    a, b = r(*shapes[0]), r(*shapes[1], positive=True)
    check_against_cpu(op, a, b, dtype=dtype)
    check_against_cpu(lambda u, v: op(v, u), a, b, dtype=dtype)


@pytest.mark.parametrize("op", [fa.add, fa.sub, fa.mul, fa.div])
def test_a_long_broadcast_sum_in_the_gradient(backend, op):
    check_against_cpu(op, r(700, 3), r(3))          # each column's gradient: 700 rows, chunked
    check_against_cpu(op, r(1, 3), r(600, 2, 3))


def test_binary_with_a_host_array(backend):
    b = r(4)
    check_against_cpu(lambda u: u * b + b, r(3, 4))


REDUCTIONS = [(None, False), (0, False), (1, True), ((0, 2), False), (-1, False), ((), False)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis,keepdims", REDUCTIONS, ids=str)
@pytest.mark.parametrize("op", [fa.sum, fa.mean, fa.max, fa.logsumexp], ids=lambda f: f.__name__)
def test_reductions(backend, op, axis, keepdims, dtype):
    check_against_cpu(lambda x: op(x, axis=axis, keepdims=keepdims), r(3, 4, 5), dtype=dtype)


@pytest.mark.parametrize("op", [fa.sum, fa.mean])
def test_long_sums_split_across_threads(backend, op):
    check_against_cpu(lambda x: op(x), r(3000))
    check_against_cpu(lambda x: op(x, axis=0), r(700, 3))


def test_max_shares_the_gradient_among_ties(backend):
    check_against_cpu(lambda x: fa.max(x, axis=1), np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]),
                      replay=False)


def test_reductions_over_many_axes(backend):
    x = r(*(2,) * 10)
    check_against_cpu(lambda v: fa.sum(v, axis=(0, 1, 2)), x, replay=False)
    check_against_cpu(lambda v: fa.max(v, axis=(7, 8, 9)), x, replay=False)
    check_against_cpu(lambda v: fa.logsumexp(v, axis=(3, 4)), x, replay=False)
    with pytest.raises(ValueError, match="at most 8 runs"):
        fa.sum(fa.Parameter(x, device="cuda"), axis=(0, 2, 4, 6, 8))


def test_reductions_of_edge_shapes(backend):
    check_against_cpu(lambda x: fa.sum(x), r())
    check_against_cpu(lambda x: fa.sum(x, axis=0), r(0, 3))
    check_against_cpu(lambda x: fa.mean(x, axis=1), r(1, 6))


SHAPE_OPS = {
    "reshape": (lambda x: fa.reshape(x, (4, -1)) * 2.0, (2, 3, 2)),
    "transpose": (lambda x: fa.transpose(x, (2, 0, 1)) * 2.0, (2, 3, 4)),
    ".T": (lambda x: x.T * 2.0, (3, 4)),
    "slice": (lambda x: x[1:, ::-2] * 2.0, (3, 5)),
    "int": (lambda x: x[1] * 2.0, (3, 5)),
    "int array, repeats": (lambda x: x[[0, 2, 0, 0]] * 2.0, (3, 5)),
    "mask": (lambda x: x[np.array([True, False, True])] * 2.0, (3, 5)),
    "newaxis, ellipsis": (lambda x: x[None, ..., 1] * 2.0, (3, 5)),
    "ints only": (lambda x: x[1, 2] * 2.0, (3, 5)),
    "int of a vector": (lambda x: fa.stack([x[0], x[-1]]) * 2.0, (4,)),
    "empty tuple of a 0-d": (lambda x: x[()] * 2.0, ()),
    "0-d transpose": (lambda x: x.T * 2.0, ()),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(SHAPE_OPS))
def test_shape_ops(backend, name, dtype):
    fn, shape = SHAPE_OPS[name]
    check_against_cpu(fn, r(*shape), dtype=dtype)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_and_stack(backend, axis):
    check_against_cpu(lambda a, b: fa.concat([a, b, a], axis=axis), r(2, 3), r(2, 3))
    check_against_cpu(lambda a, b: fa.stack([a, b], axis=axis), r(2, 3), r(2, 3))


MATMULS = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (2, 4, 5)),
           ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((3, 0), (0, 2)), ((1, 1), (1, 1))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", MATMULS, ids=str)
def test_matmul(backend, shapes, dtype):
    check_against_cpu(lambda a, b: a @ b, r(*shapes[0]), r(*shapes[1]), dtype=dtype)


def test_matmul_accumulates_into_a_shared_leaf(backend):
    check_against_cpu(lambda a, b: (a @ b) @ b.T + a, r(3, 3), r(3, 3))
    check_against_cpu(lambda a: a @ a, r(3, 3))
    check_against_cpu(lambda a: fa.matmul(a, a), r(2, 3, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear(backend, dtype):
    """fa.linear on a device: the matmul of x with the weight's transpose, plus the bias."""
    check_against_cpu(fa.linear, r(3, 4), r(5, 4), r(5), dtype=dtype)
    check_against_cpu(fa.linear, r(2, 3, 4), r(5, 4), dtype=dtype)


def test_vector_dot(backend):
    check_against_cpu(fa.vector_dot, r(5, 3), r(5, 3))
    check_against_cpu(fa.vector_dot, r(3), r(3))
    check_against_cpu(fa.vector_dot, r(1, 3), r(4, 3))        # broadcast: the backend base's composition
    check_against_cpu(fa.vector_dot, r(2, 1, 3), r(4, 3))


@pytest.mark.parametrize("dtype", DTYPES)
def test_take_with_repeated_ids_has_a_sparse_gradient(backend, dtype):
    table = r(10, 4)
    ids = [3, 7, 3, 3, 0]
    cpu = fa.Parameter(table, dtype=dtype)
    dev = fa.Parameter(table, dtype=dtype, device="cuda")
    ix_cpu, ix_dev = fa.IndexInput(ids), fa.IndexInput(ids, device="cuda")
    weights = r(5, 4)
    loss_cpu = (cpu[ix_cpu] * weights).sum()
    loss_dev = (dev[ix_dev] * weights).sum()
    tol = tolerance(dtype)
    for new_ids in (None, [1, 1, 9, 2, 3]):
        if new_ids is not None:
            ix_cpu.set_value(new_ids)
            ix_dev.set_value(new_ids)
            loss_cpu.forward()
            loss_dev.forward()
            cpu.zero_grad()
            dev.zero_grad()
        np.testing.assert_allclose(host(loss_dev), loss_cpu.value, **tol)
        loss_cpu.backward()
        loss_dev.backward()
        assert dev.is_sparse_grad
        np.testing.assert_array_equal(dev.sparse_rows(), cpu.sparse_rows())
        rows, values = dev.sparse_grad()
        np.testing.assert_allclose(values, cpu.sparse_grad()[1], **tol)
        np.testing.assert_allclose(host(dev.grad), cpu.grad, **tol)


def test_take_mixed_with_a_dense_gradient(backend):
    ids = [2, 2, 0]
    check_against_cpu(lambda t: (fa.take(t, fa.IndexInput(ids, device=t.device)) ** 2).sum() + t.sum(),
                      r(4, 3))


def test_take_checks_ids_at_build_and_at_set_value(backend):
    table = fa.Parameter(r(4, 2), device="cuda")
    with pytest.raises(IndexError, match="id 4 at position 1 of the IndexInput is out of range"):
        fa.take(table, fa.IndexInput([1, 4], device="cuda"))
    ix = fa.IndexInput([1, 2], device="cuda")
    rows = table[ix]
    with pytest.raises(IndexError, match="id 4 at position 1 .*< 4"):
        ix.set_value([0, 4])
    with pytest.raises(IndexError, match=">= 0"):
        ix.set_value([-1, 0])
    np.testing.assert_array_equal(ix.numpy(), [1, 2])       # unchanged after refusals
    rows.forward()


def test_integer_ids_reshape_on_the_host_only(backend):
    """Reshaped ids on a device are refused, naming where they are (they reshape on the CPU)."""
    ids = fa.IndexInput([1, 4, 0, 2], device="cuda")
    with pytest.raises(ValueError, match="reshape: x holds integer ids on cuda:0; integer ids "
                                         "reshape on the CPU only"):
        ids.reshape(2, 2)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("sparse", [True, False])
def test_embedding_bag_matches_the_cpu(backend, dtype, mode, sparse):
    table = r(8, 3)
    ids, offsets = [4, 1, 4, 4, 0, 2, 5, 1], [0, 0, 3, 3, 6]     # repeats, empty bags
    cpu = fa.Parameter(table, dtype=dtype)
    dev = fa.Parameter(table, dtype=dtype, device="cuda")
    ix_cpu, ix_dev = fa.IndexInput(ids), fa.IndexInput(ids, device="cuda")
    off_cpu, off_dev = fa.IndexInput(offsets), fa.IndexInput(offsets)   # offsets stay on the host
    y_cpu = fa.embedding_bag(cpu, ix_cpu, off_cpu, mode=mode, sparse=sparse)
    y_dev = fa.embedding_bag(dev, ix_dev, off_dev, mode=mode, sparse=sparse)
    tol = tolerance(dtype)
    for new in (None, ([7, 7, 0, 1, 2, 3, 3, 6], [0, 1, 1, 5, 8])):
        if new is not None:
            for ix, off in ((ix_cpu, off_cpu), (ix_dev, off_dev)):
                ix.set_value(new[0])
                off.set_value(new[1])
            y_cpu.forward(); y_dev.forward()
            cpu.zero_grad(); dev.zero_grad()
        np.testing.assert_allclose(host(y_dev), y_cpu.value, **tol)
        seed = r(*y_cpu.shape)
        y_cpu.backward(seed)
        y_dev.backward(seed)
        assert dev.is_sparse_grad == sparse
        np.testing.assert_allclose(host(dev.grad), cpu.grad, **tol)
        if sparse:
            np.testing.assert_array_equal(np.sort(dev.sparse_rows()), np.sort(cpu.sparse_rows()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("include_last_offset", [False, True])
def test_weighted_embedding_bag_matches_the_cpu(backend, dtype, include_last_offset):
    table, weights, cotangent = r(8, 3), r(8), r(5 - include_last_offset, 3)
    ids, offsets = [4, 1, 4, 4, 0, 2, 5, 1], [0, 0, 3, 3, 6]     # with the last offset: ids 6, 7 in no bag
    grads = {}
    for device in ("cpu", "cuda"):
        E = fa.Parameter(table, dtype=dtype, device=None if device == "cpu" else device)
        w = fa.Parameter(weights, dtype=dtype, device=None if device == "cpu" else device)
        ix = fa.IndexInput(ids, device=None if device == "cpu" else device)
        y = fa.embedding_bag(E, ix, offsets, mode="sum", include_last_offset=include_last_offset,
                             per_sample_weights=w)
        y.backward(cotangent)
        grads[device] = (host(y), host(E.grad), host(w.grad))
    for cpu, dev in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(dev, cpu, **tolerance(dtype))
    check_against_cpu(lambda t: fa.embedding_bag(t, fa.IndexInput(ids, device=t.device), offsets,
                                                 mode="mean"), r(8))       # a 1-D table
    with pytest.raises(ValueError, match="per_sample_weights is on cpu, weight on cuda"):
        fa.embedding_bag(fa.Parameter(table, device="cuda"), fa.IndexInput(ids, device="cuda"),
                         offsets, mode="sum", per_sample_weights=fa.Input(weights.astype(np.float32)))


def test_embedding_bag_fixed_bags_include_last_offset_and_checks(backend):
    check_against_cpu(lambda t: fa.embedding_bag(t, fa.IndexInput([[0, 3, 3], [1, 2, 0]],
                                                                  device=t.device), mode="mean"),
                      r(4, 2))
    check_against_cpu(lambda t: fa.embedding_bag(t, fa.IndexInput([0, 3, 3, 1, 2],
                                                                  device=t.device),
                                                 [0, 2, 4], include_last_offset=True, mode="sum"),
                      r(4, 2))
    table = fa.Parameter(r(4, 2), device="cuda")
    with pytest.raises(IndexError, match="embedding_bag: id 4 at position 1"):
        fa.embedding_bag(table, fa.IndexInput([1, 4], device="cuda"), [0])
    with pytest.raises(ValueError, match="offsets stay on the host"):
        fa.embedding_bag(table, fa.IndexInput([1, 2], device="cuda"), fa.IndexInput([0], device="cuda"))
    ix, off = fa.IndexInput([1, 2, 3], device="cuda"), fa.IndexInput([0, 1])
    y = fa.embedding_bag(table, ix, off)
    off.set_value([0, 4])
    with pytest.raises(ValueError, match=r"offsets\[1\] = 4 is past the end of the 3 ids"):
        y.forward()
    off.set_value([0, 2])
    with pytest.raises(IndexError, match="id 4 at position 0"):
        ix.set_value([4, 0, 0])
    y.forward()


def test_lstm_and_gru_cells(backend):
    B, I, H = 2, 3, 4
    x, h, c = r(B, I), r(B, H), r(B, H)
    w_ih, w_hh, b, b2 = r(4 * H, I), r(4 * H, H), r(4 * H), r(4 * H)
    from fastad.ops.fused import lstm_cell, gru_cell
    check_against_cpu(lambda *v: lstm_cell(*v), x, h, c, w_ih, w_hh, b, b2)
    check_against_cpu(lambda x, wi, wh, b, b2: lstm_cell(x, None, None, wi, wh, b, b2),
                      x, w_ih, w_hh, b, b2)
    g_ih, g_hh, b_ih, b_hh = r(3 * H, I), r(3 * H, H), r(3 * H), r(3 * H)
    check_against_cpu(lambda *v: gru_cell(*v), x, h, g_ih, g_hh, b_ih, b_hh)
    check_against_cpu(lambda x, wi, wh, bi, bh: gru_cell(x, None, wi, wh, bi, bh),
                      x, g_ih, g_hh, b_ih, b_hh)


@pytest.mark.parametrize("reverse", [False, True])
def test_lstm_sequence_steps_the_device_cell(backend, reverse):
    T, B, I, H = 3, 2, 3, 4
    x, h, c = r(T, B, I), r(B, H), r(B, H)
    weights = r(4 * H, I), r(4 * H, H), r(4 * H), r(4 * H)
    from fastad.ops.fused import lstm_sequence
    check_against_cpu(lambda *v: lstm_sequence(*v, reverse=reverse), x, h, c, *weights)
    check_against_cpu(lambda x, *w: lstm_sequence(x, None, None, *w, reverse=reverse), x, *weights)
    check_against_cpu(lambda x, *w: lstm_sequence(x[:1], None, None, *w, reverse=reverse), x, *weights)
    check_against_cpu(lambda *v: fa.stack(list(lstm_sequence(*v, reverse=reverse,
                                                             return_state=True)[1]), 0),
                      x, h, c, *weights)


def test_a_small_network_matches_the_cpu(backend):
    def net(x, w1, b1, w2):
        return fa.logsumexp(fa.tanh(x @ w1 + b1) @ w2, axis=1).mean()
    check_against_cpu(net, r(8, 5), r(5, 6), r(6), r(6, 3))


def test_a_recurrent_cell_with_its_state_on_another_device_names_the_cell(backend):
    from fastad.ops.fused import lstm_cell
    x = fa.Parameter(r(2, 3), device="cuda")
    with pytest.raises(ValueError, match="lstm_cell: inputs on different devices, cpu and cuda:0"):
        lstm_cell(x, fa.Parameter(r(2, 4)), fa.Parameter(r(2, 4)),
                  fa.Parameter(r(16, 3), device="cuda"), fa.Parameter(r(16, 4), device="cuda"),
                  fa.Parameter(r(16), device="cuda"), fa.Parameter(r(16), device="cuda"))
