"""A BiLSTM tagger over sentences of different lengths: one graph per length, kept and replayed.

Data: the logical lines of code of the Python standard library, each a sentence of tokens.
The tagger reads a line's words (the commonest 2,000, else "unknown") and tags each token
with its kind: keyword, name, number, string, or the operator's own kind (`(`, `=`, ...).
A word alone does not settle its tag (`print` is a name, `if` a keyword, but an unknown word
may be a name, a number or a string), so the tagger has to read the words around it.

The model embeds the words, runs a bidirectional LSTM over the sentence as one
(T, 1, embed) Variable (`fa.nn.LSTM(..., bidirectional=True)`: one fused node a direction,
as PyTorch's `nn.LSTM`), and scores the tags from both directions' states. Each sentence
length builds a graph of its own; `fa.GraphCache` builds each once and replays it for every
later sentence of that length.

Run: python examples/bilstm_tagger.py [--sentences 4000] [--epochs 3] [--hidden 32]
"""
import argparse
import collections
import io
import itertools
import keyword
import os
import sysconfig
import time
import tokenize

# A model this small runs fastest on one BLAS thread (a value set by the user wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402

SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENCODING, tokenize.ENDMARKER}


def stdlib_lines(skip_dirs=("test", "tests", "site-packages")):
    """Every logical line of the standard library's modules as its tokens' (string, kind) pairs
    (no comments, no layout), in a fixed order: folders and files sorted by name, those in
    `skip_dirs` left out."""
    for dirpath, dirnames, filenames in os.walk(sysconfig.get_paths()["stdlib"]):
        dirnames[:] = sorted(d for d in dirnames if d not in skip_dirs)
        for filename in sorted(f for f in filenames if f.endswith(".py")):
            try:
                with open(os.path.join(dirpath, filename), encoding="utf-8") as f:
                    tokens = list(tokenize.generate_tokens(io.StringIO(f.read()).readline))
            except (SyntaxError, UnicodeDecodeError, tokenize.TokenError):
                continue
            line = []
            for tok in tokens:
                if tok.type == tokenize.NEWLINE:
                    yield line
                    line = []
                elif tok.type not in SKIP:
                    line.append((tok.string, _kind(tok)))


def code_lines(limit, vocab_size=2000, min_len=3, max_len=40):
    """Up to `limit` (word ids, tag ids) pairs, one per logical line of the standard library of
    min_len..max_len tokens, the tag names, and the vocabulary's size (id 0: an unknown word)."""
    sentences = (line for line in stdlib_lines() if min_len <= len(line) <= max_len)
    lines = list(itertools.islice(sentences, limit))
    common = [w for w, _ in collections.Counter(w for line in lines for w, _ in line).most_common(vocab_size - 1)]
    word_ids = {w: k + 1 for k, w in enumerate(common)}
    tags = sorted({t for line in lines for _, t in line})
    tag_ids = {t: k for k, t in enumerate(tags)}
    data = [(np.array([word_ids.get(w, 0) for w, _ in line]), np.array([tag_ids[t] for _, t in line]))
            for line in lines]
    return data, tags, vocab_size


def _kind(tok):
    if tok.type == tokenize.NAME:
        return "keyword" if keyword.iskeyword(tok.string) else "name"
    return tokenize.tok_name[tok.exact_type]


class Tagger(fa.nn.Module):
    """Embedding, a bidirectional LSTM, and a linear layer on both directions' states."""

    def __init__(self, vocab_size, n_tags, embed=32, hidden=32, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.embed = fa.nn.Embedding(vocab_size, embed, generator=rng)
        self.lstm = fa.nn.LSTM(embed, hidden, bidirectional=True, generator=rng)
        self.out = fa.nn.Linear(2 * hidden, n_tags, generator=rng)

    def forward(self, words):
        """The tag scores (T, n_tags) of a sentence of T word ids (an IndexInput)."""
        x = self.embed(words)                               # (T, embed)
        states = self.lstm(x.reshape(x.shape[0], 1, x.shape[1]))   # (T, 1, 2 * hidden)
        return self.out(states.reshape(x.shape[0], -1))


def main(sentences=4000, epochs=3, hidden=32, lr=0.05, seed=0):
    data, tags, vocab_size = code_lines(sentences)
    split = len(data) * 4 // 5
    train, held_out = data[:split], data[split:]
    print(f"{len(data)} lines of the standard library: {len(train)} to train on, {len(held_out)} "
          f"held out; {len(tags)} tags; {len({len(w) for w, _ in data})} distinct lengths")
    model = Tagger(vocab_size, len(tags), hidden=hidden, seed=seed)
    opt = fa.optim.SGD(model.parameters(), lr=lr)
    # A sentence's length is its graph's structure; its words and tags are the data.
    losses = fa.GraphCache(lambda length, words, targets: fa.nn.cross_entropy(model(words), targets))
    scores = fa.GraphCache(lambda length, words: model(words))
    rng = np.random.default_rng(seed)
    history = {"train_loss": [], "accuracy": []}
    for epoch in range(1, epochs + 1):
        t0, total = time.perf_counter(), 0.0
        for k in rng.permutation(len(train)):
            words, targets = train[k]
            loss = losses(len(words), words, targets)
            loss.backward()
            opt.step()
            opt.zero_grad()
            total += loss.item()
        speed = len(train) / (time.perf_counter() - t0)
        with fa.no_grad():
            right = sum(int((np.argmax(scores(len(w), w).value, axis=1) == t).sum()) for w, t in held_out)
        tokens = sum(len(t) for _, t in held_out)
        history["train_loss"].append(total / len(train))
        history["accuracy"].append(right / tokens)
        print(f"epoch {epoch}: loss {total / len(train):.3f}, held-out token accuracy "
              f"{right / tokens:.1%} ({speed:,.0f} sentences/s; {len(losses)} graphs kept)")
    counts = np.bincount(np.concatenate([t for _, t in held_out]), minlength=len(tags))
    history["majority"] = counts.max() / counts.sum()
    print(f"always guessing the commonest tag ({tags[int(counts.argmax())]}): {history['majority']:.1%}")
    return history


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--hidden", type=int, default=32)
    args = parser.parse_args()
    main(args.sentences, args.epochs, args.hidden)
