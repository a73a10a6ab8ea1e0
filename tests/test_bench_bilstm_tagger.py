"""bench/bilstm_tagger.py's autobatched mode trains the tagger it compares: its first step's
loss is the sum of the minibatch's sentences' losses built one by one, and where DyNet is
installed, its steps give DyNet's losses (the same model, minibatches and updates)."""
import concurrent.futures
import importlib.util
import multiprocessing

import numpy as np
import pytest

from bench_modules import bench_module

tagger = bench_module("bilstm_tagger")


def _data():
    data, n_tags = tagger.code_sentences(48)
    return data, tagger.initial_weights(n_tags)


def test_an_autobatched_step_is_the_sum_of_its_sentences_losses():
    import fastad as fa
    data, weights = _data()
    params, _ = tagger.fastad_model(tagger.one_bias(weights), np.float64)
    eager = sum(tagger.fastad_net(len(w), fa.IndexInput(w), fa.IndexInput(t), params).item()
                for w, t in data[:tagger.MINIBATCH])
    step = tagger.fastad_autobatch_trainer(weights, np.float64)
    assert step(data[:tagger.MINIBATCH]) == pytest.approx(eager, rel=1e-12)


def _losses_beside_dynets():
    """(fastad's, DyNet's) loss of each minibatch of the autobatched steps."""
    import dynet as dy
    data, weights = _data()
    ours = tagger.fastad_autobatch_trainer(weights, np.float32)
    theirs = tagger.dynet_trainer(dy, weights, autobatch=True)
    return [(ours(data[k:k + tagger.MINIBATCH]), theirs(data[k:k + tagger.MINIBATCH]))
            for k in range(0, len(data), tagger.MINIBATCH)]


def test_the_autobatched_steps_give_dynets_losses():
    # DyNet in a process of its own, not even imported here: loading its library turns on
    # flush-to-zero for the whole process, and the later tests of fastad's float functions
    # would see subnormals as 0.
    if importlib.util.find_spec("dynet") is None:
        pytest.skip("DyNet is not installed: pip install dynet38")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        losses = pool.submit(_losses_beside_dynets).result(timeout=300)
    for ours, theirs in losses:
        assert ours == pytest.approx(theirs, rel=1e-5)


def _first_losses_beside_dynets():
    """(fastad's, DyNet's) eager loss of the first sentence, and DyNet's eager steps' losses."""
    import dynet as dy
    data, weights = _data()
    import fastad as fa
    params, _ = tagger.fastad_model(tagger.one_bias(weights), np.float32)
    words, tags = data[0]
    ours = tagger.fastad_net(len(words), fa.IndexInput(words), fa.IndexInput(tags), params).item()
    step = tagger.dynet_trainer(dy, weights)
    return ours, [step(sentence) for sentence in data[:8]]


def test_dynets_eager_steps_start_from_fastads_loss():
    if importlib.util.find_spec("dynet") is None:
        pytest.skip("DyNet is not installed: pip install dynet38")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        ours, theirs = pool.submit(_first_losses_beside_dynets).result(timeout=300)
    assert theirs[0] == pytest.approx(ours, rel=1e-5)
    assert all(np.isfinite(theirs)) and len(theirs) == 8
