"""Automatic batching of a child-sum tree RNN: fastad eager (a new graph per tree) against
fa.autobatch (the graphs of a minibatch of 32 trees recorded, then evaluated as one batched
graph by fa.batch), over the ASTs of the standard library's functions, at dim 64 and 256,
float32, BLAS on one thread.

The model is bench/tree_rnn.py's: h = tanh(W emb(type) + U sum(h(children)) + b) per node,
a softmax over the root's h (four classes), plain SGD (a step a tree eager, a step a
minibatch batched, on the minibatch's summed loss). The two run alternately in one process,
a pass over the trees each, several rounds; the best round of each counts. Also printed:
where a batched tree's time goes (recording the ops, building and running the batched
graph's forward in fa.batch, its backward).
Run: python bench/autobatch_tree_rnn.py [--quick] [--trees N] [--rounds N]
"""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402
from trees import function_trees  # noqa: E402
import tree_rnn  # noqa: E402

import fastad as fa  # noqa: E402

LR, BATCH = 0.01, 32


def tree_loss(tree, p):
    """bench/tree_rnn.py's loss of one tree, built node by node: the same code eager and
    under fa.autobatch."""
    return tree_rnn.tree_loss(tree, p, tree_rnn.FASTAD)


def trainers(weights):
    """(eager epoch, batched epoch): each takes the trees and returns (trees/s, seconds per
    tree recording, in fa.batch, in backward); each has its own Parameters."""
    def make():
        params = {k: fa.Parameter(v, name=k) for k, v in weights.items()}
        return params, fa.optim.SGD(list(params.values()), lr=LR)

    params_e, opt_e = make()
    params_b, opt_b = make()

    def eager(trees):
        t0 = time.perf_counter()
        for tree in trees:
            tree_loss(tree, params_e).backward()
            opt_e.step()
            opt_e.zero_grad()
        return len(trees) / (time.perf_counter() - t0), None

    def batched(trees):
        spent = np.zeros(3)
        t0 = time.perf_counter()
        with fa.autobatch():
            for start in range(0, len(trees), BATCH):
                t1 = time.perf_counter()
                losses = [tree_loss(tree, params_b) for tree in trees[start:start + BATCH]]
                t2 = time.perf_counter()
                total = fa.batch(losses)
                t3 = time.perf_counter()
                total.backward()
                t4 = time.perf_counter()
                opt_b.step()
                opt_b.zero_grad()
                spent += (t2 - t1, t3 - t2, t4 - t3)
        return len(trees) / (time.perf_counter() - t0), spent / len(trees)
    return eager, batched


def run(quick=False, trees=None, rounds=None):
    data, vocab = function_trees(trees or (320 if quick else 1280))
    nodes = sum(len(t[0]) for t in data)
    print(f"{len(data)} trees of 5-200 nodes ({nodes / len(data):.0f} on average), "
          f"{len(vocab)} node types, minibatches of {BATCH}")
    rows = []
    for dim in (64, 256):
        eager, batched = trainers(tree_rnn.initial_weights(len(vocab), dim))
        best_e, best_b, split = 0.0, 0.0, None
        for _ in range(rounds or (2 if quick else 4)):       # alternating, best of each
            best_e = max(best_e, eager(data)[0])
            speed, spent = batched(data)
            if speed > best_b:
                best_b, split = speed, spent
        rows.append((dim, best_e, best_b, split))
    return rows


def show(rows):
    for dim, eager, batched, split in rows:
        record, evaluate, backward = split * 1e6
        print(f"dim {dim}: eager {eager:7,.0f} trees/s | autobatch {batched:7,.0f} trees/s "
              f"({batched / eager:5.2f}x eager) | per batched tree: record {record:.0f} us, "
              f"fa.batch {evaluate:.0f} us, backward {backward:.0f} us")
    print("[target: autobatched >= 5x eager at dim 64, >= 10x at dim 256]")


if __name__ == "__main__":
    cli(run, __doc__, show=show, trees="how many trees (default 1280)", rounds="rounds (default 4)")
