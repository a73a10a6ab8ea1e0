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
from common import alternate, classifier_steps, cli, torch_or_none  # noqa: E402

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
    state = {name: torch.from_numpy(value)
             for name, value in mine.state_dict().items()}
    model.load_state_dict(state, strict=False)       # num_batches_tracked keeps its start
    return model


def candidates_for(batch, torch, rng):
    data = rng.standard_normal((16, batch, 1, 8, 8)).astype(np.float32)    # 16 batches, cycled
    labels = rng.integers(0, 10, size=(16, batch))
    model = fastad_model(rng)
    return classifier_steps(data, labels, model, model.parameters(), LR, torch,
                            lambda: torch_model(torch, model))


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
