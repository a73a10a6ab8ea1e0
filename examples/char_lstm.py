"""Character-level LSTM language model, trained on the Python standard library's own source.

Every Python install ships the text: a fixed list of modules is read from the
directory of `os`, so the run is the same on any machine with the same
Python. The model is Embedding -> LSTM -> Linear with a softmax
cross-entropy on every step (truncated backpropagation through time over
`seq_len` characters, the LSTM state carried from one chunk to the next).

The unrolled graph is built once; each training step copies the next chunk
of character ids into two IndexInputs and the carried state into two Inputs
(`set_value`), then replays forward and backward, with no Python per node.
A second, one-step graph samples text the same way.

Run: python examples/char_lstm.py [--epochs 5] [--chars 300000] [--batch 4] [--hidden 64]
"""
import argparse
import math
import os
import sys
import time

# A model this small runs fastest on one BLAS thread, and a multi-threaded BLAS on a
# busy machine is slower still; set before numpy loads BLAS (a value set by the user wins).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import fastad as fa  # noqa: E402

MODULES = ("textwrap.py", "string.py", "fnmatch.py", "glob.py", "shlex.py", "heapq.py",
           "bisect.py", "colorsys.py", "base64.py", "calendar.py", "functools.py", "random.py",
           "dataclasses.py", "argparse.py")
# printable ASCII and newline; anything else becomes "?" (tabs become spaces)
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))


def load_corpus(max_chars):
    """(text, modules read): the text of MODULES (those present), concatenated and cut to max_chars."""
    root = os.path.dirname(os.__file__)
    parts = []
    for name in MODULES:
        path = os.path.join(root, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                parts.append(f.read())
    if not parts:
        raise FileNotFoundError(f"none of {MODULES} found in {root}")
    text = "".join(parts).replace("\t", "    ")[:max_chars]
    return "".join(ch if ch in ALPHABET else "?" for ch in text), len(parts)


class CharLSTM(fa.nn.Module):
    def __init__(self, vocab, embed, hidden, generator):
        super().__init__()
        self.embed = fa.nn.Embedding(vocab, embed, generator=generator)
        self.lstm = fa.nn.LSTM(embed, hidden, generator=generator)
        self.head = fa.nn.Linear(hidden, vocab, generator=generator)

    def forward(self, ids, state):
        """ids: IndexInput (seq_len, batch); returns (logits (seq_len * batch, vocab), final state)."""
        vectors = self.embed(ids)                          # (seq_len, batch, embed)
        steps = [vectors[t] for t in range(ids.shape[0])]  # each (batch, embed)
        hs, final = self.lstm(steps, state, return_state=True)
        return self.head(fa.concat(hs, axis=0)), final


def batches(codes, seq_len, batch):
    """Split codes into `batch` parallel streams; yield (inputs, targets) chunks of (seq_len, batch)."""
    stream_len = (len(codes) - 1) // batch
    streams = codes[:stream_len * batch + 1]
    inputs = streams[:-1].reshape(batch, stream_len).T
    targets = streams[1:].reshape(batch, stream_len).T
    for start in range(0, stream_len - seq_len + 1, seq_len):
        yield (np.ascontiguousarray(inputs[start:start + seq_len]),
               np.ascontiguousarray(targets[start:start + seq_len]).reshape(-1))


class Progress:
    """A one-line progress bar with throughput, redrawn at most ten times a second."""

    def __init__(self, label, total, unit):
        self.label, self.total, self.unit = label, total, unit
        self.start = self.last_draw = time.perf_counter()

    def update(self, done, note=""):
        now = time.perf_counter()
        if now - self.last_draw < 0.1 and done < self.total:
            return
        self.last_draw = now
        width = 24
        filled = int(width * done / max(self.total, 1))
        rate = done / max(now - self.start, 1e-9)
        sys.stdout.write(f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
                         f"{done:,}/{self.total:,} {self.unit} {rate:,.0f} {self.unit}/s {note}")
        sys.stdout.flush()

    def close(self):
        sys.stdout.write("\n")
        return time.perf_counter() - self.start


def sample(model, prime, length, temperature, rng):
    """Continue `prime` by up to `length` characters, stopping at a newline."""
    H = model.lstm.hidden_size
    with fa.no_grad():
        ix = fa.IndexInput([0])
        h, c = fa.Input(np.zeros((1, H))), fa.Input(np.zeros((1, H)))
        _, (h_next, c_next) = model.lstm([model.embed(ix)], (h, c), return_state=True)
        probs = fa.softmax(model.head(h_next) * (1.0 / temperature))
    text = prime
    code = ALPHABET.index(prime[0])
    for k in range(len(prime) + length - 1):
        ix.set_value([code])
        probs.forward()                    # h_next and c_next lie below probs
        h.set_value(h_next.value)
        c.set_value(c_next.value)
        if k + 1 < len(prime):             # still reading the prime
            code = ALPHABET.index(prime[k + 1])
            continue
        p = probs.value[0].astype(np.float64)
        code = int(rng.choice(len(p), p=p / p.sum()))
        if ALPHABET[code] == "\n":
            break
        text += ALPHABET[code]
    return text


def main(epochs=5, chars=300_000, seq_len=32, batch=4, hidden=64, embed=16, lr=3e-3,
         clip=1.0, seed=0):
    """Train and report; returns {"train_loss": [...], "valid_loss": [...], "uniform_loss": float}."""
    rng = np.random.default_rng(seed)
    text, n_modules = load_corpus(chars)
    codes = np.array([ALPHABET.index(ch) for ch in text], dtype=np.int64)
    split = int(len(codes) * 0.9)
    train_codes, valid_codes = codes[:split], codes[split:]
    vocab = len(ALPHABET)
    if len(valid_codes) <= seq_len * batch:
        raise ValueError(f"char_lstm: {len(text):,} characters leave too few held out for one "
                         f"chunk of {seq_len} x {batch}; read more (chars) or shorten seq_len/batch")
    print(f"corpus: {len(text):,} characters of {n_modules} standard-library modules "
          f"({len(train_codes):,} train, {len(valid_codes):,} held out), {vocab} symbols")

    model = CharLSTM(vocab, embed, hidden, rng)
    ids = fa.IndexInput(np.zeros((seq_len, batch), dtype=np.int64))
    targets = fa.IndexInput(np.zeros(seq_len * batch, dtype=np.int64))
    h0, c0 = fa.Input(np.zeros((batch, hidden))), fa.Input(np.zeros((batch, hidden)))
    logits, (h_final, c_final) = model(ids, (h0, c0))            # built once
    loss = fa.nn.cross_entropy(logits, targets)
    params = model.parameters()
    optimizer = fa.optim.Adam(params, lr=lr)

    def run(codes_, train):
        """One pass over codes_ (training steps, or forward only); returns the mean loss."""
        h0.set_value(np.zeros((batch, hidden)))
        c0.set_value(np.zeros((batch, hidden)))
        chunks = list(batches(codes_, seq_len, batch))
        bar = Progress("  train" if train else "  valid", len(chunks) * seq_len * batch, "chars")
        total = 0.0
        for k, (x, y) in enumerate(chunks):
            ids.set_value(x)
            targets.set_value(y)
            loss.forward()
            if train:
                loss.backward()
                fa.optim.clip_grad_norm(params, clip)
                optimizer.step()
                optimizer.zero_grad()
            h0.set_value(h_final.value)                # carry the state to the next chunk
            c0.set_value(c_final.value)
            total += loss.item()
            bar.update((k + 1) * seq_len * batch, f"loss {total / (k + 1):.3f}")
        bar.close()
        return total / max(len(chunks), 1)

    history = {"train_loss": [], "valid_loss": [], "uniform_loss": math.log(vocab)}
    print(f"a uniform guess scores {math.log(vocab):.3f} nats/char")
    for epoch in range(1, epochs + 1):
        history["train_loss"].append(run(train_codes, True))
        history["valid_loss"].append(run(valid_codes, False))
        line = sample(model, "    def ", 60, 0.7, rng)
        print(f"epoch {epoch}: train {history['train_loss'][-1]:.3f} nats/char, "
              f"held out {history['valid_loss'][-1]:.3f}  | sample: {line!r}")
    return history


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--chars", type=int, default=300_000, help="characters of source to read")
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    main(a.epochs, a.chars, a.seq_len, a.batch, a.hidden, seed=a.seed)
