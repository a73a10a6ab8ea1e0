"""Small trained models of each ready model's class, for the tests of the one base and of
the runner's protocols."""
import numpy as np
import scipy.sparse as sp

import fastad as fa

LIKES = fa.data.planted_interactions(60, 40, per_user=6, rank=3, seed=0)
SENTENCES = [["walk", "talks", "walked", "talking", "play", "plays"], ["jump", "read", "sing", "reads"]] * 20
TEXTS = ["goal match team", "bread cake oven", "team score win", "bake flour sugar"] * 10
LABELS = ["sport", "food", "sport", "food"] * 10
MODELS = ["BPR", "TwoTower", "LightFM", "Word2Vec", "FastText", "TextClassifier"]


def fitted(name):
    """A small trained model of class `name` (one of MODELS)."""
    if name == "BPR":
        return fa.models.BPR(60, 40, dim=4, seed=1, biases=True).fit(LIKES, epochs=2)
    if name == "TwoTower":
        groups = np.arange(60) % 3
        return fa.models.TwoTower({"id": np.arange(60), "group": groups}, {"id": np.arange(40)},
                                  dim=4, seed=2).fit(LIKES, epochs=2)
    if name == "LightFM":
        tags = np.eye(40)[:, :5] + np.eye(40)[:, 5:10]
        features = sp.hstack([sp.identity(40), sp.csr_matrix(tags)]).tocsr()
        return fa.models.LightFM(no_components=4, loss="warp", random_state=6).fit(LIKES, item_features=features,
                                                                                  epochs=2)
    if name == "Word2Vec":
        return fa.models.Word2Vec(dim=4, min_count=1, epochs=1, seed=3).fit(SENTENCES)
    if name == "FastText":
        return fa.models.FastText(dim=4, min_count=1, epochs=1, bucket=50, seed=4).fit(SENTENCES)
    return fa.models.TextClassifier(dim=4, epochs=2, word_ngrams=2, bucket=50, seed=5).fit(TEXTS, LABELS)
