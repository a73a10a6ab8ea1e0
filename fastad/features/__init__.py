"""fa.features: hashed sparse features from text, in compiled code, as Vowpal Wabbit hashes
them: its text format, CSV/TSV columns and JSON lines, namespaces, `name:value` features, n-grams and
skip-grams, character n-grams, quadratic and cubic crosses, labels and importance weights,
into the CSR bags the samplers read (`fa.data.BagSampler`), whole or in chunks, with a
cached binary form.

>>> hasher = fa.features.Hasher(bits=21, quadratic=["ab"])
>>> f = fa.features.read_vw("train.vw", hasher)             # f.ids, f.offsets, f.values, f.labels
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.features._featuriser import hash_name
from fastad.features.reader import (Features, Hasher, iter_csv, iter_json, iter_vw, load, read_csv, read_json,
                                    read_vw)

__all__ = ["Hasher", "Features", "read_vw", "iter_vw", "read_csv", "iter_csv", "read_json", "iter_json", "load", "hash_name"]
