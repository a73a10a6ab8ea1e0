"""fastad's random sources, and `fa.manual_seed` to make them all reproducible.

Everything in fastad that draws random numbers without being given a seed or a
generator (layer and `fa.nn.init` initialisers, `Dropout(seed=None)`, the
samplers of `fa.train`, `BPR`, `TwoTower` and their `fit`, the data sets and
splits of `fa.data`, each with `seed=None`) takes its stream from here: fresh
entropy by default, or, after `fa.manual_seed(seed)`, streams spawned in order
from that seed, so a program that seeds once at the start runs the same way
every time.

>>> fa.manual_seed(0)
>>> model = fa.nn.Linear(4, 2)          # the same weights in every run
"""
import numbers

import numpy as np

from fastad.training import sampler
from fastad.checks import check_seed

__all__ = ["manual_seed", "generator"]

_root = None        # the SeedSequence of fa.manual_seed, or None for fresh entropy


def manual_seed(seed):
    """Seed every fastad random source (see the module docstring); returns None.

    >>> fa.manual_seed(1234)
    """
    global _root
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"manual_seed: seed must be an int >= 0, got {seed!r}")
    _root = np.random.SeedSequence(int(seed))
    sampler.set_default_seed(_root.spawn(1)[0])


def generator(who="fastad", given=None):
    """`given` if it is a numpy Generator, else the next stream of fastad's random source.

    Raises TypeError naming `who` for anything else.
    """
    if given is not None:
        if not isinstance(given, np.random.Generator):
            raise TypeError(f"{who}: generator must be a numpy Generator (np.random.default_rng(seed)) "
                            f"or None, got {type(given).__name__}")
        return given
    return np.random.default_rng(None if _root is None else _root.spawn(1)[0])


def seed_of(who, seed):
    """`seed` checked (an int >= 0), or for None a seed drawn from fastad's random source
    (`fa.manual_seed`'s stream, else fresh entropy): the seed a model draws its initial
    weights or its samples from."""
    seed = check_seed(who, seed)
    return generator(who).integers(2**63) if seed is None else seed


def generator_of(who, seed):
    """A numpy Generator started from `seed_of(who, seed)`."""
    return np.random.default_rng(seed_of(who, seed))
