"""Text models and features: `Word2Vec`, `FastText` (subword vectors) and `TextClassifier`
(fastText's supervised model), their vectors (`KeyedVectors`), and, in compiled code beside
them, word2vec's window samplers (`_windows`) and fastText's dictionary, hashing and
n-grams (`_dictionary`, also `fa.text`).

The dictionary's ids equal fastText's own (checked against the `fasttext` package in the
tests) except among words of equal count, whose order fastText's unstable sort leaves open.
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.models.text._dictionary import (EOS, Dictionary, fasttext_hash,  # noqa: E402
                                            fasttext_tokens, subword_table)
