"""`TripleSampling`: how `BPR` and `TwoTower` draw what they train on, (user, liked item,
other item) triples of a user x item matrix, by the rule of the compiled `PairwiseSampler`
(`_pairs.pyx`, `fa.data.sample_triples`)."""
import numpy as np

from fastad._engine.graph import IndexInput
from fastad.models.recsys._pairs import PairwiseSampler

__all__ = ["TripleSampling"]


class TripleSampling:
    """The sampling of a `Recommender` trained on triples: its examples are dicts of int64
    `users`, `pos` and `neg` ids, which the feeds of its `example_graph()` take.

    It draws an epoch's triples before the epoch (`sample_examples`), unless the model
    draws them inside `fa.train`'s loop (`epoch_sampler`, as `BPR` does); a fit on a
    device draws each batch on the host with `PairwiseSampler` (`host_sampler`)."""

    def sample_examples(self, interactions, n, seed, negatives="uniform"):
        """`n` triples of `interactions` (a checked canonical CSR matrix, or its `Interactions`)
        drawn from `seed` in one batch of `PairwiseSampler`, as `fa.data.sample_triples` draws them."""
        return self.drawn_examples(next(self.host_sampler(interactions, n, 1, seed, negatives).epoch()))

    def host_sampler(self, interactions, batch, n, seed, negatives="uniform"):
        """`PairwiseSampler` drawing `n` batches of `batch` triples into host leaves."""
        drawn = [IndexInput(np.zeros(batch, dtype=np.int64)) for _ in range(3)]
        return PairwiseSampler(interactions, *drawn, examples=n, seed=seed, negatives=negatives)

    def drawn_examples(self, drawn):
        """The triples of a batch that `host_sampler`'s sampler drew: its (users, pos, neg)."""
        users, pos, neg = drawn
        return {"users": users, "pos": pos, "neg": neg}
