"""The optimizers and gradient clipping on a device (fastad.cuda.optim and
cuda/optim.cu), run by the CPU emulator: every step on the device must
match the same step on the CPU, dense and sparse gradients, float32 and float64.

Sparse gradients come from gathers `p[ix]` on both sides.
"""
import numpy as np
import pytest

import fastad as fa
import fastad.cuda.optim as cuda_optim
from fastad.cuda import backend

DTYPES = [np.float32, np.float64]

OPTIMIZERS = {
    "sgd": lambda ps: fa.optim.SGD(ps, lr=0.1),
    "sgd-momentum-wd": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
    "sgd-nesterov": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    "sgd-dampening": lambda ps: fa.optim.SGD(ps, lr=0.1, momentum=0.5, dampening=0.3),
    "adagrad": lambda ps: fa.optim.Adagrad(ps, lr=0.1, weight_decay=0.1,
                                           initial_accumulator_value=0.2),
    "adam": lambda ps: fa.optim.Adam(ps, lr=0.01),
    "adam-wd-small-beta1": lambda ps: fa.optim.Adam(ps, lr=0.01, betas=(0.2, 0.9),
                                                    weight_decay=0.1),
    "adamw": lambda ps: fa.optim.AdamW(ps, lr=0.01, weight_decay=0.1),
    "rmsprop": lambda ps: fa.optim.RMSprop(ps, lr=0.01),
    "rmsprop-momentum-wd": lambda ps: fa.optim.RMSprop(ps, lr=0.01, alpha=0.9, momentum=0.9,
                                                       weight_decay=0.1),
    "adadelta": lambda ps: fa.optim.Adadelta(ps),
    "adadelta-wd": lambda ps: fa.optim.Adadelta(ps, lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1),
    "adamax": lambda ps: fa.optim.Adamax(ps, lr=0.01),
    "adamax-wd-small-beta1": lambda ps: fa.optim.Adamax(ps, lr=0.01, betas=(0.2, 0.9),
                                                        weight_decay=0.1),
    "radam": lambda ps: fa.optim.RAdam(ps, lr=0.01, betas=(0.5, 0.6)),
    "radam-decoupled": lambda ps: fa.optim.RAdam(ps, lr=0.01, weight_decay=0.1,
                                                 decoupled_weight_decay=True),
    "nadam": lambda ps: fa.optim.NAdam(ps, lr=0.01),
    "ftrl": lambda ps: fa.optim.FTRL(ps, lr=0.1, beta=0.5, l1=0.05, l2=0.1),
    "nadam-decoupled-small-beta1": lambda ps: fa.optim.NAdam(
        ps, lr=0.01, betas=(0.3, 0.9), weight_decay=0.1, momentum_decay=0.01,
        decoupled_weight_decay=True),
}


@pytest.fixture(autouse=True)
def emulated():
    backend.set_emulation(True)
    yield
    backend.set_emulation(None)


def tolerance(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)


def twins(array, dtype):
    """The same Parameter on the CPU and on the device."""
    return fa.Parameter(array, dtype=dtype), fa.Parameter(array, dtype=dtype, device="cuda")


def twins_and_six_grads(seed, shape, dtype):
    """A random start of `shape` (seeded), six gradients for it (dtype) and its twins:
    (start, grads, (the CPU Parameter, the device one))."""
    rng = np.random.default_rng(seed)
    start = rng.standard_normal(shape)
    grads = [rng.standard_normal(shape).astype(dtype) for _ in range(6)]
    return start, grads, twins(start, dtype)


def dense_grad(cpu, dev, g):
    cpu.backward(g)
    dev.backward(g)


def sparse_grad(cpu, dev, ids, rows):
    """Add `rows` at row `ids` (repeats allowed) into both gradients, through a gather."""
    for p, device in ((cpu, None), (dev, "cuda")):
        ix = fa.IndexInput(ids, device=device)
        (p[ix] * fa.Input(rows, dtype=p.dtype, device=device)).sum().backward()


def assert_same(opt_cpu, opt_dev, pairs, dtype):
    for cpu, dev in pairs:
        np.testing.assert_allclose(dev.numpy(), cpu.numpy(), **tolerance(dtype))
    s_cpu, s_dev = opt_cpu.state_dict(), opt_dev.state_dict()
    assert s_cpu.keys() == s_dev.keys()
    for key, expected in s_cpu.items():
        got = s_dev[key]
        if isinstance(expected, np.ndarray):
            assert isinstance(got, np.ndarray) and got.dtype == expected.dtype, key
            np.testing.assert_allclose(got, expected, **tolerance(dtype), err_msg=key)
        else:
            assert type(got) is type(expected) and got == expected, key


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_steps_match_the_cpu(name, dtype):
    """A dense Parameter, an embedding table with sparse gradients (repeated ids,
    within one gather and across two; densified on one step) and a Parameter that
    never has a gradient; the lr changes mid-run."""
    rng = np.random.default_rng(7)
    w_start = rng.standard_normal((5, 3)).astype(dtype)
    w = twins(w_start, dtype)
    emb = twins(rng.standard_normal((12, 4)), dtype)
    idle = twins(rng.standard_normal(3), dtype)
    pairs = [w, emb, idle]
    opt_cpu = OPTIMIZERS[name]([cpu for cpu, _ in pairs])
    opt_dev = OPTIMIZERS[name]([dev for _, dev in pairs])
    for step in range(5):
        dense_grad(*w, rng.standard_normal((5, 3)).astype(dtype))
        sparse_grad(*emb, np.array([3, 7, 3, 0, 3]), rng.standard_normal((5, 4)).astype(dtype))
        if step != 1:
            sparse_grad(*emb, np.array([7, 11, 7]), rng.standard_normal((3, 4)).astype(dtype))
        if step == 3:       # a dense contribution densifies the sparse gradient
            dense_grad(*emb, rng.standard_normal((12, 4)).astype(dtype))
        if step == 2:
            opt_cpu.lr = opt_dev.lr = 0.5 * opt_cpu.lr
        opt_cpu.step()
        opt_dev.step()
        opt_cpu.zero_grad()
        opt_dev.zero_grad()
        assert_same(opt_cpu, opt_dev, pairs, dtype)
    np.testing.assert_array_equal(idle[1].numpy(), idle[0].numpy())
    assert opt_dev.state_dict()["state.2.step"] == 0
    assert not np.allclose(w[1].numpy(), w_start)


@pytest.mark.parametrize("dtype", DTYPES)
def test_state_dict_round_trip_and_scheduler(dtype):
    """load_state_dict uploads state, steps and lr; a scheduler's lr reaches the kernels."""
    _, grads, (cpu, dev) = twins_and_six_grads(1, (6, 2), dtype)
    opt_cpu, opt_dev = fa.optim.Adam([cpu], lr=0.1), fa.optim.Adam([dev], lr=0.1)
    sched_cpu = fa.optim.StepLR(opt_cpu, step_size=2, gamma=0.5)
    sched_dev = fa.optim.StepLR(opt_dev, step_size=2, gamma=0.5)
    for g in grads[:3]:
        dense_grad(cpu, dev, g)
        opt_cpu.step(); opt_dev.step(); opt_cpu.zero_grad(); opt_dev.zero_grad()
        sched_cpu.step(); sched_dev.step()
    saved = opt_dev.state_dict()
    # A fresh device optimizer over the same values continues exactly from the save.
    dev2 = fa.Parameter(dev.numpy(), dtype=dtype, device="cuda")
    opt_dev2 = fa.optim.Adam([dev2], lr=1.0).load_state_dict(saved)
    assert opt_dev2.lr == saved["lr"]
    for g in grads[3:]:
        cpu.backward(g); dev2.backward(g)
        opt_cpu.step(); opt_dev2.step(); opt_cpu.zero_grad(); opt_dev2.zero_grad()
    assert_same(opt_cpu, opt_dev2, [(cpu, dev2)], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_captured_step_reads_lr_and_step_count_on_the_device(dtype):
    """A step captured once and replayed: the lr set between replays and the step
    counts advanced by the kernels reach every replay."""
    rng = np.random.default_rng(2)
    w = twins(rng.standard_normal((4, 3)), dtype)
    emb = twins(rng.standard_normal((9, 3)), dtype)
    dense_grad(*w, rng.standard_normal((4, 3)).astype(dtype))
    sparse_grad(*emb, np.array([1, 5, 1, 8]), rng.standard_normal((4, 3)).astype(dtype))
    opt_cpu = fa.optim.Adam([w[0], emb[0]], lr=0.05, weight_decay=0.1)
    opt_dev = fa.optim.Adam([w[1], emb[1]], lr=0.05, weight_decay=0.1)
    replay = fa.cuda.capture(opt_dev.step)        # runs one step (the warm-up), records one
    opt_cpu.step()
    for lr in (0.1, 0.02, 0.3):
        opt_cpu.lr = opt_dev.lr = lr
        opt_cpu.step()
        replay()
    assert opt_dev.state_dict()["state.0.step"] == 4
    assert_same(opt_cpu, opt_dev, [w, emb], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm(norm_type, max_norm, dtype):
    """The joint norm of a dense and a sparse gradient (rows listed twice count
    once), and the scaling when it exceeds max_norm (never when it does not)."""
    rng = np.random.default_rng(3)
    w = twins(rng.standard_normal((4, 3)), dtype)
    emb = twins(rng.standard_normal((10, 2)), dtype)
    idle = twins(rng.standard_normal(2), dtype)
    dense_grad(*w, rng.standard_normal((4, 3)).astype(dtype))
    sparse_grad(*emb, np.array([2, 9, 2]), rng.standard_normal((3, 2)).astype(dtype))
    sparse_grad(*emb, np.array([9, 4]), rng.standard_normal((2, 2)).astype(dtype))
    pairs = [w, emb, idle]
    total_cpu = fa.optim.clip_grad_norm([cpu for cpu, _ in pairs], max_norm, norm_type)
    total_dev = fa.optim.clip_grad_norm([dev for _, dev in pairs], max_norm, norm_type)
    assert total_dev == pytest.approx(total_cpu, rel=1e-12)
    assert idle[0].grad is None and idle[1].grad is None
    for cpu, dev in (w, emb):
        np.testing.assert_allclose(backend.get().to_host(dev.grad), cpu.grad, **tolerance(dtype))
    assert emb[1].is_sparse_grad


def test_clip_grad_norm_propagates_nan():
    cpu, dev = twins(np.zeros((2, 2)), np.float32)
    g = np.array([[1.0, np.nan], [2.0, 3.0]], dtype=np.float32)
    dense_grad(cpu, dev, g)
    for norm_type in (2.0, float("inf")):
        assert np.isnan(fa.optim.clip_grad_norm([dev], 1.0, norm_type))
        assert np.isnan(fa.optim.clip_grad_norm([cpu], 1.0, norm_type))


@pytest.mark.parametrize("dtype", DTYPES)
def test_clip_grad_value(dtype):
    rng = np.random.default_rng(4)
    w = twins(rng.standard_normal((4, 3)), dtype)
    emb = twins(rng.standard_normal((10, 2)), dtype)
    dense_grad(*w, 3 * rng.standard_normal((4, 3)).astype(dtype))
    sparse_grad(*emb, np.array([2, 9, 2]), 3 * rng.standard_normal((3, 2)).astype(dtype))
    fa.optim.clip_grad_value([w[0], emb[0]], 0.7)
    fa.optim.clip_grad_value([w[1], emb[1]], 0.7)
    for cpu, dev in (w, emb):
        np.testing.assert_array_equal(backend.get().to_host(dev.grad), cpu.grad)
    assert np.abs(w[0].grad).max() == pytest.approx(0.7)


def test_cpu_and_device_parameters_do_not_mix():
    cpu = fa.Parameter(np.ones(3))
    dev = fa.Parameter(np.ones(3), device="cuda")
    for make in (fa.optim.SGD, fa.optim.Adam):
        with pytest.raises(ValueError, match=r"params\[0\] is on cpu but params\[1\] is on cuda:0"):
            make([cpu, dev], lr=0.1)
        with pytest.raises(ValueError, match=r"params\[0\] is on cuda:0 but params\[1\] is on cpu"):
            make([dev, cpu], lr=0.1)
    with pytest.raises(ValueError, match="clip_grad_norm: params.0. is on cpu"):
        fa.optim.clip_grad_norm([cpu, dev], 1.0)
    with pytest.raises(ValueError, match="clip_grad_value: params.0. is on cuda:0"):
        fa.optim.clip_grad_value([dev, cpu], 1.0)


def test_load_state_dict_checks_before_uploading():
    dev = fa.Parameter(np.ones((2, 3)), device="cuda")
    opt = fa.optim.Adagrad([dev], lr=0.1)
    state = opt.state_dict()
    bad = dict(state, **{"state.0.sum": np.ones((3, 2))})
    with pytest.raises(ValueError, match=r"state.0.sum .* expected a float array of shape \(2, 3\)"):
        opt.load_state_dict(bad)
    np.testing.assert_array_equal(opt.state_dict()["state.0.sum"], np.zeros((2, 3), np.float32))


def test_touched_rows_split_over_several_id_arrays(monkeypatch):
    """A sparse gradient may list its rows in several id arrays, with repeats
    across them: each distinct row is still updated, and counted, once."""
    real = cuda_optim.grad_state

    def split(p):
        mode, grad, touched = real(p)
        if mode == "sparse":
            ids = touched[0]
            touched = (ids[:3], ids[3:])
        return mode, grad, touched

    monkeypatch.setattr(cuda_optim, "grad_state", split)
    rng = np.random.default_rng(5)
    emb = twins(rng.standard_normal((8, 3)), np.float64)
    opt_cpu, opt_dev = fa.optim.Adam([emb[0]], lr=0.1), fa.optim.Adam([emb[1]], lr=0.1)
    for _ in range(3):
        sparse_grad(*emb, np.array([4, 1, 6, 4, 2, 1, 6]), rng.standard_normal((7, 3)))
        total_cpu = fa.optim.clip_grad_norm([emb[0]], 0.5)
        total_dev = fa.optim.clip_grad_norm([emb[1]], 0.5)
        assert total_dev == pytest.approx(total_cpu, rel=1e-12)
        opt_cpu.step(); opt_dev.step(); opt_cpu.zero_grad(); opt_dev.zero_grad()
    assert_same(opt_cpu, opt_dev, [emb], np.float64)


@pytest.mark.parametrize("dtype", DTYPES)
def test_nadam_resumes_its_running_product_on_the_device(dtype):
    """After load_state_dict the device's product P_t is that of the loaded step count."""
    start, grads, (cpu, dev) = twins_and_six_grads(12, (3, 2), dtype)
    opt_cpu = fa.optim.NAdam([cpu], lr=0.05, betas=(0.6, 0.9))
    for g in grads:
        cpu.backward(g)
        opt_cpu.step()
        opt_cpu.zero_grad()
    half, _ = twins(start, dtype)
    opt_half = fa.optim.NAdam([half], lr=0.05, betas=(0.6, 0.9))
    for g in grads[:3]:
        half.backward(g)
        opt_half.step()
        opt_half.zero_grad()
    dev.set_value(half.numpy())
    opt_dev = fa.optim.NAdam([dev], lr=0.05, betas=(0.6, 0.9)).load_state_dict(opt_half.state_dict())
    for g in grads[3:]:
        dev.backward(g)
        opt_dev.step()
        opt_dev.zero_grad()
    np.testing.assert_allclose(dev.numpy(), cpu.numpy(), **tolerance(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_radam_rectified_steps_match_the_cpu(dtype):
    """From step 20 on (loaded into both), rho_t > 5: RAdam's rectified branch."""
    rng = np.random.default_rng(11)
    w = twins(rng.standard_normal((4, 3)), dtype)
    emb = twins(rng.standard_normal((8, 3)), dtype)
    pairs = [w, emb]
    opt_cpu = fa.optim.RAdam([cpu for cpu, _ in pairs], lr=0.01, weight_decay=0.1)
    opt_dev = fa.optim.RAdam([dev for _, dev in pairs], lr=0.01, weight_decay=0.1)
    state = opt_cpu.state_dict()
    for i, (cpu, _) in enumerate(pairs):
        state[f"state.{i}.step"] = 20
        state[f"state.{i}.exp_avg"] = rng.standard_normal(cpu.shape) * 0.1
        state[f"state.{i}.exp_avg_sq"] = rng.random(cpu.shape) * 0.1
    opt_cpu.load_state_dict(state)
    opt_dev.load_state_dict(state)
    for _ in range(3):
        dense_grad(*w, rng.standard_normal((4, 3)).astype(dtype))
        sparse_grad(*emb, np.array([1, 5, 1]), rng.standard_normal((3, 3)).astype(dtype))
        opt_cpu.step()
        opt_dev.step()
        opt_cpu.zero_grad()
        opt_dev.zero_grad()
        assert_same(opt_cpu, opt_dev, pairs, dtype)
