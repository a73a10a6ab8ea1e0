"""`Model`, the base of every ready model (`Recommender`, and so `BPR` and `TwoTower`;
`Word2Vec` and `FastText`; `TextClassifier`), and its one way to save and load a model.

A saved model is rebuilt from two things: its settings (the constructor's keyword
arguments, as plain JSON values) and its state (the arrays it learned or was given, and
what else it holds: a vocabulary, the interactions `recommend` filters). `save(path)`
writes them with `fa.save` (atomically; an .npz, or safetensors for a *.safetensors
path) as one dict,

    {"model": the class's name, "settings": settings() as JSON text, "state": _state()}

and the classmethod `load(path)` reads it back with `fa.load` (which never unpickles),
checks the class's name and rebuilds the model. A subclass supplies only what differs:

    settings()               the constructor's keyword arguments, JSON values (by default
                             its positional-or-keyword parameters, each read from the
                             attribute of its name)
    _state()                 {name: array, number, string, or a dict of them}
    _restore(state)          put a saved state into the model its settings built; or,
                             for a model built around its state, `_from_state`
    _is_trained()            whether the model holds what it learns (else `save` and the
                             queries raise), or `_require_trained` itself
"""
import inspect
import json
import os

from fastad.io import load, save

__all__ = ["Model"]


class Model:
    """The base of the ready models: one save/load scheme over the subclass's settings and
    state (see the module's docstring).

    >>> model.save("model.npz")                       # or "model.safetensors"
    >>> model = type(model).load("model.npz")
    """

    def settings(self):
        """The constructor's keyword arguments as plain JSON values (numbers, strings,
        booleans, None, lists, dicts): what `load` rebuilds the model from, with its state.
        By default the constructor's positional-or-keyword parameters (its keyword-only ones
        are other libraries' names for them), each the value of the attribute of its name."""
        names = [p.name for p in inspect.signature(type(self)).parameters.values()
                 if p.kind is p.POSITIONAL_OR_KEYWORD]
        missing = [name for name in names if not hasattr(self, name)]
        if missing:
            raise NotImplementedError(
                f"{type(self).__name__}: the default settings() reads each constructor parameter "
                f"from the attribute of its name, and there is none for {missing}; keep them as "
                f"attributes or define settings()")
        return {name: getattr(self, name) for name in names}

    def _state(self):
        """What the model holds beyond its settings, for `save`: {name: a numpy array, a
        number, a string, or a dict of them} (what `fa.save` writes)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _state()")

    def _restore(self, state):
        """Put `state` (as `_state()` gave it, read back by `fa.load`) into this model, built
        from the saved settings; a ValueError or TypeError says what is wrong with it."""
        raise NotImplementedError(f"{type(self).__name__} does not define _restore(state)")

    @classmethod
    def _from_state(cls, settings, state):
        """The model of `settings` holding `state`: built from its settings, then restored."""
        model = cls(**settings)
        model._restore(state)
        return model

    @classmethod
    def _earlier_format(cls, saved):
        """(settings, state) of a file this class saved before the one format: the text
        models wrote their settings beside their state, `{"settings": {...}, **state}`."""
        state = dict(saved)
        return dict(state.pop("settings")), state

    def _is_trained(self):
        """Whether the model holds what it learns (a fit or `load` put it there)."""
        raise NotImplementedError(f"{type(self).__name__} does not define _is_trained()")

    def _require_trained(self, method):
        """A RuntimeError naming `method` unless the model is trained."""
        if not self._is_trained():
            raise RuntimeError(f"{type(self).__name__}.{method}: the model is not trained; call fit() "
                               f"or load()")

    def save(self, path):
        """Write the model to `path` with `fa.save`: an .npz, or safetensors for a path ending
        in ".safetensors"; atomic (a failed save leaves an older file as it was), and read
        back by `load` without pickle. It holds the class's name, the settings and the state.

        >>> model.save("model.npz"); model = type(model).load("model.npz")
        """
        self._require_trained("save")
        save({"model": type(self).__name__, "settings": json.dumps(self.settings()),
              "state": self._state()}, path)

    @classmethod
    def load(cls, path):
        """The model that `save` wrote to `path`, of this class, also from a file saved before
        this format (`_earlier_format`). A file that holds another class's model, or is no
        saved model, is a ValueError naming the path (a file that is no fastad checkpoint at
        all, `fa.load`'s ValueError)."""
        saved = load(path)
        try:
            if saved.get("model", cls.__name__) != cls.__name__:
                raise ValueError(f"it holds a {saved['model']}")
            if "state" in saved:
                settings, state = json.loads(saved["settings"]), saved["state"]
            else:
                settings, state = cls._earlier_format(saved)
            return cls._from_state(settings, state)
        except (KeyError, TypeError, ValueError) as e:
            reason = f"no entry {e.args[0]!r}" if isinstance(e, KeyError) else e
            raise ValueError(f"{cls.__name__}.load: {os.fspath(path)} is not a saved {cls.__name__} "
                             f"({reason})") from None
