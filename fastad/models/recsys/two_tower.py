"""`TwoTower`: users and items as sums of feature embeddings, trained with the BPR loss."""
import numpy as np

from fastad._engine.graph import IndexInput, Parameter
from fastad.ops.sparse import take
from fastad.checks import check_int
from fastad.random import seed_of
from fastad.models.recsys.recommender import Recommender, _check_scale, bpr_loss
from fastad.models.recsys.triples import TripleSampling

__all__ = ["TwoTower"]


class TwoTower(TripleSampling, Recommender):
    """Users and items as sums of feature embeddings (as LightFM does), trained with the BPR loss.

    `user_features` maps a field name to an int array with one id per user
    (e.g. `{"id": np.arange(n_users), "age": age_group}`); `item_features`
    likewise per item. Each field gets a table (Parameter `user_<name>` or
    `item_<name>`) of (largest id + 1) x dim rows, N(0, scale); a user's
    vector is the sum of its fields' rows (one `IndexInput` per field in the
    training graph), an item's likewise, and the score is their dot product.
    Users or items that share features share what is learned about them.

    >>> model = fa.models.TwoTower({"id": np.arange(n_users), "age": ages},
    ...                            {"id": np.arange(n_items), "genre": genres}, dim=16)
    >>> model.fit(likes, epochs=5)
    """

    def __init__(self, user_features, item_features, dim=32, scale=0.1, seed=0, dtype=None):
        super().__init__()
        self.user_features = _check_fields("TwoTower", "user_features", user_features)
        self.item_features = _check_fields("TwoTower", "item_features", item_features)
        self.dim = check_int("TwoTower", "dim", dim)
        self.scale = _check_scale("TwoTower", scale)
        self.seed = seed_of("TwoTower", seed)
        rng = np.random.default_rng(self.seed)
        for side, fields in (("user", self.user_features), ("item", self.item_features)):
            for name, ids in fields.items():
                table = rng.normal(0, self.scale, (int(ids.max()) + 1, dim))
                setattr(self, f"{side}_{name}", Parameter(table, dtype=dtype))

    @property
    def n_users(self):
        return len(next(iter(self.user_features.values())))

    @property
    def n_items(self):
        return len(next(iter(self.item_features.values())))

    def settings(self):
        """The constructor's keyword arguments but the feature ids (`_arrays`) and the tables."""
        return {"dim": self.dim, "scale": self.scale, "seed": int(self.seed),
                "dtype": next(iter(self._parameters.values())).dtype.name}

    def _arrays(self):
        """The feature ids the model is built from: `user_features` and `item_features`."""
        return {"user_features": self.user_features, "item_features": self.item_features}

    def _tower(self, side, leaves):
        """The sum of the rows of each field's table at the field's IndexInput."""
        total = None
        for name, ids in leaves.items():
            rows = take(self._parameters[f"{side}_{name}"], ids)
            total = rows if total is None else total + rows
        return total

    def example_graph(self, batch=1, device="cpu"):
        """A graph of `batch` triples (default one) to replay, and a function mapping
        triples to its feeds; its leaves are on `device` (where the model must be).

        Each field has an `IndexInput` (items have two: the preferred and the
        other item); `feeds(triples)` looks up each triple's field ids.
        """
        def leaves(fields):
            return {name: IndexInput(np.zeros(batch, dtype=np.int64), device=device) for name in fields}

        user, pos, neg = leaves(self.user_features), leaves(self.item_features), leaves(self.item_features)
        loss = bpr_loss(self._tower("user", user), self._tower("item", pos), self._tower("item", neg))

        def feeds(triples):
            fed = {user[name]: ids[triples["users"]] for name, ids in self.user_features.items()}
            for name, ids in self.item_features.items():
                fed[pos[name]] = ids[triples["pos"]]
                fed[neg[name]] = ids[triples["neg"]]
            return fed

        return loss, feeds

    def _vectors(self, side, fields, rows):
        return sum(self._parameters[f"{side}_{name}"].value[ids[rows]] for name, ids in fields.items())

    def user_vectors(self, user_ids):
        return self._vectors("user", self.user_features, user_ids)

    def item_vectors(self):
        return self._vectors("item", self.item_features, slice(None))

    def item_biases(self):
        return None


def _check_fields(who, name, fields):
    """{field name: int64 ids} with one length and ids >= 0, or a clear error naming `name`."""
    if not hasattr(fields, "items") or not fields:
        raise TypeError(f"{who}: {name} must be a non-empty dict of field name -> int ids, "
                        f"got {fields!r:.60}")
    checked, length = {}, None
    for field, ids in fields.items():
        if not isinstance(field, str) or not field.isidentifier():
            raise ValueError(f"{who}: {name} field names must be identifiers, got {field!r}")
        array = np.asarray(ids)
        if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
            raise ValueError(f"{who}: {name}[{field!r}] must be a non-empty 1-D int array, "
                             f"got shape {array.shape} and dtype {array.dtype}")
        if (array < 0).any():
            raise ValueError(f"{who}: {name}[{field!r}] holds a negative id ({array.min()})")
        if length is not None and len(array) != length:
            raise ValueError(f"{who}: the fields of {name} differ in length ({length} and "
                             f"{len(array)} for {field!r}); each needs one id per row")
        length = len(array)
        checked[field] = array.astype(np.int64)
    return checked
