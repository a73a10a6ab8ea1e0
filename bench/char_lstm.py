"""One train step of a character LSTM: batch 1, 20 steps, embedding 16, hidden 32.

Embedding -> LSTM -> Linear head with a softmax cross-entropy on every step,
then a plain SGD update. fastad replays one graph (set_value on two
IndexInputs, forward, backward, step) and, for reference, also builds the
graph afresh every step (eager); PyTorch runs its usual loop of
`nn.LSTMCell` calls. Both start from the same weights and are checked to
compute the same first loss. Timed alternately in one process.
Run: python bench/char_lstm.py [--quick]
"""
import os
import sys

# Run as a script, start BLAS with one thread (no idle workers spinning on the other
# core); run() pins it again for a caller that loaded BLAS first.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import alternate, cli, torch_or_none  # noqa: E402

import fastad as fa  # noqa: E402

VOCAB, EMBED, HIDDEN, STEPS, LR = 64, 16, 32, 20, 0.05


class Model(fa.nn.Module):
    def __init__(self, rng):
        super().__init__()
        self.embed = fa.nn.Embedding(VOCAB, EMBED, generator=rng)
        self.lstm = fa.nn.LSTM(EMBED, HIDDEN, generator=rng)
        self.head = fa.nn.Linear(HIDDEN, VOCAB, generator=rng)

    def loss(self, ids, targets):
        vectors = self.embed(ids)                                   # (STEPS, EMBED)
        hs = self.lstm([vectors[t:t + 1] for t in range(STEPS)])    # each (1, HIDDEN)
        return fa.nn.cross_entropy(self.head(fa.concat(hs, axis=0)), targets)


def torch_model(torch, model):
    """PyTorch modules holding the same weights as the fastad model."""
    embed = torch.nn.Embedding(VOCAB, EMBED)
    cell = torch.nn.LSTMCell(EMBED, HIDDEN)
    head = torch.nn.Linear(HIDDEN, VOCAB)
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))
    with torch.no_grad():
        embed.weight.copy_(t(model.embed.weight.value))
        for name, value in model.lstm.state_dict().items():      # weight_ih_l0, ...
            getattr(cell, name.removesuffix("_l0")).copy_(t(value))
        head.weight.copy_(t(model.head.weight.value))
        head.bias.copy_(t(model.head.bias.value))
    return embed, cell, head


def run(quick=False):
    pin_blas_to_one_thread()
    rng = np.random.default_rng(0)
    text = rng.integers(0, VOCAB, size=(64, STEPS + 1))             # 64 sequences, cycled
    state = {"next": 0}

    def next_sequence():
        state["next"] = (state["next"] + 1) % len(text)
        return text[state["next"], :-1], text[state["next"], 1:]

    model = Model(rng)
    torch = torch_or_none()
    reference = torch_model(torch, model) if torch is not None else None

    ids, targets = fa.IndexInput(text[0, :-1]), fa.IndexInput(text[0, 1:])
    loss = model.loss(ids, targets)
    first_loss = loss.item()
    params = model.parameters()
    opt = fa.optim.SGD(params, lr=LR)

    def fastad_replay():
        x, y = next_sequence()
        ids.set_value(x)
        targets.set_value(y)
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return 1

    def fastad_eager():
        x, y = next_sequence()
        model.loss(fa.IndexInput(x), fa.IndexInput(y)).backward()
        opt.step()
        opt.zero_grad()
        return 1

    candidates = {"fastad replay": fastad_replay, "fastad eager": fastad_eager}
    if torch is not None:
        embed, cell, head = reference
        topt = torch.optim.SGD(list(embed.parameters()) + list(cell.parameters())
                               + list(head.parameters()), lr=LR)
        sequences = torch.from_numpy(text)

        def torch_loss(k):
            vectors = embed(sequences[k, :-1])
            h = c = torch.zeros(1, HIDDEN)
            hs = []
            for t in range(STEPS):
                h, c = cell(vectors[t:t + 1], (h, c))
                hs.append(h)
            return torch.nn.functional.cross_entropy(head(torch.cat(hs)), sequences[k, 1:])

        torch_first = torch_loss(0).item()
        assert abs(torch_first - first_loss) < 1e-4 * abs(first_loss), \
            f"fastad and torch disagree: {first_loss} vs {torch_first}"

        def torch_step():
            k = state["next"] = (state["next"] + 1) % len(text)
            out = torch_loss(k)
            topt.zero_grad()
            out.backward()
            topt.step()
            return 1

        candidates["torch LSTMCell loop"] = torch_step
    t = alternate(candidates, repeats=3 if quick else 7)
    shape = f"batch 1, seq {STEPS}, embed {EMBED}, hidden {HIDDEN}, vocab {VOCAB}"
    return [
        {"workload": f"char-LSTM train step ({shape}), fastad replay", "unit": "step",
         "fastad": t["fastad replay"], "torch": t.get("torch LSTMCell loop"),
         "target": ">= 10x faster than PyTorch LSTMCell loop"},
        {"workload": f"char-LSTM train step ({shape}), fastad eager build", "unit": "step",
         "fastad": t["fastad eager"], "torch": t.get("torch LSTMCell loop"), "target": "-"},
    ]


if __name__ == "__main__":
    cli(run, __doc__)
