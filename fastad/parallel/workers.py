"""The workers of a Hogwild run: `run` calls a function in N processes or threads at once
and returns their results, or raises `WorkerError` for the first that failed.

Each process worker pins BLAS/OpenMP to one thread, dies with its parent, and
reports examples with `report(n)` into a per-rank slot of a segment of the run
(`run`'s `progress` reads them). The run's segments belong to a `segments.Block`
that `run` frees when it ends, whatever happened. `run(..., mode="synchronized")`
runs the worker's function through `lockstep.call`, so that its optimizers step
in lockstep.
"""
import ctypes
import multiprocessing
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Mapping
from contextlib import contextmanager, nullcontext, suppress
from multiprocessing import connection
from multiprocessing.reduction import ForkingPickler

import numpy as np

from fastad.checks import check_choice
from fastad.parallel import lockstep, segments
from fastad.parallel.arrays import InProcessArray
from fastad.progress import ProgressRate

__all__ = ["run", "report", "train_progress", "set_report_listener", "WorkerError",
           "worker_result", "raised", "start_methods", "max_workers"]

_THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_COUNTER_STRIDE = 8        # int64 slots between two ranks' counters: one 64-byte cache line each
_PROGRESS, _TAG = 0, 1     # a rank's slots of a run's "ranks" segment: its progress count, its sync tag
_TERMINATE_GRACE_S = 5.0   # after SIGTERM, how long a worker may take before SIGKILL
_MODES = ["hogwild", "synchronized"]


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
_report_listener = None   # the runner's listener of report(n) counts (set_report_listener)
_thread_worker = threading.local()   # in a worker thread (start_method="threads"): .counter


def report(n=1):
    """Add `n` examples to this worker's progress count (read by `run`'s `progress`).

    A plain store into a per-rank shared int64, no lock: cheap, but call it per
    batch of examples rather than per example. Outside a worker, or when `run`
    was given no `progress`, it does nothing, so the same training function runs
    unchanged in a single process. In a `fa.distributed.run` worker the
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
    if _report_listener is not None:
        _report_listener(n)


def set_report_listener(listener):
    """Install (or, with None, remove) the listener of this process's `report(n)` counts:
    the runner of a worker that paces itself by the examples done
    (fastad.parallel.distributed syncs a worker's replicas by them) has `listener(n)`
    called on every `report(n)`, after the count of `run`'s progress."""
    global _report_listener
    if listener is not None and not callable(listener):
        raise TypeError(f"set_report_listener: expected a callable listener(n) or None, "
                        f"got {type(listener).__name__}")
    _report_listener = listener


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
    global _counter
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # the parent handles Ctrl-C and stops us
    _die_with_parent(parent_pid)
    if fork:
        _limit_threads_to_one()
    ranks = np.frombuffer(segments.attach_segment(prefix + "ranks"), np.int64).reshape(-1, _COUNTER_STRIDE)
    _counter = ranks[rank, _PROGRESS:_PROGRESS + 1] if counting else None
    try:
        fn, args = payload if fork else pickle.loads(payload)
        message = ("ok", fn(rank, *args) if sync is None
                   else lockstep.call(fn, rank, args, prefix, ranks[:, _TAG], *sync))
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
        with suppress(ValueError):
            return f"was killed by signal {signal.Signals(-exitcode).name} (exit code {exitcode})"
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
    waiting = {obj: rank for rank in range(workers) for obj in (conns[rank], processes[rank].sentinel)}
    rate = ProgressRate(progress)
    while not all(done):
        timeout = progress_interval if progress is not None else None
        for ready in connection.wait(list(waiting), timeout):
            rank = waiting.pop(ready, None)
            if rank is None or done[rank]:
                continue                # already handled with its pair
            ended = ready is processes[rank].sentinel
            if ended:
                processes[rank].join()
            if not ended or conns[rank].poll():
                with suppress(EOFError):    # it died before sending: its sentinel reports the exit
                    results[rank] = worker_result("hogwild worker", rank, conns[rank].recv())
                    done[rank] = True
            if ended and not done[rank]:
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
    every step of an optimizer made in a worker (`opt.step()`, `sync_step(opt)`,
    and the steps of `fa.train` and so of every model's `fit`) a lockstep step:
    the workers' gradients are summed (reduce="sum") or averaged (reduce="mean",
    the default) across workers, in rank order, and one identical update is
    applied, so a seeded run gives the same Parameters every time, equal (up to
    rounding) to one process training on the workers' minibatches combined
    (`fa.train` then keeps every step's gradients: no row is updated inside
    backward). Every worker must then take the same number of steps, of one
    optimizer; a worker that fails stops the run as above, and no worker is left
    waiting for it.

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
    check_choice("run", "reduce", reduce, lockstep.REDUCTIONS)
    args = tuple(args)
    if start_method == "threads":
        if mode != "hogwild":
            raise ValueError("run: mode='synchronized' runs its workers as processes; use "
                             "start_method='spawn' or 'fork' with it")
        return _run_threads(fn, workers, args, progress, progress_interval)
    segments.require_shm_dir()
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
    block = segments.Block()   # the run's segments: the ranks' slots, the synchronized workers' gradients
    sync = (context.Barrier(workers), workers, reduce) if mode == "synchronized" else None
    processes, conns = [], []
    finished = False
    try:
        ranks = segments.view(block.create(block.prefix + "ranks", 8 * _COUNTER_STRIDE * workers),
                      (workers, _COUNTER_STRIDE), np.int64)
        for rank in range(workers):
            receiver, sender = context.Pipe(duplex=False)
            conns.append(receiver)
            process = context.Process(
                target=_worker_main, name=f"fastad-hogwild-{rank}", daemon=True,
                args=(rank, payload, block.prefix, progress is not None, sender, os.getpid(), fork, sync))
            with nullcontext() if fork else _single_thread_env():
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
