"""bench/bilstm_tagger.py's autobatched mode trains the tagger it compares: its first step's
loss is the sum of the minibatch's sentences' losses built one by one, and where DyNet is
installed, its steps give DyNet's losses (the same model, minibatches and updates)."""
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


def test_the_autobatched_steps_give_dynets_losses():
    dy = pytest.importorskip("dynet")
    data, weights = _data()
    ours = tagger.fastad_autobatch_trainer(weights, np.float32)
    theirs = tagger.dynet_autobatch_trainer(dy, weights)
    for k in range(0, len(data), tagger.MINIBATCH):
        batch = data[k:k + tagger.MINIBATCH]
        assert ours(batch) == pytest.approx(theirs(batch), rel=1e-5)
