"""Helpers of the optimizer tests (test_optim.py, test_optim_more.py)."""
import numpy as np

import fastad as fa


def set_grad(p, g):
    """Make p's gradient exactly g (dense)."""
    p.zero_grad()
    (p * 1.0).backward(np.asarray(g, dtype=p.dtype))


def assert_dense_steps_match_torch(torch, cls, kw, torch_optimizer, steps):
    """`steps` dense steps of cls(params, **kw) and of torch_optimizer(torch params) over
    float64 Parameters of shapes (3, 4), (), (1, 5) and (0, 3) give the same values, with
    the lr halved at step 4 (as a scheduler would) and Parameter 1 getting no gradient at
    steps 2 and 3 (skipped, like torch's grad=None)."""
    rng = np.random.default_rng(0)
    inits = [rng.standard_normal(s) for s in [(3, 4), (), (1, 5), (0, 3)]]
    ps = [fa.Parameter(a, dtype=np.float64) for a in inits]
    tps = [torch.tensor(a, requires_grad=True) for a in inits]
    opt, topt = cls(ps, **kw), torch_optimizer(tps)
    for step in range(steps):
        if step == 4:
            opt.lr = topt.param_groups[0]["lr"] = kw["lr"] / 2
        for i, (p, tp) in enumerate(zip(ps, tps)):
            if i == 1 and step in (2, 3):
                p.zero_grad()
                tp.grad = None
                continue
            g = rng.standard_normal(p.shape)
            set_grad(p, g)
            tp.grad = torch.tensor(g)
        opt.step()
        topt.step()
        for p, tp in zip(ps, tps):
            np.testing.assert_allclose(p.value, tp.detach().numpy(), rtol=1e-12, atol=1e-14)


def sparse_grad(p, ids, rows):
    """Add a sparse gradient: rows[k] into row ids[k] of p (repeated ids add)."""
    fa.take(p, fa.IndexInput(np.asarray(ids, dtype=np.int64))).backward(np.asarray(rows, dtype=p.dtype))


def sparse_schedule(rng, rows, dim, steps):
    """[(ids, grad rows)] with repeats, rows untouched for several steps; the last row is
    never touched."""
    return [(rng.integers(0, rows - 1, size=3), rng.standard_normal((3, dim))) for _ in range(steps)]


def summed_rows(ids, grads):
    """{row: the sum of its gradient rows} of one sparse gradient."""
    out = {}
    for r, g in zip(ids, grads):
        out[int(r)] = out.get(int(r), 0) + g
    return out


def stepped_on_sparse_rows(cls, kw, dtype, steps, rows=6, dim=4):
    """A (rows, dim) Parameter stepped by cls(**kw) on `steps` sparse gradients of
    sparse_schedule (seed 3): (its initial values, it, the optimizer, the schedule)."""
    rng = np.random.default_rng(3)
    init = rng.standard_normal((rows, dim))
    w = fa.Parameter(init, dtype=dtype)
    opt = cls([w], **kw)
    schedule = sparse_schedule(rng, rows, dim, steps)
    for ids, grads in schedule:
        sparse_grad(w, ids, grads)
        opt.step()
        opt.zero_grad()
    return init, w, opt, schedule


def assert_float32_tracks_float64(cls, kw, steps, torch=None, torch_optimizer=None):
    """`steps` steps of cls(**kw) on the same random (4, 3) gradients (seed 1) of a float32
    and a float64 Parameter: the float32 one stays float32 and tracks the float64 one. Given
    torch and torch_optimizer(tensors), a float32 torch tensor takes the same steps and the
    float32 Parameter tracks it too."""
    rng = np.random.default_rng(1)
    init = rng.standard_normal((4, 3))
    p32, p64 = fa.Parameter(init, dtype=np.float32), fa.Parameter(init, dtype=np.float64)
    o32, o64 = cls([p32], **kw), cls([p64], **kw)
    if torch is not None:
        tp = torch.tensor(init.astype(np.float32), requires_grad=True)
        topt = torch_optimizer([tp])
    for _ in range(steps):
        g = rng.standard_normal((4, 3))
        set_grad(p32, g)
        set_grad(p64, g)
        if torch is not None:
            tp.grad = torch.tensor(g.astype(np.float32))
        o32.step()
        o64.step()
        if torch is not None:
            topt.step()
    assert p32.value.dtype == np.float32
    np.testing.assert_allclose(p32.value, p64.value, rtol=2e-4, atol=2e-5)
    if torch is not None:
        np.testing.assert_allclose(p32.value, tp.detach().numpy(), rtol=1e-5, atol=1e-6)
