"""LightFM's side of bench/lightfm_warp.py: fit LightFM on a user x item matrix and return its
factors and the fit's seconds. It needs only numpy, scipy and lightfm (not fastad), so that it
also runs as a script in the interpreter that has LightFM: lightfm 1.17 builds only with
setuptools < 70, often in a venv of its own.

Run: python bench/lightfm_fit.py IN.npz OUT.npz LOSS EPOCHS THREADS SEED [FEATURES.npz]
IN.npz holds the CSR matrix's `indptr`, `indices` and `shape` (FEATURES.npz the item feature
matrix's, with its `data`); OUT.npz gets `user_factors`, `item_factors`, `item_biases` (the
users' and items' representations: with item features, of every row of the feature matrix)
and `seconds`.
"""
import sys
import time

import numpy as np
import scipy.sparse as sp

DIM, LR, MAX_SAMPLED = 64, 0.05, 10


def fit(train, loss, epochs, threads, seed, item_features=None):
    """LightFM(no_components=64, loss=loss, learning_rate=0.05, its default Adagrad schedule,
    max_sampled=10) fitted on `train` (CSR) for `epochs`, with `item_features` (a CSR matrix
    whose rows may outnumber train's items: the rows past them are items not trained on):
    (user representations, item representations, item biases, seconds of the fit)."""
    from lightfm import LightFM

    model = LightFM(no_components=DIM, loss=loss, learning_rate=LR, learning_schedule="adagrad",
                    max_sampled=MAX_SAMPLED, random_state=int(seed))
    coo = train.tocoo()
    trained = None if item_features is None else item_features[:train.shape[1]]
    start = time.perf_counter()
    model.fit(coo, item_features=trained, epochs=int(epochs), num_threads=int(threads))
    seconds = time.perf_counter() - start
    item_biases, items = model.get_item_representations(item_features)
    return model.get_user_representations()[1], items, item_biases, seconds


def main(source, target, loss, epochs, threads, seed, features=None):
    saved = np.load(source)
    train = sp.csr_matrix((np.ones(len(saved["indices"]), np.float32), saved["indices"], saved["indptr"]),
                          shape=tuple(saved["shape"]))
    item_features = None
    if features is not None:
        saved = np.load(features)
        item_features = sp.csr_matrix((saved["data"], saved["indices"], saved["indptr"]),
                                      shape=tuple(saved["shape"]))
    users, items, biases, seconds = fit(train, loss, epochs, threads, seed, item_features)
    np.savez(target, user_factors=users, item_factors=items, item_biases=biases, seconds=seconds)


if __name__ == "__main__":
    main(*sys.argv[1:])
