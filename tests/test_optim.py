"""Optimizers, gradient clipping and LR schedulers (fastad.optim) against torch.optim."""
import math

import numpy as np
import pytest

import fastad as fa
from fastad import optim
from optim_helpers import (assert_dense_steps_match_torch, assert_float32_tracks_float64, set_grad,
                           sparse_grad, sparse_schedule, stepped_on_sparse_rows, summed_rows)

F64 = np.float64


@pytest.fixture
def torch():
    """PyTorch, the reference implementation (tests that need it skip without it)."""
    return pytest.importorskip("torch")


def torch_class(torch, cls):
    """torch.optim's optimizer of the same name as ours."""
    return getattr(torch.optim, cls.__name__)


OPTIMIZERS = [
    (optim.SGD, dict(lr=0.1)),
    (optim.SGD, dict(lr=0.1, momentum=0.9)),
    (optim.SGD, dict(lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.1)),
    (optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (optim.Adagrad, dict(lr=0.1)),
    (optim.Adagrad, dict(lr=0.1, eps=1e-6, weight_decay=0.1,
                                              initial_accumulator_value=0.5)),
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)),
    (optim.Adam, dict(lr=0.02, betas=(0.3, 0.9))),   # lerp's other branch
    (optim.AdamW, dict(lr=0.01)),
    (optim.AdamW, dict(lr=0.02, betas=(0.7, 0.95), weight_decay=0.3)),
    (optim.RMSprop, dict(lr=0.01)),
    (optim.RMSprop, dict(lr=0.01, alpha=0.9, eps=1e-6, weight_decay=0.1,
                                              momentum=0.7)),
]
IDS = [f"{cls.__name__}-{i}" for i, (cls, _) in enumerate(OPTIMIZERS)]


# ------------------------------------------------------------- dense updates

@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_dense_steps_match_torch(cls, kw, torch):
    assert_dense_steps_match_torch(torch, cls, kw, lambda tps: torch_class(torch, cls)(tps, **kw),
                                   steps=7)


@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_float32_tracks_float64(cls, kw):
    assert_float32_tracks_float64(cls, kw, steps=5)


def test_step_uses_the_gradient_of_a_real_graph(torch):
    w = fa.Parameter(np.array([1.0, -2.0, 3.0]), dtype=F64)
    tw = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64, requires_grad=True)
    opt, topt = optim.Adam([w], lr=0.1), torch.optim.Adam([tw], lr=0.1)
    x = fa.Input(np.array([0.5, 1.0, -1.5]), dtype=F64)
    y = fa.tanh(w * x) * w
    for _ in range(4):
        y.forward()
        y.backward(np.ones(3))
        (torch.tanh(tw * torch.tensor([0.5, 1.0, -1.5], dtype=torch.float64)) * tw).sum().backward()
        opt.step()
        opt.zero_grad()
        topt.step()
        topt.zero_grad()
    np.testing.assert_allclose(w.value, tw.detach().numpy(), rtol=1e-12)


def test_gradients_accumulate_until_zero_grad():
    w = fa.Parameter(np.zeros(2), dtype=F64)
    opt = optim.SGD([w], lr=1.0)
    (w * 1.0).backward(np.array([1.0, 2.0]))
    (w * 1.0).backward(np.array([1.0, 2.0]))
    opt.step()
    np.testing.assert_array_equal(w.value, [-2.0, -4.0])
    opt.zero_grad()
    opt.step()                                  # no gradient: nothing moves
    np.testing.assert_array_equal(w.value, [-2.0, -4.0])
    assert opt.state_dict()["state.0.step"] == 1


def test_lr_zero_leaves_values_but_advances_state():
    w = fa.Parameter(np.ones(3), dtype=F64)
    opt = optim.Adam([w], lr=0.0)
    set_grad(w, [1.0, 2.0, 3.0])
    opt.step()
    np.testing.assert_array_equal(w.value, np.ones(3))
    np.testing.assert_allclose(opt.state_dict()["state.0.exp_avg"], [0.1, 0.2, 0.3])


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("make,message", [
    (lambda p: optim.SGD(p, lr=-0.1), "lr"),
    (lambda p: optim.SGD(p, lr=float("nan")), "lr"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=-0.5), "momentum"),
    (lambda p: optim.SGD(p, lr=0.1, nesterov=True), "nesterov"),
    (lambda p: optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "nesterov"),
    (lambda p: optim.SGD(p, lr=0.1, weight_decay=-1), "weight_decay"),
    (lambda p: optim.Adagrad(p, eps=0), "eps"),
    (lambda p: optim.Adagrad(p, initial_accumulator_value=-1), "initial_accumulator_value"),
    (lambda p: optim.Adam(p, betas=(1.0, 0.999)), "betas"),
    (lambda p: optim.Adam(p, betas=(0.9, -0.1)), "betas"),
    (lambda p: optim.Adam(p, eps=-1e-8), "eps"),
    (lambda p: optim.AdamW(p, lr=-1), "lr"),
    (lambda p: optim.RMSprop(p, alpha=1.0), "alpha"),
    (lambda p: optim.RMSprop(p, eps=0.0), "eps"),
])
def test_bad_hyperparameters_raise_value_error(make, message):
    with pytest.raises(ValueError, match=message):
        make([fa.Parameter(np.zeros(2))])


def test_bad_params_raise():
    w = fa.Parameter(np.zeros(2))
    with pytest.raises(TypeError, match=r"params\[1\] is a Input"):
        optim.Adam([w, fa.Input(np.zeros(2))])
    with pytest.raises(TypeError, match="single Parameter"):
        optim.Adam(w)
    with pytest.raises(TypeError, match="iterable"):
        optim.Adam(3)
    with pytest.raises(ValueError, match="empty"):
        optim.Adam([])
    with pytest.raises(ValueError, match="same Parameter"):
        optim.Adam([w, w])
    with pytest.raises(TypeError, match="number"):
        optim.SGD([w], lr="0.1")
    with pytest.raises(TypeError, match="pair"):
        optim.Adam([w], betas=0.9)
    with pytest.raises(TypeError, match="base class"):
        optim.Optimizer([w])


def test_lr_setter_validates():
    opt = optim.SGD([fa.Parameter(np.zeros(2))], lr=0.1)
    opt.lr = 0.5
    assert opt.lr == 0.5
    with pytest.raises(ValueError, match="lr"):
        opt.lr = -1
    assert opt.lr == 0.5


def test_hyperparameters_are_readable():
    opt = optim.AdamW([fa.Parameter(np.zeros(2))], betas=(0.8, 0.9))
    assert (opt.beta1, opt.beta2, opt.weight_decay, opt.decoupled) == (0.8, 0.9, 0.01, True)
    assert opt.hyperparameters() == {"lr": 1e-3, "beta1": 0.8, "beta2": 0.9, "eps": 1e-8,
                                     "weight_decay": 0.01}
    assert "AdamW(lr=0.001" in repr(opt)


# ---------------------------------------------------------------- state dicts

@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_state_dict_resumes_exactly(cls, kw):
    rng = np.random.default_rng(2)
    init = rng.standard_normal((3, 2))
    grads = [rng.standard_normal((3, 2)) for _ in range(6)]
    a = fa.Parameter(init, dtype=F64)
    opt_a = cls([a], **kw)
    for g in grads[:3]:
        set_grad(a, g)
        opt_a.step()
    state = opt_a.state_dict()
    b = fa.Parameter(a.value, dtype=F64)
    opt_b = cls([b], **kw)
    opt_b.load_state_dict(state)
    for g in grads[3:]:
        for p, o in ((a, opt_a), (b, opt_b)):
            set_grad(p, g)
            o.step()
    np.testing.assert_array_equal(a.value, b.value)


def test_state_dict_is_flat_numbers_and_copies():
    w = fa.Parameter(np.zeros((2, 3)), dtype=F64)
    opt = optim.Adam([w], lr=0.1, betas=(0.5, 0.75))
    set_grad(w, np.ones((2, 3)))
    opt.step()
    state = opt.state_dict()
    assert sorted(state) == ["beta1", "beta2", "eps", "lr", "state.0.exp_avg",
                             "state.0.exp_avg_sq", "state.0.step", "weight_decay"]
    assert state["state.0.step"] == 1 and state["lr"] == 0.1
    np.testing.assert_allclose(state["state.0.exp_avg"], 0.5)
    opt.step()
    np.testing.assert_allclose(state["state.0.exp_avg"], 0.5)   # a copy, not live


def test_load_state_dict_restores_lr():
    w = fa.Parameter(np.zeros(2))
    state = optim.SGD([w], lr=0.3).state_dict()
    opt = optim.SGD([w], lr=0.1)
    opt.load_state_dict(state)
    assert opt.lr == 0.3


def test_load_state_dict_rejects_mismatches_without_changing_anything():
    w = fa.Parameter(np.zeros((2, 3)), dtype=F64)
    opt = optim.Adam([w], lr=0.1)
    set_grad(w, np.ones((2, 3)))
    opt.step()
    before = opt.state_dict()

    other_kind = optim.SGD([fa.Parameter(np.zeros((2, 3)))], lr=0.1, momentum=0.9).state_dict()
    with pytest.raises(ValueError, match="missing keys.*exp_avg"):
        opt.load_state_dict(other_kind)
    two_params = optim.Adam([fa.Parameter(np.zeros((2, 3))), fa.Parameter(np.zeros(1))]).state_dict()
    with pytest.raises(ValueError, match=r"unexpected keys \['state.1"):
        opt.load_state_dict(two_params)
    bad_shape = dict(before, **{"state.0.exp_avg": np.zeros((3, 2))})
    with pytest.raises(ValueError, match=r"state.0.exp_avg.*\(3, 2\).*\(2, 3\)"):
        opt.load_state_dict(bad_shape)
    bad_beta = dict(before, beta1=0.5)
    with pytest.raises(ValueError, match="beta1=0.5"):
        opt.load_state_dict(bad_beta)
    bad_step = dict(before, **{"state.0.step": -1})
    with pytest.raises(ValueError, match="state.0.step"):
        opt.load_state_dict(bad_step)
    bad_lr = dict(before, lr=-1.0)
    with pytest.raises(ValueError, match="lr"):
        opt.load_state_dict(bad_lr)
    with pytest.raises(TypeError, match="dict"):
        opt.load_state_dict([1, 2])

    after = opt.state_dict()
    assert after.keys() == before.keys()
    for key in before:
        np.testing.assert_array_equal(after[key], before[key])


# ------------------------------------------------------- shared (Hogwild) state

class FakeSharedHandle:
    """Stands in for a fastad.hogwild handle: a value array plus named state arrays
    that are created (and filled) once and then handed out again."""

    def __init__(self, value):
        self.value = value
        self.arrays = {}
        self.created = []

    def state_array(self, key, fill):
        if key not in self.arrays:
            self.arrays[key] = np.full(self.value.shape, fill, dtype=self.value.dtype)
            self.created.append(key)
        return self.arrays[key]

    def trainable_array(self):
        return self.value


def test_shared_parameters_keep_state_in_the_handle():
    handle = FakeSharedHandle(np.zeros((4, 2)))
    worker1, worker2 = fa.Parameter(handle), fa.Parameter(handle)
    opt1, opt2 = optim.Adam([worker1], lr=0.1), optim.Adam([worker2], lr=0.1)
    assert handle.created == ["Adam.exp_avg", "Adam.exp_avg_sq"]       # filled once
    set_grad(worker1, np.ones((4, 2)))
    opt1.step()
    np.testing.assert_allclose(handle.arrays["Adam.exp_avg"], 0.1)
    np.testing.assert_array_equal(opt2.state_dict()["state.0.exp_avg"], handle.arrays["Adam.exp_avg"])
    np.testing.assert_array_equal(worker2.value, worker1.value)        # one value array
    assert opt1.state_dict()["state.0.step"] == 1 and opt2.state_dict()["state.0.step"] == 0


def test_shared_state_fill_and_bad_handle():
    handle = FakeSharedHandle(np.zeros(3, dtype=np.float32))
    optim.Adagrad([fa.Parameter(handle)], initial_accumulator_value=0.25)
    np.testing.assert_array_equal(handle.arrays["Adagrad.sum"], np.full(3, 0.25, np.float32))

    class WrongShape(FakeSharedHandle):
        def state_array(self, key, fill):
            return np.zeros(5, dtype=self.value.dtype)

    with pytest.raises(RuntimeError, match="state_array"):
        optim.Adam([fa.Parameter(WrongShape(np.zeros(3)))])


# ----------------------------------------------------------- sparse updates

def test_sparse_sgd_updates_touched_rows_only():
    init = np.arange(12.0).reshape(4, 3)
    w = fa.Parameter(init, dtype=F64)
    opt = optim.SGD([w], lr=0.5)
    sparse_grad(w, [2, 0, 2], np.ones((3, 3)))      # row 2 twice: gradients add
    assert w.is_sparse_grad
    opt.step()
    expected = init.copy()
    expected[0] -= 0.5
    expected[2] -= 1.0
    np.testing.assert_array_equal(w.value, expected)
    opt.zero_grad()
    assert not w.is_sparse_grad


# Stateful optimizers without a global step term: lazily, each row must follow
# the dense torch rule applied only on the steps that touched it.
ROW_LOCAL = [
    (optim.SGD, dict(lr=0.1, momentum=0.9)),
    (optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    (optim.Adagrad, dict(lr=0.1, weight_decay=0.1,
                                              initial_accumulator_value=0.1)),
    (optim.RMSprop, dict(lr=0.01, alpha=0.9, momentum=0.5, weight_decay=0.1)),
    (optim.RMSprop, dict(lr=0.01)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cls,kw", ROW_LOCAL,
                         ids=[f"{c.__name__}-{i}" for i, (c, _) in enumerate(ROW_LOCAL)])
def test_sparse_rows_follow_dense_rule_on_their_own_steps(cls, kw, dtype, torch):
    tcls = torch_class(torch, cls)
    init, w, opt, schedule = stepped_on_sparse_rows(cls, kw, dtype, 8)
    rows = len(init)
    for r in range(rows):
        tp = torch.tensor(init[r], requires_grad=True)
        topt = tcls([tp], **kw)
        for ids, grads in schedule:
            row_grad = summed_rows(ids, grads).get(r)
            if row_grad is not None:
                tp.grad = torch.tensor(row_grad)
                topt.step()
        tol = dict(rtol=1e-12, atol=1e-14) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(w.value[r], tp.detach().numpy(), **tol)
    np.testing.assert_array_equal(w.value[rows - 1], init[rows - 1].astype(dtype))


def lazy_adam_reference(init, schedule, lr, beta1, beta2, eps, weight_decay, decoupled):
    """SparseAdam's rule in numpy: one step count, only touched rows move."""
    p = init.copy()
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t, (ids, grads) in enumerate(schedule, start=1):
        for r, g in summed_rows(ids, grads).items():
            if decoupled:
                p[r] *= 1 - lr * weight_decay
            elif weight_decay:
                g = g + weight_decay * p[r]
            m[r] = beta1 * m[r] + (1 - beta1) * g
            v[r] = beta2 * v[r] + (1 - beta2) * g * g
            step_size = lr / (1 - beta1 ** t)
            p[r] -= step_size * m[r] / (np.sqrt(v[r]) / math.sqrt(1 - beta2 ** t) + eps)
    return p


@pytest.mark.parametrize("cls,decoupled,weight_decay",
                         [(optim.Adam, False, 0.0), (optim.Adam, False, 0.1),
                          (optim.AdamW, True, 0.1)])
def test_sparse_adam_is_lazy_with_a_shared_step_count(cls, decoupled, weight_decay):
    rng = np.random.default_rng(4)
    rows, dim = 7, 3
    init = rng.standard_normal((rows, dim))
    schedule = sparse_schedule(rng, rows, dim, 9)
    w = fa.Parameter(init, dtype=F64)
    opt = cls([w], lr=0.05, betas=(0.8, 0.95), eps=1e-7, weight_decay=weight_decay)
    for ids, grads in schedule:
        sparse_grad(w, ids, grads)
        opt.step()
        opt.zero_grad()
    expected = lazy_adam_reference(init, schedule, 0.05, 0.8, 0.95, 1e-7, weight_decay, decoupled)
    np.testing.assert_allclose(w.value, expected, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(w.value[rows - 1], init[rows - 1])


def test_sparse_adam_matches_torch_sparse_adam(torch):
    rng = np.random.default_rng(5)
    rows, dim = 5, 4
    init = rng.standard_normal((rows, dim))
    w = fa.Parameter(init, dtype=F64)
    tw = torch.tensor(init, requires_grad=True)
    # SparseAdam adds eps before the bias correction, Adam after: a negligible eps hides it
    opt = optim.Adam([w], lr=0.05, eps=1e-15)
    topt = torch.optim.SparseAdam([tw], lr=0.05, eps=1e-15)
    for ids, grads in sparse_schedule(rng, rows, dim, 6):
        sparse_grad(w, ids, grads)
        opt.step()
        opt.zero_grad()
        summed = summed_rows(ids, grads)
        keys = sorted(summed)
        tw.grad = torch.sparse_coo_tensor(torch.tensor([keys]), torch.tensor(np.stack(
            [summed[k] for k in keys])), (rows, dim), check_invariants=True)
        topt.step()
    np.testing.assert_allclose(w.value, tw.detach().numpy(), rtol=1e-11, atol=1e-13)


def test_sparse_sgd_momentum_with_dampening_starts_from_zero():
    w = fa.Parameter(np.zeros((3, 2)), dtype=F64)
    opt = optim.SGD([w], lr=1.0, momentum=0.5, dampening=0.25)
    sparse_grad(w, [1], [[1.0, 2.0]])
    opt.step()
    opt.zero_grad()
    np.testing.assert_allclose(w.value[1], [-0.75, -1.5])            # buf = 0.75 * g
    sparse_grad(w, [1], [[1.0, 2.0]])
    opt.step()
    np.testing.assert_allclose(w.value[1], [-0.75 - 1.125, -1.5 - 2.25])   # buf = 0.5 * buf + 0.75 * g
    np.testing.assert_array_equal(w.value[[0, 2]], 0)


def test_sparse_then_dense_gradient_on_one_parameter():
    w = fa.Parameter(np.zeros((3, 2)), dtype=F64)
    opt = optim.SGD([w], lr=1.0)
    sparse_grad(w, [0], [[1.0, 1.0]])
    (w * 2.0).backward(np.ones((3, 2)))       # a dense contribution densifies and adds
    assert not w.is_sparse_grad
    opt.step()
    np.testing.assert_array_equal(w.value, [[-3, -3], [-2, -2], [-2, -2]])


def test_sparse_clipping_counts_touched_rows_only():
    w = fa.Parameter(np.zeros((5, 2)), dtype=F64)
    sparse_grad(w, [3, 1], [[3.0, 0.0], [0.0, 4.0]])
    norm = optim.clip_grad_norm([w], max_norm=1.0)
    assert norm == pytest.approx(5.0)
    assert w.is_sparse_grad
    np.testing.assert_allclose(w.grad[[1, 3]], [[0, 4 / (5 + 1e-6)], [3 / (5 + 1e-6), 0]])
    np.testing.assert_array_equal(w.grad[[0, 2, 4]], 0)
    w.zero_grad()
    sparse_grad(w, [2], [[-3.0, 0.5]])
    optim.clip_grad_value(w, 1.0)
    np.testing.assert_array_equal(w.grad[2], [-1.0, 0.5])


# ------------------------------------------------------------------ clipping

@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, torch):
    rng = np.random.default_rng(6)
    grads = [rng.standard_normal(s) for s in [(3, 4), (5,), ()]]
    ps = [fa.Parameter(np.zeros(g.shape), dtype=F64) for g in grads]
    tps = [torch.zeros(g.shape, dtype=torch.float64, requires_grad=True) for g in grads]
    for p, tp, g in zip(ps, tps, grads):
        set_grad(p, g)
        tp.grad = torch.tensor(g)
    skipped = fa.Parameter(np.zeros(2))                       # no gradient: ignored
    norm = optim.clip_grad_norm(ps + [skipped], max_norm, norm_type)
    tnorm = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type)
    assert isinstance(norm, float)
    assert norm == pytest.approx(tnorm.item(), rel=1e-12)
    for p, tp in zip(ps, tps):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-12)


def test_clip_grad_norm_edge_cases():
    assert optim.clip_grad_norm([], 1.0) == 0.0
    w = fa.Parameter(np.zeros(3), dtype=np.float32)
    set_grad(w, [3.0, 4.0, 0.0])
    assert optim.clip_grad_norm(w, 10.0) == pytest.approx(5.0)     # a single Parameter works
    np.testing.assert_array_equal(w.grad, [3.0, 4.0, 0.0])          # below max_norm: unchanged
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm(w, -1.0)
    with pytest.raises(ValueError, match="norm_type"):
        optim.clip_grad_norm(w, 1.0, norm_type=0)
    with pytest.raises(TypeError, match="Parameter"):
        optim.clip_grad_norm([w * 2.0], 1.0)


def test_clip_grad_value_matches_torch(torch):
    rng = np.random.default_rng(7)
    g = rng.standard_normal((4, 5)) * 2
    w = fa.Parameter(np.zeros((4, 5)), dtype=F64)
    tw = torch.zeros((4, 5), dtype=torch.float64, requires_grad=True)
    set_grad(w, g)
    tw.grad = torch.tensor(g)
    optim.clip_grad_value([w], 0.7)
    torch.nn.utils.clip_grad_value_([tw], 0.7)
    np.testing.assert_array_equal(w.grad, tw.grad.numpy())
    with pytest.raises(ValueError, match="clip_value"):
        optim.clip_grad_value([w], -0.1)


# ---------------------------------------------------------------- schedulers

def torch_lrs(torch, make_sched, lr, steps):
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = make_sched(opt)
    lrs = [sched.get_last_lr()[0]]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr()[0])
    return lrs


def our_lrs(make_sched, lr, steps):
    opt = optim.SGD([fa.Parameter(np.zeros(1))], lr=lr)
    sched = make_sched(opt)
    lrs = [sched.get_last_lr()]
    for _ in range(steps):
        sched.step()
        assert opt.lr == sched.get_last_lr()
        lrs.append(sched.get_last_lr())
    return lrs


@pytest.mark.parametrize("name", ["StepLR", "CosineAnnealingLR", "LinearWarmup"])
def test_schedulers_match_torch(name, torch):
    schedulers = torch.optim.lr_scheduler
    ours, theirs = {
        "StepLR": (lambda o: optim.StepLR(o, step_size=3, gamma=0.5),
                   lambda o: schedulers.StepLR(o, step_size=3, gamma=0.5)),
        "CosineAnnealingLR": (lambda o: optim.CosineAnnealingLR(o, T_max=10, eta_min=0.01),
                              lambda o: schedulers.CosineAnnealingLR(o, T_max=10, eta_min=0.01)),
        "LinearWarmup": (lambda o: optim.LinearWarmup(o, warmup_steps=5, start_factor=0.25),
                         lambda o: schedulers.LinearLR(o, start_factor=0.25, end_factor=1.0,
                                                       total_iters=5)),
    }[name]
    np.testing.assert_allclose(our_lrs(ours, 0.2, 25), torch_lrs(torch, theirs, 0.2, 25),
                               rtol=1e-12)


def test_linear_warmup_from_zero():
    lrs = our_lrs(lambda o: optim.LinearWarmup(o, warmup_steps=4), 0.1, 6)
    np.testing.assert_allclose(lrs, [0.0, 0.025, 0.05, 0.075, 0.1, 0.1, 0.1])


def test_scheduler_state_dict_resumes():
    opt = optim.SGD([fa.Parameter(np.zeros(1))], lr=0.1)
    sched = optim.CosineAnnealingLR(opt, T_max=8)
    for _ in range(3):
        sched.step()
    state = sched.state_dict()
    opt2 = optim.SGD([fa.Parameter(np.zeros(1))], lr=0.1)
    sched2 = optim.CosineAnnealingLR(opt2, T_max=8)
    sched2.load_state_dict(state)
    assert opt2.lr == opt.lr
    sched.step()
    sched2.step()
    assert opt2.lr == opt.lr
    with pytest.raises(ValueError, match="last_epoch"):
        sched2.load_state_dict({"base_lr": 0.1, "last_epoch": -2})


def test_scheduler_validation():
    opt = optim.SGD([fa.Parameter(np.zeros(1))], lr=0.1)
    with pytest.raises(ValueError, match="step_size"):
        optim.StepLR(opt, step_size=0)
    with pytest.raises(TypeError, match="T_max must be an int, got 2.5"):
        optim.CosineAnnealingLR(opt, T_max=2.5)
    with pytest.raises(ValueError, match="start_factor"):
        optim.LinearWarmup(opt, 10, start_factor=1.5)
    with pytest.raises(TypeError, match="optimizer"):
        optim.StepLR(object(), 3)


def test_the_runners_step_hooks_take_over_the_steps_of_the_optimizers_made_while_installed():
    from fastad.optim.optimizers import set_step_hooks
    calls, asked = [], []

    def hook_for(optimizer):
        asked.append([p.name for p in optimizer.params])
        if optimizer.params[0].name != "replica":
            return None

        def hook(opt, steps):
            calls.append(steps)
            opt.apply_update()                        # the hook takes the step's update itself
            return 3                                  # call again after 3 steps
        return hook

    w, other = fa.Parameter(np.zeros(2), name="replica"), fa.Parameter(np.zeros(2), name="local")
    set_step_hooks(hook_for)
    try:
        hooked, unhooked = optim.SGD([w], lr=0.1), optim.SGD([other], lr=0.1)
    finally:
        set_step_hooks(None)
    after = fa.Parameter(np.zeros(2), name="replica")
    plain = optim.SGD([after], lr=0.1)                # made once the runner removed its hooks
    assert asked == [["replica"], ["local"]]
    for _ in range(7):
        for opt, p in ((hooked, w), (unhooked, other), (plain, after)):
            set_grad(p, np.ones(2))
            opt.step()
    assert calls == [1, 3, 3]                 # at steps 1, 4 and 7, only for the replica's
    np.testing.assert_array_equal(w.value, after.value)       # every step was taken once
    np.testing.assert_array_equal(other.value, after.value)
    with pytest.raises(TypeError, match="set_step_hooks: expected a callable"):
        set_step_hooks(3)


def test_a_step_hook_that_reads_gradients_turns_the_row_step_off():
    from fastad.optim.optimizers import set_step_hooks

    class Lockstep:
        needs_gradients = True

        def __call__(self, opt, steps):
            opt.apply_update()
            return 1

    table = fa.Parameter(np.zeros((4, 2)))
    set_step_hooks(lambda optimizer: Lockstep())
    try:
        hooked = optim.SGD([table], lr=0.1)
    finally:
        set_step_hooks(None)
    assert hooked.row_step(table) is None
    assert optim.SGD([table], lr=0.1).row_step(table) is not None
    assert optim.SGD([table], lr=0.1, momentum=0.9).row_step(table) is not None   # a RuleRowStep
    with pytest.raises(ValueError, match="not one of the optimizer's"):
        optim.SGD([table], lr=0.1).row_step(fa.Parameter(np.zeros((4, 2))))
