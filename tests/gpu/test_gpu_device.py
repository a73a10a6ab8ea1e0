"""Device leaves, transfers, errors, anomaly detection and CUDA-graph capture."""
import numpy as np
import pytest

import fastad as fa
from device_check import host


def test_leaves_live_on_the_device(backend):
    w = fa.Parameter(np.arange(6.0).reshape(2, 3), device="cuda", name="w")
    assert w.device == "cuda:0" and w.shape == (2, 3) and w.dtype == np.float32
    assert isinstance(w.value, backend.xp.ndarray)
    assert isinstance(w.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(w), np.arange(6.0).reshape(2, 3))
    assert "cuda:0" in repr(w) and "'w'" in repr(w)
    assert fa.Input([1.0], device="cuda:0").device == "cuda:0"
    assert fa.IndexInput([1, 2], device="cuda").numpy().tolist() == [1, 2]
    assert fa.Parameter([2.5], device="cuda").item() == 2.5


def test_a_device_variable_holds_its_value_and_gradient_in_its_storage(backend):
    """The engine keeps nothing of a device Variable but its storage: value, gradient,
    the touched rows of a sparse gradient and the ids' bound all live there."""
    from fastad.cuda.storage import DeviceStorage
    assert fa.Parameter(np.ones(2)).storage is None
    table = fa.Parameter(np.ones((5, 2)), device="cuda")
    ix = fa.IndexInput([3, 1, 3], device="cuda")
    loss = (table[ix] * 2.0).sum()
    assert isinstance(table.storage, DeviceStorage) and table.storage.device == "cuda:0"
    assert table.storage.value is table.value and loss.storage.value is loss.value
    assert ix.storage.id_bound == 5            # checked against the table it indexes
    loss.backward()
    assert table.is_sparse_grad and table.storage.n_touched == 3
    assert table.sparse_rows().tolist() == [3, 1]
    np.testing.assert_array_equal(host(table.storage.grad)[[1, 3]], [[2, 2], [4, 4]])
    table.zero_grad()
    assert table.storage.n_touched == 0 and table.storage.grad_is_zero
    assert not host(table.storage.grad).any()


def test_to_moves_leaves_and_keeps_their_kind(backend):
    w = fa.Parameter(np.ones((2, 2)), name="w")
    assert w.to("cpu") is w
    d = w.to("cuda")
    assert isinstance(d, fa.Parameter) and d.device == "cuda:0" and d.name == "w"
    assert d.to("cuda:0") is d
    back = d.to("cpu")
    assert back.device == "cpu" and isinstance(back.value, np.ndarray)
    np.testing.assert_array_equal(back.value, w.value)
    x = fa.Input(np.zeros(3), requires_grad=True).to("cuda")
    assert isinstance(x, fa.Input) and x.requires_grad
    assert isinstance(fa.IndexInput([0]).to("cuda"), fa.IndexInput)
    assert fa.Parameter(np.ones(2), dtype=np.float64).to("cuda").to("cpu").dtype == np.float64
    with pytest.raises(RuntimeError, match="only leaves move"):
        (d * 2.0).to("cpu")


def test_set_value_on_the_device_keeps_the_buffer(backend):
    x = fa.Input(np.zeros((2, 2)), device="cuda")
    buffer = x.value
    y = (x * 3.0).sum()
    x.set_value(np.ones((2, 2)))
    assert x.value is buffer
    assert y.forward().item() == 12.0
    x.set_value(backend.xp.full((2, 2), 2.0, dtype=np.float32))      # a device array
    assert y.forward().item() == 24.0
    with pytest.raises(ValueError, match=r"expected \(2, 2\)"):
        x.set_value(np.ones(3))


def test_mixed_devices_raise_naming_both(backend):
    a = fa.Parameter(np.ones(3), device="cuda")
    b = fa.Parameter(np.ones(3))
    for build in (lambda: a + b, lambda: b * a, lambda: fa.concat([a, b]),
                  lambda: fa.vector_dot(a, b), lambda: fa.matmul(a, b)):
        with pytest.raises(ValueError, match=r"cpu.*cuda:0|cuda:0.*cpu"):
            build()
    table = fa.Parameter(np.ones((4, 2)), device="cuda")
    with pytest.raises(ValueError, match=r"cuda:0.*cpu|cpu.*cuda:0"):
        table[fa.IndexInput([1])]


def test_bad_device_names(backend):
    with pytest.raises(ValueError, match="'cpu', 'cuda' or 'cuda:N'"):
        fa.Parameter([1.0], device="gpu")
    with pytest.raises(ValueError, match="cuda:7"):
        fa.Parameter([1.0], device="cuda:7")


def test_gradients_accumulate_until_zero_grad(backend):
    w = fa.Parameter(np.array([1.0, 2.0]), device="cuda")
    assert w.grad is None                               # no gradient yet
    loss = (w * w).sum()
    loss.backward()
    loss.backward()
    np.testing.assert_allclose(host(w.grad), [4.0, 8.0])
    w.zero_grad()
    loss.backward()
    np.testing.assert_allclose(host(w.grad), [2.0, 4.0])


def test_backward_needs_a_seed_for_a_non_scalar(backend):
    y = fa.Parameter(np.ones(3), device="cuda") * 2.0
    with pytest.raises(RuntimeError, match="one-element"):
        y.backward()
    y.backward(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(host(y.parents[0].grad), [2.0, 4.0, 6.0])


def test_detect_anomaly_names_the_op(backend):
    x = fa.Parameter(np.array([-1.0, 1.0]), device="cuda")
    with fa.detect_anomaly():
        with pytest.raises(FloatingPointError, match="forward of 'log'"):
            fa.log(x)
        y = fa.sqrt(fa.Parameter(np.array([0.0]), device="cuda")).sum()
        with pytest.raises(FloatingPointError, match="backward of 'sqrt'"):
            y.backward()


def test_no_grad_on_the_device(backend):
    w = fa.Parameter(np.ones(2), device="cuda")
    with fa.no_grad():
        y = (w * 2.0).sum()
    assert not y.requires_grad


def test_a_long_chain_replays(backend):
    x = fa.Parameter(np.array([0.5]), dtype=np.float64, device="cuda")
    y = x
    for _ in range(2000):
        y = y * 1.0001
    y.backward()
    np.testing.assert_allclose(host(x.grad), [1.0001 ** 2000])


def test_capture_replays_forward_and_backward(backend):
    rng = np.random.default_rng(1)
    x = fa.Input(rng.standard_normal((4, 3)), dtype=np.float64, device="cuda")
    w = fa.Parameter(rng.standard_normal((3, 2)), dtype=np.float64, device="cuda")
    loss = (fa.tanh(x @ w) ** 2).sum()
    def step():
        loss.forward()
        w.zero_grad()
        loss.backward()
    replay = fa.cuda.capture(step)
    for _ in range(3):
        data = rng.standard_normal((4, 3))
        x.set_value(data)
        replay()
        cpu_x, cpu_w = fa.Input(data, dtype=np.float64), fa.Parameter(w.numpy(), dtype=np.float64)
        cpu_loss = (fa.tanh(cpu_x @ cpu_w) ** 2).sum()
        cpu_loss.backward()
        np.testing.assert_allclose(loss.item(), cpu_loss.item(), rtol=1e-12)
        np.testing.assert_allclose(host(w.grad), cpu_w.grad, rtol=1e-12)


def test_capture_refuses_a_function_that_allocates(backend):
    if backend.name != "emulator":
        pytest.skip("the emulator's check; CUDA reports its own error")
    w = fa.Parameter(np.ones(2), device="cuda")
    with pytest.raises(RuntimeError, match="allocate nothing"):
        fa.cuda.capture(lambda: (w * 2.0).sum())
    with pytest.raises(TypeError, match="callable"):
        fa.cuda.capture(3)


def test_queries(backend):
    assert fa.cuda.is_available()
    assert fa.cuda.device_count() >= 1
    assert fa.cuda.canonical_device("cuda") == "cuda:0"
    assert fa.cuda.canonical_device(0) == "cuda:0"


def test_finite_differences_on_the_device(backend):
    w = fa.Parameter(np.array([0.3, -0.7]), dtype=np.float64, device="cuda")
    numerical, analytic = fa.finite_difference(w, (fa.tanh(w) * w).sum())
    np.testing.assert_allclose(analytic, numerical, rtol=1e-6)


def test_the_compiled_training_loop_refuses_a_device_graph(backend):
    w = fa.Parameter(np.ones(2), device="cuda")
    x = fa.Input(np.ones(2), device="cuda")
    loss = (w * x).sum()
    with pytest.raises(ValueError, match="runs on the CPU.*cuda:0"):
        fa.train(loss, fa.optim.SGD([w], lr=0.1), {x: np.ones((3, 2))})
    w_cpu, x_cpu = fa.Parameter(np.ones(2)), fa.Input(np.ones(2))
    cpu_loss = (w_cpu * x_cpu).sum()
    with pytest.raises(ValueError, match="fed leaf .* is on cuda:0"):
        fa.train(cpu_loss, fa.optim.SGD([w_cpu], lr=0.1), {x: np.ones((3, 2))})
    with pytest.raises(ValueError, match="optimizer's Parameters are on a GPU"):
        fa.train(cpu_loss, fa.optim.SGD([w], lr=0.1), {x_cpu: np.ones((3, 2))})


def test_device_ids_change_only_through_set_value(backend):
    table = fa.Parameter(np.ones((4, 3)), device="cuda")
    ix = fa.IndexInput([1, 2], device="cuda")
    rows = table[ix].sum()
    ix.value[:] = 1 << 40                  # a copy: the ids the graph reads stay checked
    assert rows.forward().item() == 6.0
    np.testing.assert_array_equal(ix.numpy(), [1, 2])


def test_graph_pictures_name_the_device(backend):
    w = fa.Parameter(np.ones((2, 3)), device="cuda", name="w")
    dot = fa.to_dot((w * 2.0).sum())
    assert "Parameter w\\n2x3 float32 cuda:0" in dot


def test_a_0d_parameter_keeps_its_shape_everywhere(backend):
    s = fa.Parameter(2.5, device="cuda")
    assert s.shape == () and s.value.shape == () and s.numpy().shape == ()
    assert s.to("cpu").shape == () and s.to("cpu").to("cuda").shape == ()
    layer = fa.nn.LayerNorm(3).to("cuda")
    layer.scale = s
    state = layer.state_dict()
    assert state["scale"].shape == ()
    layer.load_state_dict(state)
    fa.nn.init.ones_(s)
    assert s.item() == 1.0
    opt = fa.optim.Adam([s], lr=0.1)
    (s * s).backward()
    opt.step()
    assert opt.state_dict()["state.0.exp_avg"].shape == ()
    assert fa.IndexInput(3, device="cuda").numpy().shape == ()
