"""`LightFM`: the hybrid recommender of LightFM (users and items described by weighted
features), with LightFM's arguments and calls, trained in `fastad.train`'s compiled loop."""
import numpy as np
import scipy.sparse as sp

from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.ops.losses import bce_with_logits
from fastad.ops.linalg import vector_dot
from fastad.ops.ranking import margin_loss
from fastad.ops.reduction import sum as total
from fastad.ops.sparse import embedding_bag
from fastad.training.feeds import FeedSampler
from fastad.checks import check_choice, check_flag, check_ids, check_int, check_number
from fastad.random import generator_of, seed_of
from fastad.models.recsys._pairs import (RANK_ESTIMATES, FeatureBags, FeatureSampler, Interactions, PairwiseSampler,
                                         WarpSampler)
from fastad.models.recsys.interactions import check_interactions
from fastad.models.recsys.recommender import Recommender, _nearest, _queries, _top_k_in_batches

__all__ = ["LightFM"]

#: LightFM's losses: the two of BPR's triples, WARP's and k-OS WARP's, and the pointwise logistic.
LOSSES = ("logistic", "bpr", "warp", "warp-kos")
#: LightFM's learning schedules -> fastad's optimizer of the same rule (Adagrad's sums from 1).
SCHEDULES = {"adagrad": "adagrad", "adadelta": "adadelta"}
#: each schedule's accumulators (its optimizer's state slots) -> their starting values: LightFM's
#: `*_gradients` (Adagrad's sums of squared gradients, from 1) and Adadelta's `*_momentum`
ACCUMULATORS = {"adagrad": {"sum": 1.0}, "adadelta": {"square_avg": 0.0, "acc_delta": 0.0}}


class LightFM(Recommender):
    """LightFM's hybrid model: a user and an item are each the sum of the embeddings of their
    features, weighted (`user_features`, `item_features`: scipy (rows, features) matrices;
    identity matrices, one feature per id, when not given), with biases summed likewise; the
    score of (u, i) is user(u) . item(i) + bias(u) + bias(i).

    The arguments and calls are LightFM 1.17's (`from fastad.models import LightFM` is the
    one line to change): `LightFM(no_components=10, k=5, n=10, learning_schedule="adagrad",
    loss="logistic", learning_rate=0.05, rho=0.95, epsilon=1e-6, item_alpha=0.0,
    user_alpha=0.0, max_sampled=10, random_state=None)`, `fit`, `fit_partial`, `predict`,
    `predict_rank`, `get_user_representations`, `get_item_representations`; and fastad's
    `recommend`, `similar_items` (with features: for users and items not seen in training),
    `save`/`load`.

    - `loss`: "logistic" (each stored entry of the interactions, LightFM's: a value > 0 is a
      positive, its label 1, and a value <= 0, LightFM's -1, a negative, its label 0), "bpr" (a
      negative drawn uniformly
      per interaction, -log sigmoid of the margin), "warp" (negatives drawn against the
      current scores until one violates the margin, up to `max_sampled`, the hinge times the
      log-rank weight: `fa.data.WarpSampler`), "warp-kos" (k-OS WARP with `k` of `n`).
    - `rank_estimate` (fastad's, keyword-only): "sampled" (LightFM's) or "online" (WARP's
      positives draw one candidate each, weighted by the user's running violation rate).
    - `learning_schedule`: "adagrad" (the rate over the root of each weight's sum of squared
      gradients, the sums from 1, as LightFM's) or "adadelta" (`rho`, `epsilon`;
      `learning_rate` unused, as in LightFM).
    - `user_alpha`, `item_alpha`: L2 penalties, applied as the optimizer's weight decay of
      the rows each example touches (LightFM decays every row lazily; a row untouched for
      long decays less here). One optimizer steps all tables, so the two must be equal
      when both are non-zero.
    - Feature rows are taken as given, not normalised (LightFM's behaviour: normalise your
      rows when a user or item should weigh 1 in all). Weights must be finite and >= 0.
    - Trained in `fastad.train`'s compiled loop: the sampler draws ids and `FeatureSampler`
      writes each as its feature bag; `num_threads` > 1 trains Hogwild threads.

    `sample_weighted` (keyword-only, fastad's; set by each fit: whether its `sample_weight`
    was given) makes the graph multiply each example's loss by its weight, a node and a weight
    a step that a fit without weights does not pay (under "warp" the weight rides on the
    rank weight: the sampler reads the stored weights only when it is set). `user_features=`/`item_features=` (keyword-only, not
    LightFM's) give the constructor the feature matrices of a fit, as `load` and `fit`'s
    workers rebuild the model.

    Parameters: `user_embeddings` (n_user_features, no_components), `item_embeddings`,
    `user_bias` and `item_bias` (n_features,), LightFM's `user_biases`/`item_biases`
    arrays (here `item_biases()` is the Recommender's per-item bias).

    >>> model = LightFM(no_components=32, loss="warp")
    >>> model.fit(train, item_features=tags, epochs=20, num_threads=2)
    >>> scores = model.predict(np.repeat(3, n_items), np.arange(n_items), item_features=tags)
    """

    def __init__(self, no_components=10, k=5, n=10, learning_schedule="adagrad", loss="logistic",
                 learning_rate=0.05, rho=0.95, epsilon=1e-6, item_alpha=0.0, user_alpha=0.0,
                 max_sampled=10, random_state=None, dtype=None, *, user_features=None, item_features=None,
                 rank_estimate="sampled", sample_weighted=False):
        super().__init__()
        who = "LightFM"
        self.no_components = check_int(who, "no_components", no_components)
        self.k = check_int(who, "k", k)
        self.n = check_int(who, "n", n, minimum=self.k)
        self.learning_schedule = check_choice(who, "learning_schedule", learning_schedule, sorted(SCHEDULES))
        self.loss = check_choice(who, "loss", loss, list(LOSSES))
        self.learning_rate = check_number(who, "learning_rate", learning_rate, above=0)
        self.rho = check_number(who, "rho", rho, above=0)
        self.epsilon = check_number(who, "epsilon", epsilon, above=0)
        self.item_alpha = check_number(who, "item_alpha", item_alpha, at_least=0)
        self.user_alpha = check_number(who, "user_alpha", user_alpha, at_least=0)
        if self.item_alpha and self.user_alpha and self.item_alpha != self.user_alpha:
            raise ValueError(f"{who}: item_alpha ({item_alpha}) and user_alpha ({user_alpha}) differ; "
                             f"fastad applies them as one optimizer's weight decay: give one value, "
                             f"or one of them 0")
        self.max_sampled = check_int(who, "max_sampled", max_sampled, minimum=1)
        self.rank_estimate = check_choice(who, "rank_estimate", rank_estimate, list(RANK_ESTIMATES))
        self.sample_weighted = check_flag(who, "sample_weighted", sample_weighted)
        self.random_state = seed_of(who, random_state)
        self.dtype = Parameter(np.zeros(0), dtype=dtype).dtype.name
        self._draws = generator_of(who, self.random_state)      # each fit's sampling seed
        self._accumulators = None       # {table: {slot: array}}: the schedule's state, kept across fits
        # FeatureBags of the last fit: `_arrays()` gives them to the fit's workers, `_state()` as
        # CSR arrays, as `load` passes them
        self.user_features, self.item_features = (None if features is None else _saved_bags(name, features)
                                                  for name, features in (("user_features", user_features),
                                                                         ("item_features", item_features)))

    # ------------------------------------------------------------------ sizes and features

    @property
    def n_users(self):
        return None if self.user_features is None else self.user_features.n_rows

    @property
    def n_items(self):
        return None if self.item_features is None else self.item_features.n_rows

    def _is_trained(self):
        return "user_embeddings" in self._parameters

    def _features(self, who, name, features, rows, table):
        """`features` (or the identity, when None) as FeatureBags of `rows` rows whose features
        are `table`'s rows (when the model has it)."""
        if features is None:
            features = sp.identity(rows if table is None else table.shape[0], format="csr")
        bags = FeatureBags(features, rows if rows is not None else features.shape[0], who, name)
        if table is not None and bags.n_features != table.shape[0]:
            raise ValueError(f"{who}: {name} has {bags.n_features} features (columns), but the model "
                             f"has {table.shape[0]}: give the feature matrices it was fitted with")
        return bags

    def _table(self, name):
        return self._parameters.get(name)

    def _reset(self):
        for name in ("user_embeddings", "item_embeddings", "user_bias", "item_bias"):
            self._parameters.pop(name, None)
        self.user_features = self.item_features = None
        self._accumulators = None

    def _make_tables(self, n_user_features, n_item_features):
        """LightFM's initialisation: embeddings uniform in [-0.5, 0.5) / no_components, biases 0."""
        rng = np.random.default_rng(self._draws.integers(2 ** 63))
        dim = self.no_components
        for side, rows in (("user", n_user_features), ("item", n_item_features)):
            setattr(self, f"{side}_embeddings",
                    Parameter(((rng.random((rows, dim)) - 0.5) / dim).astype(self.dtype), dtype=self.dtype))
            setattr(self, f"{side}_bias", Parameter(np.zeros(rows, self.dtype), dtype=self.dtype))

    # ------------------------------------------------------------------ training

    def fit(self, interactions, user_features=None, item_features=None, sample_weight=None, epochs=1,
            num_threads=1, verbose=False, **fastad_options):
        """LightFM's `fit`: a fresh model (weights drawn anew), then `fit_partial`."""
        self._reset()
        return self.fit_partial(interactions, user_features, item_features, sample_weight, epochs,
                                num_threads, verbose, **fastad_options)

    def fit_partial(self, interactions, user_features=None, item_features=None, sample_weight=None,
                    epochs=1, num_threads=1, verbose=False, **fastad_options):
        """Train `epochs` more epochs on `interactions` (a scipy user x item matrix; a stored
        value > 0 is an interaction; with loss "logistic" each stored value is an example, > 0 a
        positive and <= 0 a negative, as in LightFM, duplicates summed), from the current
        weights; returns the model.

        `user_features`/`item_features`: scipy (users, features) / (items, features)
        matrices of weights >= 0, the identity when None; a later call must give as many
        features. `num_threads`: Hogwild threads (`start_method="fork"` or "spawn": Hogwild
        processes). `verbose`: a line per epoch. `sample_weight` (every loss but "warp-kos",
        as LightFM's; a NotImplementedError for it): a scipy matrix of finite weights > 0 stored
        at exactly the interactions' entries (LightFM's rule), each entry's example (its
        logistic loss, its BPR or WARP triple) weighted by its weight, which scales its update;
        without it every entry weighs 1 (its stored value is ignored, as LightFM's is).
        `recommend` leaves out the items of every stored entry, negatives included. Other
        keyword arguments go to `Recommender.fit`
        (`callback`, `progress`, `negatives`, `samples`).
        The schedule's accumulators (Adagrad's sums, Adadelta's averages) carry over from one
        call to the next, as LightFM's do (`fit` starts them anew), and are saved with the
        model (a checkpoint saved before they were kept starts them at their defaults)."""
        who = "LightFM.fit"
        if sample_weight is not None and self.loss == "warp-kos":
            raise NotImplementedError(f"{who}: sample_weight is not supported with loss='warp-kos' (nor in "
                                      f"LightFM): k-OS WARP draws its positives among a user's items")
        signed = self.loss == "logistic"
        if not signed and sp.issparse(interactions) and interactions.nnz and interactions.min() < 0:
            raise ValueError(f"{who}: interactions hold negative values (LightFM's -1 entries): loss="
                             f"'logistic' trains on them as negatives; loss={self.loss!r} reads positives "
                             f"only: leave them out")
        matrix = check_interactions(interactions, who, signed=signed)
        positive = matrix.data > 0 if signed else None
        matrix.data[:] = 1.0 if sample_weight is None else _sample_weights(who, sample_weight, matrix)
        epochs = check_int(who, "epochs", epochs, minimum=0)
        workers = check_int(who, "num_threads", num_threads)
        check_flag(who, "verbose", verbose)
        user_bags = self._features(who, "user_features", user_features, matrix.shape[0],
                                   self._table("user_embeddings"))
        item_bags = self._features(who, "item_features", item_features, matrix.shape[1],
                                   self._table("item_embeddings"))
        if not self._is_trained():
            self._make_tables(user_bags.n_features, item_bags.n_features)
        self.user_features, self.item_features = user_bags, item_bags
        alpha = max(self.item_alpha, self.user_alpha)
        options = ({"initial_accumulator_value": ACCUMULATORS["adagrad"]["sum"], "weight_decay": alpha}
                   if self.learning_schedule == "adagrad" else
                   {"rho": self.rho, "eps": self.epsilon, "weight_decay": alpha})
        if verbose and "callback" not in fastad_options:
            fastad_options["callback"] = lambda epoch, loss: print(f"Epoch {epoch}: loss {loss:.4f}")
        if epochs:
            self.sample_weighted = sample_weight is not None        # the workers' graphs weigh their examples
            # laid out here for the fit, so that Recommender.fit takes it without a second copy
            data = _Labelled(matrix, positive) if signed else Interactions(matrix, copy=False)
            super().fit(data, epochs=epochs, workers=workers,
                        lr=self.learning_rate if self.learning_schedule == "adagrad" else 1.0,
                        optimizer=SCHEDULES[self.learning_schedule], optimizer_options=options,
                        seed=int(self._draws.integers(2 ** 62)),
                        start_method=fastad_options.pop("start_method", "threads" if workers > 1 else None),
                        **fastad_options)
        return self

    def _optimizer_state(self, optimizer):
        """The schedule's accumulators, which every fit starts from and keeps (LightFM's carry
        over between its fit_partial calls): made at their starting values when the model has
        none (a fresh fit, or a checkpoint saved before they were kept)."""
        if self._accumulators is None:
            self._accumulators = {name: {slot: np.full(table.shape, start, dtype=self.dtype)
                                         for slot, start in ACCUMULATORS[self.learning_schedule].items()}
                                  for name, table in self._parameters.items()}
        return self._accumulators

    def epoch_samples(self, matrix):
        """An epoch: one example per interaction, or with k-OS WARP one per user (LightFM's)."""
        return matrix.shape[0] if self.loss == "warp-kos" else matrix.nnz

    def check_run(self, who, settings):
        if settings.device != "cpu":
            raise ValueError(f"{who}: LightFM trains in the CPU loop (its samplers write feature "
                             f"bags); fit it with device='cpu' (got {settings.device!r})")

    def example_graph(self, batch=1, device="cpu"):
        """The loss of `batch` examples over bag leaves, and its `_Bags` (the leaves, which
        `epoch_sampler` fills): a ranking loss of triples, or the logistic loss of pairs, each
        example's times its weight (`extra`: its sample weight, under WARP times its rank weight;
        under "bpr" and "logistic" only when `sample_weighted`)."""
        bags = _Bags(self, batch)
        users = embedding_bag(self.user_embeddings, *bags.user, mode="sum", include_last_offset=True,
                              per_sample_weights=bags.user_weights)
        items = embedding_bag(self.item_embeddings, *bags.item, mode="sum", include_last_offset=True,
                              per_sample_weights=bags.item_weights)
        score = vector_dot(users, items) + embedding_bag(self.item_bias, *bags.item, mode="sum",
                                                         include_last_offset=True,
                                                         per_sample_weights=bags.item_weights)
        if self.loss == "logistic":
            score = score + embedding_bag(self.user_bias, *bags.user, mode="sum", include_last_offset=True,
                                          per_sample_weights=bags.user_weights)
            losses = bce_with_logits(score, bags.labels, reduction="none")
        else:
            losses = margin_loss(score, "bpr" if self.loss == "bpr" else "hinge", reduction="none")
        loss = total(losses if bags.extra is None else losses * bags.extra)
        return loss, bags

    def epoch_sampler(self, bags, interactions, n, seed, negatives="uniform"):
        """The epoch's sampler: the ids' sampler of the loss (the entries for "logistic", with
        their labels, PairwiseSampler's triples for "bpr", WarpSampler's against the current
        scores for WARP), each example's weight its entry's stored value (read when
        `sample_weighted`: without, every stored value is 1), its ids written as
        feature bags by `FeatureSampler`. `interactions`: a `fa.data.Interactions`, all of
        whose entries are positives unless it is a logistic fit's (`_Labelled`)."""
        u, i = bags.ids[0], bags.ids[1]
        j = bags.ids[2] if len(bags.ids) == 3 else None
        if self.loss == "logistic":
            rng = np.random.default_rng(seed)
            matrix = interactions.matrix
            chosen = rng.permutation(matrix.nnz)[:n * bags.batch] if n * bags.batch <= matrix.nnz else \
                rng.integers(matrix.nnz, size=n * bags.batch)
            users = np.searchsorted(matrix.indptr, chosen, side="right") - 1     # each entry's user
            labels = interactions.positive[chosen] if isinstance(interactions, _Labelled) else 1.0
            ids = FeedSampler({u: users.reshape(n, -1), i: matrix.indices[chosen].reshape(n, -1).astype(np.int64),
                               bags.labels: np.broadcast_to(labels, chosen.shape).reshape(n, -1).astype(self.dtype),
                               **({} if bags.extra is None else
                                  {bags.extra: matrix.data[chosen].reshape(n, -1).astype(self.dtype)})})
        elif self.loss == "bpr":
            ids = PairwiseSampler(interactions, u, i, j, examples=n, seed=seed, negatives=negatives,
                                  weights=bags.extra)
        else:
            ids = WarpSampler(interactions, u, i, j, bags.extra, self.user_embeddings, self.item_embeddings,
                              self.item_bias, max_sampled=self.max_sampled,
                              kos_k=self.k if self.loss == "warp-kos" else None, kos_n=self.n, examples=n,
                              seed=seed, negatives=negatives, user_features=self.user_features,
                              item_features=self.item_features, rank_estimate=self.rank_estimate,
                              weighted=self.loss == "warp" and self.sample_weighted, rates=bags.rates)
            bags.rates = ids.rates
        return FeatureSampler(ids, self.user_features, self.item_features, bags.user + (bags.user_weights,),
                              bags.item + (bags.item_weights,), u, i, j)

    # ------------------------------------------------------------------ saving

    def settings(self):
        return {"no_components": self.no_components, "k": self.k, "n": self.n,
                "learning_schedule": self.learning_schedule, "loss": self.loss,
                "learning_rate": self.learning_rate, "rho": self.rho, "epsilon": self.epsilon,
                "item_alpha": self.item_alpha, "user_alpha": self.user_alpha,
                "max_sampled": self.max_sampled, "rank_estimate": self.rank_estimate,
                "sample_weighted": self.sample_weighted, "random_state": int(self.random_state), "dtype": self.dtype}

    def _arrays(self):
        """The FeatureBags of the last fit, which each worker of a fit adopts: its threads these
        ones, without a copy; its processes their own, rebuilt from the matrix pickled."""
        return {"user_features": self.user_features, "item_features": self.item_features}

    def _state(self):
        """Recommender's state, the feature matrices as CSR arrays, and the schedule's
        accumulators when the model has them."""
        state = super()._state()
        state["arrays"] = {name: {"indptr": bags.matrix.indptr, "indices": bags.matrix.indices,
                                  "data": bags.matrix.data, "shape": np.array(bags.matrix.shape)}
                           for name, bags in state["arrays"].items()}
        if self._accumulators is not None:
            state["accumulators"] = self._accumulators
        return state

    @classmethod
    def _from_state(cls, settings, state):
        """The saved model, its accumulators checked against its tables and schedule (a file
        saved before they were kept has none: the next fit starts them at their defaults)."""
        model = super()._from_state(settings, state)
        if "accumulators" in state:
            slots = sorted(ACCUMULATORS[model.learning_schedule])
            saved = state["accumulators"]
            for name, table in model._parameters.items():
                if sorted(saved.get(name, {})) != slots or any(np.shape(saved[name][slot]) != table.shape
                                                              for slot in slots):
                    raise ValueError(f"its accumulators of {name} do not fit the table and the "
                                     f"{model.learning_schedule} schedule (slots {slots}, shape {table.shape})")
            model._accumulators = {name: {slot: np.array(saved[name][slot], dtype=model.dtype) for slot in slots}
                                   for name in model._parameters}
        return model

    @classmethod
    def _around(cls, settings, arrays, weights):
        """The model of `settings` and the feature matrices of `arrays` over `weights` (adopted
        zero-copy): how `load` and each worker of `fit` rebuild it (the tables are made by a
        fit, so there are none to replace)."""
        model = cls(**settings, **arrays)
        for name, value in weights.items():
            setattr(model, name, Parameter(value, dtype=model.dtype))     # a float64 model's stay float64
        return model

    # ------------------------------------------------------------------ LightFM's queries

    def _query_bags(self, who, name, features, side):
        """The feature bags a query scores with: the fit's, or `features` (any rows: new users
        or items, the cold start), checked against the model's features."""
        self._require_trained(who.rpartition(".")[2])
        if features is None:
            return getattr(self, f"{side}_features")
        return self._features(who, name, features, None, self._table(f"{side}_embeddings"))

    def _weights_of(self, bags, rows=None):
        """The feature weights of bags' rows (all when None), in the model's dtype."""
        return (bags.matrix if rows is None else bags.matrix[rows]).astype(self.dtype)

    def _embeddings(self, bags, side, rows=None):
        """The embeddings of bags' rows (all when None) on `side`'s table."""
        return self._weights_of(bags, rows) @ self._parameters[f"{side}_embeddings"].value

    def _representations(self, bags, side, rows=None):
        """(biases, embeddings) of bags' rows (all when None) on `side`'s tables."""
        matrix = self._weights_of(bags, rows)
        return (matrix @ self._parameters[f"{side}_bias"].value,
                matrix @ self._parameters[f"{side}_embeddings"].value)

    def get_user_representations(self, features=None):
        """LightFM's: (biases (n_users,), embeddings (n_users, no_components)) of the users of
        `features` (default: the fit's), each the weighted sum over their features."""
        return self._representations(self._query_bags("LightFM.get_user_representations", "features",
                                                      features, "user"), "user")

    def get_item_representations(self, features=None):
        """LightFM's: (biases (n_items,), embeddings (n_items, no_components)) of the items of
        `features` (default: the fit's)."""
        return self._representations(self._query_bags("LightFM.get_item_representations", "features",
                                                      features, "item"), "item")

    def predict(self, user_ids, item_ids, item_features=None, user_features=None, num_threads=1):
        """LightFM's: the scores of the pairs (user_ids[k], item_ids[k]) (one user id scores it
        against every item id given), a float array; with feature matrices, ids are their rows."""
        who = "LightFM.predict"
        user_bags = self._query_bags(who, "user_features", user_features, "user")
        item_bags = self._query_bags(who, "item_features", item_features, "item")
        check_int(who, "num_threads", num_threads)
        items = check_ids(who, "item_ids", item_ids, item_bags.n_rows, "items")
        users = check_ids(who, "user_ids", user_ids, user_bags.n_rows, "users")
        if users.ndim == 0:
            users = np.full(items.shape, users)
        if users.shape != items.shape or users.ndim != 1:
            raise ValueError(f"{who}: user_ids and item_ids must be 1-D of one length (or one user id), "
                             f"got shapes {users.shape} and {items.shape}")
        user_bias, user_rows = self._representations(user_bags, "user", users)
        item_bias, item_rows = self._representations(item_bags, "item", items)
        return np.einsum("nk,nk->n", user_rows, item_rows) + user_bias + item_bias

    def predict_rank(self, test_interactions, train_interactions=None, item_features=None, user_features=None,
                     num_threads=1, check_intersections=True):
        """LightFM's: a CSR matrix of test_interactions' shape holding, at each test interaction,
        the rank of its item among all items for that user (0: the highest score), the items
        of `train_interactions` left out of the count."""
        who = "LightFM.predict_rank"
        user_bags = self._query_bags(who, "user_features", user_features, "user")
        item_bags = self._query_bags(who, "item_features", item_features, "item")
        check_int(who, "num_threads", num_threads)
        shape = (user_bags.n_rows, item_bags.n_rows)
        test = check_interactions(test_interactions, who, "test_interactions", shape=shape)
        train = (None if train_interactions is None else
                 check_interactions(train_interactions, who, "train_interactions", shape=shape))
        if train is not None and check_flag(who, "check_intersections", check_intersections) and \
                test.multiply(train).nnz:
            raise ValueError(f"{who}: test_interactions and train_interactions share "
                             f"{test.multiply(train).nnz} interaction(s); pass check_intersections=False "
                             f"to rank them anyway")
        # a user's bias adds to all its scores alike: the ranks take the embeddings alone
        users = self._embeddings(user_bags, "user")
        item_bias, items = self._representations(item_bags, "item")
        ranks = np.zeros(test.nnz, dtype=np.float32)
        rows = np.flatnonzero(np.diff(test.indptr))
        for start in range(0, len(rows), 1000):
            batch = rows[start:start + 1000]
            scores = users[batch] @ items.T + item_bias
            if train is not None:
                scores[(train[batch].toarray() > 0)] = -np.inf
            for position, user in enumerate(batch):
                lo, hi = test.indptr[user], test.indptr[user + 1]
                mine = scores[position, test.indices[lo:hi]]
                ranks[lo:hi] = (scores[position][None, :] > mine[:, None]).sum(axis=1)
        return sp.csr_matrix((ranks, test.indices.copy(), test.indptr.copy()), shape=shape)

    # ------------------------------------------------------------------ the Recommender's vectors

    def user_vectors(self, user_ids):
        return self._embeddings(self.user_features, "user", user_ids)

    def item_vectors(self):
        return self._embeddings(self.item_features, "item")

    def item_biases(self):
        return self._weights_of(self.item_features) @ self._parameters["item_bias"].value

    def recommend(self, user_ids, *args, user_features=None, item_features=None, **kwargs):
        """`Recommender.recommend`, or with `user_features` and/or `item_features` (scipy
        matrices over the model's features) the top `k` (default 10) items of those matrices'
        rows for the users of their rows `user_ids`, new users and items included (the cold
        start): `(ids, scores)`, best first, nothing filtered out.

        >>> ids, scores = model.recommend([0], k=5, user_features=new_user, item_features=catalogue)
        """
        if user_features is None and item_features is None:
            return super().recommend(user_ids, *args, **kwargs)
        who = "LightFM.recommend"
        k = check_int(who, "k", kwargs.pop("k", args[0] if args else 10))
        if kwargs or len(args) > 1:
            raise TypeError(f"{who}: with user_features or item_features it takes user_ids and k only, "
                            f"got more: {sorted(kwargs) or args[1:]}")
        user_bags = self._query_bags(who, "user_features", user_features, "user")
        item_bags = self._query_bags(who, "item_features", item_features, "item")
        users = _queries(who, "user_ids", user_ids, user_bags.n_rows, "users")
        item_bias, items = self._representations(item_bags, "item")

        def score_rows(positions):
            return self._embeddings(user_bags, "user", users[positions]) @ items.T + item_bias

        ids, scores = _top_k_in_batches(np.arange(len(users)), min(k, len(items)), score_rows)
        return (ids[0], scores[0]) if np.ndim(user_ids) == 0 else (ids, scores)

    def similar_items(self, item_ids, N=10, filter_items=None, items=None, *, k=None, item_features=None):
        """`Recommender.similar_items`, by cosine of the items' representations; with
        `item_features` (a scipy matrix over the model's features) among the items of its rows,
        new ones included (the cold start)."""
        who = "LightFM.similar_items"
        bags = self._query_bags(who, "item_features", item_features, "item")
        return _nearest(who, "item_ids", item_ids, self._representations(bags, "item")[1], N, k, filter_items,
                        items, "items")


def _sample_weights(who, sample_weight, matrix):
    """`sample_weight`'s values in the order of `matrix`'s stored entries (canonical CSR), checked
    to be finite, > 0 and stored at exactly those entries."""
    if not sp.issparse(sample_weight):
        raise TypeError(f"{who}: sample_weight must be a scipy sparse matrix of the interactions' shape "
                        f"(LightFM's COO matrix), got {type(sample_weight).__name__}")
    if sample_weight.shape != matrix.shape:
        raise ValueError(f"{who}: sample_weight has shape {sample_weight.shape}, expected the "
                         f"interactions' {matrix.shape}")
    weights = sp.csr_matrix(sample_weight, dtype=np.float64, copy=True)
    weights.sum_duplicates()
    weights.sort_indices()
    if not (np.array_equal(weights.indptr, matrix.indptr) and np.array_equal(weights.indices, matrix.indices)):
        raise ValueError(f"{who}: sample_weight must store one weight at each interaction and none "
                         f"elsewhere (it stores {weights.nnz} values for {matrix.nnz} interactions)")
    bad = ~np.isfinite(weights.data) | (weights.data <= 0)
    if bad.any():
        first = np.flatnonzero(bad)[0]
        user = np.searchsorted(weights.indptr, first, side="right") - 1
        raise ValueError(f"{who}: sample_weight must hold finite weights > 0; it holds {weights.data[first]} "
                         f"at user {user}, item {weights.indices[first]}")
    return weights.data


def _saved_bags(name, features):
    """The FeatureBags of a feature matrix given as `_arrays()` gives it (FeatureBags, taken as
    they are), as `_state()` saves it (a dict of its CSR arrays) or as a scipy matrix."""
    if isinstance(features, FeatureBags):
        return features
    if isinstance(features, dict):
        features = sp.csr_matrix((features["data"], features["indices"], features["indptr"]),
                                 shape=tuple(features["shape"]))
    return FeatureBags(features, getattr(features, "shape", (0,))[0], "LightFM", name)


class _Labelled(Interactions):
    """The entries of a logistic fit as `Interactions` (every stored entry, its value its weight),
    and `positive`, each entry's label (True: a value > 0; False: <= 0, LightFM's negatives), in
    the order of the stored values: what its epochs draw their examples from."""

    def __init__(self, matrix, positive):
        super().__init__(matrix, copy=False)
        self.positive = positive

    def __reduce__(self):
        return _Labelled, (self.matrix, self.positive)


class _Bags:
    """The leaves of `LightFM.example_graph`: the user and item bags (ids, offsets, weights
    of `embedding_bag`s), the sampler's id leaves (users, pos, and for the ranking losses
    neg), `extra`, the Input of each example's weight (its sample weight, under WARP times its
    rank weight; None for "bpr" and "logistic" unless `sample_weighted`), and `labels`, each
    example's label (logistic; else None)."""

    def __init__(self, model, batch):
        dtype = model.dtype
        triples = model.loss != "logistic"
        user_room = batch * model.user_features.longest
        item_room = batch * model.item_features.longest * (2 if triples else 1)
        self.batch = batch
        self.user = (IndexInput(np.zeros(user_room, np.int64)), IndexInput(np.zeros(batch + 1, np.int64)))
        self.item = (IndexInput(np.zeros(item_room, np.int64)), IndexInput(np.zeros(batch + 1, np.int64)))
        self.user_weights = Input(np.zeros(user_room), dtype=dtype)
        self.item_weights = Input(np.zeros(item_room), dtype=dtype)
        self.ids = tuple(IndexInput(np.zeros(batch, np.int64)) for _ in range(3 if triples else 2))
        weighted = model.sample_weighted or model.loss not in ("bpr", "logistic")
        self.extra = Input(np.ones(batch), dtype=dtype) if weighted else None
        self.labels = Input(np.ones(batch), dtype=dtype) if model.loss == "logistic" else None
        self.rates = None       # the online rank estimate's, kept across a fit's epochs (WarpSampler)
