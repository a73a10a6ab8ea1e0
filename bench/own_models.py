"""Models a user writes from the docs, beside a hand-written C loop of each.

Each workload is a graph written from fastad's ops as `docs/guide/training.md`
teaches, trained by `fa.train` with per-example SGD in float32 on one thread, beside:

- a plain C loop of the same model (the C source below, compiled by this benchmark at
  run time with `cc -O3 -march=native -shared -fPIC` into a temporary folder and called
  through ctypes on the same numpy arrays): float32, per-example SGD, each example's
  gradients computed from the weights before its step, then applied (as fastad's step
  after backward), no loss value computed (a hand-written loop needs only its gradient);
  where fastad draws examples in a sampler, the C loop draws them the same way from its
  own generator (xorshift64*), as word2vec's loop does, its skip-gram noise words a pair
  ahead with their rows prefetched;
- PyTorch minibatches of 256 (`sparse=True` embeddings, `optim.SGD`, one thread), the loss
  summed over the batch so that a row's step is per-example SGD's summed (the factorization
  machine's averaged, at lr 0.1: summed, it overflows), its examples drawn before the clock
  starts;
- fastad's fused ready model, where there is one (`fa.ranking_loss` in the same sampler and
  loop for BPR; `fa.models.Word2Vec` for skip-gram).

Workloads:

1. Factorization machine for click prediction: 10-40 hashed ids an example (Zipf(1.3)
   over 2**18 slots), padded to 40 with a padding row, k=8, logistic loss, lr 0.01 (at
   0.05 the weights overflow to nan in the first epoch, in every library); also
   with `fa.optim.Adagrad` and `SGD(weight_decay=0.01)`, whose rates are given as a ratio
   of plain SGD's. Held-out AUC.
2. Logistic regression over the same hashed bags: `fa.embedding_bag(mode="sum")` + a bias
   through `fa.data.BagSampler` (no padding), lr 0.05. Held-out AUC.
3. BPR from ops, `-sum(logsigmoid(vector_dot(U[u], V[i] - V[j])))`, beside the fused
   `fa.ranking_loss`, both in `fa.data.PairwiseSampler`, on likes with power-law item
   popularity, k=32, lr 0.1, one epoch of the training likes. Held-out AUC (the same test
   triples for all).
4. Skip-gram with negative sampling from ops, `fa.gather_dot` + `fa.logsigmoid`, in
   `fa.data.SkipGramSampler` (one pair an example, 5 negatives, window 5), beside
   `fa.models.Word2Vec` (skip-gram, the same settings, one worker, trained on the same ids
   through `EncodedCorpus`, its `train()` timed after `build_vocab()`), on a Zipf corpus with
   topical sentences: dim 64, lr 0.025 falling linearly to 1e-4, one epoch. The unit is the
   (centre, context) pair, for every library. Held-out SGNS loss.
5. Matrix factorization with biases for ratings, `vector_dot(P[u], Q[i]) + bu[u] + bi[i] +
   mu`, squared loss, k=32, lr 0.01, on planted ratings with Zipf user and item activity.
   No ready model. Held-out RMSE.

Rounds alternate the libraries in this process, each round a fresh model for one epoch;
figures are medians over the rounds. Each library's quality is printed, and whether it is
within a tolerance of the C loop's (AUC: 0.01; a loss or RMSE: 2%). The C rows are skipped
with the reason where no C compiler is found, the PyTorch rows where PyTorch is missing.

Run: python bench/own_models.py [--quick]
"""
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, torch_or_none  # noqa: E402
from memory import power_law_likes  # noqa: E402
from peers import heldout_sgns_loss  # noqa: E402

import fastad as fa  # noqa: E402

BATCH = 256             # PyTorch's minibatch
AUC_TOLERANCE = 0.01    # a library "learned" when its AUC is this close to the C loop's
LOSS_TOLERANCE = 0.02   # ... or its held-out loss (RMSE) within this fraction of the C loop's
#: PyTorch's factorization machine averages its batch's loss: summed, the step of the frequent ids
#: overflows to nan at every lr tried (0.01 down to 0.001); averaged, at lr 0.2 and above
TORCH_FM_LR = 0.1

C_SOURCE = r"""
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* xorshift64*: the samplers' draws */
static inline uint64_t next_u64(uint64_t *s) {
    uint64_t x = *s; x ^= x >> 12; x ^= x << 25; x ^= x >> 27; *s = x;
    return x * 2685821657736338717ULL;
}
static inline int64_t below(uint64_t *s, int64_t n) {      /* uniform in [0, n) */
    return (int64_t)(((unsigned __int128)next_u64(s) * (uint64_t)n) >> 64);
}
static inline float uniform01(uint64_t *s) { return (float)(next_u64(s) >> 40) * (1.0f / 16777216.0f); }

/* Factorization machine, one epoch: ids (n, cap) padded with `pad` (a zero row that takes
   no step); logit = w0 + sum W[id] + 0.5 (|sum V[id]|^2 - sum |V[id]|^2); logistic loss. */
void fm_epoch(const int64_t *ids, const float *y, int64_t n, int64_t cap, int64_t pad, int64_t k,
              float *V, float *W, float *w0, float lr) {
    float s[k], grad[cap * k];
    for (int64_t r = 0; r < n; r++) {
        const int64_t *row = ids + r * cap;
        float sq = 0, lin = 0, ss = 0;
        memset(s, 0, sizeof s);
        for (int64_t j = 0; j < cap; j++) {
            if (row[j] == pad) continue;
            const float *v = V + row[j] * k;
            for (int64_t f = 0; f < k; f++) { s[f] += v[f]; sq += v[f] * v[f]; }
            lin += W[row[j]];
        }
        for (int64_t f = 0; f < k; f++) ss += s[f] * s[f];
        float x = w0[0] + lin + 0.5f * (ss - sq);
        float g = sigmoid(x) - y[r];
        for (int64_t j = 0; j < cap; j++) {
            if (row[j] == pad) continue;
            const float *v = V + row[j] * k;
            for (int64_t f = 0; f < k; f++) grad[j * k + f] = g * (s[f] - v[f]);
        }
        for (int64_t j = 0; j < cap; j++) {
            if (row[j] == pad) continue;
            float *v = V + row[j] * k;
            for (int64_t f = 0; f < k; f++) v[f] -= lr * grad[j * k + f];
            W[row[j]] -= lr * g;
        }
        w0[0] -= lr * g;
    }
}

/* Logistic regression over bags: logit = b + sum W[ids[offsets[r]:offsets[r + 1]]]. */
void bags_epoch(const int32_t *ids, const int64_t *offsets, const float *y, int64_t n,
                float *W, float *b, float lr) {
    for (int64_t r = 0; r < n; r++) {
        float x = b[0];
        for (int64_t j = offsets[r]; j < offsets[r + 1]; j++) x += W[ids[j]];
        float g = sigmoid(x) - y[r];
        for (int64_t j = offsets[r]; j < offsets[r + 1]; j++) W[ids[j]] -= lr * g;
        b[0] -= lr * g;
    }
}

static int liked(const int64_t *indptr, const int32_t *indices, int64_t u, int64_t item) {
    int64_t lo = indptr[u], hi = indptr[u + 1];
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (indices[mid] < item) lo = mid + 1; else hi = mid;
    }
    return lo < indptr[u + 1] && indices[lo] == item;
}

/* BPR, `examples` triples: a like drawn uniformly, a negative uniformly (redrawn while liked);
   loss -log sigmoid(U[u] . (V[i] - V[j])). */
void bpr_epoch(const int64_t *indptr, const int32_t *indices, const int32_t *user_of, int64_t nnz,
               int64_t n_items, int64_t examples, int64_t k, float *U, float *V, float lr, uint64_t seed) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int64_t e = 0; e < examples; e++) {
        int64_t like = below(&state, nnz), u = user_of[like], i = indices[like], j;
        do j = below(&state, n_items); while (liked(indptr, indices, u, j));
        float *pu = U + u * k, *vi = V + i * k, *vj = V + j * k;
        float x = 0;
        for (int64_t f = 0; f < k; f++) x += pu[f] * (vi[f] - vj[f]);
        float g = -sigmoid(-x);
        for (int64_t f = 0; f < k; f++) {
            float uf = pu[f], d = vi[f] - vj[f];
            pu[f] = uf - lr * g * d;
            vi[f] -= lr * g * uf;
            vj[f] += lr * g * uf;
        }
    }
}

static inline int32_t noise(uint64_t *s, const float *prob, const int32_t *alias, int64_t vocab) {
    int64_t t = below(s, vocab);
    return uniform01(s) < prob[t] ? (int32_t)t : alias[t];
}

/* Skip-gram with negative sampling, one epoch over `tokens` cut at `ends`: each centre a
   reduced window 1..window, each (centre, word) pair with `negative` noise words drawn from
   the alias table (prob, alias) of unigram^0.75; lr falling linearly with the position. */
int64_t sgns_epoch(const int32_t *tokens, const int64_t *ends, int64_t n_sentences, int64_t window,
                   int64_t negative, const float *prob, const int32_t *alias, int64_t vocab, int64_t k,
                   float *W, float *C, float lr0, float min_lr, uint64_t seed) {
    uint64_t state = seed * 0x9E3779B97F4A7C15ULL + 1;
    int64_t total_tokens = ends[n_sentences - 1], start = 0, count = 0;
    int32_t target[negative + 1], ahead[negative];
    for (int64_t n = 0; n < negative; n++) ahead[n] = noise(&state, prob, alias, vocab);
    float score[negative + 1], gw[k];
    for (int64_t s = 0; s < n_sentences; s++) {
        int64_t end = ends[s];
        for (int64_t p = start; p < end; p++) {
            float lr = lr0 + (min_lr - lr0) * (float)p / (float)total_tokens;
            int64_t b = 1 + below(&state, window);
            float *w = W + (int64_t)tokens[p] * k;
            for (int64_t q = (p - b > start ? p - b : start); q < end && q <= p + b; q++) {
                if (q == p) continue;
                target[0] = tokens[q];
                for (int64_t n = 1; n <= negative; n++) {   /* the noise drawn a pair ahead */
                    target[n] = ahead[n - 1];
                    ahead[n - 1] = noise(&state, prob, alias, vocab);
                    for (int64_t f = 0; f < k; f += 16) __builtin_prefetch(C + (int64_t)ahead[n - 1] * k + f);
                }
                for (int64_t n = 0; n <= negative; n++) {
                    const float *c = C + (int64_t)target[n] * k;
                    float x = 0;
                    for (int64_t f = 0; f < k; f++) x += w[f] * c[f];
                    score[n] = sigmoid(x) - (n == 0);
                }
                memset(gw, 0, sizeof gw);
                for (int64_t n = 0; n <= negative; n++) {
                    const float *c = C + (int64_t)target[n] * k;
                    for (int64_t f = 0; f < k; f++) gw[f] += score[n] * c[f];
                }
                for (int64_t n = 0; n <= negative; n++) {
                    float *c = C + (int64_t)target[n] * k;
                    for (int64_t f = 0; f < k; f++) c[f] -= lr * score[n] * w[f];
                }
                for (int64_t f = 0; f < k; f++) w[f] -= lr * gw[f];
                count++;
            }
        }
        start = end;
    }
    return count;
}

/* Matrix factorization with biases: (P[u] . Q[i] + bu[u] + bi[i] + mu - r)^2. */
void mf_epoch(const int64_t *users, const int64_t *items, const float *r, int64_t n, int64_t k,
              float *P, float *Q, float *bu, float *bi, float mu, float lr) {
    for (int64_t e = 0; e < n; e++) {
        float *p = P + users[e] * k, *q = Q + items[e] * k;
        float x = 0;
        for (int64_t f = 0; f < k; f++) x += p[f] * q[f];
        float d = x + bu[users[e]] + bi[items[e]] + mu - r[e];
        float g = 2 * d;
        bu[users[e]] -= lr * g;
        bi[items[e]] -= lr * g;
        for (int64_t f = 0; f < k; f++) {
            float pf = p[f];
            p[f] -= lr * g * q[f];
            q[f] -= lr * g * pf;
        }
    }
}
"""

#: each C loop's argument types ("p" a pointer, "i" int64, "f" float, "u" uint64) and result
_C_SIGNATURES = {"fm_epoch": ("ppiiiipppf", None), "bags_epoch": ("pppippf", None),
                 "bpr_epoch": ("pppiiiippfu", None), "sgns_epoch": ("ppiiippiippffu", ctypes.c_int64),
                 "mf_epoch": ("pppiippppff", None)}
_CTYPES = {"p": ctypes.c_void_p, "i": ctypes.c_int64, "f": ctypes.c_float, "u": ctypes.c_uint64}


def compile_c():
    """(the C loops as a ctypes library, None) or (None, why not): C_SOURCE compiled with the
    C compiler of $CC or `cc`, -O3 -march=native, in a temporary folder (removed once the
    library is loaded)."""
    compiler = shutil.which(os.environ.get("CC", "cc"))
    if compiler is None:
        return None, f"no C compiler ({os.environ.get('CC', 'cc')} not found)"
    with tempfile.TemporaryDirectory(prefix="fastad-own-models-") as folder:
        source, library = os.path.join(folder, "loops.c"), os.path.join(folder, "loops.so")
        with open(source, "w") as f:
            f.write(C_SOURCE)
        done = subprocess.run([compiler, "-O3", "-march=native", "-shared", "-fPIC", source, "-o", library, "-lm"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return None, f"{compiler} failed: {done.stderr.strip()[:300]}"
        lib = ctypes.CDLL(library)
    for name, (kinds, result) in _C_SIGNATURES.items():
        getattr(lib, name).argtypes = [_CTYPES[kind] for kind in kinds]
        getattr(lib, name).restype = result
    return lib, None


def ptr(array):
    """The address of a C-contiguous numpy array, for the C loops."""
    assert array.flags.c_contiguous
    return array.ctypes.data


def timed(fn):
    """(seconds, fn's value) of one call."""
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# ---------------------------------------------------------------- quality

def auc(scores, labels):
    """The area under the ROC curve (the rank statistic; ties are rare in float scores); nan
    when a score is not finite (a model that diverged)."""
    if not np.all(np.isfinite(scores)):
        return float("nan")
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels > 0.5
    n_pos = positives.sum()
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * (len(labels) - n_pos)))


def within(value, reference, tolerance_kind):
    """Whether a quality is within the tolerance of the C loop's ("-" without a C figure)."""
    if reference is None:
        return "-"
    if tolerance_kind == "auc":
        return "yes" if abs(value - reference) <= AUC_TOLERANCE else "NO"
    return "yes" if abs(value - reference) <= LOSS_TOLERANCE * abs(reference) else "NO"


# ---------------------------------------------------------------- rounds and tables

def alternate_fits(fits, rounds):
    """Run every fit `rounds` times, alternating them within each round. A fit returns
    (units trained, seconds, quality). Returns {name: (median units per second, median quality)}."""
    rates = {name: [] for name in fits}
    quality = {name: [] for name in fits}
    for _ in range(rounds):
        for name, fit in fits.items():
            units, seconds, q = fit()
            rates[name].append(units / seconds)
            quality[name].append(q)
    return {name: (statistics.median(rates[name]), statistics.median(quality[name])) for name in fits}


def print_table(title, unit, quality_name, tolerance_kind, results, other_optimizers=()):
    """One workload's table: each library's rate, its ratio to the C loop's, its quality and
    whether that is within the tolerance of the C loop's (not asked of `other_optimizers`,
    which train another model than the C loop's SGD)."""
    c_rate, c_quality = results.get("C loop", (None, None))
    print(f"\n{title}")
    print(f"  {'library':54s} {unit + '/s':>12s} {'vs C loop':>10s} {quality_name:>14s}  within tolerance of C")
    for name, (rate, quality) in results.items():
        ratio = f"{rate / c_rate:.2f}x" if c_rate else "-"
        if name == "C loop":
            verdict = "-"
        elif name in other_optimizers:
            verdict = "- (another optimizer)"
        else:
            verdict = within(quality, c_quality, tolerance_kind)
        print(f"  {name:54s} {rate:12,.0f} {ratio:>10s} {quality:14.4f}  {verdict}")


def row(workload, unit, rate, against_name, against_rate, target):
    """A run.py row: fastad's seconds per unit beside a comparator's (the C loop, or the fastad
    run the target names), whose ratio run.py prints as the speed-up."""
    return {"workload": workload, "unit": unit, "fastad": 1 / rate,
            "peer": 1 / against_rate if against_rate else None, "peer_name": against_name, "target": target}


# ---------------------------------------------------------------- 1, 2: hashed click data

def click_data(n_train, n_test, slots=2**18, cap=40, seed=0):
    """Examples of 10-40 hashed ids (Zipf(1.3) over `slots`), padded to `cap` with the id
    `slots`, and a click label from planted per-id weights. Returns (ids, labels) of the
    training and the held-out examples, and the padding id."""
    rng = np.random.default_rng(seed)
    n = n_train + n_test
    lengths = rng.integers(10, cap + 1, n)
    ids = (rng.zipf(1.3, (n, cap)) - 1) % slots
    padded = np.arange(cap)[None, :] >= lengths[:, None]
    truth = rng.normal(0, 1, slots)
    score = np.where(padded, 0.0, truth[ids]).sum(axis=1) / np.sqrt(lengths)
    labels = (rng.random(n) < 1 / (1 + np.exp(-score))).astype(np.float32)
    ids[padded] = slots
    return (ids[:n_train], labels[:n_train]), (ids[n_train:], labels[n_train:]), slots


def fm_logits(V, W, w0, ids):
    """The factorization machine's logits of padded examples (the padding row is zero)."""
    E = V[ids]
    s = E.sum(axis=1)
    return w0[0] + W[ids].sum(axis=(1, 2)) + 0.5 * ((s * s).sum(axis=1) - (E * E).sum(axis=(1, 2)))


def fm_start(rows, k=8, seed=1):
    """The initial V (normal(0, 0.01), its padding row, the last, zero), W and w0."""
    V = np.random.default_rng(seed).normal(0, 0.01, (rows, k)).astype(np.float32)
    V[-1] = 0
    return V, np.zeros((rows, 1), np.float32), np.zeros(1, np.float32)


def fm_graph(V, W, w0, pad, cap):
    """The user's graph over the Parameters V, W, w0 (as issue 51 writes it), examples of `cap`
    ids padded with `pad`: (loss, feeds), feeds(ids, labels) giving fa.train's feeds."""
    ids = fa.IndexInput(np.zeros(cap, np.int64))
    y = fa.Input(np.zeros(1, np.float32))
    E = fa.embedding(V, ids, padding_idx=pad)
    s = fa.sum(E, axis=0)
    pair = 0.5 * (fa.sum(s * s) - fa.sum(E * E))
    lin = fa.sum(fa.embedding(W, ids, padding_idx=pad))
    loss = fa.nn.bce_with_logits(w0 + lin + pair, y)
    return loss, lambda rows, labels: {ids: rows, y: labels[:, None]}


def fm_c_epoch(lib, V, W, w0, ids, labels, pad, lr):
    """One epoch of the C loop over the numpy V, W, w0, in place."""
    lib.fm_epoch(ptr(ids), ptr(labels), len(labels), ids.shape[1], pad, V.shape[1], ptr(V), ptr(W), ptr(w0), lr)


def fm_fastad(train, test, pad, optimizer):
    """The user's graph trained by fa.train with `optimizer`."""
    V, W, w0 = (fa.Parameter(a) for a in fm_start(pad + 1))
    loss, feeds = fm_graph(V, W, w0, pad, train[0].shape[1])
    opt = optimizer([V, W, w0])
    seconds, _ = timed(lambda: fa.train(loss, opt, feeds(*train)))
    return len(train[1]), seconds, auc(fm_logits(V.numpy(), W.numpy(), w0.numpy(), test[0]), test[1])


def fm_c(lib, train, test, pad, lr):
    V, W, w0 = fm_start(pad + 1)
    seconds, _ = timed(lambda: fm_c_epoch(lib, V, W, w0, *train, pad, lr))
    return len(train[1]), seconds, auc(fm_logits(V, W, w0, test[0]), test[1])


def fm_torch(torch, train, test, pad, lr):
    V0, W0, b0 = fm_start(pad + 1)
    V = torch.nn.Embedding.from_pretrained(torch.from_numpy(V0), freeze=False, sparse=True, padding_idx=pad)
    W = torch.nn.Embedding.from_pretrained(torch.from_numpy(W0), freeze=False, sparse=True, padding_idx=pad)
    w0 = torch.nn.Parameter(torch.from_numpy(b0))
    opt = torch.optim.SGD([V.weight, W.weight, w0], lr=lr)
    ids, y = torch.from_numpy(train[0]), torch.from_numpy(train[1])

    def epoch():
        for start in range(0, len(y), BATCH):
            batch = ids[start:start + BATCH]
            E = V(batch)
            s = E.sum(1)
            logit = w0 + W(batch).sum((1, 2)) + 0.5 * ((s * s).sum(1) - (E * E).sum((1, 2)))
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y[start:start + BATCH])
            opt.zero_grad()
            loss.backward()
            opt.step()

    seconds, _ = timed(epoch)
    with torch.no_grad():
        return len(y), seconds, auc(fm_logits(V.weight.numpy(), W.weight.numpy(), w0.numpy(), test[0]), test[1])


def bags(ids, pad):
    """Padded rows as CSR bags: (int32 ids, int64 offsets)."""
    kept = ids != pad
    return ids[kept].astype(np.int32), np.concatenate(([0], np.cumsum(kept.sum(axis=1)))).astype(np.int64)


def bag_logits(W, b, ids, offsets):
    return b[0] + np.add.reduceat(np.append(W[ids, 0], 0), offsets[:-1])


def bags_graph(W, b, longest):
    """Logistic regression over bags of at most `longest` ids, on the Parameters W (slots, 1) and
    b: (loss, sampler), sampler(ids, offsets, labels) giving fa.train's BagSampler."""
    ids, offsets = fa.IndexInput(np.zeros(longest, np.int64)), fa.IndexInput([0, 0])
    y = fa.Input(np.zeros((1, 1), np.float32))
    loss = fa.nn.bce_with_logits(fa.embedding_bag(W, ids, offsets, mode="sum", include_last_offset=True) + b, y)
    return loss, lambda bag_ids, bag_offsets, labels: fa.data.BagSampler(ids, offsets, bag_ids, bag_offsets,
                                                                         {y: labels[:, None, None]})


def bags_c_epoch(lib, W, b, ids, offsets, labels, lr):
    """One epoch of the C loop over the numpy W, b, in place."""
    lib.bags_epoch(ptr(ids), ptr(offsets), ptr(labels), len(labels), ptr(W), ptr(b), lr)


def bags_start(slots):
    return np.zeros((slots, 1), np.float32), np.zeros(1, np.float32)


def bags_fastad(train, test, slots, lr):
    W, b = (fa.Parameter(a) for a in bags_start(slots))
    loss, sampler = bags_graph(W, b, np.diff(train[1]).max())
    seconds, _ = timed(lambda: fa.train(loss, fa.optim.SGD([W, b], lr=lr), sampler(*train)))
    return len(train[2]), seconds, auc(bag_logits(W.numpy(), b.numpy(), *test[:2]), test[2])


def bags_c(lib, train, test, slots, lr):
    W, b = bags_start(slots)
    seconds, _ = timed(lambda: bags_c_epoch(lib, W, b, *train, lr))
    return len(train[2]), seconds, auc(bag_logits(W, b, *test[:2]), test[2])


def bags_torch(torch, train, test, slots, lr):
    W0, b0 = bags_start(slots)
    W = torch.nn.EmbeddingBag.from_pretrained(torch.from_numpy(W0), freeze=False, mode="sum", sparse=True)
    b = torch.nn.Parameter(torch.from_numpy(b0))
    opt = torch.optim.SGD([W.weight, b], lr=lr)
    ids, offsets, y = (torch.from_numpy(a) for a in train)
    ids = ids.long()

    def epoch():
        for start in range(0, len(y), BATCH):
            stop = min(start + BATCH, len(y))
            lo, hi = offsets[start], offsets[stop]
            logit = W(ids[lo:hi], offsets[start:stop] - lo)[:, 0] + b
            loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, y[start:stop], reduction="sum")
            opt.zero_grad()
            loss.backward()
            opt.step()

    seconds, _ = timed(epoch)
    with torch.no_grad():
        return len(y), seconds, auc(bag_logits(W.weight.numpy(), b.numpy(), *test[:2]), test[2])


def click_rows(lib, torch, quick):
    n_train, n_test = (40_000, 10_000) if quick else (180_000, 20_000)
    rounds = 1 if quick else 3
    lr, bags_lr = 0.01, 0.05        # the factorization machine's weights overflow at lr 0.05
    train, test, pad = click_data(n_train, n_test)
    SGD, Adagrad = fa.optim.SGD, fa.optim.Adagrad
    fits = {}
    if lib is not None:
        fits["C loop"] = lambda: fm_c(lib, train, test, pad, lr)
    fits["fastad graph, SGD"] = lambda: fm_fastad(train, test, pad, lambda p: SGD(p, lr=lr))
    fits["fastad graph, Adagrad"] = lambda: fm_fastad(train, test, pad, lambda p: Adagrad(p, lr=lr))
    fits["fastad graph, SGD weight_decay=0.01"] = lambda: fm_fastad(
        train, test, pad, lambda p: SGD(p, lr=lr, weight_decay=0.01))
    if torch is not None:
        fits[f"PyTorch minibatch {BATCH}, mean loss, lr {TORCH_FM_LR}"] = lambda: fm_torch(torch, train, test, pad,
                                                                                        TORCH_FM_LR)
    title = (f"1. factorization machine, k=8, 10-40 hashed ids of 2**18, {n_train:,} examples, one epoch, "
             f"median of {rounds}")
    fm = alternate_fits(fits, rounds)
    print_table(title, "examples", "held-out AUC", "auc", fm,
                other_optimizers=("fastad graph, Adagrad", "fastad graph, SGD weight_decay=0.01"))
    sgd = fm["fastad graph, SGD"][0]
    print(f"  Adagrad at {fm['fastad graph, Adagrad'][0] / sgd:.2f}x plain SGD's rate, weight_decay=0.01 at "
          f"{fm['fastad graph, SGD weight_decay=0.01'][0] / sgd:.2f}x (target >= 0.75x)")

    train_bags = bags(train[0], pad) + (train[1],)
    test_bags = bags(test[0], pad) + (test[1],)
    fits = {}
    if lib is not None:
        fits["C loop"] = lambda: bags_c(lib, train_bags, test_bags, pad + 1, bags_lr)
    fits["fastad embedding_bag + BagSampler"] = lambda: bags_fastad(train_bags, test_bags, pad + 1, bags_lr)
    if torch is not None:
        fits[f"PyTorch EmbeddingBag minibatch {BATCH}"] = lambda: bags_torch(torch, train_bags, test_bags,
                                                                             pad + 1, bags_lr)
    lr_results = alternate_fits(fits, rounds)
    print_table(f"2. logistic regression over the same hashed bags, {n_train:,} examples, one epoch, "
                f"median of {rounds}", "examples", "held-out AUC", "auc", lr_results)

    c_fm, c_bags = fm.get("C loop", (None,))[0], lr_results.get("C loop", (None,))[0]
    aucs = f"held-out AUC {fm['fastad graph, SGD'][1]:.3f}" + (f", C loop {fm['C loop'][1]:.3f}" if c_fm else "")
    return [
        row(f"own model: factorization machine k=8 (the user's graph, fa.train, SGD; {aucs})", "example", sgd,
            "C loop", c_fm, ">= 0.5x the C loop, same AUC"),
        row("own model: factorization machine k=8, Adagrad (vs the same graph with plain SGD)", "example",
            fm["fastad graph, Adagrad"][0], "fastad SGD", sgd, ">= 0.75x plain SGD"),
        row("own model: factorization machine k=8, SGD weight_decay=0.01 (vs plain SGD)", "example",
            fm["fastad graph, SGD weight_decay=0.01"][0], "fastad SGD", sgd, ">= 0.75x plain SGD"),
        row("own model: logistic regression over hashed bags (embedding_bag, BagSampler)", "example",
            lr_results["fastad embedding_bag + BagSampler"][0], "C loop", c_bags, "-"),
    ]


# ---------------------------------------------------------------- 3: BPR

def bpr_start(users, items, k=32, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 0.1, (users, k)).astype(np.float32), rng.normal(0, 0.1, (items, k)).astype(np.float32))


def bpr_fastad(train, test, lr, fused):
    U0, V0 = bpr_start(*train.shape)
    U, V = fa.Parameter(U0), fa.Parameter(V0)
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    if fused:
        loss = fa.ranking_loss(U, u, V, i, j, reduction="sum")
    else:
        loss = -fa.sum(fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])))
    sampler = fa.data.PairwiseSampler(train, u, i, j, seed=0)
    seconds, _ = timed(lambda: fa.train(loss, fa.optim.SGD([U, V], lr=lr), sampler))
    return train.nnz, seconds, fa.data.pairwise_auc(U.numpy(), V.numpy(), test)


def bpr_c(lib, train, test, lr):
    U, V = bpr_start(*train.shape)
    indptr, indices = train.indptr.astype(np.int64), train.indices.astype(np.int32)
    user_of = np.repeat(np.arange(train.shape[0], dtype=np.int32), np.diff(indptr))
    seconds, _ = timed(lambda: lib.bpr_epoch(ptr(indptr), ptr(indices), ptr(user_of), train.nnz, train.shape[1],
                                             train.nnz, U.shape[1], ptr(U), ptr(V), lr, 0))
    return train.nnz, seconds, fa.data.pairwise_auc(U, V, test)


def bpr_torch(torch, train, test, lr):
    U0, V0 = bpr_start(*train.shape)
    U = torch.nn.Embedding.from_pretrained(torch.from_numpy(U0), freeze=False, sparse=True)
    V = torch.nn.Embedding.from_pretrained(torch.from_numpy(V0), freeze=False, sparse=True)
    opt = torch.optim.SGD([U.weight, V.weight], lr=lr)
    triples = fa.data.sample_triples(train, seed=0)        # drawn before the clock starts
    users, pos, neg = (torch.from_numpy(triples[key]) for key in ("users", "pos", "neg"))

    def epoch():
        for start in range(0, len(users), BATCH):
            end = start + BATCH
            x = (U(users[start:end]) * (V(pos[start:end]) - V(neg[start:end]))).sum(1)
            loss = -torch.nn.functional.logsigmoid(x).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    seconds, _ = timed(epoch)
    return len(users), seconds, fa.data.pairwise_auc(U.weight.detach().numpy(), V.weight.detach().numpy(), test)


def bpr_rows(lib, torch, quick):
    users, items, likes = (5_000, 2_000, 200_000) if quick else (20_000, 5_000, 1_000_000)
    rounds = 1 if quick else 3
    lr = 0.1
    train, held = fa.data.train_test_split(power_law_likes(users, items, likes, seed=0), test_fraction=0.2, seed=0)
    train.sort_indices()
    test = fa.data.sample_triples(held, n=min(held.nnz, 50_000), seed=1)
    fits = {}
    if lib is not None:
        fits["C loop"] = lambda: bpr_c(lib, train, test, lr)
    fits["fastad chain from ops, PairwiseSampler"] = lambda: bpr_fastad(train, test, lr, fused=False)
    fits["fastad fused ranking_loss, PairwiseSampler"] = lambda: bpr_fastad(train, test, lr, fused=True)
    if torch is not None:
        fits[f"PyTorch minibatch {BATCH} (triples drawn beforehand)"] = lambda: bpr_torch(torch, train, test, lr)
    results = alternate_fits(fits, rounds)
    print_table(f"3. BPR k=32, {users:,} users x {items:,} items, power-law popularity, {train.nnz:,} training "
                f"likes, one epoch, median of {rounds}",
                "examples", "held-out AUC", "auc", results)
    chain, fused = results["fastad chain from ops, PairwiseSampler"][0], \
        results["fastad fused ranking_loss, PairwiseSampler"][0]
    print(f"  the chain at {chain / fused:.2f}x the fused node's rate (target >= 0.8x)")
    c_rate = results.get("C loop", (None,))[0]
    return [
        row("own model: BPR k=32 chain from ops (vs fused ranking_loss, same sampler and loop)", "example",
            chain, "fastad ranking_loss", fused, ">= 0.8x ranking_loss"),
        row("own model: BPR k=32 chain from ops, PairwiseSampler", "example", chain, "C loop", c_rate, "-"),
        row("own model: BPR k=32 fused ranking_loss, PairwiseSampler", "example", fused, "C loop", c_rate, "-"),
    ]


# ---------------------------------------------------------------- 4: skip-gram

SG = dict(dim=64, window=5, negative=5, lr=0.025, min_lr=1e-4)


def zipf_corpus(tokens, vocab=10_000, topics=50, seed=0):
    """(ids, sentence ends): sentences of 5-30 words, half of them Zipf(1.2) over the whole
    vocabulary, half Zipf(1.2) over the sentence's topic's own shuffled words, so that words
    of a topic keep company."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(5, 31, tokens // 17 + 1)
    ends = np.cumsum(lengths)
    ends = ends[ends <= tokens]
    n = int(ends[-1])
    topic_of = np.repeat(rng.integers(0, topics, ends.size), np.diff(np.concatenate(([0], ends))))
    topic_words = np.argsort(rng.random((topics, vocab)), axis=1)
    rank = (rng.zipf(1.2, n) - 1) % vocab
    ids = np.where(rng.random(n) < 0.5, rank, topic_words[topic_of, rank])
    return ids.astype(np.int32), ends.astype(np.int64)


def alias_table(weights):
    """Vose's alias table of a discrete distribution: (prob float32, alias int32)."""
    p = weights / weights.sum() * len(weights)
    prob, alias = np.ones(len(p), np.float32), np.arange(len(p), dtype=np.int32)
    small, large = [i for i in range(len(p)) if p[i] < 1], [i for i in range(len(p)) if p[i] >= 1]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s], alias[s] = p[s], g
        p[g] -= 1 - p[s]
        (small if p[g] < 1 else large).append(g)
    return prob, alias


def sg_start(vocab, seed=1):
    W = ((np.random.default_rng(seed).random((vocab, SG["dim"])) * 2 - 1) / SG["dim"]).astype(np.float32)
    return W, np.zeros((vocab, SG["dim"]), np.float32)


def sg_chain(tokens, ends, vocab, held):
    W0, C0 = sg_start(vocab)
    W, C = fa.Parameter(W0), fa.Parameter(C0)
    k = SG["negative"]
    centre, context = fa.IndexInput([0]), fa.IndexInput(np.zeros((1, 1 + k), np.int64))
    signs = np.array([1.0] + [-1.0] * k, np.float32)
    loss = -fa.sum(fa.logsigmoid(fa.gather_dot(W, centre, C, context) * signs))
    opt = fa.optim.SGD([W, C], lr=SG["lr"])
    sampler = fa.data.SkipGramSampler(tokens, centre, context, sentence_ends=ends, window=SG["window"],
                                      vocab_size=vocab, seed=0)
    seconds, _ = timed(lambda: fa.train(loss, opt, sampler, lr_schedule=fa.optim.LinearDecay(opt, min_lr=SG["min_lr"])))
    return sampler.epoch_pairs, seconds, heldout_sgns_loss(W.numpy(), C.numpy(), *held)


def sg_word2vec(tokens, ends, vocab, held):
    model = fa.models.Word2Vec(dim=SG["dim"], window=SG["window"], negative=SG["negative"], lr=SG["lr"],
                               min_lr=SG["min_lr"], sample=0, epochs=1, workers=1, seed=0)
    corpus = fa.models.EncodedCorpus(tokens, [str(w) for w in range(vocab)], ends)
    model.build_vocab(corpus)
    done = []
    seconds, _ = timed(lambda: model.train(corpus, batch_size=1, progress=lambda n, rate: done.append(n)))
    return done[-1], seconds, heldout_sgns_loss(model.vectors, model.output, *held)


def sg_c(lib, tokens, ends, vocab, held):
    W, C = sg_start(vocab)
    prob, alias = alias_table(np.bincount(tokens, minlength=vocab) ** 0.75)
    seconds, pairs = timed(lambda: lib.sgns_epoch(ptr(tokens), ptr(ends), ends.size, SG["window"], SG["negative"],
                                                  ptr(prob), ptr(alias), vocab, SG["dim"], ptr(W), ptr(C), SG["lr"],
                                                  SG["min_lr"], 0))
    return pairs, seconds, heldout_sgns_loss(W, C, *held)


def sg_pairs(tokens, ends, vocab, seed=0):
    """Every (centre, [word, negatives]) pair of one epoch in corpus order, drawn with numpy as
    the samplers draw them (a reduced window per centre, unigram^0.75 negatives)."""
    rng = np.random.default_rng(seed)
    sentence = np.repeat(np.arange(ends.size), np.diff(np.concatenate(([0], ends))))
    reach = rng.integers(1, SG["window"] + 1, tokens.size)
    position = np.arange(tokens.size)
    found = []
    for offset in [d for d in range(-SG["window"], SG["window"] + 1) if d]:
        other = position + offset
        ok = (abs(offset) <= reach) & (other >= 0) & (other < tokens.size)
        ok[ok] &= sentence[other[ok]] == sentence[position[ok]]
        found.append(np.stack([position[ok], other[ok]], axis=1))
    found = np.concatenate(found)
    found = found[np.argsort(found[:, 0], kind="stable")]
    noise = np.bincount(tokens, minlength=vocab) ** 0.75
    negatives = rng.choice(vocab, size=(len(found), SG["negative"]), p=noise / noise.sum())
    return tokens[found[:, 0]].astype(np.int64), np.column_stack([tokens[found[:, 1]], negatives]).astype(np.int64)


def sg_torch(torch, pairs, vocab, held):
    W0, C0 = sg_start(vocab)
    W = torch.nn.Embedding.from_pretrained(torch.from_numpy(W0), freeze=False, sparse=True)
    C = torch.nn.Embedding.from_pretrained(torch.from_numpy(C0), freeze=False, sparse=True)
    opt = torch.optim.SGD([W.weight, C.weight], lr=SG["lr"])
    centres, targets = (torch.from_numpy(a) for a in pairs)
    signs = torch.tensor([1.0] + [-1.0] * SG["negative"])
    n = len(centres)

    def epoch():
        for start in range(0, n, BATCH):
            opt.param_groups[0]["lr"] = SG["lr"] + (SG["min_lr"] - SG["lr"]) * start / n
            scores = (C(targets[start:start + BATCH]) * W(centres[start:start + BATCH])[:, None, :]).sum(-1)
            loss = -torch.nn.functional.logsigmoid(scores * signs).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    seconds, _ = timed(epoch)
    return n, seconds, heldout_sgns_loss(W.weight.detach().numpy(), C.weight.detach().numpy(), *held)


def sg_rows(lib, torch, quick):
    n_tokens, vocab = (150_000, 5_000) if quick else (1_000_000, 10_000)
    rounds = 1 if quick else 3
    ids, ends = zipf_corpus(n_tokens + n_tokens // 10, vocab)
    cut = ends[np.searchsorted(ends, n_tokens)]
    tokens, train_ends = ids[:cut], ends[ends <= cut]
    held = (ids[cut:].astype(np.int64), ends[ends > cut] - cut)
    fits = {}
    if lib is not None:
        fits["C loop"] = lambda: sg_c(lib, tokens, train_ends, vocab, held)
    fits["fastad chain: gather_dot + logsigmoid, SkipGramSampler"] = lambda: sg_chain(tokens, train_ends, vocab, held)
    fits["fastad fused: Word2Vec.train (sg, 1 worker)"] = lambda: sg_word2vec(tokens, train_ends, vocab, held)
    if torch is not None:
        pairs = sg_pairs(tokens, train_ends, vocab)
        fits[f"PyTorch minibatch {BATCH} (pairs drawn beforehand)"] = lambda: sg_torch(torch, pairs, vocab, held)
    results = alternate_fits(fits, rounds)
    print_table(f"4. skip-gram, dim 64, window 5, 5 negatives, Zipf corpus of {tokens.size:,} tokens over {vocab:,} "
                f"words, one epoch, median of {rounds}",
                "pairs", "held-out loss", "loss", results)
    chain = results["fastad chain: gather_dot + logsigmoid, SkipGramSampler"][0]
    fused = results["fastad fused: Word2Vec.train (sg, 1 worker)"][0]
    print(f"  the chain at {chain / fused:.2f}x Word2Vec's pairs/s (target >= 0.8x)")
    c_rate = results.get("C loop", (None,))[0]
    return [
        row("own model: skip-gram chain (gather_dot + logsigmoid, 1 pair an example) vs Word2Vec.train",
            "pair", chain, "fastad Word2Vec", fused, ">= 0.8x Word2Vec"),
        row("own model: skip-gram chain (gather_dot + logsigmoid), SkipGramSampler", "pair", chain, "C loop",
            c_rate, "-"),
        row("own model: skip-gram, fused Word2Vec.train (1 worker)", "pair", fused, "C loop", c_rate, "-"),
    ]


# ---------------------------------------------------------------- 5: matrix factorization

def ratings(users, items, n, rank=8, seed=0):
    """(users, items, ratings) of planted taste: Zipf(1.2) user and item activity, a rating
    3.5 + user and item biases + P[u].Q[i] / sqrt(rank) + noise."""
    rng = np.random.default_rng(seed)
    u = (rng.zipf(1.2, n) - 1) % users
    i = rng.permutation(items)[(rng.zipf(1.2, n) - 1) % items]
    P, Q = rng.normal(0, 1, (users, rank)), rng.normal(0, 1, (items, rank))
    r = 3.5 + rng.normal(0, 0.3, users)[u] + rng.normal(0, 0.5, items)[i] + \
        np.einsum("nk,nk->n", P[u], Q[i]) / np.sqrt(rank) + rng.normal(0, 0.5, n)
    return u.astype(np.int64), i.astype(np.int64), r.astype(np.float32)


def mf_start(users, items, k=32, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.normal(0, 0.1, (users, k)).astype(np.float32), rng.normal(0, 0.1, (items, k)).astype(np.float32),
            np.zeros(users, np.float32), np.zeros(items, np.float32))


def rmse(P, Q, bu, bi, mu, test):
    u, i, r = test
    return float(np.sqrt(np.mean((np.einsum("nk,nk->n", P[u], Q[i]) + bu[u] + bi[i] + mu - r) ** 2)))


def mf_graph(P, Q, bu, bi, mu):
    """The user's graph over the Parameters P, Q, bu, bi and the mean rating mu: (loss, feeds),
    feeds(users, items, ratings) giving fa.train's feeds."""
    u, i, r = fa.IndexInput([0]), fa.IndexInput([0]), fa.Input(np.zeros(1, np.float32))
    d = fa.vector_dot(P[u], Q[i]) + bu[u] + bi[i] + mu - r
    loss = fa.sum(d * d)
    return loss, lambda users, items, ratings: {u: users[:, None], i: items[:, None], r: ratings[:, None]}


def mf_c_epoch(lib, P, Q, bu, bi, users, items, ratings, mu, lr):
    """One epoch of the C loop over the numpy P, Q, bu, bi, in place."""
    lib.mf_epoch(ptr(users), ptr(items), ptr(ratings), len(ratings), P.shape[1], ptr(P), ptr(Q), ptr(bu), ptr(bi),
                 mu, lr)


def mf_fastad(shape, train, test, mu, lr):
    P, Q, bu, bi = (fa.Parameter(a) for a in mf_start(*shape))
    loss, feeds = mf_graph(P, Q, bu, bi, mu)
    seconds, _ = timed(lambda: fa.train(loss, fa.optim.SGD([P, Q, bu, bi], lr=lr), feeds(*train)))
    return len(train[2]), seconds, rmse(P.numpy(), Q.numpy(), bu.numpy(), bi.numpy(), mu, test)


def mf_c(lib, shape, train, test, mu, lr):
    P, Q, bu, bi = mf_start(*shape)
    seconds, _ = timed(lambda: mf_c_epoch(lib, P, Q, bu, bi, *train, mu, lr))
    return len(train[2]), seconds, rmse(P, Q, bu, bi, mu, test)


def mf_torch(torch, shape, train, test, mu, lr):
    tables = [torch.nn.Embedding.from_pretrained(torch.from_numpy(a.reshape(len(a), -1)), freeze=False, sparse=True)
              for a in mf_start(*shape)]
    P, Q, bu, bi = tables
    opt = torch.optim.SGD([t.weight for t in tables], lr=lr)
    u, i, r = (torch.from_numpy(a) for a in train)

    def epoch():
        for start in range(0, len(r), BATCH):
            us, its = u[start:start + BATCH], i[start:start + BATCH]
            d = (P(us) * Q(its)).sum(1) + bu(us)[:, 0] + bi(its)[:, 0] + mu - r[start:start + BATCH]
            loss = (d * d).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()

    seconds, _ = timed(epoch)
    weights = [t.weight.detach().numpy() for t in tables]
    return len(r), seconds, rmse(weights[0], weights[1], weights[2][:, 0], weights[3][:, 0], mu, test)


def mf_rows(lib, torch, quick):
    users, items, n = (5_000, 2_000, 150_000) if quick else (20_000, 5_000, 1_000_000)
    rounds = 1 if quick else 3
    lr = 0.01
    u, i, r = ratings(users, items, n + n // 10)
    train, test = (u[:n], i[:n], r[:n]), (u[n:], i[n:], r[n:])
    mu = float(train[2].mean())
    fits = {}
    if lib is not None:
        fits["C loop"] = lambda: mf_c(lib, (users, items), train, test, mu, lr)
    fits["fastad graph, fa.train"] = lambda: mf_fastad((users, items), train, test, mu, lr)
    if torch is not None:
        fits[f"PyTorch minibatch {BATCH}"] = lambda: mf_torch(torch, (users, items), train, test, mu, lr)
    results = alternate_fits(fits, rounds)
    print_table(f"5. matrix factorization with biases, k=32, {users:,} users x {items:,} items, {n:,} ratings, "
                f"squared loss, one epoch, median of {rounds}",
                "examples", "held-out RMSE", "loss", results)
    return [row("own model: matrix factorization with biases k=32, squared loss (user's graph, fa.train)", "example",
                results["fastad graph, fa.train"][0], "C loop", results.get("C loop", (None,))[0], "-")]


def run(quick=False):
    lib, c_reason = compile_c()
    if c_reason:
        print(f"C loop rows skipped: {c_reason}")
    torch = torch_or_none()
    if torch is None:
        print("PyTorch rows skipped: PyTorch is not installed")
    rows = []
    for workload in (click_rows, bpr_rows, sg_rows, mf_rows):
        rows += workload(lib, torch, quick)
    print()
    return rows


if __name__ == "__main__":
    cli(run, __doc__)
