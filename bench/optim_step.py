"""One optimizer step on a sparse gradient of one 1x32 row of a 50,000 x 32 table.

fastad's optimizers update only the touched row; PyTorch's SGD, Adagrad and
SparseAdam take the same sparse gradient from `nn.Embedding(sparse=True)`.
The gradient is made once by a backward through a gather of one row; the
timing covers step() alone, which reads that same gradient every time.
Run: python bench/optim_step.py [--quick]
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, cli, torch_or_none  # noqa: E402

import fastad as fa  # noqa: E402

ROWS, DIM = 50_000, 32
OPTIMIZERS = {"SGD": ("SGD", "SGD", {"lr": 0.01}), "Adagrad": ("Adagrad", "Adagrad", {"lr": 0.01}),
              "Adam": ("Adam", "SparseAdam", {"lr": 0.01})}


def fastad_step(name, kwargs):
    E = fa.Parameter(np.random.default_rng(0).normal(size=(ROWS, DIM)))
    rows = E[fa.IndexInput([123])]
    opt = getattr(fa.optim, name)([E], **kwargs)
    rows.backward(np.ones((1, DIM), dtype=np.float32))

    def step(n=5000):
        for _ in range(n):
            opt.step()
        return n
    return step


def torch_step(torch, name, kwargs):
    emb = torch.nn.Embedding(ROWS, DIM, sparse=True)
    opt = getattr(torch.optim, name)(emb.parameters(), **kwargs)
    ids = torch.tensor([123])
    emb(ids).backward(torch.ones(1, DIM))

    def step(n=500):
        for _ in range(n):
            opt.step()
        return n
    return step


def run(quick=False):
    torch = torch_or_none()
    rows = []
    for label, (fa_name, torch_name, kwargs) in OPTIMIZERS.items():
        candidates = {"fastad": fastad_step(fa_name, kwargs)}
        if torch is not None:
            candidates["torch"] = torch_step(torch, torch_name, kwargs)
        t = alternate(candidates, repeats=3 if quick else 7)
        rows.append({"workload": f"{label} step() on one sparse 1x32 row of a 50,000-row table",
                     "unit": "step", "fastad": t["fastad"], "torch": t.get("torch"),
                     "target": "well under 1 µs per step"})
    return rows


if __name__ == "__main__":
    cli(run, __doc__)
