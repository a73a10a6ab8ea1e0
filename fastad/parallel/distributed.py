"""Asynchronous parameter-server training on Ray: the same worker code as `fa.hogwild`
(fastad.parallel's workers).

An optional extra: `pip install "fastad[distributed]"` installs Ray. Importing
this module does not import Ray; the first `share`, `run` or `restore` does.

    import fastad as fa
    from fastad import distributed

    with distributed.share({"U": U0, "V": V0}, shards=2) as shared:
        results = distributed.run(fa.models.bpr_hogwild_worker, workers=4,
                                  args=(shared, triples, 4), address="auto")
        U = shared["U"].numpy()                # gathered from the shards

Parameter server. `share` splits every array into `shards` contiguous blocks
of rows and gives each to a shard, a Ray actor that keeps them, and the
optimizer state made for its rows, in shared memory on its node. In a worker
of `run`, `fa.Parameter(shared["U"])` adopts a replica of U, one per node (the
workers of a run on a node train it together, Hogwild-style), that the
compiled loop and the optimizers update at full speed; at sync points that
its optimizer's steps reach by themselves (see `run`'s `sync_every`), at
`sync()` and when its function returns, a worker pushes the rows its node
changed as deltas (which the shards add: no update is lost) and merges the
rows others changed: directly with the shards on its node, through Ray with
the others. A shard that dies, or whose node leaves, starts again from its
checkpoint and is seeded by a worker's replica.

The user guide's Ray page (docs/guide/ray.md) gives the layout, the sync rule
and the staleness bound it implies, the fault policy and the figures.
"""
import concurrent.futures
import contextlib
import fcntl
import functools
import hashlib
import itertools
import mmap
import os
import re
import secrets
import socket
import sys
import time

import numpy as np

from fastad.checks import check_int, check_number
from fastad.io import load, save
from fastad.optim.optimizers import set_step_hooks
from fastad.parallel import segments
from fastad.parallel import arrays as array_handles     # `arrays` and `workers` name arguments here
from fastad.parallel.arrays import as_rows
from fastad.parallel import workers as pool
from fastad.parallel.workers import WorkerError

__all__ = ["share", "restore", "run", "sync", "buckets", "DistributedArray", "DistributedArrays",
           "WorkerError"]

_FORMAT = "fastad-distributed-shard-1"
# What a driver, its shards and its workers exchange; one that changes it bumps this.
_PROTOCOL = 2
_SHARD_FILE = re.compile(r"shard-(\d+)-of-(\d+)\.npz")
_HOST_PORT = re.compile(r"(?:ray://)?\[?([^\[\]/]+?)\]?:(\d{1,5})")
_CONNECT_SECONDS = 10.0


def _version():
    """This process's fastad, as the driver, the shards and the workers must agree on it."""
    return f"fastad {sys.modules['fastad'].__version__}, fastad.distributed protocol {_PROTOCOL}"


def _check_version(who, expected):
    """RuntimeError naming `who` and its node unless it runs the driver's fastad."""
    if expected != _version():
        node = _ray().get_runtime_context().get_node_id()
        raise RuntimeError(f"{who} on Ray node {node} runs {_version()}, but the driver runs "
                           f"{expected}: install the same fastad on every node")


def _ray():
    try:
        import ray
    except ImportError:
        raise ImportError("fastad.distributed needs Ray: pip install 'fastad[distributed]' "
                          "(or pip install 'ray>=2.9')") from None
    return ray


def _connect(address):
    """Ray, initialised: joins `address` ("auto", "ray://host:port", ...) or starts a local one."""
    ray = _ray()
    if not ray.is_initialized():
        if address is None:
            # "local": a new instance, even where RAY_ADDRESS or a `ray start` names another.
            ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False)
        else:
            _check_reachable(address)
            ray.init(address=address)
    return ray


def _check_reachable(address):
    """Fail within _CONNECT_SECONDS when nothing answers at a "host:port" or "ray://host:port"
    address (Ray itself would retry for minutes); other forms ("auto") go to Ray as they are."""
    if not isinstance(address, str):
        raise TypeError(f"address must be a str such as 'auto' or 'host:port', or None, "
                        f"got {type(address).__name__}")
    match = _HOST_PORT.fullmatch(address)
    if match is None:
        return
    host, port = match.group(1), int(match.group(2))
    try:
        socket.create_connection((host, port), timeout=_CONNECT_SECONDS).close()
    except OSError as exc:
        raise ConnectionError(f"cannot reach a Ray cluster at address={address!r}: nothing "
                              f"answered at {host}:{port} within {_CONNECT_SECONDS:g} s ({exc}); "
                              f"start one with `ray start --head`, or pass address=None for a "
                              f"local instance") from None


def _changed(current, base):
    """Per row, whether its bits differ between two 2-D arrays of one shape."""
    if current.size == 0:
        return np.zeros(len(current), bool)
    width = 8 if current.shape[1] * current.itemsize % 8 == 0 else current.itemsize
    unsigned = np.dtype(f"u{width}")
    differ = current.view(unsigned) != base.view(unsigned)
    if differ.shape[1] % 8 == 0:
        differ = differ.view(np.uint64)       # eight flags a word
    # numpy's any(axis=1) costs about 20 ns a row however short the rows; OR-ing the halves of
    # the rows together takes a few calls over less and less data (5,000 rows of 32: 7x faster).
    while differ.shape[1] > 1:
        half = differ.shape[1] // 2
        folded = differ[:, :half] | differ[:, half:2 * half]
        if differ.shape[1] % 2:
            folded[:, 0] |= differ[:, -1]
        differ = folded
    return differ[:, 0] != 0


def _dense(rows, total):
    """Whether `rows` of `total` rows travel as the whole block: contiguous array arithmetic
    then costs less than gathering and scattering that many rows one by one."""
    return 2 * rows >= total


# ------------------------------------------------------------------ shards

def _segment_name(prefix, name):
    """The segment of table `name` (an array's or its state's: "key/state key") in a block
    of segments named after `prefix`."""
    return prefix + "t" + hashlib.blake2b(name.encode(), digest_size=8).hexdigest()


_SEED = -2          # a request's `since` that offers the shard a seed (see _ShardMemory.sync)

# A writer that pushed to a shard within this many seconds counts as active (see
# _ShardMemory.sync); writers push at least every sync_seconds (1 s by default).
_ACTIVE_WRITER_SECONDS = 10.0
_WRITER_SLOTS = 8


class _ShardMemory:
    """A shard's tables in shared memory on its node: for each table its rows and, per row,
    the clock of its last write (version), who wrote it (writer) and its version before that
    writer's run of writes began; a header with the shard's clock, its token (new at each
    start of the shard: workers then pull again), when it last saved its checkpoint, the clock
    after which a seed is awaited (see `sync`; -1: none), and the last few writers with the
    time of their last push. The shard actor serves the syncs of workers on other nodes from
    it; workers on its node sync with it directly, without a Ray call. Either holds the
    header's file lock for a sync."""

    _CLOCK, _TOKEN, _SAVED_AT, _SEED_AFTER = range(4)
    _HEADER = 4

    def __init__(self, prefix, pid, header_mapping):
        self.prefix, self.pid = prefix, pid      # the shard actor's segments and process
        self.header = segments.view(header_mapping, (self._HEADER,), np.int64)
        self.recent = segments.view(header_mapping, (_WRITER_SLOTS, 2), np.int64,
                                    self._HEADER * 8)  # writer, when (ns)
        self.lock_fd = segments.lock_descriptor(prefix + "head")
        self.tables, self.versions, self.writers, self.before = {}, {}, {}, {}

    @classmethod
    def create(cls, block, tables, clock=0, seed_after=-1):
        """The memory of a starting shard, in segments of `block` (its actor's), holding
        `tables` ({name: 2-D rows}), its clock starting at `clock`."""
        memory = cls(block.prefix, os.getpid(),
                     block.create(block.prefix + "head", (cls._HEADER + 2 * _WRITER_SLOTS) * 8))
        memory.header[cls._CLOCK] = clock
        memory.header[cls._TOKEN] = secrets.randbits(62) + 1
        memory.header[cls._SAVED_AT] = time.monotonic_ns()
        memory.header[cls._SEED_AFTER] = seed_after
        for name, rows in tables.items():
            memory.add_table(name, rows, block)
        return memory

    @classmethod
    def attach(cls, prefix, pid):
        """A worker's view of the memory of the shard whose actor runs as `pid` on its node."""
        return cls(prefix, pid, segments.attach_segment(prefix + "head"))

    @staticmethod
    def _layout(mapping, rows, width, dtype):
        values = segments.view(mapping, (rows, width), dtype)
        bookkeeping = segments.view(mapping, (3, rows), np.int64, values.nbytes)
        return values, bookkeeping

    def add_table(self, name, rows, block):
        """Make table `name` holding a copy of `rows` (shard side)."""
        rows = as_rows(rows)
        dtype = np.dtype(rows.dtype)
        mapping = block.create(_segment_name(self.prefix, name),
                               rows.size * dtype.itemsize + 3 * 8 * len(rows))
        values, bookkeeping = self._layout(mapping, len(rows), rows.shape[1], dtype)
        values[...] = rows
        bookkeeping[1] = -1
        self._bind(name, values, bookkeeping)

    def table(self, name, rows, width, dtype):
        """Table `name` (`rows` x `width` of `dtype`), attached on first use (worker side)."""
        if name not in self.tables:
            mapping = segments.attach_segment(_segment_name(self.prefix, name))
            self._bind(name, *self._layout(mapping, rows, width, dtype))
        return self.tables[name]

    def _bind(self, name, values, bookkeeping):
        self.tables[name] = values
        self.versions[name], self.writers[name], self.before[name] = bookkeeping

    @contextlib.contextmanager
    def locked(self):
        """Hold the shard's file lock (the actor's, or a worker's on its node) for a sync."""
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX)
        try:
            yield self
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    @property
    def token(self):
        return int(self.header[self._TOKEN])

    @property
    def clock(self):
        return int(self.header[self._CLOCK])

    def alive(self):
        """Whether the shard actor that made this memory still runs (else a restarted one
        serves from memory of its own)."""
        return segments.pid_alive(self.pid)

    def saved_seconds_ago(self):
        return (time.monotonic_ns() - int(self.header[self._SAVED_AT])) / 1e9

    def mark_saved(self):
        self.header[self._SAVED_AT] = time.monotonic_ns()

    def sync(self, writer, requests):
        """Add the deltas pushed by `writer`; answer each table's rows changed since its last
        request. Call it holding the lock.

        requests: {table: (token, since, local rows, deltas)}, the deltas of
        those rows, or of every row (dense, zero where not in `rows`). A caller
        whose token is not this start's, or whose since is -1, gets every row of
        the table; otherwise the rows that someone else wrote after `since`.
        Rows only the caller wrote since then are left out: the caller computed
        their value itself, with the same float additions.
        Returns (token, clock, {table: (local rows, values)}, others): the
        values of those rows, or every row of the table when many are asked for
        (dense: the table itself, which changes once the lock is released), and
        whether another writer pushed in the last _ACTIVE_WRITER_SECONDS.

        Seeds. A shard started again from its checkpoint lost what was pushed
        after it; the workers that knew the shard before (their token is the
        last start's) still hold it, up to their last sync. The first of them
        whose last answer came after the checkpoint (since > its clock: the clock
        goes on from the checkpoint's) gets the answer None, nothing it pushed
        applied: it then sends its replica's rows as (token, SEED, None, rows),
        which become the shard's. A later seed, or a worker whose view is older
        than the checkpoint, finds the shard seeded and is answered every row.
        """
        self.header[self._CLOCK] += 1
        clock = int(self.header[self._CLOCK])
        if self.header[self._SEED_AFTER] >= 0:
            seeds = {name: rows for name, (_, since, _, rows) in requests.items() if since == _SEED}
            if seeds:
                for name, rows in seeds.items():
                    self.tables[name][...] = rows
                    self.versions[name][...] = clock
                    self.writers[name][...] = writer
                    self.before[name][...] = 0
                self.header[self._SEED_AFTER] = -1
                empty = np.zeros(0, np.int64)
                return self.token, clock, {name: (empty, self.tables[name][:0]) for name in requests}, True
            known = [since for token, since, _, _ in requests.values() if token not in (0, self.token)]
            if known and max(known) > self.header[self._SEED_AFTER]:
                return self.token, clock, None, True
            if known:
                self.header[self._SEED_AFTER] = -1     # the checkpoint is newer than its view
        # A seed that came second is a request for every row.
        requests = {name: (token, -1, np.zeros(0, np.int64), rows[:0]) if since == _SEED
                    else (token, since, ids, rows) for name, (token, since, ids, rows) in requests.items()}
        now = time.monotonic_ns()
        if any(len(rows) for _, _, rows, _ in requests.values()):
            mine = np.flatnonzero(self.recent[:, 0] == writer)
            slot = mine[0] if len(mine) else np.argmin(self.recent[:, 1])
            self.recent[slot] = writer, now
        others = bool(np.any((self.recent[:, 0] != writer) & (self.recent[:, 1] > 0) & (
            now - self.recent[:, 1] < _ACTIVE_WRITER_SECONDS * 1e9)))
        for name, (_, _, rows, deltas) in requests.items():
            if len(rows):
                table = self.tables[name]
                if len(deltas) == len(table):      # dense: zero for the rows not in `rows`
                    table += deltas
                else:
                    table[rows] += deltas
                new_run = rows[self.writers[name][rows] != writer]
                self.before[name][new_run] = self.versions[name][new_run]
                self.writers[name][rows] = writer
                self.versions[name][rows] = clock
        answer = {}
        for name, (token, since, _, _) in requests.items():
            table = self.tables[name]
            if token != self.token or since < 0:
                rows = np.arange(len(table), dtype=np.int64)
            else:
                rows = np.flatnonzero((self.versions[name] > since) & (
                    (self.writers[name] != writer) | (self.before[name] > since)))
            answer[name] = (rows, table if _dense(len(rows), len(table)) else table[rows])
        return self.token, clock, answer, others

    def close(self):
        os.close(self.lock_fd)


class _Shard:
    """A parameter server: rows [first_row, first_row + n) of every shared array, their
    optimizer state, a version per row, and its checkpoint file. Runs as a Ray actor, its
    tables in shared memory on its node (`_ShardMemory`)."""

    def __init__(self, index, count, shapes, first_rows, arrays, checkpoint_path,
                 checkpoint_every, version):
        _check_version(f"parameter shard {index} of {count}", version)
        self.index, self.count = index, count
        self.shapes, self.first_rows = shapes, first_rows
        self.checkpoint_path, self.checkpoint_every = checkpoint_path, checkpoint_every
        # `arrays` None: a shard moved from a node that is gone
        if arrays is None or _ray().get_runtime_context().was_current_actor_reconstructed:
            snapshot = load(checkpoint_path)
            if snapshot.get("format") != _FORMAT or (snapshot["shard"], snapshot["shards"]) != (
                    index, count):
                raise RuntimeError(f"parameter shard {index} of {count}: "
                                   f"{checkpoint_path} is not this shard's checkpoint")
            tables = _tables(snapshot["arrays"], snapshot["state"])
            clock = seed_after = int(snapshot.get("clock", 0))
        else:
            tables, clock, seed_after = arrays, 0, -1
        # A shard killed by Ray leaves its segments behind (its resource tracker goes with it):
        # the shard restarted in its place, another share or the driver's close() unlinks them.
        segments.sweep_stale_segments()
        self.segments = segments.Block()
        self.memory = _ShardMemory.create(self.segments, tables, clock, seed_after)
        if checkpoint_path is not None:
            self.checkpoint()

    def sync(self, writer, requests):
        """`_ShardMemory.sync` for a worker on another node (the answer copied before the
        lock is released)."""
        with self.memory.locked():
            token, clock, answer, others = self.memory.sync(writer, requests)
            if answer is not None:
                answer = {name: (rows, values.copy() if values is self.memory.tables[name] else values)
                          for name, (rows, values) in answer.items()}
        if self.checkpoint_every is not None and self.memory.saved_seconds_ago() >= self.checkpoint_every:
            self.checkpoint()
        return token, clock, answer, others

    def create_state(self, name, like, fill):
        """Make state table `name` shaped like table `like`, filled with `fill`, unless it exists."""
        with self.memory.locked():
            if name not in self.memory.tables:
                self.memory.add_table(name, np.full_like(self.memory.tables[like], fill), self.segments)

    def free(self):
        """Unlink this shard's segments: it is ending (workers still attached keep theirs)."""
        self.segments.free()

    def place(self):
        """(the id of the Ray node this shard runs on, the prefix of its segments, its pid)."""
        return _ray().get_runtime_context().get_node_id(), self.segments.prefix, os.getpid()

    def read(self, name):
        with self.memory.locked():
            return self.memory.tables[name].copy()

    def snapshot(self):
        """This shard as a checkpoint dict."""
        with self.memory.locked():
            tables = {name: rows.copy() for name, rows in self.memory.tables.items()}
            clock = self.memory.clock
        return _checkpoint(self.index, self.count, self.first_rows, self.shapes, tables, clock)

    def checkpoint(self):
        self.memory.mark_saved()
        save(self.snapshot(), self.checkpoint_path)
        return self.checkpoint_path


def _tables(arrays, state):
    """{table name: 2-D rows}: each array under its key, and each of its optimizer state
    arrays (`state`: {key: {state key: array}}) under "key/state key"."""
    tables = {key: as_rows(a) for key, a in arrays.items()}
    for key, states in state.items():
        tables.update((f"{key}/{state_key}", as_rows(rows)) for state_key, rows in states.items())
    return tables


def _checkpoint(shard, shards, first_rows, shapes, tables, clock=0):
    """The checkpoint dict (see `_merge_snapshots` for the layout) of shard `shard` of
    `shards`, which holds `tables` (as `_tables` names them) of arrays of `shapes`, from
    `first_rows` on, at the shard's `clock`."""
    state = {key: {} for key in shapes}
    for name, rows in tables.items():
        if "/" in name:
            key, state_key = name.split("/", 1)
            state[key][state_key] = rows
    return {"format": _FORMAT, "shard": shard, "shards": shards, "first_row": dict(first_rows),
            "shape": {key: np.array(shape, np.int64) for key, shape in shapes.items()},
            "arrays": {key: tables[key] for key in shapes}, "state": state, "clock": clock}


def _results(calls, timeout, timeout_name):
    """The results of shard calls (made by `_Block.start`), waiting at most `timeout` seconds
    (None: no limit). A shard whose node is gone is started again on a live node from its
    last checkpoint, when its share allows restarts, and called again; any other error names
    a shard that died or did not answer."""
    ray = _ray()
    _, late = concurrent.futures.wait([call.answer for call in calls], timeout=timeout)
    if late:
        names = "; ".join(call.block.describe(call.shard) for call in calls if call.answer in late)
        raise TimeoutError(f"no answer from {names} within {timeout_name}={timeout} s")
    results = []
    for call in calls:
        block, s = call.block, call.shard
        try:
            results.append(call.answer.result())
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError) as exc:
            if getattr(exc, "actor_init_failed", False):
                raise RuntimeError(f"{block.describe(s)} could not start\n{exc}") from None
            if block.movable(s):
                block.move(s)
                results.append(_results([block.start(s, call.method, *call.args)], timeout,
                                        timeout_name)[0])
                continue
            if block.checkpoint_dir is None:
                policy = "share() had no checkpoint_dir, so it is not restarted and its rows are lost"
            elif block.shard_restarts == 0:
                policy = (f"share(shard_restarts=0) stops the run rather than restart it; its "
                          f"last checkpoint is {block.checkpoint_path(s)}")
            else:
                policy = (f"it could not be restarted from its checkpoint "
                          f"{block.checkpoint_path(s)} (shard_restarts={block.shard_restarts})")
            raise RuntimeError(f"{block.describe(s)} died; {policy}\n{exc}") from None
    return results


class _ShardCall:
    """A call of a shard's method in flight: what `_results` needs to wait for it, and to
    make it again on a shard that moved."""

    __slots__ = ("block", "shard", "method", "args", "answer")

    def __init__(self, block, shard, method, args, answer):
        self.block, self.shard, self.method, self.args = block, shard, method, args
        self.answer = answer       # the Future of its ObjectRef (`ref.future()`)

    def done(self):
        return self.answer.done()


def _live_nodes():
    return {node["NodeID"] for node in _ray().nodes() if node["Alive"]}


@functools.cache
def _remote(target):
    """The Ray actor class or remote function of `target`, made once (Ray is imported late)."""
    return _ray().remote(target)


class _BucketScheduler:
    """The buckets of one pass of `buckets`: every tuple of partitions, one per axis, handed
    to one worker at a time so that no two workers hold a partition of one axis at once.
    Runs as a Ray actor, named after the run, the share and the pass."""

    def __init__(self, sizes):
        self.axes = len(sizes)
        self.todo = set(itertools.product(*(range(n) for n in sizes)))
        self.held = {}           # rank -> its bucket

    def acquire(self, rank, done):
        """Take back rank's bucket (trained if `done`, else to do again), and hand it the
        next: a bucket none of whose partitions another worker holds, sharing most
        partitions with its last one; () when every bucket left has a held partition (ask
        again); None when none is left in this pass."""
        last = self.held.pop(rank, None)
        if last is not None and not done:
            self.todo.add(last)
        if not self.todo:
            return None
        busy = [{bucket[axis] for bucket in self.held.values()} for axis in range(self.axes)]
        free = [b for b in self.todo if not any(b[axis] in busy[axis] for axis in range(self.axes))]
        if not free:
            return ()
        bucket = min(free, key=lambda b: (-sum(x == y for x, y in zip(b, last or ())), b))
        self.todo.remove(bucket)
        self.held[rank] = bucket
        return bucket


# ------------------------------------------------------------ driver side

def _checkpoint_path(checkpoint_dir, s, shards):
    name = f"shard-{s:04d}-of-{shards:04d}.npz"
    return None if checkpoint_dir is None else os.path.join(checkpoint_dir, name)


class _Block:
    """What the handles of one `share` call have in common (pickled to workers as it is)."""

    def __init__(self, count, shapes, bounds, checkpoint_dir, checkpoint_every, shard_restarts,
                 partitioned=frozenset()):
        self.id = secrets.token_hex(8)
        self.partitioned = partitioned    # keys whose replicas hold the buckets' rows only
        self.shards = [None] * count      # Ray actor handles, in shard order
        self.shapes = shapes              # key -> the shape of the whole array
        self.bounds = bounds              # key -> int64 array of len(shards) + 1 row bounds
        self.checkpoint_dir = checkpoint_dir
        self.checkpoint_every = checkpoint_every
        self.shard_restarts = shard_restarts
        # (node, segment prefix, pid) of each shard as it started; a restart keeps the node
        self.places = None
        self.job = _ray().get_runtime_context().get_job_id()   # the Ray session it lives in
        self.closed = False

    def __getstate__(self):
        return {**self.__dict__, "closed": False}

    def start_shard(self, s, node, tables, moved=False):
        """Start shard s on `node` (a Ray node id) with `tables` (None: from its checkpoint).
        A shard `moved` from a node that is gone is detached from the process that starts
        it (any process that finds it gone may), under a name that makes the others find it."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
        restartable = self.checkpoint_dir is not None
        options = dict(num_cpus=0, max_restarts=self.shard_restarts if restartable else 0,
                       max_task_retries=-1 if restartable else 0,
                       scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
        if moved:
            options.update(name=self.moved_name(s), lifetime="detached", get_if_exists=True)
        first_rows = {key: int(b[s]) for key, b in self.bounds.items()}
        self.shards[s] = _remote(_Shard).options(**options).remote(
            s, len(self.shards), self.shapes, first_rows, tables, self.checkpoint_path(s),
            self.checkpoint_every, _version())

    def moved_name(self, s):
        return f"fastad-{self.id}-shard-{s}"

    def movable(self, s):
        """Whether shard s, which Ray reports dead, is to start again elsewhere: its share
        restarts shards from checkpoints, and the node it ran on is gone (a shard whose
        process died comes back on its node by Ray's own restarts)."""
        return (self.checkpoint_dir is not None and self.shard_restarts > 0
                and self.places[s][0] not in _live_nodes())

    def move(self, s):
        """Start shard s again from its last checkpoint on a live node (node s mod n of the
        n live ones), or find the one another process started there."""
        nodes = sorted(_live_nodes())
        self.start_shard(s, nodes[s % len(nodes)], None, moved=True)
        self.places[s] = _results([self.start(s, "place")], None, "")[0]

    def start(self, s, method, *args):
        """Call `method(*args)` on shard s, not waiting: a `_ShardCall` for `_results`."""
        return _ShardCall(self, s, method, args, getattr(self.shards[s], method).remote(*args).future())

    def call(self, method, *args):
        """Call `method(*args)` on every shard and wait for the results, in shard order."""
        return _results([self.start(s, method, *args) for s in range(len(self.shards))], None, "")

    def checkpoint_path(self, s):
        """Where shard s writes its checkpoint (None without a checkpoint_dir)."""
        return _checkpoint_path(self.checkpoint_dir, s, len(self.shards))

    def describe(self, s):
        held = ", ".join(f"{key!r} rows {b[s]}..{b[s + 1] - 1}" for key, b in self.bounds.items()
                         if b[s + 1] > b[s])
        return f"parameter shard {s} of {len(self.shards)} ({held or 'no rows'})"


class DistributedArray:
    """A handle on one array held by the parameter shards of `share`.

    In the driver, `numpy()` gathers the array from the shards (a new array
    each call). In a worker of `run`, `fa.Parameter(handle)` trains on the
    worker's replica (docs/guide/ray.md says how it syncs), and
    optimizers keep their state in the shards through `state_array`.

    Example::

        with fa.distributed.share({"w": np.zeros(3)}) as shared:
            shared["w"]              # DistributedArray(key='w', shape=(3,), dtype=float64, shards=1)
            shared["w"].numpy()      # array([0., 0., 0.])
    """

    def __init__(self, key, shape, dtype, block):
        self.key = key
        self.shape = shape
        self.dtype = dtype
        self._block = block

    def numpy(self):
        """In the driver, the array gathered from the shards now (a new array of `self.shape`
        and `self.dtype`); in a worker of `run`, the worker's replica (the array its
        Parameter adopts, updated in place at sync points)."""
        if _session is not None:
            return _session.replica(self).array
        if self._block.closed:
            raise RuntimeError(f"{self!r}: the share() block of this array has ended")
        return np.concatenate(self._block.call("read", self.key)).reshape(self.shape)

    def trainable_array(self):
        """The array `fa.Parameter(handle)` adopts: this worker's replica."""
        if _session is None:
            raise RuntimeError(
                f"fa.Parameter({self!r}): a distributed array becomes a Parameter only inside a "
                f"worker of fastad.distributed.run; in the driver read it with .numpy()")
        return _session.replica(self).array

    def state_array(self, key, fill=0.0):
        """Optimizer state of this array's shape and dtype, held by the shards; in a worker only.

        `key` names the state (letters, digits, `_`, `.`, `-`; e.g. "Adagrad.sum").
        The first worker to ask makes it on every shard, filled with `fill` (a
        scalar or an array broadcastable to `self.shape`); later calls, in any
        worker, get a replica of that same state, never refilled. The replica
        syncs with the shards like the array's. Optimizers call this for a
        Parameter made from the handle.

        Example::

            acc = shared["U"].state_array("adagrad_sum", fill=0.1)   # in a worker of run()
        """
        array_handles.check_state_key(key)
        if _session is None:
            raise RuntimeError(f"{self!r}.state_array({key!r}): optimizer state is made only inside "
                               f"a worker of fastad.distributed.run; read it with shared.save(path)")
        return _session.state_replica(self, key, fill).array

    def __repr__(self):
        return (f"DistributedArray(key={self.key!r}, shape={self.shape}, dtype={self.dtype.name}, "
                f"shards={len(self._block.shards)})")


class DistributedArrays(array_handles.ArrayHandles):
    """The mapping `share` returns: key -> DistributedArray, and the context manager that ends it.

    Picklable: a worker that receives it gets handles on the same shards; only
    the driver's object ends them.

    Example::

        with fa.distributed.share({"U": U0}, shards=2) as shared:
            fa.distributed.run(worker, workers=2, args=(shared,))
            U = shared["U"].numpy()                # gathered from the shards
    """

    def __init__(self, handles, block, owner):
        self._handles = handles
        self._block = block
        self._owner = owner

    def __reduce__(self):
        return (DistributedArrays, (self._handles, self._block, False))

    def _check_open(self, what):
        if self._block.closed:
            raise RuntimeError(f"{what}: the share() block has ended")

    def checkpoint(self):
        """Make every shard write its checkpoint now; returns the files' paths.

        Needs `share(..., checkpoint_dir=...)`. A shard writes
        `<checkpoint_dir>/shard-<i>-of-<n>.npz` with `fastad.save` (on the node
        it runs on), atomically.

        Example::

            with fa.distributed.share({"U": U0}, checkpoint_dir="ckpt") as shared:
                ...
                shared.checkpoint()          # ['ckpt/shard-0000-of-0001.npz']
        """
        self._check_open("checkpoint")
        if self._block.checkpoint_dir is None:
            raise ValueError("checkpoint: this share has no checkpoint_dir; pass "
                             "share(..., checkpoint_dir=...) or use save(path)")
        return self._block.call("checkpoint")

    def save(self, path):
        """Gather every array and its optimizer state into one `fastad.save` file at `path`.

        The file holds the same layout as a shard checkpoint, as one shard of
        one; `restore(path)` reads it. Each shard's part is a consistent
        snapshot of that shard (shards are read one after another while
        workers may still push).

        Example::

            shared.save("model.npz"); shared = fa.distributed.restore("model.npz", shards=4)
        """
        self._check_open("save")
        arrays, state = _merge_snapshots(self._block.call("snapshot"), "save")
        save(_checkpoint(0, 1, dict.fromkeys(arrays, 0), {key: a.shape for key, a in arrays.items()},
                         _tables(arrays, state)), path)

    def close(self):
        """End the shards (their arrays are gone unless checkpointed or saved); idempotent."""
        if self._owner and not self._block.closed:
            self._block.closed = True
            ray = _ray()
            shards = list(self._block.shards)
            for s in range(len(shards)):       # moved by a worker: this process never saw it
                with contextlib.suppress(ValueError):
                    shards[s] = ray.get_actor(self._block.moved_name(s))
            # Unlinking first: a killed shard leaves its segments behind.
            ray.wait([shard.free.remote() for shard in shards], num_returns=len(shards), timeout=10)
            for shard in shards:
                ray.kill(shard)
            segments.sweep_stale_segments()     # those of shards that had died (on this node)


def _merge_snapshots(snapshots, who):
    """Full arrays and state from the checkpoint dicts of every shard of one share.

    A checkpoint dict: {"format", "shard": i, "shards": n, "first_row": {key:
    int}, "shape": {key: int64 array}, "arrays": {key: 2-D rows}, "state":
    {key: {state key: 2-D rows}}}.
    """
    for snapshot in snapshots:
        if not isinstance(snapshot, dict) or snapshot.get("format") != _FORMAT:
            raise ValueError(f"{who}: not a fastad.distributed checkpoint (format "
                             f"{snapshot.get('format') if isinstance(snapshot, dict) else None!r})")
    count = snapshots[0]["shards"]
    indices = sorted(s["shard"] for s in snapshots)
    if indices != list(range(count)) or any(s["shards"] != count for s in snapshots):
        raise ValueError(f"{who}: expected shards 0..{count - 1} of one checkpoint, got shards "
                         f"{indices} of {sorted({s['shards'] for s in snapshots})}")
    snapshots = sorted(snapshots, key=lambda s: s["shard"])
    arrays, state = {}, {}
    for key, shape in snapshots[0]["shape"].items():
        shape = tuple(int(n) for n in shape)
        parts, row = [], 0
        for snapshot in snapshots:
            if key not in snapshot["arrays"] or snapshot["first_row"][key] != row:
                raise ValueError(f"{who}: shard {snapshot['shard']} does not hold the rows of "
                                 f"{key!r} from {row} on")
            parts.append(snapshot["arrays"][key])
            row += len(snapshot["arrays"][key])
        arrays[key] = np.concatenate(parts).reshape(shape)
        names = set.intersection(*(set(s["state"].get(key, {})) for s in snapshots))
        state[key] = {name: np.concatenate([s["state"][key][name] for s in snapshots]).reshape(shape)
                      for name in sorted(names)}
    return arrays, state


def _share(arrays, state, shards, checkpoint_dir, checkpoint_every, shard_restarts, address,
           partitioned):
    _connect(address)
    if checkpoint_dir is not None:
        checkpoint_dir = os.path.abspath(os.fspath(checkpoint_dir))
        os.makedirs(checkpoint_dir, exist_ok=True)
    bounds = {key: np.array([len(as_rows(a)) * s // shards for s in range(shards + 1)], np.int64)
              for key, a in arrays.items()}
    tables = _tables(arrays, state)
    block = _Block(shards, {key: a.shape for key, a in arrays.items()}, bounds, checkpoint_dir,
                   checkpoint_every, shard_restarts, partitioned)
    # Shard s lives on node s mod n. A hard affinity: Ray's soft one and "SPREAD" put shards
    # that take no CPU all on one node.
    nodes = sorted(_live_nodes())
    for s in range(shards):
        held = {}                  # shard s's rows of every table (an array's, or its state's)
        for name, table in tables.items():
            lo, hi = bounds[name.split("/")[0]][s:s + 2]
            held[name] = table[lo:hi]
        block.start_shard(s, nodes[s % len(nodes)], held)
    shared = DistributedArrays(
        {key: DistributedArray(key, a.shape, a.dtype, block) for key, a in arrays.items()},
        block, owner=True)
    try:
        block.places = block.call("place")   # the shards are up (and wrote their first checkpoint)
    except BaseException:
        shared.close()
        raise
    return shared


def _check_options(who, shards, checkpoint_dir, checkpoint_every, shard_restarts):
    """The options of `share` and `restore`, checked; returns (shards, shard_restarts) as ints."""
    shards = check_int(who, "shards", shards)
    if checkpoint_every is not None:
        check_number(who, "checkpoint_every", checkpoint_every, above=0)
        if checkpoint_dir is None:
            raise ValueError(f"{who}: checkpoint_every needs a checkpoint_dir to write to")
    return shards, check_int(who, "shard_restarts", shard_restarts, minimum=0)


def _check_partitioned(who, partitioned, keys):
    """`partitioned` (names of arrays among `keys`) as a frozenset."""
    if isinstance(partitioned, str) or not all(isinstance(key, str) for key in partitioned):
        raise TypeError(f"{who}: partitioned must be a list of array names, got {partitioned!r}")
    unknown = sorted(set(partitioned) - set(keys))
    if unknown:
        raise KeyError(f"{who}: partitioned names {unknown}, which are not among the arrays "
                       f"{sorted(keys)}")
    return frozenset(partitioned)


def share(arrays, shards=1, checkpoint_dir=None, checkpoint_every=None, shard_restarts=3,
          address=None, partitioned=()):
    """Put float arrays in parameter shards on Ray: `with share({...}) as shared:`.

    `arrays` maps names (str of 1 to 128 characters without "/", as for
    `fa.hogwild.share`) to float32 or float64 arrays of any shape; each is
    split by rows (first axis) into `shards` contiguous blocks, shard i
    holding block i of every array. Returns a
    `DistributedArrays` mapping name -> `DistributedArray` to pass to `run`.
    Leaving the `with` block (or `close()`) ends the shards.

    checkpoint_dir    a directory where each shard writes
                      `shard-<i>-of-<n>.npz` (fastad.save) at start, on
                      `shared.checkpoint()` and every `checkpoint_every`
                      seconds; a shard whose process dies is then restarted
                      from it (up to `shard_restarts` times). Use one
                      directory per share.
    address           Ray to use when Ray is not initialised yet: None
                      starts a local instance with `os.cpu_count()` CPUs,
                      "auto", "host:port" or "ray://host:port" joins a
                      running cluster (ConnectionError within 10 s when
                      nothing answers there). An initialised Ray is used as
                      it is.
    partitioned       names of arrays trained only in `buckets`: a worker's
                      replica of one (and of its optimizer state) is not
                      pulled when it opens, takes memory only for the rows
                      its buckets pull, and syncs only the partitions its
                      bucket holds (its changes outside a bucket are not
                      pushed).

    Shards take no CPU from Ray's accounting; shard i starts on node i mod n of the
    cluster's n nodes.

    Example::

        with fa.distributed.share({"U": U0, "V": V0}, shards=2) as shared:
            fa.distributed.run(fa.models.bpr_hogwild_worker, workers=2,
                               args=(shared, triples, 2))
            U = shared["U"].numpy()
    """
    sources = array_handles.check_shareable(arrays)
    shards, shard_restarts = _check_options("share", shards, checkpoint_dir, checkpoint_every,
                                            shard_restarts)
    partitioned = _check_partitioned("share", partitioned, sources)
    return _share(sources, {}, shards, checkpoint_dir, checkpoint_every, shard_restarts, address,
                  partitioned)


def restore(path, shards=1, checkpoint_dir=None, checkpoint_every=None, shard_restarts=3,
            address=None, partitioned=()):
    """A new share with the arrays and optimizer state of a checkpoint; options as `share`.

    `path` is a file written by `shared.save(path)` or a `checkpoint_dir`
    holding every shard's `shard-<i>-of-<n>.npz`. The number of shards may
    differ from the checkpoint's.

    Example::

        shared = fa.distributed.restore("ckpt", shards=4, checkpoint_dir="ckpt")
    """
    shards, shard_restarts = _check_options("restore", shards, checkpoint_dir, checkpoint_every,
                                            shard_restarts)
    path = os.fspath(path)
    if os.path.isdir(path):
        files = sorted(f for f in os.listdir(path) if _SHARD_FILE.fullmatch(f))
        if not files:
            raise FileNotFoundError(f"restore: no shard-<i>-of-<n>.npz checkpoint in {path}")
        counts = sorted({int(_SHARD_FILE.fullmatch(f).group(2)) for f in files})
        if len(counts) > 1:
            raise ValueError(f"restore: {path} holds the checkpoints of shares of {counts} shards; "
                             f"keep one share's checkpoint per directory")
        snapshots = [load(os.path.join(path, f)) for f in files]
    else:
        snapshots = [load(path)]
    arrays, state = _merge_snapshots(snapshots, f"restore({path!r})")
    partitioned = _check_partitioned("restore", partitioned, arrays)
    return _share(arrays, state, shards, checkpoint_dir, checkpoint_every, shard_restarts, address,
                  partitioned)


# ------------------------------------------------------------ worker side

class _Replica:
    """One table (an array or its optimizer state) as a worker holds it: in memory of its own,
    or in a segment that the workers of its run on its node share (see `_Replicas`), laid out
    as the shard start (token) and clock (since) of each shard's last pull, the replica and
    its base."""

    def __init__(self, block, key, name, shape, dtype):
        self.block = block
        self.name = name                       # the shard's table name: key or "key/state key"
        self.bounds = block.bounds[key]
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.changed_rows = 0                  # rows its requests pushed since the session last read it

    def nbytes(self):
        """The size of the memory `bind` lays the replica out in."""
        return 16 * len(self.block.shards) + 2 * int(np.prod(self.shape)) * self.dtype.itemsize

    def bind(self, mapping, private=False):
        """Lay the replica out in `mapping` (of `nbytes()` bytes: a segment, or with
        `private` memory of this process's own)."""
        self.mapping, self.private = mapping, private
        count = len(self.block.shards)
        self.tokens = segments.view(mapping, (count,), np.int64)        # 0: never pulled
        self.since = segments.view(mapping, (count,), np.int64, 8 * count)
        self.array = segments.view(mapping, self.shape, self.dtype, 16 * count)  # the Parameter's
        self.rows = as_rows(self.array)        # a view of it
        # the value last pulled from or pushed to the shards
        self.base = segments.view(mapping, self.rows.shape, self.dtype, 16 * count + self.array.nbytes)

    def request(self, s):
        """The request to shard s: the ids of this replica's rows of that shard changed since
        the last push and their deltas (replica - base), which are added to the base, as
        (token, since, ids, deltas)."""
        lo, hi = self.bounds[s], self.bounds[s + 1]
        rows, base = self.rows[lo:hi], self.base[lo:hi]
        changed = _changed(rows, base)
        ids = np.flatnonzero(changed)
        self.changed_rows += len(ids)
        dense = _dense(len(ids), hi - lo)
        deltas = np.empty((hi - lo if dense else len(ids), rows.shape[1]), rows.dtype)
        # The shard adds the deltas to the same base unless someone else wrote the row, so the
        # base follows it. The rows are not written: other workers of this node may be
        # training them. Where base + (rows - base) rounds away from rows, the next request
        # pushes that last ulp.
        if dense:
            np.subtract(rows, base, out=deltas)
            deltas[~changed] = 0            # not inf - inf: an unchanged row adds nothing
            base += deltas
        else:
            np.subtract(rows[ids], base[ids], out=deltas)
            base[ids] += deltas
        return (int(self.tokens[s]), int(self.since[s]), ids, deltas)

    def release(self, s):
        """Give back the memory of shard s's rows (a partitioned table's bucket is done and
        pushed): they read as zeros until the next sync pulls them whole."""
        lo, hi = self.bounds[s], self.bounds[s + 1]
        start = np.frombuffer(self.mapping, np.uint8).ctypes.data
        # A shared segment's pages go back to /dev/shm with MADV_REMOVE; private memory's
        # with MADV_DONTNEED (both read as zeros after).
        advice = mmap.MADV_DONTNEED if self.private else mmap.MADV_REMOVE
        for array in (self.rows, self.base):
            first = array[lo:hi].ctypes.data - start
            begin = -(-first // mmap.PAGESIZE) * mmap.PAGESIZE
            end = (first + array[lo:hi].nbytes) // mmap.PAGESIZE * mmap.PAGESIZE
            if end > begin:
                self.mapping.madvise(advice, begin, end - begin)
        self.tokens[s], self.since[s] = 0, -1

    def unpush(self, s, ids, deltas):
        """Take back the push of `request(s)`: the shard did not apply it."""
        lo, hi = self.bounds[s], self.bounds[s + 1]
        base = self.base[lo:hi]
        if len(deltas) == hi - lo:
            base -= deltas
        else:
            base[ids] -= deltas

    def seed(self, s):
        """The seed of shard s (see _ShardMemory.sync): this replica's rows of it, which
        become their base."""
        lo, hi = self.bounds[s], self.bounds[s + 1]
        rows = self.rows[lo:hi].copy()
        self.base[lo:hi] = rows
        return (int(self.tokens[s]), _SEED, None, rows)

    def merge(self, s, token, clock, ids, values):
        """Take shard s's answer: `values` of rows `ids`, or of every row of the shard."""
        lo, hi = self.bounds[s], self.bounds[s + 1]
        # One pass that adds what the shard holds beyond the base: a worker of this node
        # that reads a row meanwhile sees its old value or its new one.
        if len(values) == hi - lo:             # every row
            rows, base = self.rows[lo:hi], self.base[lo:hi]
            rows += values - base
            base[...] = values
        else:
            ids = ids + lo
            self.rows[ids] += values - self.base[ids]
            self.base[ids] = values
        self.tokens[s], self.since[s] = token, clock


# The default sync interval (sync_every=None) follows the work done: a worker syncs once it has
# changed about this fraction of the rows of the table it covers fastest...
_CHANGED_ROWS_PER_SYNC = 0.75
# ...starting from this many steps, moving at most 4x per sync...
_FIRST_SYNC_STEPS = 1_000
# ...and spending at most about a thirtieth of its time syncing: at least 5 ms between syncs,
# and 30 times the processor time a sync takes in this worker (mostly Ray's call, about a
# millisecond; pushing a large dense table takes longer), averaged over the last few syncs.
# Processor time, not wall time: a worker descheduled mid-sync by a busy machine must not
# stretch its intervals. Each sync also costs its shard and Ray's own processes about as much
# again, on the workers' cores when they share a machine: at a tenth, the Python-loop worker
# of bench/distributed_bpr.py (two workers, 500,000 planted triples) ran at 0.60-0.75x
# Hogwild's examples/s over three runs of three rounds, at a thirtieth 0.86-0.97x, its test
# AUC 0.009 below Hogwild's instead of 0.002-0.005 (a twentieth: 0.81x, 0.0045).
_SYNC_COST_SHARE = 30
_MIN_SYNC_SECONDS = 0.005
# ...but never more steps between syncs than the fixed default of old: a worker fast enough to
# meet the cost bound only every tens of thousands of steps syncs as often as it used to.
_MAX_SYNC_STEPS = 20_000


def _next_interval(steps, changed_fraction, alone=False):
    """The adaptive sync interval after a sync that came `steps` steps after the last one and
    found `changed_fraction` of some table's rows changed (the largest over the tables). With
    rows touched at random, the rows changed after t touches of an n-row table are
    n(1 - exp(-t/n)): touches grow as -log(1 - fraction), and steps with them.

    `alone`: no shard of the last round saw another writer push lately (one node, or the
    other nodes idle). Staleness then costs nothing, and the interval grows 4x a sync,
    with no cap in steps: sync_seconds bounds it."""
    if alone:
        return 4 * steps
    fraction = min(changed_fraction, 0.999)
    scale = np.log1p(-_CHANGED_ROWS_PER_SYNC) / np.log1p(-fraction) if fraction > 0 else 4.0
    return min(max(1, int(steps * min(max(scale, 0.25), 4.0))), _MAX_SYNC_STEPS)


class _Replicas:
    """Where a worker keeps its replicas: in memory of its own, or (`prefix`, a `run`'s) in
    segments that the workers of that run on this node share, so that they train one replica
    of each table Hogwild-style and one of them at a time syncs it with the shards.

    The shared form has a header segment (the node's writer id, which the shards see instead
    of the workers', the number of workers using it and the number of sync rounds made) whose
    file lock the worker holding a sync round holds from its push to the merge of its answer,
    and a segment per table, made and pulled by the first worker to open it."""

    _WRITER, _USERS, _SYNCS = range(3)

    def __init__(self, prefix):
        self.prefix = prefix
        self.tracked = []          # the shared segments this worker tracks
        self.lock_fd = None
        if prefix is None:
            self.header = np.array([secrets.randbits(62), 1, 0], np.int64)
            return
        name = prefix + "node"
        mapping, self.lock_fd = segments.attach_or_create_lockable(
            name, 3 * 8, lambda fresh: segments.view(fresh, (1,), np.int64).fill(secrets.randbits(62)))
        self.header = segments.view(mapping, (3,), np.int64)
        self._track(name)
        self.lock(blocking=True)
        self.header[self._USERS] += 1
        self.unlock()

    def _track(self, name):
        segments.track(name)       # a worker that dies leaves its node's segments to its tracker
        self.tracked.append(name)

    @property
    def writer(self):
        return int(self.header[self._WRITER])

    @property
    def syncs(self):
        return int(self.header[self._SYNCS])

    def count_sync(self):
        self.header[self._SYNCS] += 1
        return self.syncs

    def table(self, block_id, name, nbytes, fill, reserve=True):
        """The memory of table `name` of share `block_id`: attached, or made and filled by
        `fill(memory)` first; without `reserve`, a page of it is taken when first written."""
        if self.prefix is None:
            memory = mmap.mmap(-1, max(nbytes, 1))      # zero pages, taken as written
            fill(memory)
            return memory
        segment = _segment_name(self.prefix, f"{block_id}/{name}")
        mapping, _ = segments.attach_or_create(segment, nbytes, fill, reserve)
        self._track(segment)
        return mapping

    def lock(self, blocking):
        """Take the sync lock; False when another worker holds it and `blocking` is False."""
        if self.lock_fd is not None:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                return False
        return True

    def unlock(self):
        if self.lock_fd is not None:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def close(self):
        """Leave the shared segments; the last worker to leave unlinks them."""
        if self.lock_fd is None:
            return
        self.lock(blocking=True)
        try:
            self.header[self._USERS] -= 1
            if self.header[self._USERS] == 0:
                segments.unlink_prefixed(self.prefix)
        finally:
            os.close(self.lock_fd)         # and with it the lock
            self.lock_fd = None
            for name in self.tracked:
                segments.untrack(name)


class _StepClock:
    """The step hook of one optimizer over a worker's replicas (see
    fastad.optim.optimizers.set_step_hooks): it counts the optimizer's steps for its session,
    and syncs when one is due."""

    def __init__(self, session):
        self.session = session
        self.steps = 0
        self.ticked_at = time.monotonic()

    def __call__(self, optimizer, steps):
        optimizer.apply_update()
        now = time.monotonic()
        seconds, self.ticked_at = now - self.ticked_at, now
        self.steps += steps
        self.session.sync_if_due()
        return self.session.steps_to_next_check(steps, seconds)


class _Session:
    """The replicas of one worker of `run` and its exchanges with the shards."""

    def __init__(self, sync_every, sync_seconds, sync_timeout, node_prefix, rank=0, run_id=""):
        self.rank, self.run_id = rank, run_id
        # block id -> {key: the partition (shard) of it this worker's bucket holds, None
        # between buckets}, while a pass of `buckets` is on: syncs touch only those
        self.partitioned = {}
        self.passes = {}         # block id -> passes of `buckets` begun
        self.home = _Replicas(node_prefix)
        self.id = self.home.writer       # this worker (or its node) as a writer of rows, to the shards
        self.seen_syncs = self.home.syncs   # the node's sync rounds when this worker last looked
        self.others = True               # whether another writer pushed lately, at the last round
        self.round_others = False        # ... at the shards of the round in flight answered so far
        self.adaptive = sync_every is None
        self.sync_every = _FIRST_SYNC_STEPS if self.adaptive else sync_every   # the interval
        self.sync_seconds = sync_seconds
        self.sync_timeout = sync_timeout
        self.replicas = {}       # (block id, table name) -> _Replica
        # The _ShardCalls of the sync round in flight. Asking a Future whether it is done
        # takes a microsecond; ray.wait(timeout=0) on an answer not yet here took about 200.
        self.pending = []
        self.clocks = []         # a _StepClock per optimizer over the replicas
        self.reported = 0        # examples counted by fa.hogwild.report
        self.node = _ray().get_runtime_context().get_node_id()
        self.shard_memory = {}   # (block id, shard) -> its _ShardMemory on this node, or None
        self.next_sync = self.sync_every
        self.synced_at = time.monotonic()
        self.synced_steps = 0    # progress() at the last sync
        self.min_gap = _MIN_SYNC_SECONDS if self.adaptive else 0.0   # seconds between syncs
        self.sync_cost = None    # processor seconds a sync takes here, averaged over the last few

    def progress(self):
        """Examples done: the most steps of any one optimizer, or the reported count if larger."""
        return max([self.reported] + [clock.steps for clock in self.clocks])

    def step_clock_for(self, optimizer):
        """The step hook of `optimizer`, made in this worker (installed with set_step_hooks): a
        new clock when one of its Parameters is a replica, else None."""
        if not any(isinstance(p.shared, DistributedArray) for p in optimizer.params):
            return None
        clock = _StepClock(self)
        self.clocks.append(clock)
        return clock

    def count(self, n):
        self.reported += n
        self.sync_if_due()

    def sync_if_due(self):
        """Sync when the interval's examples (and the least time between syncs) or
        `sync_seconds` have passed since the last sync; else merge the last sync's answer if
        it has arrived."""
        since = time.monotonic() - self.synced_at
        progress = self.progress()
        if (progress >= self.next_sync and (since >= self.min_gap
                                            or progress - self.synced_steps >= _MAX_SYNC_STEPS)
                or since >= self.sync_seconds):
            self.sync(wait=False)
        elif self.pending and all(call.done() for call in self.pending):
            self._finish_round()

    def steps_to_next_check(self, steps, seconds):
        """Steps until a step clock should call again, after `steps` steps in `seconds`: at the
        next sync by count (or, when that is due but the least time between syncs has not
        passed, when it will have), or sooner, to merge an answer (an eighth of the interval)
        or to meet sync_seconds (at half the time left at the last step rate, and at most
        twice as many steps as last time, so that a worker whose steps slow down checks again
        in time)."""
        since = time.monotonic() - self.synced_at
        by_count = self.next_sync - self.progress()
        if by_count <= 0:
            by_count = min(int(steps * (self.min_gap - since) / seconds) if seconds > 0 else 1,
                           self.synced_steps + _MAX_SYNC_STEPS - self.progress())
        if self.pending:
            by_count = min(by_count, -(-self.sync_every // 8))
        by_time = int(steps * (self.sync_seconds - since) / (2 * seconds)) if seconds > 0 else by_count
        return max(1, min(by_count, by_time, 2 * steps))

    def state_replica(self, handle, key, fill):
        name = f"{handle.key}/{key}"
        if (handle._block.id, name) not in self.replicas:
            filled = array_handles.state_fill(key, handle.shape, handle.dtype, fill)
            block = handle._block
            bounds = block.bounds[handle.key]
            if np.ndim(fill) == 0:
                parts = [np.asarray(fill, handle.dtype)] * len(block.shards)
            else:
                rows = as_rows(filled)
                parts = [np.ascontiguousarray(rows[bounds[s]:bounds[s + 1]])
                         for s in range(len(block.shards))]
            self._wait([block.start(s, "create_state", name, handle.key, parts[s])
                        for s in range(len(block.shards))])
        return self.replica(handle, name)

    def replica(self, handle, name=None):
        """The replica of `handle`'s array (or of its state table `name`), opened on first use."""
        name = handle.key if name is None else name
        block = handle._block
        replica = self.replicas.get((block.id, name))
        if replica is None:
            replica = _Replica(block, handle.key, name, handle.shape, handle.dtype)
            partitioned = handle.key in block.partitioned

            def pull(memory):
                replica.bind(memory)
                replica.since[...] = -1
                if partitioned:            # its buckets' syncs pull each partition
                    return
                self.replicas[(block.id, name)] = replica
                pending, _ = self._send({(block.id, s): {name: replica.request(s)}
                                         for s in range(len(block.shards))}, {block.id: block})
                self._merge(pending)

            replica.bind(self.home.table(block.id, name, replica.nbytes(), pull,
                                         reserve=not partitioned),
                         private=self.home.prefix is None)
            self.replicas[(block.id, name)] = replica
        return replica

    def sync(self, wait):
        """Merge the previous round's answers, push changed rows, ask for fresh ones. Unless
        `wait`, a worker whose node's replicas another worker is syncing, or has synced since
        this one last looked, counts that round as its own instead."""
        started = time.thread_time()
        if self.pending:
            self._finish_round()
        if not self.home.lock(blocking=wait):
            self._count_as_synced()
            return
        if not wait and self.home.syncs != self.seen_syncs:
            self.home.unlock()
            self._count_as_synced()
            return
        self.seen_syncs = self.home.count_sync()
        requests = {}            # (block id, shard) -> {table: request}
        blocks = {}
        changed_fraction = 0.0   # the largest share of a table's rows changed since the last sync
        for replica in self.replicas.values():
            blocks[replica.block.id] = replica.block
            for s in self._shards_to_sync(replica):
                requests.setdefault((replica.block.id, s), {})[replica.name] = replica.request(s)
            changed_fraction = max(changed_fraction, replica.changed_rows / max(len(replica.rows), 1))
            replica.changed_rows = 0
        self.pending, self.round_others = self._send(requests, blocks)
        if wait or not self.pending:
            self._finish_round()
        progress = self.progress()
        if self.adaptive and progress > self.synced_steps:
            self.sync_every = _next_interval(progress - self.synced_steps, changed_fraction,
                                             alone=not self.others)
        if self.adaptive:
            cost = time.thread_time() - started
            self.sync_cost = cost if self.sync_cost is None else (self.sync_cost + cost) / 2
            self.min_gap = max(_MIN_SYNC_SECONDS, _SYNC_COST_SHARE * self.sync_cost)
        self._count_as_synced()

    def _shards_to_sync(self, replica):
        """The shards whose rows of `replica` a sync exchanges: every shard, or while a pass
        of `buckets` holds its table's axis, the partition its bucket holds (or none). A
        table `share` partitioned syncs in buckets only."""
        held = self.partitioned.get(replica.block.id, {})
        key = replica.name.split("/")[0]
        if key in held:
            return () if held[key] is None else (held[key],)
        return () if key in replica.block.partitioned else range(len(replica.block.shards))

    def buckets(self, shared, axes):
        """`buckets`, in this worker."""
        block = shared._block
        if block.id in self.partitioned:
            raise RuntimeError("buckets: a pass over this share's buckets is already going on "
                               "in this worker; finish it first")
        keys = [key for axis in axes for key in axis]
        self.passes[block.id] = index = self.passes.get(block.id, 0) + 1
        ray = _ray()
        scheduler = _remote(_BucketScheduler).options(
            name=f"fastad-{self.run_id}-{block.id}-buckets-{index}", get_if_exists=True,
            lifetime="detached",            # not with the worker that made it: `run` ends it
            num_cpus=0).remote([len(block.shards)] * len(axes))
        self.partitioned[block.id] = dict.fromkeys(keys)
        done = False
        try:
            while True:
                bucket = ray.get(scheduler.acquire.remote(self.rank, done), timeout=self.sync_timeout)
                done = False
                if bucket is None:
                    return
                if bucket == ():
                    time.sleep(0.002)
                    continue
                self.partitioned[block.id] = {key: part for part, axis in zip(bucket, axes)
                                              for key in axis}
                self.sync(wait=True)           # pull the bucket's partitions
                yield bucket
                self.sync(wait=True)           # push them
                self._release(block)
                self.partitioned[block.id] = dict.fromkeys(keys)
                done = True
        finally:
            if not done:                       # left mid-bucket: to do again
                scheduler.acquire.remote(self.rank, False)
            del self.partitioned[block.id]

    def _release(self, block):
        """Give back the memory of the rows of the tables `share` partitioned that this
        worker's bucket held (pushed)."""
        held = self.partitioned[block.id]
        for (block_id, name), replica in self.replicas.items():
            key = name.split("/")[0]
            if block_id == block.id and key in block.partitioned and held.get(key) is not None:
                replica.release(held[key])

    def _count_as_synced(self):
        """Start the next interval now."""
        progress = self.progress()
        self.synced_at = time.monotonic()
        self.synced_steps = progress
        self.next_sync = progress + self.sync_every

    def _send(self, requests, blocks):
        """Send `requests` ({(block id, shard): {table: request}}): to a shard on this node
        directly, merging its answer at once, to the others by a Ray call. Returns the calls
        in flight (`_ShardCall`s), and whether a shard that answered has seen another writer
        lately."""
        pending, others = [], False
        for (block_id, s), tables in requests.items():
            block = blocks[block_id]
            memory = self._shard_memory(block, s)
            if memory is None:
                pending.append(block.start(s, "sync", self.id, tables))
                continue
            with memory.locked():
                for name in tables:
                    replica = self.replicas[(block_id, name)]
                    lo, hi = replica.bounds[s], replica.bounds[s + 1]
                    memory.table(name, hi - lo, replica.rows.shape[1], replica.dtype)
                token, clock, answer, shard_others = memory.sync(self.id, tables)
                if answer is None:
                    token, clock, answer, shard_others = memory.sync(self.id,
                                                                     self._seeds(block_id, s, tables))
                others |= shard_others
                for name, (rows, values) in answer.items():
                    self.replicas[(block_id, name)].merge(s, token, clock, rows, values)
                save = (block.checkpoint_every is not None
                        and memory.saved_seconds_ago() >= block.checkpoint_every)
                if save:
                    memory.mark_saved()
            if save:
                block.shards[s].checkpoint.remote()
        return pending, others

    def _seeds(self, block_id, s, tables):
        """Shard s, started again, asked for a seed instead of applying `tables` (the
        requests it got): take the pushes back, and offer it the replicas' rows."""
        seeds = {}
        for name, (_, _, ids, deltas) in tables.items():
            replica = self.replicas[(block_id, name)]
            replica.unpush(s, ids, deltas)
            seeds[name] = replica.seed(s)
        return seeds

    def _shard_memory(self, block, s):
        """The memory of shard s of `block` when it runs on this node, attached on first use;
        None when it runs elsewhere. When the shard's actor has died, asks the restarted one
        where it runs (waiting for it, as a Ray call would)."""
        key = (block.id, s)
        memory = self.shard_memory.get(key)
        if memory is not None and memory.alive():
            return memory
        if memory is not None:
            del self.shard_memory[key]
            memory.close()
            place = self._wait([block.start(s, "place")])[0]
        elif key in self.shard_memory:
            return None
        else:
            place = block.places[s]
        node, prefix, pid = place
        memory = None
        if node == self.node:
            with contextlib.suppress(FileNotFoundError):        # it died again: Ray calls reach it
                memory = _ShardMemory.attach(prefix, pid)
        self.shard_memory[key] = memory
        return memory

    def _merge(self, pending):
        """Wait for the answers of the calls `pending` and merge them; whether a shard has
        seen another writer lately."""
        others = False
        for call, (token, clock, answer, shard_others) in zip(pending, self._wait(pending)):
            if answer is None:
                seeds = self._seeds(call.block.id, call.shard, call.args[1])
                token, clock, answer, shard_others = self._wait(
                    [call.block.start(call.shard, "sync", self.id, seeds)])[0]
            others |= shard_others
            for name, (rows, values) in answer.items():
                self.replicas[(call.block.id, name)].merge(call.shard, token, clock, rows, values)
        return others

    def _finish_round(self):
        """Merge the answers of the round in flight and release the sync lock."""
        pending, self.pending = self.pending, []
        try:
            self.others = self._merge(pending) or self.round_others
        finally:
            self.home.unlock()

    def _wait(self, calls):
        return _results(calls, self.sync_timeout, "sync_timeout")

    def close(self):
        """Leave the node's replicas and the shards' memory."""
        self.home.close()
        for memory in self.shard_memory.values():
            if memory is not None:
                memory.close()


_session = None     # in a worker of `run`: its _Session


def sync():
    """In a worker of `run`: exchange rows with the shards now and wait for the answer.

    Pushes every row this worker changed since its last sync point and merges
    every row the shards changed since then. Outside a worker it does nothing,
    so the same function runs unchanged under `fa.hogwild.run`.

    Example::

        for epoch in range(epochs):
            ...                        # train on the replica
            fa.distributed.sync()      # everyone's updates so far, before the next epoch
    """
    if _session is not None:
        _session.sync(wait=True)


def buckets(shared, axes):
    """In a worker of `run`: one pass over the buckets of `shared`'s partitions, each handed
    to one worker at a time, so that no two workers train rows of one partition at once.

    The partitions of a table are its shards' blocks of rows. `axes` lists the
    tables of each axis of a bucket, e.g. `[["U"], ["V"]]` for BPR: a bucket
    `(i, j)` is then partition i of U and partition j of V, and the pass hands
    out every (i, j) once, to the workers of the run, each bucket to a worker
    whose other partitions are not held by anyone (PyTorch-BigGraph's scheme).
    The tables of one axis have the same number of rows (their partitions are
    the same ids). Iterating yields a bucket after pulling its partitions (and
    their optimizer state) and pushes them when the worker asks for the next;
    in between, syncs touch only the bucket's partitions and the tables that
    are on no axis (the small ones every worker shares). A worker trains, in
    each bucket, the examples whose ids fall in its partitions: see
    `fa.data.partition_triples`. A worker that stops mid-bucket (an error, or
    a `break`) gives the bucket back to be done again.

    Example::

        def worker(rank, shared, parts):       # parts = fa.data.partition_triples(...)
            model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
            loss, feeds = model.example_graph()
            opt = fa.optim.SGD(model.parameters(), lr=0.05)
            for bucket in fa.distributed.buckets(shared, [["U"], ["V"]]):
                fa.train(loss, opt, feeds(parts[bucket]), shuffle=True)
    """
    if _session is None:
        raise RuntimeError("buckets: only inside a worker of fastad.distributed.run")
    if not isinstance(shared, DistributedArrays):
        raise TypeError(f"buckets: shared must be a fastad.distributed.share(...), got "
                        f"{type(shared).__name__}")
    if (not isinstance(axes, (list, tuple)) or not axes
            or not all(isinstance(axis, (list, tuple)) and axis for axis in axes)):
        raise TypeError(f"buckets: axes must be a non-empty list of non-empty lists of table "
                        f"names, e.g. [['U'], ['V']], got {axes!r}")
    keys = [key for axis in axes for key in axis]
    unknown = [key for key in keys if key not in shared]
    if unknown:
        raise KeyError(f"buckets: axes name {unknown}, which the share does not hold (it holds "
                       f"{sorted(shared)})")
    if len(set(keys)) != len(keys):
        raise ValueError(f"buckets: a table is on two axes in {axes!r}")
    for axis in axes:
        rows = {key: shared[key].shape[0] if shared[key].shape else 1 for key in axis}
        if len(set(rows.values())) > 1:
            raise ValueError(f"buckets: the tables of one axis must have as many rows (their "
                             f"partitions are the same ids), got {rows}")
    return _session.buckets(shared, [list(axis) for axis in axes])


def _run_rank(rank, payload, sync_every, sync_seconds, sync_timeout, node_prefix, version,
              run_id=""):
    """One rank of `run`, as a Ray task: ("ok", result) or ("error", message, traceback)."""
    global _session
    try:
        _check_version(f"distributed worker {rank}", version)
    except RuntimeError as exc:
        return pool.raised(exc)
    fn, args = payload
    _session = session = _Session(sync_every, sync_seconds, sync_timeout, node_prefix, rank, run_id)
    pool.set_report_listener(session.count)
    set_step_hooks(session.step_clock_for)
    try:
        result = fn(rank, *args)
        session.sync(wait=True)
        return "ok", result
    except BaseException as exc:
        return pool.raised(exc)
    finally:
        _session = None
        pool.set_report_listener(None)
        set_step_hooks(None)
        session.close()


def _first_line(exc):
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def run(fn, workers=1, args=(), address=None, sync_every=None, sync_seconds=1.0,
        sync_timeout=60.0, timeout=None, max_restarts=0, node_replicas=True):
    """Call `fn(rank, *args)` in `workers` Ray worker processes; return the results in rank order.

    `rank` runs from 0 to workers - 1; each worker is a Ray task with one CPU
    (Ray limits its BLAS/OpenMP threads to one), run in a pooled Ray worker
    process. `fn` and `args` are serialised once (cloudpickle: `fn` may be
    any function; one defined in a module must be importable on every node)
    and reach every worker; numpy arrays in them arrive read-only.
    `DistributedArrays` from `share`
    in `args` give each worker replicas that sync with the shards by
    themselves (docs/guide/ray.md gives the staleness bound).

    sync_every    None (the default): a worker syncs by the work it has done,
                  once it has changed about three quarters of the rows of a
                  table it trains, spending at most about a thirtieth of its time
                  on syncs (docs/guide/ray.md). An int >= 1: after this
                  many steps of a fastad optimizer over its replicas
                  (examples, for per-example training) or examples counted by
                  `fa.hogwild.report`.
    sync_seconds  ... or after this many seconds, whichever comes first (for
                  slow steps); also on `fastad.distributed.sync()` and when
                  `fn` returns.
    address       as in `share` (None: a local Ray instance with every CPU;
                  an address where nothing answers fails within 10 s).
    sync_timeout  seconds a worker waits for a shard's answer before failing.
    timeout       seconds the whole run may take (None: no limit); past it the
                  workers are stopped and TimeoutError names the unfinished ranks.
    max_restarts  how many times a rank whose process died is started again
                  from the beginning of `fn` (0: report it).
    node_replicas True (the default): the workers on one node train one
                  replica of each table in that node's shared memory (Hogwild
                  within the node), which one of them at a time syncs with the
                  shards. False: each worker trains a replica of its own.

    A worker that raises stops the run with `WorkerError` (rank, traceback);
    so does a worker whose process died past its restarts. The other workers
    are always stopped before `run` returns or raises.

    Example::

        def train(rank, shared, n):          # the same function works with fa.hogwild.run
            w = fa.Parameter(shared["w"])
            ...
            return rank

        with fa.distributed.share({"w": np.zeros(8)}) as shared:
            assert fa.distributed.run(train, workers=2, args=(shared, 1000)) == [0, 1]
    """
    workers = check_int("run", "workers", workers, minimum=1)
    if sync_every is not None:
        sync_every = check_int("run", "sync_every", sync_every, minimum=1)
    check_number("run", "sync_seconds", sync_seconds, above=0)
    check_number("run", "sync_timeout", sync_timeout, above=0)
    if timeout is not None:
        check_number("run", "timeout", timeout, above=0)
    max_restarts = check_int("run", "max_restarts", max_restarts, minimum=0)
    if not isinstance(node_replicas, bool):
        raise TypeError(f"run: node_replicas must be True or False, got {node_replicas!r}")
    if not callable(fn):
        raise TypeError(f"run: fn must be callable, got {type(fn).__name__}")
    args = tuple(args)
    if any(isinstance(arg, array_handles.SharedArrays) for arg in args):
        raise TypeError("run: args hold a fastad.hogwild share, which lives in this machine's "
                        "shared memory; give distributed workers a fastad.distributed.share(...)")
    shares = [arg for arg in args if isinstance(arg, DistributedArrays)]
    if any(shared._block.closed for shared in shares):
        raise RuntimeError("run: args hold a DistributedArrays whose share() block has ended")
    ray = _connect(address)
    job = ray.get_runtime_context().get_job_id()
    for shared in shares:
        if shared._block.job != job:
            raise ValueError(f"run: args hold a DistributedArrays made by share() in another Ray "
                             f"session (job {shared._block.job}; this one is job {job}): its "
                             f"shards are gone with that session; call share() again")
    cpus = ray.cluster_resources().get("CPU", 0)
    if workers > cpus:
        raise ValueError(f"run: {workers} workers need one CPU each but the Ray cluster has "
                         f"{cpus:g}; use workers <= {int(cpus)} or add nodes")
    payload = ray.put((fn, args))
    task = _remote(_run_rank).options(num_cpus=1, max_retries=0)
    died = (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
            ray.exceptions.OutOfMemoryError)
    deadline = None if timeout is None else time.monotonic() + timeout
    running = {}
    restarts = [0] * workers
    # The prefix of the segments the workers on a node share. On a node without this process
    # the pid in it means nothing: the last worker there to leave unlinks them (or the
    # resource tracker of a worker that dies).
    shared_segments = segments.Block()
    run_id = secrets.token_hex(6)        # in the names of the run's bucket schedulers

    def start(rank):
        running[task.remote(rank, payload, sync_every, sync_seconds, sync_timeout,
                            shared_segments.prefix if node_replicas else None, _version(),
                            run_id)] = rank

    results = [None] * workers
    try:
        for rank in range(workers):
            start(rank)
        while running:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"run: workers {sorted(running.values())} were still running "
                                   f"after timeout={timeout} s; every worker was stopped")
            ready, _ = ray.wait(list(running), num_returns=1, timeout=left)
            for ref in ready:
                rank = running.pop(ref)
                try:
                    outcome = ray.get(ref)
                except died as exc:
                    if restarts[rank] < max_restarts:
                        restarts[rank] += 1
                        start(rank)
                        continue
                    raise WorkerError(rank, f"distributed worker {rank} died before returning a "
                                            f"result ({_first_line(exc)}; restarts used: "
                                            f"{restarts[rank]} of {max_restarts}); the other "
                                            f"workers were stopped\n\n{exc}") from None
                except ray.exceptions.RayError as exc:
                    raise WorkerError(rank, f"distributed worker {rank} failed: {exc}") from None
                results[rank] = pool.worker_result("distributed worker", rank, outcome)
        return results
    finally:
        for ref in running:
            ray.cancel(ref, force=True)
        # A stopped worker had no time to leave its node's segments: once its process is
        # gone, unlink them (those of this node; elsewhere its resource tracker unlinks them).
        ray.wait(list(running), num_returns=len(running), timeout=10)
        shared_segments.free()
        for name in ray.util.list_named_actors():
            if name.startswith(f"fastad-{run_id}-"):
                with contextlib.suppress(ValueError):
                    ray.kill(ray.get_actor(name))
