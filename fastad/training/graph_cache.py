"""Graphs kept by structure, for models whose graph changes with every example."""
from collections import OrderedDict

import numpy as np

from fastad._engine.graph import GradientArena, IndexInput, Input, graph_nbytes


class GraphCache:
    """Build each structure's graph once and replay it for every example of that structure.

    Tree-structured nets and taggers over sentences build a new graph per example.
    `GraphCache(build)` calls `build(structure, *leaves)` the first time it meets a
    `structure` (any hashable value: a tree's shape, a sentence length) with data of given
    shapes and dtypes, keeps the graph it returns, and for each later example of the same
    structure and data shapes copies the data into the kept leaves (`set_value`) and
    recomputes the graph (`forward()`) in compiled code, with no Python per node.

    `cache(structure, *data)` returns the example's root: call `backward()` on it as on a
    graph built anew. Each of `data` is an array: an integer one becomes an `IndexInput`,
    a float one an `Input` of its dtype. Those leaves are all that change between examples
    of one structure: `build` must make a graph that depends only on `structure`, the
    leaves and Parameters (of which it uses the current values), not on other state.

    The graphs kept hold about `max_bytes` at most (`nbytes`: `fa.graph_nbytes` of each, its
    nodes and values, and the gradients of their op nodes, which the kept graphs share: a
    backward needs them only while it runs, so they take the room of the largest graph's,
    at most twice, once); the least recently used go first. Kept graphs are invisible to Python's cyclic
    collector (their nodes and plans are not tracked).

    A root returned is reused for the next example of its structure: read what you need
    (`loss.item()`) before the next call. One cache serves one thread.

    `check=True` (for testing a model, not for training: it builds every graph anew again)
    also builds each replayed example's graph afresh and raises RuntimeError when the two
    values differ: `build` made a graph that `structure` and the data do not determine. Its
    graphs must then draw no random values (dropout).

    Example::

        def tree_loss(children, types, label):          # children: the tree's shape
            ...                                          # fa ops on types, label, Parameters
            return fa.nn.cross_entropy(logits, label)

        cache = fa.GraphCache(tree_loss, max_bytes=256 << 20)
        for children, types, label in trees:
            loss = cache(children, types, np.array([label]))
            loss.backward(); opt.step(); opt.zero_grad()
    """

    def __init__(self, build, max_bytes=256 << 20, check=False):
        if not callable(build):
            raise TypeError(f"GraphCache: build must be callable, got {type(build).__name__}")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 0:
            raise ValueError(f"GraphCache: max_bytes must be an integer >= 0, got {max_bytes!r}")
        self._build = build
        self.check = bool(check)
        self.max_bytes = int(max_bytes)
        self.clear()
        self.hits = 0
        self.misses = 0

    def __call__(self, structure, *data):
        """The root of this example's graph: the kept one of `structure` replayed on `data`,
        or one built now by `build(structure, *leaves)`."""
        arrays = [_as_data(k, d) for k, d in enumerate(data)]
        key = (structure, *[(a.dtype, a.shape) for a in arrays])
        try:
            entry = self._graphs[key]
        except TypeError:
            raise TypeError(f"GraphCache: structure must be hashable, got {type(structure).__name__}") from None
        except KeyError:
            return self._add(key, structure, arrays)
        self.hits += 1
        self._graphs.move_to_end(key)
        root, leaves, _ = entry
        for leaf, a in zip(leaves, arrays):
            leaf.set_value(a)
        root.forward()
        if self.check:
            fresh = self._build(structure, *_leaves_of(arrays))
            if fresh.shape != root.shape or fresh.dtype != root.dtype or not np.array_equal(
                    fresh.numpy(), root.numpy(), equal_nan=True):
                raise RuntimeError(
                    f"GraphCache(check=True): the graph kept for structure {structure!r} gives "
                    f"{root.numpy()!r} where a graph built anew gives {fresh.numpy()!r}: `build` "
                    f"makes graphs that the structure and the data's shapes do not determine; put "
                    f"what differs into the structure, or into the data")
        return root

    def _add(self, key, structure, arrays):
        self.misses += 1
        leaves = _leaves_of(arrays)
        root = self._build(structure, *leaves)
        if graph_nbytes(root) > self.max_bytes:
            return root                  # larger than the whole cache: used once, not kept
        grew = self._arena.place(root)   # None: it keeps gradients of its own
        if grew:
            for kept, _, _ in self._graphs.values():
                self._arena.place(kept)  # into the new block (the old goes with the last)
        nbytes = graph_nbytes(root, gradients=grew is None)
        self._graphs[key] = (root, leaves, nbytes)
        self._graph_bytes += nbytes
        while self.nbytes > self.max_bytes and self._graphs:
            _, (_, _, dropped) = self._graphs.popitem(last=False)
            self._graph_bytes -= dropped
        return root

    @property
    def nbytes(self):
        """About the memory the kept graphs hold, their shared gradients included."""
        return self._graph_bytes + self._arena.nbytes

    def __len__(self):
        """How many graphs are kept."""
        return len(self._graphs)

    def clear(self):
        """Drop every kept graph."""
        self._graphs = OrderedDict()     # key -> (root, leaves, nbytes)
        self._arena = GradientArena()    # the op nodes' gradients of the graphs kept
        self._graph_bytes = 0


def _leaves_of(arrays):
    return tuple(IndexInput(a) if a.dtype.kind in "iu" else Input(a, dtype=a.dtype) for a in arrays)


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _as_data(k, d):
    a = np.asarray(d)
    kind = a.dtype.kind
    if kind not in "iuf":
        raise TypeError(f"GraphCache: data[{k}] must be an array of integers or floats, got dtype {a.dtype}")
    if kind == "f" and a.dtype not in _FLOATS:
        a = a.astype(np.float32)
    return a
