"""bench/sparse_models.py compares like with like: its files read the same in fastad and VW
(labels, example count), and both libraries' test scores come back one per test line and
learn the planted task. No time is measured."""

import numpy as np
import pytest

import fastad as fa
from bench_modules import bench_module


@pytest.fixture(scope="module")
def sparse_models():
    return bench_module("sparse_models")


def test_the_files_and_both_libraries_scores(sparse_models, tmp_path):
    train, test = sparse_models.write_files(str(tmp_path), 30000, 2000)
    features = fa.features.read_vw(train, fa.features.Hasher(bits=sparse_models.BITS))
    labels = sparse_models.labels_of(train)
    assert len(features) == 30000
    np.testing.assert_array_equal(features.labels > 0, labels)          # written -1/+1, as VW reads
    assert (features.weights != 1).sum() == 3000                   # a tenth of the lines
    truth = sparse_models.labels_of(test)
    auc = {}
    for kind, better_than in (("linear", 0.6), ("fm", 0.6), ("ffm", 0.6)):
        _, scores, _ = sparse_models.fastad_fit(kind, train, test, 1)
        auc[kind] = sparse_models.quality(truth, scores)[0]
        assert scores.shape == (2000,) and auc[kind] > better_than
    pytest.importorskip("vowpalwabbit")
    _, vw_scores, _ = sparse_models.vw_fit("linear", train, test, str(tmp_path))
    assert vw_scores.shape == (2000,) and sparse_models.quality(truth, vw_scores)[0] > 0.6
    # the factorization machine's defaults (AdaGrad at lr 0.5, factors from normal(0, 0.1))
    # learn the sites x words pairs in one pass as fast as VW's hashed crosses
    _, vw_scores, _ = sparse_models.vw_fit("fm", train, test, str(tmp_path))
    assert auc["fm"] >= sparse_models.quality(truth, vw_scores)[0]
