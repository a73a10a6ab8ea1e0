"""A BiLSTM tagger over sentences of different lengths, one sentence a step (the dynet-benchmark
task): fastad eager (a new graph per sentence) and with fa.GraphCache (a graph per length,
replayed), both with a bidirectional fa.nn.LSTM (one fused node a direction), PyTorch eager
stepping LSTM cells, and PyTorch eager with its fused bidirectional nn.LSTM, in one process.
Beside them, 16 sentences a step (the sum of their losses, one SGD step): fastad under
fa.autobatch (one fused LSTM call per sentence length and direction) and, where dynet38 is
installed, DyNet with its autobatching (its VanillaLSTMBuilder each way, as its users write
the tagger, holding the same weights); the two see the same minibatches and agree on the loss.

Sentences: the logical lines of code of the standard library's modules, 5-60 tokens each;
each token's word (the 5,000 commonest, else unknown) is tagged with its kind (keyword,
name, number, string, or the operator's own kind). Embedding 32, hidden 64 each way, a
linear layer on both directions' states, cross-entropy over the tokens, plain SGD; every
model starts from the same weights and sees the sentences in the same order.
Run: python bench/bilstm_tagger.py [--quick] [--sentences N]
"""
import collections
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (cli, dynet_or_none, dynet_step, example, fastad_train_step, timed_epoch,  # noqa: E402
                    timed_minibatches, torch_or_none, torch_train_step)

import fastad as fa  # noqa: E402

EMBED, HIDDEN, LR, VOCAB = 32, 64, 0.05, 5000
MINIBATCH = 16                  # sentences a step of the autobatched modes


def code_sentences(limit, min_len=5, max_len=60):
    """Up to `limit` (word ids, tag ids) pairs from the standard library's logical lines (read as
    examples/bilstm_tagger.py reads them, idlelib left out; the tags numbered in the order
    met), and the number of tags."""
    lines, tags = [], {}
    skip_dirs = ("test", "tests", "site-packages", "idlelib")
    for line in example("bilstm_tagger").stdlib_lines(skip_dirs):
        tagged = [(word, tags.setdefault(kind, len(tags))) for word, kind in line]
        if min_len <= len(tagged) <= max_len:
            lines.append(tagged)
            if len(lines) == limit:
                break
    return _ids(lines, tags), len(tags)


def _ids(lines, tags):
    common = [w for w, _ in collections.Counter(w for line in lines for w, _ in line).most_common(VOCAB - 1)]
    index = {w: k + 1 for k, w in enumerate(common)}         # 0: unknown
    return [(np.array([index.get(w, 0) for w, _ in line]), np.array([t for _, t in line])) for line in lines]


def initial_weights(n_tags, seed=0):
    rng = np.random.default_rng(seed)
    k = 1 / np.sqrt(HIDDEN)
    weights = {"E": rng.normal(0, 1, (VOCAB, EMBED)), "out_w": rng.uniform(-k, k, (2 * HIDDEN, n_tags)),
               "out_b": np.zeros(n_tags)}
    for d in ("f", "b"):
        weights[f"{d}_ih"] = rng.uniform(-k, k, (4 * HIDDEN, EMBED))
        weights[f"{d}_hh"] = rng.uniform(-k, k, (4 * HIDDEN, HIDDEN))
        weights[f"{d}_bih"] = rng.uniform(-k, k, 4 * HIDDEN)
        weights[f"{d}_bhh"] = rng.uniform(-k, k, 4 * HIDDEN)
    return weights


def fastad_net(length, words, tags, p):
    """The tagger's loss on one sentence of `length` tokens (IndexInputs words and tags)."""
    emb = fa.embedding(p["E"], words).reshape((length, 1, EMBED))
    both = p["lstm"](emb).reshape((length, 2 * HIDDEN))      # each step's forward and backward states
    return fa.nn.cross_entropy(both @ p["out_w"] + p["out_b"], tags)


def fastad_model(weights, dtype):
    """The tagger's Parameters from `weights`, and their SGD optimizer."""
    params = {k: fa.Parameter(weights[k], dtype=dtype, name=k) for k in ("E", "out_w", "out_b")}
    params["lstm"] = fa.nn.LSTM(EMBED, HIDDEN, bidirectional=True, dtype=dtype)
    params["lstm"].load_state_dict({f"{name}_l0{suffix}": weights[f"{d}_{key}"]
                                    for d, suffix in (("f", ""), ("b", "_reverse"))
                                    for name, key in (("weight_ih", "ih"), ("weight_hh", "hh"),
                                                      ("bias_ih", "bih"), ("bias_hh", "bhh"))})
    opt = fa.optim.SGD([params["E"], params["out_w"], params["out_b"], *params["lstm"].parameters()],
                       lr=LR)
    return params, opt


def fastad_trainer(weights, dtype, cached=False):
    params, opt = fastad_model(weights, dtype)
    cache = fa.GraphCache(lambda length, words, tags: fastad_net(length, words, tags, params), max_bytes=4 << 30)

    def step(sentence):
        words, tags = sentence
        if cached:
            loss = cache(len(words), words, tags)
        else:
            loss = fastad_net(len(words), fa.IndexInput(words), fa.IndexInput(tags), params)
        return fastad_train_step(loss, opt)
    step.cache = cache
    return step


def one_bias(weights):
    """`weights` with each direction's two LSTM biases as one, as DyNet's builder has it:
    b_ih + b_hh, and b_hh zero (fastad_autobatch_trainer freezes it, so that both train the
    same model the same way)."""
    merged = dict(weights)
    for d in ("f", "b"):
        merged[f"{d}_bih"] = weights[f"{d}_bih"] + weights[f"{d}_bhh"]
        merged[f"{d}_bhh"] = np.zeros_like(weights[f"{d}_bhh"])
    return merged


def fastad_autobatch_trainer(weights, dtype):
    """A step over a minibatch of sentences: each sentence's graph recorded under fa.autobatch,
    evaluated as one (fa.batch: the sum of their losses), one SGD step. The LSTM's bias_hh
    is zero and frozen: one trained bias a direction, as DyNet's (see one_bias)."""
    params, opt = fastad_model(one_bias(weights), dtype)
    for name in ("bias_hh_l0", "bias_hh_l0_reverse"):
        getattr(params["lstm"], name).requires_grad = False

    def step(sentences):
        with fa.autobatch():
            total = fa.batch([fastad_net(len(words), fa.IndexInput(words), fa.IndexInput(tags), params)
                              for words, tags in sentences])
        return fastad_train_step(total, opt)
    return step


# PyTorch's gate order (i, f, g, o) to DyNet's (i, f, o, g)
_DYNET_GATES = np.r_[0:HIDDEN, HIDDEN:2 * HIDDEN, 3 * HIDDEN:4 * HIDDEN, 2 * HIDDEN:3 * HIDDEN]


def dynet_trainer(dy, weights, autobatch=False):
    """DyNet (float32), as its users write the tagger: a lookup table, a VanillaLSTMBuilder
    each way (one bias, DyNet's gate order, and a forget bias of 1 it adds itself: the same
    function as fastad's weights), each token's pickneglogsoftmax averaged over the sentence,
    one plain SGD step (no gradient clipping) a sentence (eager); with `autobatch`,
    step(sentences) builds the sum of a minibatch's losses in one autobatched graph."""
    model = dy.ParameterCollection()
    table = model.lookup_parameters_from_numpy(weights["E"].astype(np.float32))
    out_w = model.parameters_from_numpy(weights["out_w"].T.astype(np.float32))
    out_b = model.parameters_from_numpy(weights["out_b"].astype(np.float32))
    builders = []
    for d in ("f", "b"):
        builder = dy.VanillaLSTMBuilder(1, EMBED, HIDDEN, model)
        w_x, w_h, bias = builder.get_parameters()[0]
        w_x.set_value(weights[f"{d}_ih"][_DYNET_GATES])
        w_h.set_value(weights[f"{d}_hh"][_DYNET_GATES])
        b = one_bias(weights)[f"{d}_bih"][_DYNET_GATES]
        b[HIDDEN:2 * HIDDEN] -= 1.0
        bias.set_value(b)
        builders.append(builder)
    trainer = dy.SimpleSGDTrainer(model, learning_rate=LR)
    trainer.set_clip_threshold(0)

    def loss_of(words, tags):
        xs = [table[int(w)] for w in words]
        forward = builders[0].initial_state().transduce(xs)
        backward = builders[1].initial_state().transduce(xs[::-1])[::-1]
        return dy.esum([dy.pickneglogsoftmax(out_w * dy.concatenate([f, b]) + out_b, int(t))
                        for f, b, t in zip(forward, backward, tags)]) / len(tags)

    if autobatch:
        return dynet_step(dy, model, trainer,
                          lambda sentences: dy.esum([loss_of(words, tags) for words, tags in sentences]), True)
    return dynet_step(dy, model, trainer, lambda sentence: loss_of(*sentence), False)


def torch_trainer(torch, weights, dtype, fused):
    """PyTorch eager: LSTM cell steps, or with `fused` its bidirectional nn.LSTM over the
    sentence."""
    params = {k: torch.tensor(v.astype(dtype), requires_grad=True) for k, v in weights.items()}
    opt = torch.optim.SGD(list(params.values()), lr=LR)
    F = torch.nn.functional
    if fused:
        lstm = torch.nn.LSTM(EMBED, HIDDEN, bidirectional=True).to(getattr(torch, np.dtype(dtype).name))
        with torch.no_grad():
            for name, key in (("weight_ih_l0", "f_ih"), ("weight_hh_l0", "f_hh"), ("bias_ih_l0", "f_bih"),
                              ("bias_hh_l0", "f_bhh")):
                getattr(lstm, name).copy_(params[key])
                getattr(lstm, name + "_reverse").copy_(params[key.replace("f_", "b_")])
        opt = torch.optim.SGD([params["E"], params["out_w"], params["out_b"], *lstm.parameters()], lr=LR)

    def states_of(xs):
        if fused:
            return lstm(xs.unsqueeze(1))[0].squeeze(1)
        out = {}
        for d, order in (("f", range(len(xs))), ("b", range(len(xs) - 1, -1, -1))):
            h = c = torch.zeros(1, HIDDEN, dtype=xs.dtype)
            for t in order:
                gates = xs[t:t + 1] @ params[f"{d}_ih"].T + params[f"{d}_bih"] + h @ params[f"{d}_hh"].T + params[f"{d}_bhh"]
                i, f, g, o = gates.chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                out[d, t] = h
        return torch.cat([torch.cat([out["f", t], out["b", t]], 1) for t in range(len(xs))], 0)

    def step(sentence):
        words, tags = sentence
        xs = params["E"][torch.from_numpy(words)]
        loss = F.cross_entropy(states_of(xs) @ params["out_w"] + params["out_b"], torch.from_numpy(tags))
        return torch_train_step(loss, opt)
    return step



def run(quick=False, sentences=None, epochs=2):
    """Print every epoch's rates and losses; return bench/run.py's rows (float32, the last
    epoch: the cache and eager builds beside PyTorch's fused nn.LSTM, and the cache beside
    its LSTMCell steps)."""
    data, n_tags = code_sentences(sentences or (300 if quick else 3000))
    lengths = [len(w) for w, _ in data]
    print(f"{len(data)} sentences of 5-60 tokens ({np.mean(lengths):.0f} on average), "
          f"{len(set(lengths))} lengths, {n_tags} tags")
    weights = initial_weights(n_tags)
    torch, dy = torch_or_none(), dynet_or_none()
    if torch is None:
        print("PyTorch is not installed: no PyTorch rows")
    if dy is None:
        print("DyNet is not installed (pip install dynet38): no DyNet rows")
    measured = []
    for dtype in (np.float32,) if quick else (np.float32, np.float64):
        steps = {"fastad": fastad_trainer(weights, dtype), "fastad cached": fastad_trainer(weights, dtype, True)}
        if torch is not None:
            steps["torch"] = torch_trainer(torch, weights, dtype, fused=False)
            steps["torch nn.LSTM"] = torch_trainer(torch, weights, dtype, fused=True)
        batched = {"fastad autobatch": fastad_autobatch_trainer(weights, dtype)}
        if dy is not None and dtype == np.float32:
            steps["dynet"] = dynet_trainer(dy, weights)
            batched["dynet autobatch"] = dynet_trainer(dy, weights, autobatch=True)
        for e in range(1, epochs + 1):
            results = {name: timed_epoch(step, data) for name, step in steps.items()}   # alternating per epoch
            results.update({name: timed_minibatches(step, data, MINIBATCH) for name, step in batched.items()})
            measured.append((np.dtype(dtype).name, e, results))
    show(measured)
    return rows_of(measured, len(data))


def rows_of(measured, n_sentences):
    """bench/run.py's rows: float32, the last epoch, seconds a sentence."""
    results = [results for dtype, _, results in measured if dtype == "float32"][-1]

    def row(label, name, torch_name, target):
        torch = results.get(torch_name)
        return {"workload": f"BiLSTM tagger, hidden 64, one sentence a step ({n_sentences:,} of 5-60 tokens), "
                            f"{label}", "unit": "sentence", "fastad": 1 / results[name][0],
                "torch": 1 / torch[0] if torch else None, "target": target}

    dynet, dynet_eager = results.get("dynet autobatch"), results.get("dynet")
    eager_vs_dynet = ([{"workload": f"BiLSTM tagger, hidden 64, one sentence a step ({n_sentences:,} of 5-60 "
                                    f"tokens), eager build vs DyNet eager (one graph and step a sentence)",
                        "unit": "sentence", "fastad": 1 / results["fastad"][0], "torch": None,
                        "peer": 1 / dynet_eager[0], "peer_name": "DyNet eager", "target": ">= 4x DyNet eager"}]
                      if dynet_eager else [])
    return eager_vs_dynet + [row("fa.GraphCache vs PyTorch's fused bidirectional nn.LSTM", "fastad cached", "torch nn.LSTM",
                ">= 10x torch eager, the same loss after an epoch"),
            row("eager build vs PyTorch's fused nn.LSTM", "fastad", "torch nn.LSTM", "-"),
            row("fa.GraphCache vs PyTorch stepping LSTMCells", "fastad cached", "torch", "-"),
            {"workload": f"BiLSTM tagger, hidden 64, {MINIBATCH} sentences a step ({n_sentences:,} of 5-60 "
                         f"tokens), fa.autobatch with the fused fa.nn.LSTM vs DyNet autobatched",
             "unit": "sentence", "fastad": 1 / results["fastad autobatch"][0], "torch": None,
             "peer": 1 / dynet[0] if dynet else None, "peer_name": "DyNet", "target": ">= 2x DyNet autobatched"}]


def show(measured):
    for dtype, e, results in measured:
        print(f"{dtype} epoch {e}:")
        for name, (speed, loss) in results.items():
            line = f"  {name:16s} {speed:8,.0f} sentences/s, loss {loss:.8f}"
            if name == "fastad autobatch":
                if "dynet autobatch" in results:
                    line += f"  ({speed / results['dynet autobatch'][0]:5.2f}x DyNet autobatched, {MINIBATCH} a step)"
            elif name.startswith("fastad") and "torch" in results:
                line += (f"  ({speed / results['torch'][0]:5.1f}x torch eager cells, "
                         f"{speed / results['torch nn.LSTM'][0]:5.1f}x torch nn.LSTM)")
            if name.startswith("fastad") and name != "fastad autobatch" and "dynet" in results:
                line += f"  ({speed / results['dynet'][0]:5.2f}x DyNet eager)"
            print(line)
    print("[targets: >= 10x PyTorch eager per sentence, the same loss after an epoch from the same start; "
          f"autobatched ({MINIBATCH} a step, the same loss): >= 2x DyNet autobatched; eager >= 4x DyNet eager]")


if __name__ == "__main__":
    cli(run, __doc__, sentences="how many sentences (default 3000)", epochs="epochs (default 2)")
