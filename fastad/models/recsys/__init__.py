"""Recommenders: the `Recommender` base (training on a user x item matrix, and ranking),
`BPR` and `TwoTower`, the interactions they train on (`interactions`), their compiled
sampler of (user, positive, negative) triples (`_pairs`) and how they draw them with it
(`triples`)."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py
