"""MLP 784-128-10 train step (ReLU, softmax cross-entropy, plain SGD) at batch 32 and batch 1.

fastad replays one graph per batch size (set_value on an Input and an
IndexInput, forward, backward, step); PyTorch runs its usual
forward/zero_grad/backward/step. Both start from the same weights and are
checked to compute the same first loss. float32, one BLAS/PyTorch thread
each (blas_threads.py, common.torch_or_none); timed alternately in one process.
Run: python bench/mlp.py [--quick]
"""
import os
import sys

# Run as a script, start BLAS with one thread (no idle workers spinning on the other
# core); run() pins it again for a caller that loaded BLAS first.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import alternate, classifier_steps, cli, torch_or_none  # noqa: E402

import fastad as fa  # noqa: E402

SIZES, LR = (784, 128, 10), 0.01


def candidates_for(batch, torch, rng):
    data = rng.standard_normal((16, batch, SIZES[0])).astype(np.float32)   # 16 batches, cycled
    labels = rng.integers(0, SIZES[2], size=(16, batch))
    first = fa.nn.Linear(SIZES[0], SIZES[1], generator=rng)
    second = fa.nn.Linear(SIZES[1], SIZES[2], generator=rng)

    def torch_model():
        model = torch.nn.Sequential(torch.nn.Linear(*SIZES[:2]), torch.nn.ReLU(),
                                    torch.nn.Linear(*SIZES[1:]))
        with torch.no_grad():
            for layer, mine in zip((model[0], model[2]), (first, second)):
                layer.weight.copy_(torch.from_numpy(mine.weight.value))
                layer.bias.copy_(torch.from_numpy(mine.bias.value))
        return model

    return classifier_steps(data, labels, lambda x: second(fa.relu(first(x))),
                            first.parameters() + second.parameters(), LR, torch, torch_model)


def run(quick=False):
    pin_blas_to_one_thread()
    torch = torch_or_none()
    rng = np.random.default_rng(0)
    rows = []
    for batch, target in ((32, "no slower than PyTorch (speed-up >= 1)"), (1, ">= 5x faster than PyTorch")):
        t = alternate(candidates_for(batch, torch, rng), repeats=3 if quick else 7)
        rows.append({"workload": f"MLP 784-128-10 train step, batch {batch}", "unit": "step",
                     "fastad": t["fastad"], "torch": t.get("torch"), "target": target})
    return rows


if __name__ == "__main__":
    cli(run, __doc__)
