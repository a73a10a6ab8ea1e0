"""A 10,000-node graph of scalar ops: fastad replay and eager build vs PyTorch eager.

The graph mixes tanh, sigmoid, softplus, add and mul at random (seeded); each
binary op combines the newest node with a random recent one, so every node
lies on a path to the root. Run: python bench/scalar_graph.py [--quick]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, cli, torch_or_none  # noqa: E402

import fastad as fa  # noqa: E402

OPS = ("tanh", "sigmoid", "softplus", "add", "mul")


def recipe(nodes, seed=0):
    rng = np.random.default_rng(seed)
    ops = rng.integers(0, len(OPS), size=nodes)
    back = rng.integers(1, 8, size=nodes)
    return [(OPS[o], int(b)) for o, b in zip(ops, back)]


def build(steps, x, lib):
    """Apply the recipe starting from leaf x with the library's functions."""
    tanh, sigmoid, softplus = lib
    vals = [x]
    for op, back in steps:
        last = vals[-1]
        if op == "tanh":
            v = tanh(last)
        elif op == "sigmoid":
            v = sigmoid(last)
        elif op == "softplus":
            v = softplus(last)
        else:
            other = vals[max(0, len(vals) - 1 - back)]
            v = last + other if op == "add" else last * other
            v = tanh(v)            # keeps values bounded; counts as its own node
        vals.append(v)
    return vals[-1]


def count_nodes(steps):
    return sum(2 if op in ("add", "mul") else 1 for op, _ in steps)


def run(quick=False):
    steps = recipe(10_000 if not quick else 2_000)
    nodes = count_nodes(steps)
    fa_lib = (fa.tanh, fa.sigmoid, fa.softplus)
    w = fa.Parameter(np.array(0.3))
    root = build(steps, w, fa_lib)

    def fastad_replay():
        root.forward()
        root.backward()
        return nodes

    def fastad_eager():
        w.zero_grad()
        build(steps, w, fa_lib).backward()
        return nodes

    candidates = {"fastad replay": fastad_replay, "fastad eager": fastad_eager}
    torch = torch_or_none()
    if torch is not None:
        tw = torch.tensor(0.3, requires_grad=True)
        t_lib = (torch.tanh, torch.sigmoid, torch.nn.functional.softplus)

        def torch_eager():
            tw.grad = None
            build(steps, tw, t_lib).backward()
            return nodes

        candidates["torch eager"] = torch_eager
        ref = build(steps, torch.tensor(0.3, dtype=torch.float32, requires_grad=True), t_lib)
        assert abs(ref.item() - root.item()) < 1e-3 * max(1, abs(ref.item())), "fastad and torch disagree"
    t = alternate(candidates, repeats=5 if quick else 9)
    rows = [{"workload": f"scalar graph replay, {nodes} nodes (fwd+bwd)", "unit": "node",
             "fastad": t["fastad replay"], "torch": t.get("torch eager"),
             "target": "<= 100 ns/node, >= 50x torch eager"},
            {"workload": f"scalar graph eager build + backward, {nodes} nodes", "unit": "node",
             "fastad": t["fastad eager"], "torch": t.get("torch eager"),
             "target": ">= 4x torch eager"}]
    return rows


if __name__ == "__main__":
    cli(run, __doc__)
