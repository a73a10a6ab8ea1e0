"""Arrays that Hogwild workers train together: the handles a worker's `fa.Parameter`
adopts without a copy, and `share`, which copies arrays into shared memory for processes.

`share` gives each array a segment of one `segments.Block` (optimizer state, made by
any worker through `state_array`, goes into segments of the same block) and returns
`SharedArrays`; only the process that called `share` frees them, when its block ends.
`InProcessArrays` hands threads the arrays themselves. `share_for` picks one of the two
for a start method.
"""
import os
import re
import threading
import weakref
from collections.abc import Mapping

import numpy as np

from fastad.checks import look_up
from fastad.parallel import segments

__all__ = ["ArrayHandle", "SharedArray", "InProcessArray", "InProcessArrays", "ArrayHandles",
           "SharedArrays", "share", "share_for", "in_place", "as_rows", "state_fill", "check_state_key",
           "check_shareable"]

_STATE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ARRAY_NAME = re.compile(r"[^/]{1,128}")    # a shared array's name: fa.distributed keys shard tables by it


_handles = weakref.WeakValueDictionary()    # segment name -> the SharedArray mapping it here


class ArrayHandle:
    """A handle on an array that Hogwild workers train together: `numpy()` is the array
    itself, `fa.Parameter(handle)` adopts it without a copy (so the parameter's in-place
    updates are seen by every worker), and `state_array` gives optimizer state shared
    the same way. `SharedArray` (in shared memory, for processes) and `InProcessArray`
    (an array of this process, for threads) are its two kinds."""

    def __init__(self, shape, dtype, array):
        self.shape = shape
        self.dtype = dtype
        self._array = array
        self._states = {}
        self._states_lock = threading.Lock()

    def numpy(self):
        """The array itself (no copy), shape `self.shape`; writes are seen by every worker."""
        return self._array

    def trainable_array(self):
        """The array `fa.Parameter(handle)` adopts: the array itself."""
        return self._array

    @property
    def nbytes(self):
        return self._array.nbytes

    def state_array(self, key, fill=0.0):
        """An array of this handle's shape and dtype for optimizer state, filled once.

        `key` names the state (letters, digits, `_`, `.`, `-`; e.g. "Adagrad.sum"). The
        first worker to ask for `key` makes it filled with `fill` (a scalar or
        an array broadcastable to `self.shape`); every later call, in any
        worker, returns a zero-copy view of that same array, never refilled,
        even when several workers ask at the same moment. The state of a
        `SharedArray` belongs to the `share` block and is freed with it.

        Example::

            acc = shared["U"].state_array("adagrad_sum", fill=0.1)   # shape == shared["U"].shape
            acc += g * g                                             # seen by every worker
        """
        check_state_key(key)
        with self._states_lock:
            array = self._states.get(key)
            if array is None:
                array = self._open_state(key, fill)
                self._states[key] = array
        return array

    def start_state(self, key, array):
        """Make the optimizer state `key` (as `state_array` names it) start from `array`, of this
        handle's shape and dtype, before any worker asks for it: an `InProcessArray` adopts
        `array` itself (the threads train it in place), a `SharedArray` fills its segment from it
        (read it back with `state_array(key)`). A ValueError when `array` does not fit or the
        state is already made.

        Example::

            shared["U"].start_state("Adagrad.sum", sums)     # a fit that goes on from earlier sums
        """
        check_state_key(key)
        if not isinstance(array, np.ndarray) or array.shape != self.shape or array.dtype != self.dtype:
            raise ValueError(f"start_state({key!r}): expected an array of shape {self.shape} and dtype "
                             f"{self.dtype}, got {type(array).__name__} {getattr(array, 'shape', '')} "
                             f"{getattr(array, 'dtype', '')}")
        with self._states_lock:
            if key in self._states:
                raise ValueError(f"start_state({key!r}): the state is already made")
            self._states[key] = self._adopt_state(key, array)

    def _open_state(self, key, fill):
        """The state array `key`, made filled with `fill` by the first to ask."""
        raise NotImplementedError

    def _adopt_state(self, key, array):
        """The state array `key` started from `array` (checked to fit): made filled with it."""
        return self._open_state(key, array)


def as_rows(array):
    """`array` seen as a 2-D (rows, row length) array: 0-d is one row, 1-D is one value a row
    (a view of a C-contiguous array; for fastad.parallel.lockstep and .distributed)."""
    if array.ndim == 0:
        return array.reshape(1, 1)
    return array.reshape(array.shape[0], int(np.prod(array.shape[1:])))


def state_fill(key, shape, dtype, fill):
    """`fill` of state array `key` as an array of `shape` and `dtype` (a read-only broadcast
    view), or a ValueError that says why it cannot be (for this module's handles and
    fastad.parallel.distributed's)."""
    try:
        return np.broadcast_to(np.asarray(fill, dtype), shape)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"state_array({key!r}): cannot fill an array of shape {shape} and dtype "
                         f"{dtype} with a fill of shape {np.shape(fill)}: {exc}") from None


class SharedArray(ArrayHandle):
    """A handle on one array in shared memory; pickling it sends only its name, shape and dtype.

    Made by `share`. In any process that holds it (the parent, or a worker that
    received it through `run`'s args), `numpy()` is a zero-copy view of the
    segment. After the owner's `share` block has ended the array stays readable
    in a process that already mapped it, until every reference to it is dropped.

    Example::

        with fa.hogwild.share({"w": np.zeros(3)}) as shared:
            h = shared["w"]            # SharedArray(shape=(3,), dtype=float64)
            h.numpy()[0] = 1.0         # visible to every process attached to "w"
    """

    def __init__(self, segment, shape, dtype, array, block):
        super().__init__(shape, dtype, array)
        self.segment = segment     # the segment's name under /dev/shm
        self._block = block        # the owner's segments.Block; None in a process that attached
        _handles[segment] = self   # what an unpickled handle of this segment resolves to here

    @classmethod
    def _attach(cls, segment, shape, dtype_str):
        handle = _handles.get(segment)
        if handle is not None:
            return handle
        try:
            mapping = segments.attach_segment(segment)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"shared array segment {segment!r} no longer exists: the share() block that "
                f"made it has ended, or its owner process died") from None
        dtype = np.dtype(dtype_str)
        return cls(segment, shape, dtype, segments.view(mapping, shape, dtype), None)

    def __reduce__(self):
        return (SharedArray._attach, (self.segment, self.shape, self.dtype.str))

    def _open_state(self, key, fill):
        if self._block is not None and self._block.closed:
            raise RuntimeError(f"state_array({key!r}): the share() block of this array has ended")
        name = f"{self.segment}_{key}"

        def fill_in(mapping):
            segments.view(mapping, self.shape, self.dtype)[...] = state_fill(key, self.shape,
                                                                            self.dtype, fill)

        mapping, made = segments.attach_or_create(name, self._array.nbytes, fill_in)
        if made and self._block is not None and os.getpid() == self._block.owner_pid:
            self._block.track(name)
        return segments.view(mapping, self.shape, self.dtype)

    def __repr__(self):
        return f"SharedArray(shape={self.shape}, dtype={self.dtype.name}, segment={self.segment!r})"


class InProcessArray(ArrayHandle):
    """A handle on an array of this process that Hogwild threads (`start_method="threads"`)
    share as it is: `fa.Parameter(handle)` adopts the array itself, and optimizer state
    (`state_array`) is one array of this process, made once for all threads. No copy in
    or out and no segment; it cannot be sent to another process.

    `Recommender.fit` hands its threads the model's own Parameters' arrays this way, and
    `Word2Vec.fit` its vectors.
    """

    def __init__(self, array):
        array = np.asarray(array)
        super().__init__(array.shape, array.dtype, array)

    def __reduce__(self):
        raise TypeError("an InProcessArray is shared by the threads of one process; for "
                        "processes, copy the array into shared memory with fa.hogwild.share")

    def _open_state(self, key, fill):
        return np.array(state_fill(key, self.shape, self.dtype, fill))     # a writeable copy

    def _adopt_state(self, key, array):
        if not (array.flags.c_contiguous and array.flags.writeable):
            raise ValueError(f"start_state({key!r}): the array must be C-contiguous and writeable "
                             f"(the threads update it in place)")
        return array

    def __repr__(self):
        return f"InProcessArray(shape={self.shape}, dtype={self.dtype.name})"


class _ClosedOnExit:
    """A context manager that calls `self.close()` when its block ends."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class InProcessArrays(_ClosedOnExit, dict):
    """{name: InProcessArray} over arrays of this process, for `run(...,
    start_method="threads")` in place of `share`: the threads train the arrays
    themselves. Closing it frees nothing (the arrays are their owners'), so it stands
    where `share`'s block would.

    Example::

        w = np.zeros(3, np.float32)
        with fa.hogwild.InProcessArrays({"w": w}) as shared:
            fa.hogwild.run(worker, workers=2, args=(shared, X, Y, 2), start_method="threads")
        w                                    # trained in place
    """

    def __init__(self, arrays):
        super().__init__((name, InProcessArray(array)) for name, array in arrays.items())

    def close(self):
        pass


def share_for(start_method, arrays):
    """What `run(..., start_method=start_method)` workers should share `arrays` through:
    `InProcessArrays` (the arrays themselves) for threads, else `share`'s copies in shared
    memory. Either is a context manager; `in_place(handles)` says which it is."""
    return InProcessArrays(arrays) if start_method == "threads" else share(arrays)


def in_place(handles):
    """Whether `handles` (from share_for) are the arrays themselves: nothing to copy back."""
    return isinstance(handles, InProcessArrays)


class ArrayHandles(_ClosedOnExit, Mapping):
    """A read-only mapping of names to array handles that is also a context
    manager: `with share(...) as handles:` calls `close()` at the end. Subclasses
    set `self._handles` and implement `close`."""

    def __getitem__(self, key):
        return look_up(self._handles, key,
                       lambda: f"no shared array named {key!r}; shared: {sorted(self._handles)}")

    def __iter__(self):
        return iter(self._handles)

    def __len__(self):
        return len(self._handles)

    def close(self):
        raise NotImplementedError

    def __repr__(self):
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self._handles.items())
        return f"{type(self).__name__}({{{inner}}})"


class SharedArrays(ArrayHandles):
    """The mapping `share` returns: key -> SharedArray, and the context manager that frees them.

    Picklable: a worker that receives it gets the same handles (attached by
    name); only the process that called `share` frees the segments.

    Example::

        with fa.hogwild.share({"U": np.zeros((1000, 32), np.float32)}) as shared:
            shared["U"].shape, list(shared)        # (1000, 32), ['U']
    """

    def __init__(self, handles, block):
        self._handles = handles
        self._block = block
        self._finalizer = weakref.finalize(self, block.free) if block is not None else None

    def __reduce__(self):
        return (SharedArrays, (self._handles, None))

    def close(self):
        """Unlink every segment of this block (arrays and optimizer state); idempotent."""
        if self._finalizer is not None:
            self._finalizer()


def check_state_key(key):
    """The rule of an optimizer state's key in `state_array`, for this module's handles and
    fastad.parallel.distributed's: 1 to 64 letters, digits, '_', '.' or '-' (it names a segment or a
    shard's state)."""
    if not isinstance(key, str) or not _STATE_KEY.fullmatch(key):
        raise ValueError(f"state_array: key must be 1 to 64 letters, digits, '_', '.' or '-', "
                         f"got {key!r}")


def check_shareable(arrays):
    """`arrays` as `share` takes them (this module's and `fa.distributed`'s): a dict of
    names (str of 1 to 128 characters without "/") to float32 or float64 arrays; returns
    {name: numpy array}, or raises a TypeError that names what is wrong."""
    if not hasattr(arrays, "items"):
        raise TypeError(f"share: expected a dict of name -> array, got {type(arrays).__name__}")
    sources = {}
    for key, value in arrays.items():
        if not isinstance(key, str) or not _ARRAY_NAME.fullmatch(key):
            raise TypeError(f"share: names must be str, of 1 to 128 characters without '/', got {key!r}")
        array = np.asarray(value)
        if array.dtype not in (np.float32, np.float64):
            raise TypeError(f"share: {key!r} has dtype {array.dtype}; expected float32 or float64 "
                            f"(convert it with .astype(np.float32))")
        sources[key] = array
    return sources


def share(arrays):
    """Copy float arrays into shared memory for Hogwild workers: `with share({...}) as shared:`.

    `arrays` maps names (str of 1 to 128 characters without "/") to float32 or
    float64 arrays of any shape (a non-contiguous array is copied into C order); each gets its own segment.
    Returns a `SharedArrays` mapping of name -> `SharedArray`. Leaving the
    `with` block (or `close()`) unlinks every segment of the block, including
    optimizer state that any worker made, whatever happened inside it; until
    then, `shared[name].numpy()` holds the latest values, even after a `run`
    that failed; afterwards, arrays this process already holds stay readable
    but no process can attach any more. The block is also freed when the
    returned object is garbage-collected, so keep it (not just one handle)
    alive while the arrays are in use. `share` first unlinks segments left by
    fastad processes that died.

    Example::

        with fa.hogwild.share({"U": np.random.randn(100, 8)}) as shared:
            fa.hogwild.run(train, workers=2, args=(shared,))
            U = shared["U"].numpy().copy()
    """
    segments.require_shm_dir()
    sources = check_shareable(arrays)
    segments.sweep_stale_segments()
    block = segments.Block()
    shared = SharedArrays({}, block)
    try:
        for n, (key, array) in enumerate(sources.items()):
            segment = f"{block.prefix}{n}"
            view = segments.view(block.create(segment, array.nbytes), array.shape, array.dtype)
            view[...] = array
            shared._handles[key] = SharedArray(segment, array.shape, array.dtype, view, block)
    except BaseException:
        shared.close()
        raise
    return shared
