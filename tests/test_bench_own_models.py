"""bench/own_models.py's C loops compute what fastad's graphs compute.

The benchmark rates a user's graph against a C loop of "the same model, same float32
arithmetic and update order": on the workloads whose examples are given (not drawn by a
sampler), one epoch of each from the same start ends at the same weights, to float32
rounding. No time is measured.
"""

import numpy as np
import pytest

import fastad as fa
from bench_modules import bench_module


@pytest.fixture(scope="module")
def own_models():
    return bench_module("own_models")


@pytest.fixture(scope="module")
def lib(own_models):
    lib, reason = own_models.compile_c()
    if lib is None:
        pytest.skip(reason)
    return lib


def same_weights(numpy_weights, parameters):
    for mine, theirs in zip(numpy_weights, parameters):
        assert np.abs(mine - theirs.numpy()).max() <= 1e-5 * max(1.0, np.abs(mine).max())


def test_factorization_machine(own_models, lib):
    (ids, labels), _, pad = own_models.click_data(300, 1, slots=2**10)
    start = own_models.fm_start(pad + 1)
    parameters = [fa.Parameter(a.copy()) for a in start]
    loss, feeds = own_models.fm_graph(*parameters, pad, ids.shape[1])
    fa.train(loss, fa.optim.SGD(parameters, lr=0.01), feeds(ids, labels))
    own_models.fm_c_epoch(lib, *start, ids, labels, pad, 0.01)
    assert np.abs(start[0] - own_models.fm_start(pad + 1)[0]).max() > 1e-2      # it trained
    same_weights(start, parameters)


def test_logistic_regression_over_bags(own_models, lib):
    (ids, labels), _, pad = own_models.click_data(300, 1, slots=2**10)
    bag_ids, offsets = own_models.bags(ids, pad)
    start = own_models.bags_start(pad + 1)
    parameters = [fa.Parameter(a.copy()) for a in start]
    loss, sampler = own_models.bags_graph(*parameters, np.diff(offsets).max())
    fa.train(loss, fa.optim.SGD(parameters, lr=0.05), sampler(bag_ids, offsets, labels))
    own_models.bags_c_epoch(lib, *start, bag_ids, offsets, labels, 0.05)
    assert np.abs(start[0]).max() > 1e-2
    same_weights(start, parameters)


def test_matrix_factorization_with_biases(own_models, lib):
    users, items, ratings = own_models.ratings(50, 40, 500)
    start = own_models.mf_start(50, 40)
    mu = float(ratings.mean())
    parameters = [fa.Parameter(a.copy()) for a in start]
    loss, feeds = own_models.mf_graph(*parameters, mu)
    fa.train(loss, fa.optim.SGD(parameters, lr=0.01), feeds(users, items, ratings))
    own_models.mf_c_epoch(lib, *start, users, items, ratings, mu, 0.01)
    assert np.abs(start[2]).max() > 1e-2
    same_weights(start, parameters)
