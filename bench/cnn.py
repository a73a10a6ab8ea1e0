"""The CNN of examples/cnn.py, train step at batch 32 and batch 1, beside PyTorch.

Conv2d(1, 16, 3, padding=1) -> BatchNorm2d -> ReLU -> MaxPool2d(2) ->
Conv2d(16, 32, 3, padding=1) -> ReLU -> MaxPool2d(2) -> Flatten -> Linear(128, 10),
softmax cross-entropy, plain SGD, on random 8x8 one-channel images. fastad
replays one graph per batch size (set_value, forward, backward, step);
PyTorch runs its usual forward/zero_grad/backward/step. Both start from the
same weights and are checked to compute the same first loss. float32, one
BLAS/PyTorch thread each; timed alternately in one process. At batch 1 the
batch norm has 64 values per channel (8x8), so it trains there too.
Run: python bench/cnn.py [--quick]
"""
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import alternate, cli, torch_or_none  # noqa: E402

import fastad as fa  # noqa: E402

LR = 0.01


def fastad_model(rng):
    return fa.nn.Sequential(
        fa.nn.Conv2d(1, 16, 3, padding=1, generator=rng), fa.nn.BatchNorm2d(16), fa.nn.ReLU(),
        fa.nn.MaxPool2d(2), fa.nn.Conv2d(16, 32, 3, padding=1, generator=rng), fa.nn.ReLU(),
        fa.nn.MaxPool2d(2), fa.nn.Flatten(), fa.nn.Linear(128, 10, generator=rng))


def torch_model(torch, mine):
    """The same network in PyTorch, holding a copy of `mine`'s weights."""
    nn = torch.nn
    model = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(128, 10))
    state = {name: torch.from_numpy(np.ascontiguousarray(value.T if name == "8.weight" else value))
             for name, value in mine.state_dict().items()}
    model.load_state_dict(state, strict=False)       # num_batches_tracked keeps its start
    return model


def candidates_for(batch, torch, rng):
    data = rng.standard_normal((16, batch, 1, 8, 8)).astype(np.float32)    # 16 batches, cycled
    labels = rng.integers(0, 10, size=(16, batch))
    state = {"next": 0}

    def next_batch():
        state["next"] = (state["next"] + 1) % len(data)
        return state["next"]

    model = fastad_model(rng)
    reference = torch_model(torch, model) if torch is not None else None
    x, y = fa.Input(data[0]), fa.IndexInput(labels[0])
    loss = fa.nn.cross_entropy(model(x), y)
    first_loss = loss.item()
    opt = fa.optim.SGD(model.parameters(), lr=LR)

    def fastad_step():
        k = next_batch()
        x.set_value(data[k])
        y.set_value(labels[k])
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return 1

    candidates = {"fastad": fastad_step}
    if torch is None:
        return candidates
    tdata, tlabels = torch.from_numpy(data), torch.from_numpy(labels)
    topt = torch.optim.SGD(reference.parameters(), lr=LR)
    torch_first = torch.nn.functional.cross_entropy(reference(tdata[0]), tlabels[0]).item()
    assert abs(torch_first - first_loss) < 1e-4 * abs(first_loss), \
        f"fastad and torch disagree: {first_loss} vs {torch_first}"

    def torch_step():
        k = next_batch()
        out = torch.nn.functional.cross_entropy(reference(tdata[k]), tlabels[k])
        topt.zero_grad()
        out.backward()
        topt.step()
        return 1

    candidates["torch"] = torch_step
    return candidates


def run(quick=False):
    pin_blas_to_one_thread()
    torch = torch_or_none()
    rng = np.random.default_rng(0)
    rows = []
    for batch, target in ((32, "no slower than PyTorch (speed-up >= 1)"),
                          (1, ">= 3x faster than PyTorch")):
        t = alternate(candidates_for(batch, torch, rng), repeats=3 if quick else 7)
        rows.append({"workload": f"CNN (2 conv, batch norm, 2 max-pool, linear) on 8x8 images, "
                                 f"train step, batch {batch}", "unit": "step",
                     "fastad": t["fastad"], "torch": t.get("torch"), "target": target})
    return rows


if __name__ == "__main__":
    cli(run, __doc__)
