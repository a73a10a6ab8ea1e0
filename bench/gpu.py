"""GPU benchmarks beside PyTorch CUDA, alternated in one process (needs a GPU and CuPy).

- MLP 4096-4096-4096-10 at batch 1024, one SGD train step (cross-entropy):
  fastad replaying its graph (forward, backward, step), the same step captured
  as a CUDA graph (fa.cuda.capture), and PyTorch CUDA eager. Target: fastad
  >= 0.8x PyTorch's throughput.
- A tiny train step (MLP 16-32-1, batch 1, MSE, SGD): fastad's captured CUDA
  graph against PyTorch CUDA eager on the same graph. Target: >= 5x faster.
- The ready models' fits on the GPU (`device="cuda"`) beside the same fits on
  the CPU (one worker), sampling and copies included, with held-out quality:
  `BPR.fit` on a planted user x item matrix (test AUC) and skip-gram
  `Word2Vec.fit` on bench/peers.py's standard-library text (held-out SGNS loss).
  Target: faster than the CPU fit at the same quality.

Each step ends with a device synchronize on both sides. float32; PyTorch with
TF32 off (its default for float32 matmul), as CuPy's cuBLAS calls.
Run: python bench/gpu.py [--quick] [--json PATH]
`--emulate --width 64 --batch 8` runs the fastad side on the CPU kernel
emulator (a dry run of the code paths, the model fits on small data: the
timings mean nothing).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import alternate, machine, report  # noqa: E402

import fastad as fa  # noqa: E402
from fastad.cuda import backend  # noqa: E402

LR = 0.01


def skip_reason():
    """Why this machine cannot run the GPU benchmarks, or None."""
    b = backend.get(required=False)
    if b is None or b.name != "cupy":
        return "no GPU: fastad.cuda.is_available() is False (needs CuPy and a CUDA device)"
    return None


def torch_cuda_or_none():
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def _fastad_mlp(sizes, batch, rng, data, labels, loss_name):
    """A fastad MLP on "cuda" with its train step; returns (step, first loss, layers)."""
    layers = [fa.nn.Linear(a, b, generator=rng).to("cuda") for a, b in zip(sizes, sizes[1:])]
    x = fa.Input(data[0], device="cuda")
    h = x
    for k, layer in enumerate(layers):
        h = layer(h)
        if k < len(layers) - 1:
            h = fa.relu(h) if loss_name == "cross_entropy" else fa.tanh(h)
    if loss_name == "cross_entropy":
        y = fa.IndexInput(labels[0], device="cuda")
        loss = fa.nn.cross_entropy(h, y)
    else:
        y = fa.Input(labels[0], device="cuda")
        loss = fa.nn.mse(h, y)
    params = [p for layer in layers for p in layer.parameters()]
    opt = fa.optim.SGD(params, lr=LR)

    def step():
        loss.forward()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step, loss, x, y, layers


def _torch_mlp(torch, layers, loss_name):
    mods = []
    for k, mine in enumerate(layers):
        lin = torch.nn.Linear(*mine.weight.shape).cuda()
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(np.ascontiguousarray(mine.weight.numpy().T)))
            lin.bias.copy_(torch.from_numpy(mine.bias.numpy()))
        mods.append(lin)
        if k < len(layers) - 1:
            mods.append(torch.nn.ReLU() if loss_name == "cross_entropy" else torch.nn.Tanh())
    model = torch.nn.Sequential(*mods)
    lossf = (torch.nn.functional.cross_entropy if loss_name == "cross_entropy"
             else torch.nn.functional.mse_loss)
    return model, lossf, torch.optim.SGD(model.parameters(), lr=LR)


def workload(name, sizes, batch, loss_name, rng, torch, quick, target, captured_only=False):
    """Rows for one MLP train step: fastad replay (unless captured_only), fastad
    captured, and PyTorch eager, alternated."""
    n_batches = 4
    data = rng.standard_normal((n_batches, batch, sizes[0])).astype(np.float32)
    if loss_name == "cross_entropy":
        labels = rng.integers(0, sizes[-1], size=(n_batches, batch))
    else:
        labels = rng.standard_normal((n_batches, batch, sizes[-1])).astype(np.float32)
    state = {"k": 0}

    def next_batch():
        state["k"] = (state["k"] + 1) % n_batches
        return state["k"]

    sync = fa.cuda.synchronize
    step, loss, x, y, layers = _fastad_mlp(sizes, batch, rng, data, labels, loss_name)
    first = loss.item()
    candidates = {}
    torch_parts = _torch_mlp(torch, layers, loss_name) if torch is not None else None

    if not captured_only:
        def fastad_replay():
            k = next_batch()
            x.set_value(data[k])
            y.set_value(labels[k])
            step()
            sync()
            return 1
        candidates["fastad"] = fastad_replay

    replay = fa.cuda.capture(step)

    def fastad_graph():
        k = next_batch()
        x.set_value(data[k])
        y.set_value(labels[k])
        replay()
        return 1
    candidates["fastad CUDA graph"] = fastad_graph

    if torch_parts is not None:
        model, lossf, topt = torch_parts
        tdata = torch.from_numpy(data).cuda()
        tlabels = torch.from_numpy(labels).cuda()
        # The torch model started from fastad's first weights: the first losses agree.
        first_torch = lossf(model(tdata[0]), tlabels[0]).item()
        assert abs(first_torch - first) <= 1e-3 * max(1.0, abs(first)), \
            f"{name}: fastad and torch disagree on the first loss: {first} vs {first_torch}"

        def torch_eager():
            k = next_batch()
            out = lossf(model(tdata[k]), tlabels[k])
            topt.zero_grad()
            out.backward()
            topt.step()
            torch.cuda.synchronize()
            return 1
        candidates["torch"] = torch_eager

    t = alternate(candidates, repeats=3 if quick else 7, min_time=0.1 if quick else 0.3)
    rows = []
    for who in candidates:
        if who == "torch":
            continue
        rows.append({"workload": f"{name} ({who})", "unit": "step", "fastad": t[who],
                     "torch": t.get("torch"), "target": target})
    return rows


def model_fit_rows(small=False):
    """BPR.fit and skip-gram Word2Vec.fit on "cuda" at two batch sizes beside the CPU fit
    (one worker, run once): rows whose peer is the CPU fit, with test AUC / held-out SGNS
    loss of both in the name."""
    from peers import encode, heldout_sgns_loss, stdlib_text

    def fits(make, fit, quality, batches):
        """{"cpu" or a batch size: (seconds, quality)} of fresh models."""
        results = {}
        for batch in ("cpu",) + batches:
            model = make()
            start = time.perf_counter()
            fit(model, {} if batch == "cpu" else {"device": "cuda", "batch_size": batch})
            results[batch] = (time.perf_counter() - start, quality(model))
        return results

    users, items, per_user, epochs, dim = (500, 200, 20, 1, 16) if small else (20_000, 5_000, 50, 2, 64)
    likes = fa.data.planted_interactions(users, items, per_user=per_user, seed=0)
    train, test = fa.data.train_test_split(likes, 0.2, seed=0)
    scored = np.arange(min(users, 2_000))
    bpr = fits(lambda: fa.models.BPR(users, items, dim=dim, seed=1),
               lambda model, options: model.fit(train, epochs=epochs, lr=0.05, **options),
               lambda model: fa.metrics.auc(model.scores(scored), test, train=train, users=scored),
               (1024, 8192))
    samples = epochs * train.nnz
    rows = [{"workload": f"GPU BPR.fit k={dim}, batch {batch}, {train.nnz:,} likes, sampling included, "
                         f"vs the CPU fit (AUC {bpr[batch][1]:.3f} vs {bpr['cpu'][1]:.3f})",
             "unit": "sample", "fastad": bpr[batch][0] / samples, "peer": bpr["cpu"][0] / samples,
             "peer_name": "CPU fit", "target": "faster than the CPU fit, AUC within 0.01"}
            for batch in (1024, 8192)]
    sentences = stdlib_text(20_000 if small else 300_000)
    split = int(len(sentences) * 0.9)
    train_text, held = sentences[:split], sentences[split:]
    settings = dict(dim=16 if small else 64, window=5, negative=5, min_count=5, sample=0, epochs=1,
                    seed=0)

    def heldout(model):
        return heldout_sgns_loss(model.vectors, model.output, *encode(held, model.index))

    w2v = fits(lambda: fa.models.Word2Vec(**settings), lambda model, options: model.fit(train_text, **options),
               heldout, (1024, 4096))
    tokens = sum(map(len, train_text))
    return rows + [{"workload": f"GPU Word2Vec.fit skip-gram dim {settings['dim']}, batch {batch}, vocabulary "
                                f"and sampling included, vs the CPU fit (held-out loss {w2v[batch][1]:.3f} "
                                f"vs {w2v['cpu'][1]:.3f})",
                    "unit": "token", "fastad": w2v[batch][0] / tokens, "peer": w2v["cpu"][0] / tokens,
                    "peer_name": "CPU fit", "target": "faster than the CPU fit, held-out loss no worse"}
                   for batch in (1024, 4096)]


def run(quick=False, width=4096, batch=1024, small_fits=False):
    rng = np.random.default_rng(0)
    torch = torch_cuda_or_none()
    rows = workload(f"GPU MLP {width}-{width}-{width}-10 train step, batch {batch}",
                    (width, width, width, 10), batch, "cross_entropy", rng, torch, quick,
                    ">= 0.8x PyTorch CUDA throughput")
    rows += workload("GPU tiny MLP 16-32-1 train step, batch 1", (16, 32, 1), 1, "mse", rng,
                     torch, quick, ">= 5x faster than PyTorch CUDA eager", captured_only=True)
    return rows + model_fit_rows(small_fits)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--json", help="also write the rows to this file")
    ap.add_argument("--emulate", action="store_true",
                    help="dry run on the CPU kernel emulator (timings meaningless)")
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=1024)
    args = ap.parse_args(argv)
    if args.emulate:
        backend.set_emulation(True)
    elif skip_reason():
        sys.exit(f"bench/gpu.py: {skip_reason()}")
    print(machine())
    if not args.emulate:
        cupy = backend.get().xp
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        print("GPU:", props["name"].decode(), "| CuPy", cupy.__version__)
    rows = run(args.quick, args.width, args.batch, small_fits=args.emulate)
    report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()
