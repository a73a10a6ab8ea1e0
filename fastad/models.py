"""Ready-made models that the examples, benchmarks and demo share."""
import time

import numpy as np

from fastad_cy.elementwise import logsigmoid
from fastad_cy.graph import IndexInput, Parameter
from fastad_cy.linalg import vector_dot
from fastad_cy.reduction import sum as fa_sum
from fastad_cy.sparse import take
from fastad_cy.train import train
from fastad import hogwild
from fastad.data import pairwise_auc
from fastad.optim import SGD, Adagrad
from fastad.nn.module import Module

__all__ = ["BPR", "bpr_hogwild_worker"]


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
        margin = vector_dot(take(self.U, users), take(self.V, pos) - take(self.V, neg))
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


def bpr_hogwild_worker(rank, shared, triples, workers, optimizer="sgd", lr=0.05, epochs=1, seed=0):
    """One Hogwild worker of BPR training: `fastad.hogwild.run(bpr_hogwild_worker, ...)`.

    Trains `BPR` factors living in `shared["U"]`, `shared["V"]` (zero copy,
    no locks) on its shard of `triples` (every `workers`-th example from
    `rank`), with `optimizer` "sgd" or "adagrad" (whose state is shared
    too). Reports its examples to `fastad.hogwild.report` and returns
    `{"loss": mean loss per epoch, "examples": n, "seconds": training time}`.

    >>> with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
    ...     fa.hogwild.run(bpr_hogwild_worker, workers=2, args=(shared, train, 2))
    """
    model = BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    shard = {k: v[rank::workers] for k, v in triples.items()}
    if optimizer == "sgd":
        opt = SGD(model.parameters(), lr=lr)
    elif optimizer == "adagrad":
        opt = Adagrad(model.parameters(), lr=lr)
    else:
        raise ValueError(f"bpr_hogwild_worker: optimizer must be 'sgd' or 'adagrad', got {optimizer!r}")
    last = [0]

    def progress(done):
        hogwild.report(done - last[0])
        last[0] = done

    start = time.perf_counter()
    means = train(loss, opt, feeds(shard), epochs=epochs, shuffle=True, seed=seed + rank,
                  progress=progress, report_every=10_000)
    return {"loss": means, "examples": epochs * len(shard["users"]),
            "seconds": time.perf_counter() - start}
