"""Random graphs mixing every op family: gradients against finite differences and PyTorch."""
import numpy as np
import pytest

import fastad as fa
from vjp import check_vjp

UNARY = ["tanh", "sigmoid", "softplus", "exp_small", "square", "neg"]
BINARY = ["add", "sub", "mul", "div_safe"]


def recipe(seed, n_nodes=12):
    """A reproducible list of ops over (3, 4) values, each using earlier nodes (a DAG)."""
    rng = np.random.default_rng(seed)
    steps = []
    for k in range(n_nodes):
        kind = rng.choice(["unary", "binary", "reduce_bcast", "matmul"], p=[0.4, 0.35, 0.15, 0.1])
        a = int(rng.integers(0, k + 2))            # node ids: 0, 1 are the two leaves
        b = int(rng.integers(0, k + 2))
        name = rng.choice(UNARY if kind == "unary" else BINARY)
        steps.append((str(kind), str(name), a, b))
    return steps


def apply(lib, steps, x, y):
    """Evaluate the recipe with either fastad or torch (`lib` maps names to functions)."""
    nodes = [x, y]
    for kind, name, a, b in steps:
        u, v = nodes[a], nodes[b]
        if kind == "unary":
            out = lib[name](u)
        elif kind == "binary":
            out = lib[name](u, v)
        elif kind == "reduce_bcast":
            out = u - lib["mean0"](v)                  # (3, 4) - (1, 4): broadcasting back
        else:
            out = lib["tanh"](lib["matmul_t"](u, v))   # (3, 4) @ (4, 3) -> (3, 3) @ (3, 4)
        nodes.append(out)
    return nodes[-1] + nodes[len(nodes) // 2]          # two uses: shared subexpressions


def fastad_lib():
    return {
        "tanh": fa.tanh, "sigmoid": fa.sigmoid, "softplus": fa.softplus,
        "exp_small": lambda t: fa.exp(fa.tanh(t)), "square": fa.square, "neg": fa.neg,
        "add": fa.add, "sub": fa.sub, "mul": fa.mul,
        "div_safe": lambda s, t: s / (fa.square(t) + 1.0),
        "mean0": lambda t: fa.mean(t, axis=0, keepdims=True),
        "matmul_t": lambda s, t: (s @ t.T) @ t * 0.1,
    }


@pytest.mark.parametrize("seed", range(8))
def test_random_dag_gradients_match_finite_differences(seed):
    steps = recipe(seed)
    rng = np.random.default_rng(100 + seed)
    check_vjp(lambda x, y: apply(fastad_lib(), steps, x, y),
              rng.normal(size=(3, 4)) * 0.5, rng.normal(size=(3, 4)) * 0.5, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("seed", range(12, 20))
def test_random_dag_matches_torch(seed):
    torch = pytest.importorskip("torch")
    steps = recipe(seed, n_nodes=20)
    rng = np.random.default_rng(seed)
    xs, ys = rng.normal(size=(3, 4)) * 0.5, rng.normal(size=(3, 4)) * 0.5
    px, py = fa.Parameter(xs, dtype=np.float64), fa.Parameter(ys, dtype=np.float64)
    out = apply(fastad_lib(), steps, px, py)
    cot = rng.normal(size=out.shape)
    out.backward(cot)
    tlib = {
        "tanh": torch.tanh, "sigmoid": torch.sigmoid, "softplus": torch.nn.functional.softplus,
        "exp_small": lambda t: torch.exp(torch.tanh(t)), "square": torch.square, "neg": torch.neg,
        "add": torch.add, "sub": torch.sub, "mul": torch.mul,
        "div_safe": lambda s, t: s / (torch.square(t) + 1.0),
        "mean0": lambda t: t.mean(0, keepdim=True),
        "matmul_t": lambda s, t: (s @ t.T) @ t * 0.1,
    }
    tx = torch.tensor(xs, requires_grad=True)
    ty = torch.tensor(ys, requires_grad=True)
    tout = apply(tlib, steps, tx, ty)
    tout.backward(torch.tensor(cot))
    np.testing.assert_allclose(out.value, tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    for mine, theirs in ((px, tx), (py, ty)):        # an unused leaf's grad is None in both
        if theirs.grad is None:
            assert mine.grad is None
        else:
            np.testing.assert_allclose(mine.grad, theirs.grad.numpy(), rtol=1e-9, atol=1e-12)
