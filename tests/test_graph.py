"""The engine: define-by-run values, replay, gradient accumulation, modes, bad input."""
import os
import pickle

import numpy as np
import pytest

import fastad as fa


def f64(a):
    return fa.Parameter(np.asarray(a, dtype=np.float64), dtype=np.float64)


def test_values_are_computed_as_the_graph_is_built():
    x = fa.Input([[1.0, 2.0]])
    w = fa.Parameter([[0.5, -1.0]])
    y = fa.tanh(x * w + 1)
    np.testing.assert_allclose(y.value, np.tanh(np.array([[1.5, -1.0]])), rtol=1e-6)
    assert y.shape == (1, 2) and y.dtype == fa.float32 and y.device == "cpu"


def test_gradients_add_into_leaves_until_zero_grad():
    w = f64([1.0, 2.0, 3.0])
    loss = fa.mul(w, w)
    g = np.ones(3)
    loss.backward(g)
    loss.backward(g)
    np.testing.assert_allclose(w.grad, 4 * w.value)
    w.zero_grad()
    assert w.grad is None
    loss.backward(g)
    np.testing.assert_allclose(w.grad, 2 * w.value)


def test_grad_reads_none_before_backward_and_intermediates_hold_the_pass_gradient():
    w = f64([1.0, -2.0])
    assert w.grad is None
    h = fa.square(w)
    out = fa.mul(h, 3.0)
    assert h.grad is None
    out.backward(np.ones(2))
    np.testing.assert_allclose(h.grad, [3.0, 3.0])
    np.testing.assert_allclose(w.grad, 6 * w.value)


def test_shared_subexpression_gets_every_contribution():
    x = f64([0.3, -0.7])
    t = fa.tanh(x)
    out = t * t + t + fa.exp(t)
    out.backward(np.ones(2))
    tv = np.tanh(x.value)
    expected = (2 * tv + 1 + np.exp(tv)) * (1 - tv ** 2)
    np.testing.assert_allclose(x.grad, expected, rtol=1e-12)


def test_replay_after_set_value_matches_a_fresh_build():
    rng = np.random.default_rng(0)
    w = f64(rng.normal(size=(3,)))
    x = fa.Input(rng.normal(size=(2, 3)), dtype=np.float64)
    loss = fa.sigmoid(x * w - 0.5) / (fa.softplus(w) + 1)
    for step in range(3):
        new = rng.normal(size=(2, 3))
        x.set_value(new)
        w.zero_grad()
        loss.forward()
        loss.backward(np.ones((2, 3)))
        replay_value, replay_grad = loss.value.copy(), w.grad.copy()

        w2 = f64(w.value)
        fresh = fa.sigmoid(fa.Input(new, dtype=np.float64) * w2 - 0.5) / (fa.softplus(w2) + 1)
        fresh.backward(np.ones((2, 3)))
        np.testing.assert_allclose(replay_value, fresh.value, rtol=1e-12)
        np.testing.assert_allclose(replay_grad, w2.grad, rtol=1e-12)


def test_replay_sees_parameter_updates_made_in_place():
    w = f64([1.0])
    y = fa.square(w)
    w.value[...] = 3.0
    y.forward()
    assert y.item() == pytest.approx(9.0)


def test_a_100000_node_chain_builds_replays_and_backpropagates():
    w = f64([0.5])
    v = w
    for _ in range(100_000):
        v = v * 0.99999 + 0.00001
    v.backward(np.ones(1))
    expected_grad = 0.99999 ** 100_000
    np.testing.assert_allclose(w.grad, [expected_grad], rtol=1e-9)
    w.zero_grad()
    w.value[...] = 1.0
    v.forward()
    v.backward(np.ones(1))
    np.testing.assert_allclose(v.value, [1.0], rtol=1e-9)
    np.testing.assert_allclose(w.grad, [expected_grad], rtol=1e-9)


def test_parameters_lists_each_parameter_once_and_zero_grad_clears_them():
    a, b = f64([1.0]), f64([2.0])
    out = a * b + a
    assert out.parameters() == [a, b]
    out.backward(np.ones(1))
    out.zero_grad()
    assert a.grad is None and b.grad is None


def test_no_grad_builds_values_without_gradient():
    w = f64([1.0, 2.0])
    with fa.no_grad():
        y = w * 2
        assert not fa.is_grad_enabled()
    assert fa.is_grad_enabled()
    np.testing.assert_allclose(y.value, [2.0, 4.0])
    assert not y.requires_grad
    with pytest.raises(RuntimeError, match="does not depend on any Parameter"):
        y.backward(np.ones(2))


def test_no_grad_works_as_a_decorator():
    w = f64([1.0])

    @fa.no_grad()
    def frozen(v):
        return v * 2

    assert not frozen(w).requires_grad
    assert (w * 2).requires_grad


def test_detect_anomaly_names_the_forward_op():
    x = fa.Input([-1.0])
    with fa.detect_anomaly():
        with pytest.raises(FloatingPointError, match="forward of 'log'"):
            fa.log(x)


def test_detect_anomaly_names_the_backward_op_and_replays_are_checked():
    w = f64([1.0])
    y = fa.sqrt(w * 1.0)
    w.value[...] = 0.0
    with fa.detect_anomaly():
        y.forward()
        with pytest.raises(FloatingPointError, match="backward of 'sqrt'"):
            y.backward(np.ones(1))


def test_default_dtype_is_float32_and_can_be_float64():
    assert fa.Parameter(np.zeros(2)).dtype == fa.float32
    fa.set_default_dtype(np.float64)
    try:
        assert fa.Parameter([1, 2]).dtype == fa.float64
        assert fa.get_default_dtype() == fa.float64
    finally:
        fa.set_default_dtype(np.float32)
    with pytest.raises(TypeError, match="float32 or float64"):
        fa.set_default_dtype(np.int32)


def test_mixed_dtypes_raise_and_python_scalars_adopt_the_dtype():
    a = fa.Parameter([1.0], dtype=np.float32)
    b = fa.Parameter([1.0], dtype=np.float64)
    with pytest.raises(TypeError, match="mixed dtypes float32 and float64"):
        a + b
    assert (a * 2.5).dtype == fa.float32
    assert (2.5 * b).dtype == fa.float64
    assert (np.ones(1) * a).dtype == fa.float32


def test_backward_needs_a_grad_for_non_scalar_outputs():
    w = f64([1.0, 2.0])
    y = w * 2
    with pytest.raises(RuntimeError, match=r"shape \(2,\)"):
        y.backward()
    with pytest.raises(ValueError, match=r"grad has shape \(3,\), expected"):
        y.backward(np.ones(3))
    s = f64(3.0) * 2
    s.backward()
    assert s.item() == 6.0


def test_leaf_backward_seeds_its_own_gradient():
    w = f64(2.0)
    w.backward()
    assert w.grad == 1.0


def test_set_value_checks_shape_and_data():
    x = fa.Input(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"got shape \(3, 2\), expected \(2, 3\)"):
        x.set_value(np.zeros((3, 2)))
    with pytest.raises(TypeError, match="real numbers"):
        x.set_value(np.array([["a", "b", "c"]] * 2))
    with pytest.raises(ValueError, match="cannot make an array"):
        x.set_value([[1.0, 2.0, 3.0], [1.0]])
    x.set_value(np.arange(6, dtype=np.int64).reshape(2, 3))
    np.testing.assert_array_equal(x.value, np.arange(6).reshape(2, 3))


def test_set_value_copies_the_bytes_of_an_equivalent_dtype_and_converts_a_swapped_one():
    """An unpickled array (Ray's and spawned processes' arguments) has a dtype object of its
    own, equivalent to numpy's: its bytes are copied as they are. A byte-swapped array is
    not equivalent: its values are converted, not its bytes copied."""
    ids, x = fa.IndexInput([0, 0, 0]), fa.Input(np.zeros(3), dtype=np.float64)
    unpickled = pickle.loads(pickle.dumps(np.array([3, 1, 2], np.int64)))
    assert unpickled.dtype is not np.dtype(np.int64)
    ids.set_value(unpickled)
    x.set_value(pickle.loads(pickle.dumps(np.array([0.5, 1.5, 2.5]))))
    np.testing.assert_array_equal(ids.value, [3, 1, 2])
    np.testing.assert_array_equal(x.value, [0.5, 1.5, 2.5])
    ids.set_value(np.array([4, 5, 6], ">i8"))
    x.set_value(np.array([7.0, 8.0, 9.0], ">f8"))
    np.testing.assert_array_equal(ids.value, [4, 5, 6])
    np.testing.assert_array_equal(x.value, [7.0, 8.0, 9.0])


def test_leaves_reject_bad_data():
    with pytest.raises(TypeError, match="real numbers"):
        fa.Parameter(np.array([1 + 2j]))
    with pytest.raises(TypeError, match="real numbers"):
        fa.Input(["x"])
    with pytest.raises(ValueError, match="cannot make an array"):
        fa.Parameter([[1.0], [1.0, 2.0]])
    with pytest.raises(TypeError, match="float32 or float64"):
        fa.Parameter([1], dtype=np.int32)


def test_non_contiguous_and_strided_arrays_are_copied_correctly():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    x = fa.Input(base.T, dtype=np.float64)
    np.testing.assert_array_equal(x.value, base.T)
    assert x.value.flags.c_contiguous
    y = fa.Input(np.zeros((3, 2)), dtype=np.float64)
    y.set_value(base[1:4, ::3])
    np.testing.assert_array_equal(y.value, base[1:4, ::3])
    p = fa.Parameter(base[:, ::2], dtype=np.float64)
    np.testing.assert_array_equal(p.value, base[:, ::2])


def test_index_input_validates_ids():
    with pytest.raises(TypeError, match="integers"):
        fa.IndexInput([1.0, 2.0])
    with pytest.raises(IndexError, match=">= 0"):
        fa.IndexInput([1, -2])
    ix = fa.IndexInput([1, 2])
    with pytest.raises(ValueError, match=r"got shape \(3,\), expected \(2,\)"):
        ix.set_value([1, 2, 3])
    with pytest.raises(IndexError, match=">= 0"):
        ix.set_value(np.array([0, -1], dtype=np.int64))
    with pytest.raises(TypeError, match="integers"):
        ix.set_value([0.5, 1.0])
    with pytest.raises(TypeError, match="IndexInput"):
        fa.tanh(ix)


def test_ops_reject_non_variables():
    with pytest.raises(TypeError, match="must be a fastad Variable"):
        fa.tanh(np.ones(3))
    with pytest.raises(TypeError, match="pow: operand b must be a Variable, a number or an array"):
        fa.Parameter([1.0]) ** "2"


def test_item_numpy_and_repr():
    w = fa.Parameter([[1.5]], name="w")
    assert w.item() == 1.5
    arr = w.numpy()
    arr[...] = 0
    assert w.item() == 1.5
    assert "name='w'" in repr(w)
    with pytest.raises(ValueError, match="2 elements"):
        fa.Parameter([1.0, 2.0]).item()
    assert w.to("cpu") is w


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read memory use")
def test_a_million_replays_keep_memory_flat():
    w = fa.Parameter(np.random.randn(4))
    x = fa.Input(np.random.randn(4))
    loss = fa.tanh(x * w + 1.0) * 0.5
    seed = np.ones(4, dtype=np.float32)
    for _ in range(1000):
        loss.forward()
        loss.backward(seed)
    before = _rss_bytes()
    for _ in range(1_000_000):
        loss.forward()
        loss.backward(seed)
    assert _rss_bytes() - before < 2 * 2**20


def test_gradcheck_builds_fn_in_float64_and_finite_difference_warns_on_float32():
    assert fa.gradcheck(lambda a: fa.sum(a * fa.Input(np.ones(3))), np.ones(3))
    assert fa.get_default_dtype() == fa.float32
    w = fa.Parameter(np.ones(3), dtype=np.float32)
    with pytest.warns(RuntimeWarning, match="need float64"):
        fa.finite_difference(w, fa.sum(w * w))




def test_root_zero_grad_clears_every_leaf_below_it_and_nothing_else():
    E = fa.Parameter(np.ones((5, 2)), dtype=np.float64)
    W = fa.Parameter(np.arange(4.0).reshape(2, 2), dtype=np.float64)
    x = fa.Input(np.full((1, 2), 2.0), dtype=np.float64, requires_grad=True)
    ix = fa.IndexInput([1, 3])
    loss = ((E[ix] @ W) * x).sum()
    loss.backward()
    first = (E.grad.copy(), W.grad.copy(), x.grad.copy())
    assert E.is_sparse_grad and all(g.any() for g in first)
    elsewhere = fa.Parameter(np.ones(2))
    (elsewhere * 2).sum().backward()
    loss.zero_grad()
    assert not E.is_sparse_grad
    for leaf in (E, W, x):
        assert leaf.grad is None
    np.testing.assert_array_equal(elsewhere.grad, [2, 2])     # not below the root
    loss.backward()                                          # written afresh, not added
    for leaf, g in zip((E, W, x), first):
        np.testing.assert_array_equal(leaf.grad, g)


def test_a_replayed_graph_is_freed_by_reference_counting_alone():
    # A root owns its cached plan; the plan must not hold the root (a cycle would keep
    # the whole graph, and its buffers, alive until the cyclic collector runs).
    import gc
    import sys
    E = fa.Parameter(np.ones((4, 3)))
    baseline = sys.getrefcount(E)
    gc.disable()
    try:
        loss = fa.tanh(E[fa.IndexInput([1, 2])] * 2).sum()
        loss.forward()
        loss.backward()
        loss.zero_grad()
        assert sys.getrefcount(E) > baseline
        del loss
        assert sys.getrefcount(E) == baseline
    finally:
        gc.enable()


def test_an_op_nodes_value_is_one_array_over_its_buffer_made_when_read():
    # An op node's value lives in the value arena; its array is made on the first read and
    # kept: every read is the same array, and a replay's new values show in it.
    x = fa.Input(np.array([[0.5, -1.0, 2.0]]), dtype=np.float64)
    y = fa.tanh(x * 2.0)
    value = y.value
    assert value is y.value and value.flags.c_contiguous and value.flags.writeable
    assert value.dtype == np.float64 and value.shape == (1, 3)
    x.set_value(np.array([[1.0, 0.0, -0.25]]))
    y.forward()
    np.testing.assert_array_equal(value, np.tanh(np.array([[2.0, 0.0, -0.5]])))
    assert fa.sum(y).item() == pytest.approx(np.tanh(2.0) + np.tanh(-0.5))


def test_a_value_read_outlives_its_graph_and_the_nodes_built_after_it():
    # The array holds the memory it shows (not the node): the graph can go, and the nodes
    # built next take other memory.
    x = fa.Input(np.arange(6.0).reshape(2, 3))
    kept = [(fa.tanh(x * (k / 100)) + float(k)).value for k in range(3000)]
    more = [fa.tanh(x) * 3.0 for _ in range(3000)]
    for k in (0, 1, 1500, 2999):
        np.testing.assert_allclose(kept[k], np.tanh(np.arange(6.0).reshape(2, 3) * (k / 100)) + k,
                                   rtol=1e-6)
    assert len(more) == 3000
    big = fa.tanh(fa.Input(np.ones((300, 40))))          # a value of its own block
    np.testing.assert_allclose(big.value, np.tanh(1.0), rtol=1e-6)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc to read memory use")
def test_eager_graphs_built_and_dropped_keep_memory_flat():
    w = fa.Parameter(np.random.randn(64, 64) * 0.1)
    x = fa.Input(np.random.randn(1, 64))

    def build_and_drop():
        h = x
        for _ in range(20):
            h = fa.tanh(h @ w + x)
        h.sum().backward()
        w.zero_grad()

    for _ in range(500):
        build_and_drop()
    before = _rss_bytes()
    for _ in range(5000):                    # 200,000 nodes, 26 MB of values
        build_and_drop()
    assert _rss_bytes() - before < 2 * 2**20


def test_graph_nodes_stay_out_of_the_cyclic_collector():
    # Nodes form no reference cycles, so the collector need not scan them: an eager
    # build of a long graph then triggers no full collections of its own.
    import gc
    E = fa.Parameter(np.ones((4, 3)))
    x = fa.Input(np.ones((2, 3)))
    ix = fa.IndexInput([0, 1])
    nodes = [E, x, ix, E[ix], fa.tanh(x), x * 2.0, x @ np.ones((3, 2)), fa.vector_dot(x, x),
             fa.sum(x), fa.softmax(x, axis=1), fa.reshape(x, (3, 2)), fa.concat([x, x], axis=0),
             fa.nn.mse(x, np.zeros((2, 3))), fa.nn.cross_entropy(x, [0, 2])]
    assert [type(n).__name__ for n in nodes if gc.is_tracked(n)] == []


def test_the_helpers_for_ops_written_in_python_refuse_host_variables():
    """function_node and the gradient slots serve Variables held in a device storage;
    a CPU Variable gets a TypeError naming the helper, not an AttributeError."""
    from fastad._engine.graph import function_node, grad_slot, grad_state, sparse_grad_slot
    w = fa.Parameter(np.ones(2))
    with pytest.raises(TypeError, match="'op' needs a device storage"):
        function_node("op", (w,), (2,), np.float32, object(), None)
    for helper, args in ((grad_slot, (w,)), (sparse_grad_slot, (w, None)), (grad_state, (w,))):
        with pytest.raises(TypeError, match=f"{helper.__name__}: 'parameter' is on the CPU"):
            helper(*args)


@pytest.mark.parametrize("shape,dtype", [((20_000, 32), np.float32), ((300, 7), np.float64),
                                         ((4096,), np.float32), ((16, 16, 3), np.float64)])
def test_large_leaves_start_on_a_cache_line_and_hold_their_data(shape, dtype):
    # rows of a 64-byte multiple then never straddle lines, and two threads' rows never share one
    data = np.random.default_rng(0).normal(size=shape)
    ints = (data * 100).astype(np.int64)
    for leaf, source in [(fa.Parameter(data, dtype=dtype), data), (fa.Input(data, dtype=dtype), data),
                         (fa.Parameter(ints, dtype=dtype), ints)]:
        value = leaf.value
        assert value.ctypes.data % 64 == 0
        assert value.shape == shape and value.dtype == dtype
        assert value.flags.c_contiguous and value.flags.writeable
        np.testing.assert_array_equal(value, source.astype(dtype))
    p = fa.Parameter(data, dtype=dtype)
    address = p.value.ctypes.data
    p.set_value(np.zeros(shape))
    assert p.value.ctypes.data == address and not p.value.any()
