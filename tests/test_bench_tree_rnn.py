"""bench/tree_rnn.py's DyNet references (issue 52) train the model fastad trains: DyNet's
eager steps give fastad's eager losses tree by tree (the same weights, order and updates), and
its autobatched step's loss is the sum of its trees' losses before the step."""
import concurrent.futures
import importlib.util
import multiprocessing

import numpy as np
import pytest

from bench_modules import bench_module

tree_rnn = bench_module("tree_rnn")


def _losses_beside_dynets():
    """(fastad's, DyNet's) eager loss of each tree, and (DyNet's autobatched first-step loss,
    the sum of its trees' losses at the start weights, by fastad)."""
    import dynet as dy

    import fastad as fa
    from trees import function_trees
    data, vocab = function_trees(60)
    weights = tree_rnn.initial_weights(len(vocab))
    ours, theirs = tree_rnn.fastad_trainer(weights, np.float32), tree_rnn.dynet_trainer(dy, weights)
    eager = [(ours(tree), theirs(tree)) for tree in data]
    start = {k: fa.Parameter(v, dtype=np.float32) for k, v in weights.items()}
    batch = data[:tree_rnn.AUTOBATCH]
    summed = sum(tree_rnn.tree_loss(tree, start, tree_rnn.FASTAD).item() for tree in batch)
    return eager, tree_rnn.dynet_trainer(dy, weights, autobatch=True)(batch), summed


def test_dynets_steps_train_fastads_model():
    # DyNet in a process of its own: loading its library turns on flush-to-zero for the
    # whole process (see bench/common.py's dynet_or_none).
    if importlib.util.find_spec("dynet") is None:
        pytest.skip("DyNet is not installed: pip install dynet38")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        eager, batched, summed = pool.submit(_losses_beside_dynets).result(timeout=300)
    assert len(eager) == 60
    for ours, theirs in eager:
        assert theirs == pytest.approx(ours, rel=1e-4, abs=1e-6)
    assert batched == pytest.approx(summed, rel=1e-5)
