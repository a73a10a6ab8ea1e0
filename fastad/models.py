"""Ready-made models that the examples, benchmarks and demo share."""
import numpy as np

from fastad_cy.elementwise import logsigmoid
from fastad_cy.graph import IndexInput, Parameter
from fastad_cy.reduction import sum as fa_sum
from fastad_cy.sparse import take
from fastad.data import pairwise_auc
from fastad.nn.module import Module

__all__ = ["BPR"]


class BPR(Module):
    """Bayesian personalised ranking by matrix factorisation.

    Users and items get `dim`-dimensional factors U, V (N(0, scale)); a
    triple (u, i, j) says u prefers i to j, and its loss is
    -log sigmoid(U[u].(V[i] - V[j])). Gradients are sparse: a step touches
    three rows.

    >>> model = BPR(1000, 500, dim=32)
    >>> loss, feeds = model.example_graph()
    >>> fa.train(loss, fa.optim.SGD(model.parameters(), lr=0.05), feeds(train), epochs=1)
    """

    def __init__(self, n_users, n_items, dim=32, scale=0.1, seed=0, dtype=None, U=None, V=None):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.U = Parameter(U if U is not None else rng.normal(0, scale, (n_users, dim)), dtype=dtype)
        self.V = Parameter(V if V is not None else rng.normal(0, scale, (n_items, dim)), dtype=dtype)

    def forward(self, users, pos, neg):
        """The summed loss of the triples given as IndexInputs (or integer ids) of one shape."""
        u = take(self.U, users)
        margin = fa_sum(u * (take(self.V, pos) - take(self.V, neg)), -1)
        return -fa_sum(logsigmoid(margin))

    def example_graph(self):
        """A one-triple graph to replay, and a function mapping triples to its feeds.

        Returns `(loss, feeds)`; `feeds(triples)` gives the `{leaf: ids}` dict
        that `fastad.train` takes, for triples as made by
        `fastad.data.planted_preferences`.
        """
        u, i, j = IndexInput([0]), IndexInput([0]), IndexInput([0])
        loss = self(u, i, j)
        return loss, lambda t: {u: t["users"], i: t["pos"], j: t["neg"]}

    def auc(self, triples):
        """Share of triples ranked correctly (0.5 is chance)."""
        return pairwise_auc(self.U, self.V, triples)
