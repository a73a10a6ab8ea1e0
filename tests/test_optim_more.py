"""Adadelta, Adamax, NAdam and RAdam against torch.optim: dense steps, sparse rows (the
documented rules), float32, state_dict round trips, fastad.train, shared (Hogwild)
state and the bad hyperparameters."""
import math

import numpy as np
import pytest
import torch

import fastad as fa
from fastad import optim
from loop_helpers import train_in_python
from optim_helpers import (assert_dense_steps_match_torch, assert_float32_tracks_float64, set_grad,
                           sparse_grad, stepped_on_sparse_rows, summed_rows)

F64 = np.float64

OPTIMIZERS = [
    (optim.Adadelta, dict(lr=1.0)),
    (optim.Adadelta, dict(lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)),
    (optim.Adamax, dict(lr=0.01)),
    (optim.Adamax, dict(lr=0.02, betas=(0.3, 0.9), eps=1e-6, weight_decay=0.1)),   # lerp's other branch
    (optim.NAdam, dict(lr=0.01)),
    (optim.NAdam, dict(lr=0.02, betas=(0.3, 0.9), weight_decay=0.1, momentum_decay=0.01)),
    (optim.NAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
    (optim.RAdam, dict(lr=0.01)),
    (optim.RAdam, dict(lr=0.02, betas=(0.5, 0.8), eps=1e-6, weight_decay=0.1)),
    (optim.RAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True)),
]
IDS = [f"{cls.__name__}-{i}" for i, (cls, _) in enumerate(OPTIMIZERS)]


@pytest.fixture(autouse=True)
def torch_float64():
    """torch keeps NAdam's running product in its default dtype: float64 here, as ours."""
    saved = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(saved)


def torch_optimizer(cls, params, kw):
    return getattr(torch.optim, cls.__name__)(params, foreach=False, **kw)


@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_dense_steps_match_torch(cls, kw):
    # 25 steps: RAdam's rectified branch starts at step 6
    assert_dense_steps_match_torch(torch, cls, kw, lambda tps: torch_optimizer(cls, tps, kw),
                                   steps=25)


def test_nadam_past_the_end_of_its_product_table_matches_torch():
    # beta1 = 0.5: the running product is below 2**-60 after ~70 steps; the table stops there
    kw = dict(lr=0.01, betas=(0.5, 0.9))
    rng = np.random.default_rng(2)
    init = rng.standard_normal(4)
    p, tp = fa.Parameter(init, dtype=F64), torch.tensor(init, requires_grad=True)
    opt, topt = optim.NAdam([p], **kw), torch_optimizer(optim.NAdam, [tp], kw)
    for _ in range(150):
        g = rng.standard_normal(4)
        set_grad(p, g)
        tp.grad = torch.tensor(g)
        opt.step()
        topt.step()
    np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_float32_tracks_float64(cls, kw):
    assert_float32_tracks_float64(cls, kw, steps=8, torch=torch,
                                  torch_optimizer=lambda tps: torch_optimizer(cls, tps, kw))


# ----------------------------------------------------------------- sparse rows

def nadam_product(kw, steps):
    """torch.optim.NAdam's mu_product after `steps` steps."""
    beta1 = kw.get("betas", (0.9, 0.999))[0]
    decay = kw.get("momentum_decay", 4e-3)
    product = 1.0
    for t in range(1, steps + 1):
        product *= beta1 * (1.0 - 0.5 * 0.96 ** (t * decay))
    return product


def lazy_reference(cls, kw, init, schedule):
    """The documented sparse rule through torch itself: at each step the touched rows
    take one torch step from their own state, with the step count the Parameter shares
    (Adamax, NAdam, RAdam: the steps at which any row had a gradient); untouched rows
    keep value and state."""
    rows = init.shape[0]
    values = [init[r].copy() for r in range(rows)]
    states = [None] * rows
    for t, (ids, grads) in enumerate(schedule, start=1):
        for r, g in summed_rows(ids, grads).items():
            tp = torch.tensor(values[r], requires_grad=True)
            topt = torch_optimizer(cls, [tp], kw)
            if states[r] is not None:
                state = {k: v.clone() for k, v in states[r].items()}
                if cls is not optim.Adadelta:
                    state["step"] = torch.tensor(float(t - 1))
                if cls is optim.NAdam:
                    state["mu_product"] = torch.tensor(nadam_product(kw, t - 1))
                topt.state[tp] = state
            elif cls is not optim.Adadelta and t > 1:
                # a row's first update still uses the shared step count t
                zeros = torch.zeros_like(tp)
                slots = {"exp_avg": zeros, "exp_inf" if cls is optim.Adamax else "exp_avg_sq": zeros}
                topt.state[tp] = {"step": torch.tensor(float(t - 1)), **{k: v.clone() for k, v in slots.items()}}
                if cls is optim.NAdam:
                    topt.state[tp]["mu_product"] = torch.tensor(nadam_product(kw, t - 1))
            tp.grad = torch.tensor(g)
            topt.step()
            values[r] = tp.detach().numpy().copy()
            states[r] = topt.state[tp]
    return np.stack(values)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_sparse_rows_follow_the_documented_lazy_rule(cls, kw, dtype):
    init, w, opt, schedule = stepped_on_sparse_rows(cls, kw, dtype, 10)
    rows = len(init)
    expected = lazy_reference(cls, kw, init, schedule)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == np.float64 else dict(rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w.value, expected, **tol)
    np.testing.assert_array_equal(w.value[rows - 1], init[rows - 1].astype(dtype))
    untouched = opt.state_dict()
    for name in opt.state_dict():
        if name.startswith("state.0.") and not name.endswith("step"):
            assert np.all(untouched[name][rows - 1] == 0), name


def test_sparse_then_dense_gradient_on_one_parameter():
    init = np.arange(12.0).reshape(4, 3) / 10
    for cls in (optim.Adadelta, optim.Adamax, optim.NAdam, optim.RAdam):
        w, v = fa.Parameter(init, dtype=F64), fa.Parameter(init, dtype=F64)
        ow, ov = cls([w]), cls([v])
        sparse_grad(w, [1, 1], np.ones((2, 3)))
        (w * 2.0).backward(np.ones((4, 3)))
        g = np.full((4, 3), 2.0)
        g[1] += 2.0
        set_grad(v, g)
        ow.step()
        ov.step()
        np.testing.assert_allclose(w.value, v.value, rtol=1e-14)


# -------------------------------------------------------- state, train, shared

@pytest.mark.parametrize("cls,kw", OPTIMIZERS, ids=IDS)
def test_state_dict_resumes_exactly(cls, kw, tmp_path):
    rng = np.random.default_rng(5)
    init = rng.standard_normal((3, 2))
    grads = [rng.standard_normal((3, 2)) for _ in range(8)]
    straight = fa.Parameter(init, dtype=F64)
    opt = cls([straight], **kw)
    for g in grads:
        set_grad(straight, g)
        opt.step()
    first = fa.Parameter(init, dtype=F64)
    opt1 = cls([first], **kw)
    for g in grads[:4]:
        set_grad(first, g)
        opt1.step()
    fa.save({"opt": opt1.state_dict(), "w": first.value}, tmp_path / "ckpt.npz")
    saved = fa.load(tmp_path / "ckpt.npz")
    second = fa.Parameter(saved["w"], dtype=F64)
    opt2 = cls([second], **kw).load_state_dict(saved["opt"])
    for g in grads[4:]:
        set_grad(second, g)
        opt2.step()
    np.testing.assert_array_equal(second.value, straight.value)
    assert set(saved["opt"]) == set(opt.state_dict())


def test_load_state_dict_checks_the_hyperparameters():
    w = fa.Parameter(np.zeros(3))
    saved = optim.NAdam([w], momentum_decay=0.01).state_dict()
    with pytest.raises(ValueError, match="saved with momentum_decay=0.01"):
        optim.NAdam([fa.Parameter(np.zeros(3))]).load_state_dict(saved)
    with pytest.raises(ValueError, match="missing keys"):
        optim.Adamax([fa.Parameter(np.zeros(3))]).load_state_dict(
            optim.Adadelta([fa.Parameter(np.zeros(3))]).state_dict())


@pytest.mark.parametrize("cls,kw", [(optim.Adadelta, {}), (optim.Adamax, {"lr": 0.01}),
                                    (optim.NAdam, {"lr": 0.01}), (optim.RAdam, {"lr": 0.01})])
def test_train_matches_the_python_loop_exactly(cls, kw):
    train, _ = fa.data.planted_preferences(40, 30, n_train=100, n_test=10, rank=3, seed=0)
    runs = []
    for _ in range(2):
        model = fa.models.BPR(40, 30, dim=4, seed=1, dtype=F64)
        loss, feeds = model.example_graph()
        runs.append((model, loss, feeds, cls(model.parameters(), **kw)))
    (m1, loss1, feeds1, opt1), (m2, loss2, feeds2, opt2) = runs
    fa.train(loss1, opt1, feeds1(train))
    train_in_python(loss2, opt2, feeds2, train)
    np.testing.assert_array_equal(m1.U.value, m2.U.value)
    np.testing.assert_array_equal(m1.V.value, m2.V.value)


@pytest.mark.parametrize("cls,slots", [(optim.Adadelta, ("square_avg", "acc_delta")),
                                       (optim.Adamax, ("exp_avg", "exp_inf")),
                                       (optim.NAdam, ("exp_avg", "exp_avg_sq")),
                                       (optim.RAdam, ("exp_avg", "exp_avg_sq"))])
def test_hogwild_shared_parameters_share_the_state(cls, slots):
    with fa.hogwild.share({"U": np.zeros((4, 2))}) as shared:
        worker1, worker2 = fa.Parameter(shared["U"]), fa.Parameter(shared["U"])
        opt1, opt2 = cls([worker1]), cls([worker2])
        set_grad(worker1, np.ones((4, 2)))
        opt1.step()
        for slot in slots:                        # one state array, in the shared segment
            np.testing.assert_array_equal(opt2.state_dict()[f"state.0.{slot}"],
                                          opt1.state_dict()[f"state.0.{slot}"])
            assert np.any(opt1.state_dict()[f"state.0.{slot}"] != 0)
        np.testing.assert_array_equal(worker2.value, worker1.value)
        assert not np.all(worker1.value == 0)


# ------------------------------------------------------------------ bad input

W = fa.Parameter(np.zeros(3))


@pytest.mark.parametrize("make, error, message", [
    (lambda: optim.Adadelta([W], rho=1.5), ValueError, r"Adadelta: rho must be in \[0, 1\], got 1.5"),
    (lambda: optim.Adadelta([W], eps=0), ValueError, r"Adadelta: eps must be > 0"),
    (lambda: optim.Adadelta([W], lr=-1), ValueError, r"Adadelta: lr must be in"),
    (lambda: optim.Adamax([W], betas=(1.0, 0.9)), ValueError, r"Adamax: betas\[0\] must be in \[0, 1\)"),
    (lambda: optim.Adamax([W], betas=0.9), TypeError, r"Adamax: betas must be a pair"),
    (lambda: optim.Adamax([W], weight_decay=-0.1), ValueError, r"Adamax: weight_decay must be in"),
    (lambda: optim.NAdam([W], momentum_decay=-1e-3), ValueError, r"NAdam: momentum_decay must be in"),
    (lambda: optim.NAdam([W], decoupled_weight_decay=1), TypeError,
     r"NAdam: decoupled_weight_decay must be True or False"),
    (lambda: optim.RAdam([W], betas=(0.9, -0.1)), ValueError, r"RAdam: betas\[1\] must be in"),
    (lambda: optim.RAdam([W], eps="small"), TypeError, r"RAdam: eps must be a number"),
    (lambda: optim.RAdam(W), TypeError, r"RAdam: params must be an iterable of Parameters"),
    (lambda: optim.NAdam([]), ValueError, r"NAdam: got an empty list of parameters"),
])
def test_bad_hyperparameters_raise(make, error, message):
    with pytest.raises(error, match=message):
        make()


def test_hyperparameters_and_repr():
    opt = optim.NAdam([W], lr=0.1, momentum_decay=0.01, decoupled_weight_decay=True)
    assert opt.hyperparameters() == {"lr": 0.1, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                                     "weight_decay": 0.0, "momentum_decay": 0.01,
                                     "decoupled_weight_decay": True}
    assert repr(optim.Adadelta([W])).startswith("Adadelta(lr=1.0, rho=0.9, eps=1e-06")
    assert optim.Adamax([W]).lr == 2e-3 and optim.RAdam([W]).decoupled_weight_decay is False
    assert math.isclose(optim.Adamax([W]).beta2, 0.999)
