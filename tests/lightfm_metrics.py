"""LightFM's side of tests/test_lightfm_metrics.py: LightFM 1.17's evaluation functions on a
LightFM model whose embeddings and biases are set to given factors. It needs only numpy, scipy
and lightfm (not fastad), so that it runs in the interpreter that has LightFM
(FASTAD_LIGHTFM_PYTHON, as bench/lightfm_fit.py).

Run: python tests/lightfm_metrics.py IN.npz OUT.npz
IN.npz holds `U`, `V`, `b` (float32) and each matrix's `test_*`/`train_*` `indptr`, `indices`
and `shape`; OUT.npz gets each metric with preserve_rows False and True, and the ranks.
"""
import sys

import numpy as np
import scipy.sparse as sp

K = 3


def matrix(saved, name):
    indices = saved[f"{name}_indices"]
    return sp.csr_matrix((np.ones(len(indices), np.float32), indices, saved[f"{name}_indptr"]),
                         shape=tuple(saved[f"{name}_shape"]))


def main(source, target):
    from lightfm import LightFM
    from lightfm import evaluation

    saved = np.load(source)
    U, V, b = saved["U"], saved["V"], saved["b"]
    model = LightFM(no_components=U.shape[1])
    model._initialize(U.shape[1], V.shape[0], U.shape[0])
    model.user_embeddings[:] = U
    model.item_embeddings[:] = V
    model.item_biases[:] = b
    model.user_biases[:] = 0
    test, train = matrix(saved, "test"), matrix(saved, "train")
    out = {"ranks": model.predict_rank(test, train).data}
    for keep in (False, True):
        out[f"precision_{keep}"] = evaluation.precision_at_k(model, test, train, k=K, preserve_rows=keep)
        out[f"recall_{keep}"] = evaluation.recall_at_k(model, test, train, k=K, preserve_rows=keep)
        out[f"auc_{keep}"] = evaluation.auc_score(model, test, train, preserve_rows=keep)
        out[f"rr_{keep}"] = evaluation.reciprocal_rank(model, test, train, preserve_rows=keep)
    np.savez(target, **out)


if __name__ == "__main__":
    main(*sys.argv[1:])
