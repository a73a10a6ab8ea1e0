"""BPR matrix factorisation, per-example sparse SGD, k=32, 50,000 users x 20,000 items.

fastad's compiled loop (`fa.train`) and its plain Python loop
(set_value/forward/backward/step) beside PyTorch's per-example loop with
`nn.Embedding(sparse=True)` and `torch.optim.SGD`, timed alternately.
Run: python bench/bpr.py [--quick]
"""
import os
import sys


sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, cli, torch_or_none  # noqa: E402
from torch_bpr import torch_bpr_trainer  # noqa: E402

import fastad as fa  # noqa: E402

USERS, ITEMS, DIM, LR = 50_000, 20_000, 32, 0.05


def data(n):
    train, _ = fa.data.planted_preferences(USERS, ITEMS, n_train=n, n_test=1, seed=0)
    return train


def run(quick=False):
    triples = data(200_000)
    chunk = 20_000
    model = fa.models.BPR(USERS, ITEMS, dim=DIM, seed=1)
    loss, feeds = model.example_graph()
    opt = fa.optim.SGD(model.parameters(), lr=LR)
    chunks = [{k: v[s:s + chunk] for k, v in triples.items()} for s in range(0, 200_000, chunk)]
    state = {"next": 0}

    def next_chunk():
        state["next"] = (state["next"] + 1) % len(chunks)
        return chunks[state["next"]]

    def fastad_train():
        fa.train(loss, opt, feeds(next_chunk()))
        return chunk

    leaves = list(feeds(chunks[0]).keys())

    def fastad_python_loop(n=500):
        t = next_chunk()
        for e in range(n):
            leaves[0].set_value(t["users"][e:e + 1])
            leaves[1].set_value(t["pos"][e:e + 1])
            leaves[2].set_value(t["neg"][e:e + 1])
            loss.forward()
            loss.backward()
            opt.step()
            opt.zero_grad()
        return n

    candidates = {"fastad train": fastad_train, "fastad python loop": fastad_python_loop}
    if torch_or_none() is not None:
        torch_step = torch_bpr_trainer(USERS, ITEMS, DIM, LR)
        candidates["torch per-example"] = lambda n=500: torch_step(triples, state["next"] * chunk, n)
    t = alternate(candidates, repeats=3 if quick else 7)
    return [
        {"workload": "BPR k=32 per-example sparse SGD, fa.train (compiled loop)", "unit": "example",
         "fastad": t["fastad train"], "torch": t.get("torch per-example"),
         "target": ">= 1,000,000 examples/s on one core"},
        {"workload": "BPR k=32 per-example sparse SGD, Python loop", "unit": "example",
         "fastad": t["fastad python loop"], "torch": t.get("torch per-example"), "target": "-"},
    ]


if __name__ == "__main__":
    cli(run, __doc__)
