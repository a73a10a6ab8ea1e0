"""Ready-made models, one module each, on one base (`base.Model`: one way to save and
load a model, its settings and state in one `fa.save` file) and trained by one epochs
runner (`runner`).

- `Recommender` (`recommender`): the base of the ranking models, trained on a user x
  item matrix with the model's ranking loss on the examples its sampler draws, and
  ranking;
- `BPR` (`bpr`): matrix factorisation, and `bpr_hogwild_worker` on precomputed triples;
- `TwoTower` (`two_tower`): users and items as sums of feature embeddings;
- `LightFM` (`lightfm`): LightFM's hybrid model, users and items as weighted sums of their
  features' embeddings (scipy feature matrices), its losses and calls;
- `Word2Vec` (`word2vec`): skip-gram and CBOW with negative sampling, its vectors a
  `KeyedVectors` (`keyed_vectors`, gensim's API);
- `FastText` (`fasttext`): Word2Vec over words and their character n-grams, with
  vectors for words outside the vocabulary;
- `TextClassifier` (`text_classifier`): fastText's supervised model;
- `LinearModel` and `FactorizationMachine` (`linear`): models over sparse (hashed)
  features, trained per example, as Vowpal Wabbit's and libFM's.

A model trains through `runner.EpochRunner`: in this process, in Hogwild threads or
processes, or on a GPU, as a `runner.RunSettings` says, over what the protocols of
`runner` ask of it (`ModelDescription`, `WorkerGraph`, `DeviceWorkerGraph`).
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.models.base import Model
from fastad.models.recsys.recommender import Recommender, bpr_loss, margin_loss
from fastad.models.runner import OPTIMIZERS
from fastad.models.recsys.bpr import BPR, bpr_hogwild_worker
from fastad.models.recsys.two_tower import TwoTower
from fastad.models.recsys.lightfm import LightFM
from fastad.models.text.keyed_vectors import KeyedVectors
from fastad.models.text.word2vec import EncodedCorpus, LineSentences, Word2Vec
from fastad.models.text.fasttext import FastText, FastTextKeyedVectors
from fastad.models.text.text_classifier import TextClassifier
from fastad.models.linear import FactorizationMachine, LinearModel

__all__ = ["Model", "Recommender", "BPR", "TwoTower", "LightFM", "Word2Vec", "FastText", "FastTextKeyedVectors",
           "EncodedCorpus", "LineSentences", "KeyedVectors", "TextClassifier", "bpr_hogwild_worker",
           "LinearModel", "FactorizationMachine"]
