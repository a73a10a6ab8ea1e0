"""A gradient check for non-scalar outputs that needs no reduction op.

`check_vjp(build, *arrays)` builds `out = build(*params)` on float64
Parameters, backpropagates a random cotangent `c` (`out.backward(c)`) and
compares each parameter's gradient with central differences of
`sum(c * out.value)`, replaying the graph with `out.forward()`.
"""
import numpy as np

import fastad as fa


def check_vjp(build, *arrays, eps=1e-6, rtol=1e-5, atol=1e-7, seed=0):
    params = [fa.Parameter(np.asarray(a, dtype=np.float64), dtype=np.float64) for a in arrays]
    out = build(*params)
    cot = np.random.default_rng(seed).normal(size=out.shape)
    out.backward(cot)
    for k, p in enumerate(params):
        flat = p.value.reshape(-1)
        numerical = np.empty(flat.size)
        for i in range(flat.size):
            saved = flat[i]
            flat[i] = saved + eps
            up = np.sum(cot * out.forward().value)
            flat[i] = saved - eps
            down = np.sum(cot * out.forward().value)
            flat[i] = saved
            numerical[i] = (up - down) / (2 * eps)
        grad = np.zeros(p.shape) if p.grad is None else p.grad     # None: no gradient reached it
        np.testing.assert_allclose(grad.reshape(-1), numerical, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {k} (shape {p.shape})")
    out.forward()
    return out
