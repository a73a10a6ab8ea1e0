"""Lock-free (Hogwild) training across processes on one machine.

Parameters live in POSIX shared-memory segments made by the parent; workers
attach to them by name without copying and update them without locks::

    import fastad as fa

    def train(rank, shared, data):
        U = fa.Parameter(shared["U"])          # zero-copy view of the segment
        ...                                   # per-example SGD writes U.value in place
        fa.hogwild.report(len(data[rank]))    # optional progress count

    with fa.hogwild.share({"U": U0}) as shared:
        fa.hogwild.run(train, workers=2, args=(shared, data))
        U_trained = shared["U"].numpy().copy()

Segments are files under /dev/shm (Linux; the same objects that
`multiprocessing.shared_memory.SharedMemory(name)` opens), named
`fastad_<owner pid>_<owner pid namespace>_<random>_<n>`. The process that called
`share` owns them and unlinks them all when its block ends, whatever happened;
a worker never unlinks anything nor registers anything with a resource
tracker. If the owner dies without cleanup (SIGKILL), its resource tracker
unlinks the segments it made, and the next `share` call on the machine sweeps
any fastad segment whose owner (in the same pid namespace) no longer exists.
Optimizer state (`SharedArray.state_array`) lives in segments of the same block
and is freed with it.

`run(..., mode="synchronized")` trades the lock-free updates for lockstep ones:
`sync_step(optimizer)` exchanges the workers' gradients through segments of the
run (unlinked by `run` when it ends) and applies one reduced update per step.
"""
import ctypes
import mmap
import multiprocessing
import os
import pickle
import re
import secrets
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Mapping
from contextlib import contextmanager
from multiprocessing import connection, resource_tracker
from multiprocessing.reduction import ForkingPickler

import numpy as np

from fastad._engine.graph import Parameter
from fastad.checks import check_choice, look_up
from fastad.progress import ProgressRate, progress_bar

__all__ = ["share", "run", "sync_step", "report", "progress_bar", "ArrayHandle", "SharedArray",
           "SharedArrays", "InProcessArray", "InProcessArrays", "share_for", "in_place", "WorkerError",
           "start_methods"]

_SHM_DIR = "/dev/shm"
_PREFIX = "fastad_"
_OWNED_NAME = re.compile(r"fastad_(\d+)_(\d+)_")
_STATE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ARRAY_NAME = re.compile(r"[^/]{1,128}")    # a shared array's name: fa.distributed keys shard tables by it
_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_COUNTER_STRIDE = 8        # int64 slots between two ranks' counters: one 64-byte cache line each
_PROGRESS, _TAG = 0, 1     # a rank's slots of a run's "ranks" segment: its progress count, its sync tag
_TERMINATE_GRACE_S = 5.0   # after SIGTERM, how long a worker may take before SIGKILL


# ------------------------------------------------------------------ segments

def _require_shm_dir():
    if not os.path.isdir(_SHM_DIR):
        raise OSError(f"fastad.hogwild needs POSIX shared memory listed under {_SHM_DIR} "
                      f"(Linux); this system ({sys.platform}) has no {_SHM_DIR}")


def _path(name):
    return os.path.join(_SHM_DIR, name)


def _map(fd):
    return mmap.mmap(fd, os.fstat(fd).st_size)


def _create_segment(name, nbytes):
    """Make segment `name` (fails with FileExistsError if it exists) and map it."""
    fd = os.open(_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        # Reserve the pages now: a full /dev/shm is then an OSError here, not a SIGBUS on a write
        # later. An empty array still needs one mappable byte.
        os.posix_fallocate(fd, 0, max(nbytes, 1))
        return _map(fd)
    except BaseException:
        os.unlink(_path(name))
        raise
    finally:
        os.close(fd)


def _attach_segment(name):
    fd = os.open(_path(name), os.O_RDWR | os.O_NOFOLLOW)
    try:
        return _map(fd)
    finally:
        os.close(fd)


def _unlink(name):
    try:
        os.unlink(_path(name))
    except (FileNotFoundError, PermissionError):      # gone already, or another user's
        pass


def _view(mapping, shape, dtype):
    """The C-contiguous array over a mapped segment (the array keeps the mapping alive)."""
    return np.ndarray(shape, dtype=dtype, buffer=mapping)


def _pid_namespace():
    """This process's pid namespace id: a pid in a segment name means nothing outside it."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


_PID_NAMESPACE = _pid_namespace()


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:        # someone else's live process
        return True
    return True


def _sweep_stale_segments():
    """Unlink fastad segments whose owner process (in this pid namespace) no longer exists."""
    for entry in os.listdir(_SHM_DIR):
        match = _OWNED_NAME.match(entry)
        if match and match.group(2) == _PID_NAMESPACE and not _pid_alive(int(match.group(1))):
            _unlink(entry)


def _new_prefix():
    return f"{_PREFIX}{os.getpid()}_{_PID_NAMESPACE}_{secrets.token_hex(4)}_"


# -------------------------------------------------------------- shared arrays

class _Block:
    """The segments named after one prefix (those of a `share` call, of a `run`, of a
    fastad.distributed worker), as the process that owns them sees them: `free` unlinks
    them all, whichever process made them."""

    def __init__(self):
        self.prefix = _new_prefix()
        self.owner_pid = os.getpid()
        self.tracked = []          # names this process registered with its resource tracker
        self.closed = False

    def track(self, name):
        """Let the resource tracker unlink segment `name` if this process dies without cleanup."""
        resource_tracker.register("/" + name, "shared_memory")
        self.tracked.append(name)

    def create(self, name, nbytes):
        """Make segment `name` (a name of this block) of `nbytes` zero bytes, tracked; its mapping."""
        mapping = _create_segment(name, nbytes)
        self.track(name)
        return mapping

    def free(self):
        """Unlink every segment of the block: arrays, state made by any process, temporaries."""
        if os.getpid() != self.owner_pid or self.closed:
            return                      # a forked child's copy of the block owns nothing
        self.closed = True
        names = {entry for entry in os.listdir(_SHM_DIR) if entry.startswith(self.prefix)}
        for name in names.union(self.tracked):
            _unlink(name)
        for name in self.tracked:
            resource_tracker.unregister("/" + name, "shared_memory")


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

    def _open_state(self, key, fill):
        """The state array `key`, made filled with `fill` by the first to ask."""
        raise NotImplementedError


def state_fill(key, shape, dtype, fill):
    """`fill` of state array `key` as an array of `shape` and `dtype` (a read-only broadcast
    view), or a ValueError that says why it cannot be (for this module's handles and
    fastad.distributed's)."""
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
        self._block = block        # the owner's _Block; None in a process that attached

    @classmethod
    def _attach(cls, segment, shape, dtype_str):
        handle = _handles.get(segment)
        if handle is not None:
            return handle
        try:
            mapping = _attach_segment(segment)
        except FileNotFoundError:
            raise FileNotFoundError(
                f"shared array segment {segment!r} no longer exists: the share() block that "
                f"made it has ended, or its owner process died") from None
        dtype = np.dtype(dtype_str)
        handle = cls(segment, shape, dtype, _view(mapping, shape, dtype), None)
        _handles[segment] = handle
        return handle

    def __reduce__(self):
        return (SharedArray._attach, (self.segment, self.shape, self.dtype.str))

    def _open_state(self, key, fill):
        if self._block is not None and self._block.closed:
            raise RuntimeError(f"state_array({key!r}): the share() block of this array has ended")
        name = f"{self.segment}_{key}"
        try:
            return _view(_attach_segment(name), self.shape, self.dtype)
        except FileNotFoundError:
            pass
        # Fill a private segment, then publish it under the final name with link(2), which
        # fails if the name exists: a reader sees either no state or a completely filled one.
        temp = f"{name}~{os.getpid()}_{threading.get_ident()}"   # '~' is never in a key
        mapping = _create_segment(temp, self._array.nbytes)
        try:
            array = _view(mapping, self.shape, self.dtype)
            array[...] = state_fill(key, self.shape, self.dtype, fill)
            os.link(_path(temp), _path(name))
        except FileExistsError:
            return _view(_attach_segment(name), self.shape, self.dtype)
        finally:
            _unlink(temp)
        if self._block is not None and os.getpid() == self._block.owner_pid:
            self._block.track(name)
        return array

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

    def __repr__(self):
        return f"InProcessArray(shape={self.shape}, dtype={self.dtype.name})"


class InProcessArrays(dict):
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def share_for(start_method, arrays):
    """What `run(..., start_method=start_method)` workers should share `arrays` through:
    `InProcessArrays` (the arrays themselves) for threads, else `share`'s copies in shared
    memory. Either is a context manager; `in_place(handles)` says which it is."""
    return InProcessArrays(arrays) if start_method == "threads" else share(arrays)


def in_place(handles):
    """Whether `handles` (from share_for) are the arrays themselves: nothing to copy back."""
    return isinstance(handles, InProcessArrays)


class ArrayHandles(Mapping):
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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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
    fastad.distributed's: 1 to 64 letters, digits, '_', '.' or '-' (it names a segment or a
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
    _require_shm_dir()
    sources = check_shareable(arrays)
    _sweep_stale_segments()
    block = _Block()
    shared = SharedArrays({}, block)
    try:
        for n, (key, array) in enumerate(sources.items()):
            segment = f"{block.prefix}{n}"
            view = _view(block.create(segment, array.nbytes), array.shape, array.dtype)
            view[...] = array
            handle = SharedArray(segment, array.shape, array.dtype, view, block)
            _handles[segment] = handle
            shared._handles[key] = handle
    except BaseException:
        shared.close()
        raise
    return shared


# ------------------------------------------------------------------- workers

class WorkerError(RuntimeError):
    """A Hogwild worker raised or died; `rank`, `exitcode` and the worker's `traceback` text.

    `exitcode` is None when the worker raised (its traceback is in the message)
    and the process exit code (negative: killed by that signal) when it died.

    Example::

        try:
            fa.hogwild.run(worker, workers=4, args=(shared,))
        except fa.hogwild.WorkerError as err:
            print(err.rank, err.exitcode, err.traceback)
    """

    def __init__(self, rank, message, traceback=None, exitcode=None):
        super().__init__(message)
        self.rank = rank
        self.traceback = traceback
        self.exitcode = exitcode

    def __reduce__(self):
        return (WorkerError, (self.rank, self.args[0], self.traceback, self.exitcode))


def raised(exc):
    """What a worker reports from the `except` block where it caught `exc`: ("error", what it
    raised, the traceback). A worker that returned reports ("ok", its result)."""
    return "error", f"raised {type(exc).__name__}: {exc}", traceback.format_exc()


def worker_result(kind, rank, outcome):
    """The result that worker `rank` (a `kind`: "hogwild worker", ...) reported in `outcome`,
    or the `WorkerError` it raised, caused by the exception itself where the outcome holds
    it (a thread's, after the traceback)."""
    if outcome[0] == "error":
        raise WorkerError(rank, f"{kind} {rank} {outcome[1]}\n\nWorker {rank} traceback:\n{outcome[2]}",
                          outcome[2]) from (outcome[3] if len(outcome) > 3 else None)
    return outcome[1]


_counter = None     # in a worker of `run` with progress: this rank's int64 slot
_report_hook = None  # in a fastad.distributed worker: its sync clock, called as hook(n)
_thread_worker = threading.local()   # in a worker thread (start_method="threads"): .counter


def report(n=1):
    """Add `n` examples to this worker's progress count (read by `run`'s `progress`).

    A plain store into a per-rank shared int64, no lock: cheap, but call it per
    batch of examples rather than per example. Outside a worker, or when `run`
    was given no `progress`, it does nothing, so the same training function runs
    unchanged in a single process. In a `fastad.distributed.run` worker the
    same count paces the exchange of parameter rows with the shards.

    Example::

        for start in range(0, len(ids), 256):
            ...                               # train on 256 examples
            fa.hogwild.report(256)
    """
    counter = getattr(_thread_worker, "counter", None)
    if counter is None:
        counter = _counter
    if counter is not None:
        counter[0] += n
    if _report_hook is not None:
        _report_hook(n)


def train_progress(per_example=1):
    """A `progress` callable for `fastad.train` in a worker: `fa.train` passes the examples
    done so far (and its rate, which `run` measures itself), and this adds the ones since
    its last call to `report`, each counting as `per_example` (the triples or pairs of a
    graph that trains several a step).

    >>> fa.train(loss, opt, sampler, progress=fa.hogwild.train_progress(), report_every=10_000)
    """
    reported = 0

    def progress(done, per_second):
        nonlocal reported
        report((done - reported) * per_example)
        reported = done

    return progress


# ------------------------------------------------------- synchronised mode

_MODES = ["hogwild", "synchronized"]
_REDUCTIONS = ["mean", "sum"]
_GRAD_MODES = ("none", "sparse", "dense")
_sync = None        # in a worker of run(mode="synchronized"): its _SyncGroup


# Gradients moved between processes: a synchronised worker reads each Parameter's gradient
# and adds the others' into its own, through the Parameters' public face (their gradient
# views, and backward passes seeded with the rows to add), as any backward would.

def _grad_mode(p):
    """How CPU Parameter `p` holds its gradient: "none" (its grad reads None), "sparse" (rows
    only) or "dense"."""
    if not isinstance(p, Parameter):
        raise TypeError(f"synchronized mode: expected a Parameter, got {type(p).__name__}")
    if p.device != "cpu":
        raise ValueError(f"synchronized mode: the Parameter is on {p.device}; this works on "
                         f"CPU Parameters")
    if p.is_sparse_grad:
        return "sparse"
    return "none" if p.grad is None else "dense"


def _aligned(nbytes):
    return (nbytes + 7) // 8 * 8


class _GradSlot:
    """One worker's gradients in a shared segment it made, laid out for the Parameters of
    one optimizer: a header of int64 (mode, touched rows) per Parameter, then per Parameter
    its row ids (int64, rows) and values (size)."""

    def __init__(self, mapping, params):
        self.mapping = mapping
        self.header = np.ndarray((len(params), 2), np.int64, mapping)
        self.ids, self.values = [], []
        offset = self.header.nbytes
        for p in params:
            rows = p.shape[0] if p.shape else 1
            self.ids.append(np.ndarray(rows, np.int64, mapping, offset))
            offset += _aligned(8 * rows)
            self.values.append(np.ndarray(p.shape, p.dtype, mapping, offset))
            offset += _aligned(p.value.nbytes)

    @staticmethod
    def nbytes(params):
        return 16 * len(params) + sum(
            _aligned(8 * (p.shape[0] if p.shape else 1)) + _aligned(p.value.nbytes) for p in params)

    def _rows(self, i, p):
        """Parameter i's values as (rows, row_len), a view."""
        return self.values[i].reshape(p.shape[0], p.size // p.shape[0] if p.shape[0] else 0)

    def write(self, params):
        """Copy each Parameter's gradient in: the touched rows of a sparse one only."""
        for i, p in enumerate(params):
            mode = _grad_mode(p)
            self.header[i, 0] = _GRAD_MODES.index(mode)
            if mode == "sparse":
                rows, values = p.sparse_grad()
                self.header[i, 1] = rows.size
                self.ids[i][:rows.size] = rows
                self._rows(i, p)[:rows.size] = values
            elif mode == "dense":
                self.values[i][...] = p.grad

    def add_into(self, params, indices):
        """Add this slot's gradients of Parameters `indices` into them (as backward passes would)."""
        for i in indices:
            p = params[i]
            mode, touched = _GRAD_MODES[self.header[i, 0]], int(self.header[i, 1])
            if mode == "sparse":
                p._accumulate_grad(self._rows(i, p)[:touched], self.ids[i][:touched])
            elif mode == "dense":
                p._accumulate_grad(self.values[i])


class _SyncGroup:
    """One worker's side of a synchronised run (see `sync_step`)."""

    def __init__(self, rank, prefix, tags, barrier, workers, reduction):
        """Worker `rank`'s side of the run of segment `prefix`, with every rank's `tags`, and
        the `barrier` (which only process creation may pass on), `workers` and `reduction`
        that `run` hands it."""
        self.rank, self.prefix, self.tags, self.barrier = rank, prefix, tags, barrier
        self.workers, self.reduction = workers, reduction
        self.steps = 0
        self.optimizer = None
        self.params = None
        self.owned = None        # the indices of the Parameters this worker updates
        self.slots = None        # every worker's gradient slot, in rank order

    def _arrive(self, tag):
        """Wait for every worker; all must have arrived with the same tag (step number, or
        -1 - steps when a worker's function has returned)."""
        self.tags[self.rank] = tag
        self.barrier.wait()
        tags = self.tags.copy()
        if (tags != tag).any():
            where = ", ".join(f"worker {r} is at step {t}" if t > 0 else
                              f"worker {r} finished after {-t - 1} steps" for r, t in enumerate(tags))
            raise RuntimeError(f"synchronized workers fell out of step ({where}): every worker "
                               f"must call sync_step the same number of times, with the same "
                               f"optimizer")

    def _open(self, optimizer):
        params = optimizer.params
        for p in params:
            _grad_mode(p)                    # a CPU Parameter, or a clear error
        self.optimizer, self.params = optimizer, params
        # Each Parameter is reduced and updated by one worker: the largest first, to the
        # least loaded worker, the same way in every worker and every run.
        load, self.owned = [0] * self.workers, []
        for i in sorted(range(len(params)), key=lambda i: -params[i].size):
            owner = load.index(min(load))
            load[owner] += params[i].size
            if owner == self.rank:
                self.owned.append(i)
        name = f"{self.prefix}slot{self.rank}"
        self.own = _GradSlot(_create_segment(name, _GradSlot.nbytes(params)), params)

    def _attach_peers(self):
        self.slots = []
        size = _GradSlot.nbytes(self.params)
        for r in range(self.workers):
            if r == self.rank:
                self.slots.append(self.own)
                continue
            mapping = _attach_segment(f"{self.prefix}slot{r}")
            if len(mapping) != size:
                raise RuntimeError(f"sync_step: worker {r}'s optimizer holds Parameters of other "
                                   f"shapes or dtypes than worker {self.rank}'s ({len(mapping)} "
                                   f"bytes of gradients against {size}); every worker must build "
                                   f"the same model")
            self.slots.append(_GradSlot(mapping, self.params))

    def step(self, optimizer):
        if self.optimizer is None:
            self._open(optimizer)
        elif optimizer is not self.optimizer:
            raise ValueError("sync_step: a synchronized worker steps one optimizer; this is "
                             "another one than in its first sync_step")
        self.own.write(self.params)
        self.steps += 1
        self._arrive(self.steps)
        if self.slots is None:
            self._attach_peers()
        optimizer.zero_grad()
        if self.owned:
            for slot in self.slots:              # in rank order: the same sums in every run
                slot.add_into(self.params, self.owned)
            if self.reduction == "mean" and self.workers > 1:
                for i in self.owned:
                    self.params[i]._scale_grad(1.0 / self.workers)
            optimizer.step()                     # only the owned Parameters hold gradients
        self.barrier.wait()                      # nobody reads the Parameters mid-update
        optimizer.zero_grad()

    def finish(self):
        self._arrive(-1 - self.steps)


def sync_step(optimizer):
    """One training step of `optimizer` after backward, then its gradients cleared.

    In a worker of `run(..., mode="synchronized")`: every worker's gradients (the
    touched rows only of sparse ones) are summed in rank order (and divided by
    the number of workers with reduce="mean"), and that one update is applied to
    the shared Parameters, each Parameter by one worker (the work split by
    size), before any worker goes on, so every step sees
    the same Parameters everywhere and the result does not depend on timing.
    Every worker must call it the same number of times, with optimizers over the
    same Parameters (from the same shared arrays). Anywhere else (one process, a
    Hogwild worker) it is `optimizer.step(); optimizer.zero_grad()`, so the same
    training function runs in every mode.

    >>> loss.forward(); loss.backward()
    >>> fa.hogwild.sync_step(opt)
    """
    if _sync is None:
        optimizer.step()
        optimizer.zero_grad()
    else:
        _sync.step(optimizer)


def _limit_threads_to_one():
    os.environ.update(dict.fromkeys(_THREAD_ENV, "1"))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return                          # a forked BLAS pool keeps the parent's size
    threadpool_limits(limits=1)


def _die_with_parent(parent_pid):
    """Ask Linux to SIGKILL this worker when the parent dies, so no orphan trains forever."""
    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:      # the parent died before the request took effect
        os._exit(1)


def _worker_main(rank, payload, prefix, counting, conn, parent_pid, fork, sync):
    global _counter, _sync
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent handles Ctrl-C and stops us
    _die_with_parent(parent_pid)
    if fork:
        _limit_threads_to_one()
    ranks = np.frombuffer(_attach_segment(prefix + "ranks"), np.int64).reshape(-1, _COUNTER_STRIDE)
    _counter = ranks[rank, _PROGRESS:_PROGRESS + 1] if counting else None
    _sync = None
    try:
        if sync is not None:
            _sync = _SyncGroup(rank, prefix, ranks[:, _TAG], *sync)
        fn, args = payload if fork else pickle.loads(payload)
        message = ("ok", fn(rank, *args))
        if _sync is not None:
            _sync.finish()
    except BaseException as exc:
        message = raised(exc)
    try:
        conn.send(message)
    except Exception as exc:
        conn.send(("error", f"returned a result that could not be sent back "
                            f"({type(exc).__name__}: {exc})", traceback.format_exc()))
    conn.close()


_env_lock = threading.Lock()


@contextmanager
def _single_thread_env():
    """Spawned children read these before numpy loads its BLAS: set them while starting one."""
    with _env_lock:
        saved = {key: os.environ.get(key) for key in _THREAD_ENV}
        os.environ.update(dict.fromkeys(_THREAD_ENV, "1"))
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    del os.environ[key]
                else:
                    os.environ[key] = value


def _describe_exit(exitcode):
    if exitcode is not None and exitcode < 0:
        try:
            return f"was killed by signal {signal.Signals(-exitcode).name} (exit code {exitcode})"
        except ValueError:
            pass
    return f"exited with code {exitcode}"


def _stop(processes, finished):
    """End every worker: let finished ones exit by themselves, terminate the rest."""
    if not finished:
        for process in processes:
            if process.exitcode is None:
                process.terminate()
    deadline = time.monotonic() + _TERMINATE_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.exitcode is None:
            process.kill()
            process.join()
        process.close()


def _collect(processes, conns, progress, progress_interval, counters):
    """Wait for every worker's result; raise WorkerError on the first failure."""
    workers = len(processes)
    results = [None] * workers
    done = [False] * workers
    waiting = {}
    for rank in range(workers):
        waiting[conns[rank]] = rank
        waiting[processes[rank].sentinel] = rank

    def receive(rank):
        conn = conns[rank]
        if conn not in waiting:
            return
        del waiting[conn]
        try:
            message = conn.recv()
        except EOFError:
            return                      # it died before sending: its sentinel reports the exit
        results[rank] = worker_result("hogwild worker", rank, message)
        done[rank] = True

    rate = ProgressRate(progress)
    while not all(done):
        timeout = progress_interval if progress is not None else None
        for ready in connection.wait(list(waiting), timeout):
            rank = waiting.get(ready)
            if rank is None:
                continue                # already handled with its pair this round
            if ready is conns[rank]:
                receive(rank)
            else:
                del waiting[ready]
                processes[rank].join()
                if conns[rank].poll():
                    receive(rank)
                if not done[rank]:
                    exitcode = processes[rank].exitcode
                    hint = ("; under start_method='spawn' an exit with code 1 before any "
                            "result often means the main script lacks an `if __name__ == "
                            "\"__main__\":` guard, or fn's module cannot be imported by the "
                            "worker (its stderr says which)") if exitcode == 1 else ""
                    raise WorkerError(rank, f"hogwild worker {rank} {_describe_exit(exitcode)} "
                                            f"before returning a result; the other workers were "
                                            f"stopped{hint}", exitcode=exitcode)
        if progress is not None and (time.monotonic() - rate.time >= progress_interval or all(done)):
            rate(int(counters.sum()))
    return results


def max_workers():
    """The most workers `run` starts: 8 per CPU of this machine, and at least 64."""
    return max(64, 8 * (os.cpu_count() or 1))


def _run_threads(fn, workers, args, progress, progress_interval):
    """`run` with start_method="threads": the workers are threads of this process."""
    counters = np.zeros((workers, _COUNTER_STRIDE), np.int64)
    outcomes = [None] * workers

    def work(rank):
        _thread_worker.counter = counters[rank, :1]
        try:
            outcomes[rank] = "ok", fn(rank, *args)
        except BaseException as exc:        # raised in the caller's thread, caused by exc
            outcomes[rank] = raised(exc) + (exc,)
        finally:
            _thread_worker.counter = None

    threads = [threading.Thread(target=work, args=(rank,), name=f"fastad-hogwild-{rank}", daemon=True)
               for rank in range(workers)]
    rate = ProgressRate(progress)
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(progress_interval if progress is not None else None)
            if progress is not None and time.monotonic() - rate.time >= progress_interval:
                rate(int(counters[:, 0].sum()))
    results = [worker_result("hogwild worker thread", rank, outcome) for rank, outcome in enumerate(outcomes)]
    if progress is not None:
        rate(int(counters[:, 0].sum()))
    return results


def start_methods():
    """The `start_method`s that `run` takes here: "spawn", "fork" where the platform has it,
    and "threads"."""
    return [m for m in ("spawn", "fork") if m in multiprocessing.get_all_start_methods()] + ["threads"]


def run(fn, workers=1, args=(), start_method="spawn", progress=None, progress_interval=1.0,
        mode="hogwild", reduce="mean"):
    """Call `fn(rank, *args)` in `workers` processes (or threads) at once; return their
    results in rank order.

    `rank` runs from 0 to workers - 1. Each worker's BLAS/OpenMP is limited to
    one thread. `start_method` is "spawn" (the default; safe with CUDA and
    threads; `fn` and `args` are pickled once and sent to every worker, so `fn`
    lives at module level in an importable module, and a script guards its
    entry point with `if __name__ == "__main__":`) or "fork" (Linux; starts in
    milliseconds instead of a fresh interpreter per worker, `fn` may be any
    callable; a BLAS thread pool the parent already started is resized to one
    thread only if threadpoolctl is installed). Shared arrays from `share` in
    `args` reach the workers by name, without copying.

    `start_method="threads"` runs the workers as threads of this process, on the
    same shared arrays: no process start, no pickling, no second copy of
    anything. Each thread makes its own `fa.Parameter(shared[name])`: two threads
    training the same Parameter object are refused (`fa.train` claims its
    Parameters for its run). It pays off when the workers spend their time in `fa.train`, whose
    compiled loop releases the GIL (every CPU node, sampler and fastad
    optimizer runs without it); a worker that loops in Python holds the GIL and
    its threads take turns. A thread cannot be stopped from outside: when one
    raises, `WorkerError` is raised after the others have returned. Pick
    processes for workers that run Python per example, for a GPU, or where one
    worker must not take the others down with it.

    If a worker raises, the others are terminated and `WorkerError` is raised
    here with the worker's rank and traceback; if one dies (os._exit, a
    signal), the others are stopped and `WorkerError` gives its exit code. On
    Ctrl-C, or any error in the parent, the workers are terminated too, and a
    worker dies with the parent. `progress(done, per_second)`, if given (the
    protocol of `fa.train` and every `fit`; `fa.progress_bar(total)` draws it),
    is called about every `progress_interval` seconds and once at the end with
    the examples that workers add with `report(n)` (`fa.hogwild.train_progress`
    does it from `fa.train`); the rate is over the time since the previous call.

    `mode="hogwild"` (the default) leaves the workers to update the shared
    Parameters whenever they like, without locks. `mode="synchronized"` makes
    `sync_step(optimizer)` a lockstep step: the workers' gradients are summed
    (reduce="sum") or averaged (reduce="mean", the default) across workers, in
    rank order, and one identical update is applied, so a seeded run gives the
    same Parameters every time, equal (up to rounding) to one process training
    on the workers' minibatches combined. Every worker must then take the same
    number of `sync_step`s; a worker that fails stops the run as above, and no
    worker is left waiting for it.

    Example::

        def train(rank, shared, n):          # at module level for spawn
            w = fa.Parameter(shared["w"])
            ...
            return rank

        with fa.hogwild.share({"w": np.zeros(8)}) as shared:
            assert fa.hogwild.run(train, workers=2, args=(shared, 1000)) == [0, 1]
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"run: workers must be a positive int, got {workers!r}")
    if workers > max_workers():
        raise ValueError(f"run: workers={workers} is more than {max_workers()} (8 per CPU of this "
                         f"machine, at least 64); Hogwild gains nothing from more workers than cores")
    check_choice("run", "start_method", start_method, start_methods())
    if start_method != "threads" and any(
            isinstance(arg, InProcessArray) or isinstance(arg, Mapping) and any(
                isinstance(value, InProcessArray) for value in arg.values()) for arg in args):
        raise TypeError(f"run: args hold an InProcessArray, which only threads of this process "
                        f"share (a {start_method!r} worker would train a private copy); use "
                        f"start_method='threads', or fa.hogwild.share for processes")
    if progress is not None and not callable(progress):
        raise TypeError(f"run: progress must be a callable or None, got {type(progress).__name__}")
    if not progress_interval > 0:
        raise ValueError(f"run: progress_interval must be > 0 seconds, got {progress_interval!r}")
    if not callable(fn):
        raise TypeError(f"run: fn must be callable, got {type(fn).__name__}")
    check_choice("run", "mode", mode, _MODES)
    check_choice("run", "reduce", reduce, _REDUCTIONS)
    args = tuple(args)
    if start_method == "threads":
        if mode != "hogwild":
            raise ValueError("run: mode='synchronized' runs its workers as processes; use "
                             "start_method='spawn' or 'fork' with it")
        return _run_threads(fn, workers, args, progress, progress_interval)
    _require_shm_dir()
    fork = start_method == "fork"
    if fork:
        payload = (fn, args)
    else:
        try:
            payload = bytes(ForkingPickler.dumps((fn, args)))
        except Exception as exc:
            raise TypeError(
                f"run: with start_method='spawn', fn and args are pickled to each worker, and "
                f"pickling failed ({type(exc).__name__}: {exc}); define fn at module level in an "
                f"importable module (not a lambda or a nested function), or use "
                f"start_method='fork'") from exc
    context = multiprocessing.get_context(start_method)
    block = _Block()      # the run's segments: the ranks' slots, the synchronised workers' gradients
    sync = (context.Barrier(workers), workers, reduce) if mode == "synchronized" else None
    processes, conns = [], []
    finished = False
    try:
        ranks = _view(block.create(block.prefix + "ranks", 8 * _COUNTER_STRIDE * workers),
                      (workers, _COUNTER_STRIDE), np.int64)
        for rank in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            conns.append(receiver)
            process = context.Process(
                target=_worker_main, name=f"fastad-hogwild-{rank}", daemon=True,
                args=(rank, payload, block.prefix, progress is not None, sender, os.getpid(), fork, sync))
            if fork:
                process.start()
            else:
                with _single_thread_env():
                    process.start()
            processes.append(process)
            sender.close()
        results = _collect(processes, conns, progress, progress_interval, ranks[:, _PROGRESS])
        finished = True
        return results
    finally:
        _stop(processes, finished)
        for conn in conns:
            conn.close()
        block.free()
