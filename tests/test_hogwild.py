import fcntl
import gc
import os
import pickle
import secrets
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import fastad as fa
from fastad import distributed, hogwild
from fastad.parallel import segments
from fastad.parallel import WorkerError
from fastad.parallel.workers import _THREAD_ENV, set_report_listener

import hogwild_workers as jobs

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs /dev/shm (Linux)")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))


def segments_of(pid):
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"fastad_{pid}_"))


def process_gone(pid):
    """True once `pid` has exited (a zombie waiting for a reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def run_script(body, **popen):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, TESTS]))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(body)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


# ---------------------------------------------------------------- share()

def test_share_copies_float_arrays_into_named_segments():
    f64 = np.arange(12.0).reshape(3, 4)
    strided = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    fortran = np.asfortranarray(np.arange(6.0).reshape(2, 3))
    with hogwild.share({"a": f64, "s": strided, "f": fortran}) as shared:
        assert sorted(shared) == ["a", "f", "s"] and len(shared) == 3
        for key, source in [("a", f64), ("s", strided), ("f", fortran)]:
            view = shared[key].numpy()
            np.testing.assert_array_equal(view, source)
            assert view.dtype == source.dtype and view.shape == source.shape
            assert view.flags.c_contiguous and view.flags.writeable
            assert not np.shares_memory(view, source)
            assert shared[key].numpy() is view
            assert shared[key].segment.startswith(f"fastad_{os.getpid()}_")
        assert len(segments_of(os.getpid())) == 3
        f64[0, 0] = 99.0                       # the segment is a copy, not the caller's array
        assert shared["a"].numpy()[0, 0] == 0.0
    assert segments_of(os.getpid()) == []


def test_share_zero_dim_and_empty_arrays():
    with hogwild.share({"s": np.array(2.5), "e": np.zeros((0, 3), np.float32)}) as shared:
        assert shared["s"].numpy().shape == () and shared["s"].numpy()[()] == 2.5
        assert shared["e"].numpy().shape == (0, 3)
        assert shared["e"].state_array("m", 1.0).shape == (0, 3)


@pytest.mark.parametrize("bad", [np.arange(3), np.zeros(2, np.complex128), np.array(["x"]),
                                 np.zeros(2, np.float16), [1, 2]])
def test_share_rejects_non_float_arrays(bad):
    with pytest.raises(TypeError, match="'w' has dtype .* expected float32 or float64"):
        hogwild.share({"w": bad})


def test_share_rejects_bad_containers():
    with pytest.raises(TypeError, match="dict of name -> array"):
        hogwild.share([np.zeros(2)])
    with pytest.raises(TypeError, match="names must be str"):
        hogwild.share({1: np.zeros(2)})


@pytest.mark.parametrize("share", [hogwild.share, distributed.share], ids=["hogwild", "distributed"])
@pytest.mark.parametrize("arrays,match", [
    ([np.zeros(2)], "expected a dict of name -> array"),
    ({1: np.zeros(2)}, "names must be str, of 1 to 128 characters without '/', got 1"),
    ({"": np.zeros(2)}, "without '/', got ''"),
    ({"a/b": np.zeros(2)}, "without '/', got 'a/b'"),
    ({"x" * 129: np.zeros(2)}, "1 to 128 characters"),
    ({"w": np.arange(3)}, "'w' has dtype int64; expected float32 or float64"),
    ({"w": np.zeros(2, np.float16)}, "'w' has dtype float16; expected float32 or float64"),
])
def test_both_shares_take_their_arrays_by_one_rule(share, arrays, match):
    """fa.hogwild.share and fa.distributed.share check names and arrays alike."""
    with pytest.raises(TypeError, match=match):
        share(arrays)


def test_a_name_of_128_characters_is_shared():
    with hogwild.share({"x" * 128: np.ones(2)}) as shared:
        np.testing.assert_array_equal(shared["x" * 128].numpy(), [1.0, 1.0])


def test_shared_and_in_process_arrays_are_two_kinds_of_one_handle():
    """An InProcessArray shares nothing, so it is no SharedArray; both are ArrayHandles,
    which Parameters adopt without a copy."""
    w = np.zeros(3)
    with hogwild.share({"w": w}) as shared:
        in_process = hogwild.InProcessArrays({"w": w})["w"]
        assert isinstance(shared["w"], hogwild.ArrayHandle) and isinstance(in_process, hogwild.ArrayHandle)
        assert not isinstance(in_process, hogwild.SharedArray)
        assert np.shares_memory(fa.Parameter(in_process).value, w)
        assert np.shares_memory(fa.Parameter(shared["w"]).value, shared["w"].numpy())


def test_share_that_fails_halfway_frees_what_it_made(monkeypatch):
    made = []

    def create_then_fail(name, nbytes):
        if made:
            raise OSError(28, "No space left on device")
        made.append(name)
        return real_create(name, nbytes)

    real_create = segments.create_segment
    monkeypatch.setattr(segments, "create_segment", create_then_fail)
    with pytest.raises(OSError, match="No space left"):
        hogwild.share({"a": np.zeros(2), "b": np.zeros(2)})
    assert len(made) == 1 and segments_of(os.getpid()) == []


def test_a_lockable_segment_unlinked_before_its_lock_opens_is_made_again(monkeypatch):
    """attach_or_create_lockable: a segment unlinked between its making and the opening of its
    lock (a dead worker's resource tracker unlinking a node's header) is made again; the
    mapping and the lock's descriptor are of one file, and closing the descriptor releases its
    lock while the mapping lives."""
    name = f"fastad_{os.getpid()}_0_{secrets.token_hex(4)}_node"
    unlinked = []
    real_open = segments.lock_descriptor

    def unlink_then_open(segment):
        if not unlinked:
            unlinked.append(segment)
            os.unlink(os.path.join("/dev/shm", segment))
        return real_open(segment)

    monkeypatch.setattr(segments, "lock_descriptor", unlink_then_open)
    fills = []
    mapping, fd = segments.attach_or_create_lockable(name, 8, lambda m: fills.append(m.write(b"made 1st")))
    try:
        assert unlinked == [name] and len(fills) == 2            # made, unlinked, made again
        mapping[:8] = b"the same"
        assert os.pread(fd, 8, 0) == b"the same"
        assert os.fstat(fd).st_ino == os.stat(os.path.join("/dev/shm", name)).st_ino
        other = real_open(name)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)                                # the lock goes with it, the mapping stays
        fd = None
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(other)
        assert bytes(mapping[:8]) == b"the same"
    finally:
        mapping.close()
        if fd is not None:
            os.close(fd)
        os.unlink(os.path.join("/dev/shm", name))


def test_missing_name_lists_the_shared_names():
    with hogwild.share({"U": np.zeros(2)}) as shared:
        with pytest.raises(KeyError, match=r"'V'.*\['U'\]"):
            shared["V"]


def test_parameter_adopts_the_segment_without_copy():
    with hogwild.share({"w": np.ones((2, 3), np.float32)}) as shared:
        p = fa.Parameter(shared["w"])
        assert p.shared is shared["w"]
        assert np.shares_memory(p.value, shared["w"].numpy())
        p.value[0, 0] = 7.0
        assert shared["w"].numpy()[0, 0] == 7.0
        with pytest.raises(TypeError, match="float32, not float64"):
            fa.Parameter(shared["w"], dtype=np.float64)


def test_pickled_handle_carries_only_the_name():
    with hogwild.share({"big": np.zeros(1_000_000)}) as shared:
        blob = pickle.dumps(shared["big"])
        assert len(blob) < 300
        assert pickle.loads(blob) is shared["big"]          # one mapping per process
        again = pickle.loads(pickle.dumps(shared))
        assert again["big"] is shared["big"]
        again.close()                                      # a copy does not own the segments
        assert len(segments_of(os.getpid())) == 1
    del shared, again
    gc.collect()
    with pytest.raises(FileNotFoundError, match="block that made it has ended"):
        pickle.loads(blob)


def test_values_stay_readable_in_this_process_after_the_block():
    with hogwild.share({"w": np.arange(3.0)}) as shared:
        view = shared["w"].numpy()
    np.testing.assert_array_equal(view, [0.0, 1.0, 2.0])
    with pytest.raises(RuntimeError, match="block of this array has ended"):
        shared["w"].state_array("m", 0.0)


def test_close_is_idempotent_and_frees_without_with():
    shared = hogwild.share({"w": np.zeros(2)})
    assert len(segments_of(os.getpid())) == 1
    shared.close()
    shared.close()
    assert segments_of(os.getpid()) == []


def test_share_sweeps_segments_of_dead_owners_only():
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    namespace = segments._PID_NAMESPACE
    stale = f"/dev/shm/fastad_{dead.pid}_{namespace}_deadbeef_0"
    alive = f"/dev/shm/fastad_{os.getpid()}_{namespace}_notstale_0"
    elsewhere = f"/dev/shm/fastad_{dead.pid}_1{namespace}_otherns_0"   # pid means nothing here
    for path in (stale, alive, elsewhere):
        with open(path, "wb") as f:
            f.write(b"x")
    try:
        with hogwild.share({"w": np.zeros(1)}):
            assert not os.path.exists(stale)
            assert os.path.exists(alive) and os.path.exists(elsewhere)
    finally:
        for path in (stale, alive, elsewhere):
            if os.path.exists(path):
                os.unlink(path)


def test_a_sweep_waiting_for_a_tag_sweeps_once_its_owners_have_exited():
    """fa.distributed stops a worker and sweeps its segments; the worker may still be exiting,
    and its resource tracker may go with it, so the sweep waits for the owners of its tag."""
    tag = "5eed" + secrets.token_hex(2)
    code = textwrap.dedent(f"""
        import os, time
        from fastad.parallel import segments
        block = segments.Block("{tag}")
        segments.create_segment(block.prefix + "0", 8)      # untracked: as if its tracker died
        print(block.prefix, flush=True)
        time.sleep(1.0)
        os._exit(0)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    path = f"/dev/shm/{child.stdout.readline().strip()}0"
    try:
        assert os.path.exists(path) and child.poll() is None
        segments.sweep_stale_segments(waiting_for=tag, timeout=60)
        assert not os.path.exists(path)
        # exiting: the group leader is a zombie (which the sweep counts as exited) while the
        # process's other threads may still be going, so waitpid may need a moment
        assert child.wait(timeout=30) == 0
    finally:
        child.wait()
        if os.path.exists(path):
            os.unlink(path)
    with pytest.raises(ValueError, match="tag must be 1 to 32 hex digits"):
        segments.Block("not_hex")


# ------------------------------------------------------------ state_array

def test_state_array_is_filled_once_and_kept():
    with hogwild.share({"w": np.zeros((2, 2), np.float32)}) as shared:
        state = shared["w"].state_array("adagrad_sum", 0.25)
        assert state.shape == (2, 2) and state.dtype == np.float32
        np.testing.assert_array_equal(state, 0.25)
        state += 1.0
        assert shared["w"].state_array("adagrad_sum", 0.0) is state
        copy = pickle.loads(pickle.dumps(shared["w"]))
        np.testing.assert_array_equal(copy.state_array("adagrad_sum", 0.0), 1.25)
        row = shared["w"].state_array("Adam.exp_avg-2", np.array([1.0, 2.0]))
        np.testing.assert_array_equal(row, [[1.0, 2.0], [1.0, 2.0]])
        assert len(segments_of(os.getpid())) == 3


def test_state_array_rejects_bad_keys_and_fills():
    with hogwild.share({"w": np.zeros((2, 2))}) as shared:
        for key in ["", "a/b", "a~b", "a b", "x" * 65, 3]:
            with pytest.raises(ValueError, match="key must be 1 to 64"):
                shared["w"].state_array(key)
        with pytest.raises(ValueError, match=r"'m'.*shape \(2, 2\).*fill of shape \(3,\)"):
            shared["w"].state_array("m", np.zeros(3))
        assert len(segments_of(os.getpid())) == 1             # no half-made state left


def test_state_array_made_once_when_workers_race():
    import multiprocessing
    barrier = multiprocessing.get_context("fork").Barrier(4)
    keys = [f"k{i}" for i in range(20)]
    with hogwild.share({"w": np.zeros(4)}) as shared:
        hogwild.run(jobs.race_for_state, workers=4, args=(shared, barrier, keys, 0.5),
                    start_method="fork")
        for key in keys:                       # a second fill would have erased someone's +1
            np.testing.assert_array_equal(shared["w"].state_array(key, 0.0), 1.5)
        assert len(segments_of(os.getpid())) == 1 + len(keys)
    assert segments_of(os.getpid()) == []


def test_in_process_arrays_are_the_arrays_themselves_with_state_made_once_for_all_threads():
    import threading
    w = np.zeros((2, 3), np.float32)
    handles = hogwild.InProcessArrays({"w": w})
    param = fa.Parameter(handles["w"])
    assert param.value is w or np.shares_memory(param.value, w)      # adopted, not copied
    barrier, states = threading.Barrier(4), []

    def ask():
        barrier.wait()
        state = handles["w"].state_array("Adagrad.sum", 0.5)
        state[0, 0] += 1.0 if state is handles["w"].state_array("Adagrad.sum", 0.0) else 100.0
        states.append(state)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(state is states[0] for state in states)         # one array, filled once
    np.testing.assert_array_equal(states[0], [[4.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
    with pytest.raises(ValueError, match=r"'m'.*shape \(2, 3\).*fill of shape \(4,\)"):
        handles["w"].state_array("m", np.zeros(4))
    with pytest.raises(ValueError, match="key must be 1 to 64"):
        handles["w"].state_array("a/b")
    with pytest.raises(TypeError, match="threads of one process.*fa.hogwild.share"):
        pickle.dumps(handles["w"])
    handles.close()                        # frees nothing: the arrays are their owners'
    assert segments_of(os.getpid()) == [] and w.shape == (2, 3)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_processes_are_refused_in_process_arrays_they_would_train_a_copy_of(start_method):
    handles = hogwild.InProcessArrays({"w": np.zeros(3)})
    for args in [(handles,), (handles["w"],)]:
        with pytest.raises(TypeError, match=f"InProcessArray.*{start_method!r} worker would train a "
                                            f"private copy.*start_method='threads'"):
            hogwild.run(jobs.rank_and_arg, workers=2, args=args, start_method=start_method)


# ------------------------------------------------------------------ run()

def test_run_returns_results_in_rank_order_with_spawn_and_pins_threads():
    saved = {k: os.environ.get(k) for k in _THREAD_ENV}
    assert hogwild.run(jobs.rank_and_arg, workers=2, args=("x",)) == [(0, "x"), (1, "x")]
    env, pools = hogwild.run(jobs.thread_settings, workers=1)[0]
    assert env == dict.fromkeys(_THREAD_ENV, "1")
    assert pools is None or set(pools) == {1}
    assert {k: os.environ.get(k) for k in _THREAD_ENV} == saved


def test_run_with_fork_takes_any_callable_and_pins_threads():
    offset = 5
    assert hogwild.run(lambda rank: rank + offset, workers=3, start_method="fork") == [5, 6, 7]
    env, pools = hogwild.run(jobs.thread_settings, workers=1, start_method="fork")[0]
    assert env == dict.fromkeys(_THREAD_ENV, "1")
    assert pools is None or set(pools) == {1}


def test_run_rejects_bad_arguments():
    with pytest.raises(TypeError, match="pickling failed.*module level.*start_method='fork'"):
        hogwild.run(lambda rank: rank, workers=1)
    for bad in (0, -1, True, 2.0, "2"):
        with pytest.raises(ValueError, match="workers must be a positive int"):
            hogwild.run(jobs.rank_and_arg, workers=bad, args=(1,))
    with pytest.raises(ValueError, match="start_method must be one of"):
        hogwild.run(jobs.rank_and_arg, args=(1,), start_method="forkserver")
    with pytest.raises(TypeError, match="progress must be a callable"):
        hogwild.run(jobs.rank_and_arg, args=(1,), progress=5)
    with pytest.raises(ValueError, match="progress_interval must be > 0"):
        hogwild.run(jobs.rank_and_arg, args=(1,), progress=print, progress_interval=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        hogwild.run(None)


def test_worker_error_names_rank_and_traceback_and_stops_the_others():
    with hogwild.share({"pids": np.zeros(2)}) as shared:
        with pytest.raises(WorkerError) as info:
            hogwild.run(jobs.record_pid_then, workers=2, args=(shared["pids"], "raise"),
                        start_method="fork")
        pids = shared["pids"].numpy().astype(int)
    err = info.value
    assert err.rank == 1 and err.exitcode is None
    message = str(err)
    assert "worker 1 raised ValueError: worker 1 found bad data" in message
    assert "Traceback (most recent call last)" in message and "record_pid_then" in message
    assert "record_pid_then" in err.traceback
    assert all(process_gone(pid) for pid in pids)       # rank 0 was sleeping for 60 s
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.rank, copy.traceback, str(copy)) == (1, err.traceback, message)


def test_worker_error_with_spawn_too():
    with hogwild.share({"pids": np.zeros(2)}) as shared:
        with pytest.raises(WorkerError, match="worker 1 raised ValueError"):
            hogwild.run(jobs.record_pid_then, workers=2, args=(shared["pids"], "raise"))


@pytest.mark.parametrize("action, exitcode, words", [
    ("exit", 3, "exited with code 3"),
    ("exit0", 0, "exited with code 0"),
    ("sigkill", -signal.SIGKILL, "was killed by signal SIGKILL"),
])
def test_worker_that_dies_stops_the_run(action, exitcode, words):
    with hogwild.share({"pids": np.zeros(2)}) as shared:
        expected = f"worker 1 {words}.*before returning a result"
        with pytest.raises(WorkerError, match=expected) as info:
            hogwild.run(jobs.record_pid_then, workers=2, args=(shared["pids"], action),
                        start_method="fork")
        pids = shared["pids"].numpy().astype(int)
    assert (info.value.rank, info.value.exitcode) == (1, exitcode)
    assert all(process_gone(pid) for pid in pids)


def test_unpicklable_result_is_a_worker_error():
    with hogwild.share({"pids": np.zeros(2)}) as shared:
        with pytest.raises(WorkerError, match="worker 1 returned a result that could not be sent"):
            hogwild.run(jobs.record_pid_then, workers=2,
                        args=(shared["pids"], "unpicklable"), start_method="fork")


def test_shared_values_survive_a_failed_run():
    with hogwild.share({"w": np.zeros(2)}) as shared:
        with pytest.raises(WorkerError):
            hogwild.run(jobs.write_then_fail, workers=2, args=(shared,), start_method="fork")
        np.testing.assert_array_equal(shared["w"].numpy(), [10.0, 11.0])


def test_progress_sees_every_reported_example():
    calls = []
    result = hogwild.run(jobs.report_examples, workers=2, args=(50,), start_method="fork",
                         progress=lambda done, rate: calls.append((done, rate)),
                         progress_interval=0.01)
    assert result == [0, 1]
    totals = [done for done, _ in calls]
    assert totals == sorted(totals) and totals[-1] == 100
    assert all(rate >= 0 for _, rate in calls)
    hogwild.report(3)                                  # outside a worker: nothing happens


def test_a_report_listener_hears_every_report_until_removed():
    """The runner of a worker (fa.distributed's paces its syncs so) listens to report(n)."""
    heard = []
    set_report_listener(heard.append)
    try:
        hogwild.report(3)
        hogwild.report()
    finally:
        set_report_listener(None)
    hogwild.report(5)
    assert heard == [3, 1]
    with pytest.raises(TypeError, match="expected a callable listener"):
        set_report_listener(5)


def test_two_workers_fit_a_line_lock_free():
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1.0, 1.0, 400)
    ys = 2.0 * xs - 1.0
    seen = []
    with hogwild.share({"a": np.array(0.0), "b": np.array(0.0)}) as shared:
        steps = hogwild.run(jobs.sgd_line_fit, workers=2, args=(shared, xs, ys, 20, 0.05),
                            progress=lambda done, rate: seen.append(done))
        a, b = float(shared["a"].numpy()), float(shared["b"].numpy())
    assert steps == [4000, 4000] and seen[-1] == 8000
    assert abs(a - 2.0) < 1e-3 and abs(b + 1.0) < 1e-3


# -------------------------------------------------- whole processes

def test_clean_exit_leaves_no_segment_and_no_tracker_warning():
    script = run_script("""
        import numpy as np
        from fastad import hogwild
        import hogwild_workers
        with hogwild.share({"w": np.zeros(2)}) as shared:
            sums = hogwild.run(hogwild_workers.attach_everything, workers=2, args=(shared,),
                               progress=lambda done, rate: None)
            assert shared["w"].state_array("adagrad_sum", 9.0).tolist() == [1.5, 1.5]
        print(sums)
        """)
    out, err = script.communicate(timeout=60)
    assert script.returncode == 0, err
    assert err == ""                         # no resource_tracker KeyError, leak or unlink warning
    assert out.strip() in ("[1.0, 2.0]", "[2.0, 1.0]", "[2.0, 2.0]")
    assert segments_of(script.pid) == []


def start_sleeping_workers():
    """A parent script running two workers that sleep forever; returns it and the worker pids."""
    script = run_script("""
        import numpy as np
        from fastad import hogwild
        import hogwild_workers

        def show(done, rate):
            pids = shared["pids"].numpy()
            if pids.all():
                print(*pids.astype(int), flush=True)

        with hogwild.share({"pids": np.zeros(2)}) as shared:
            hogwild.run(hogwild_workers.sleep_forever, workers=2, args=(shared["pids"],),
                        start_method="fork", progress=show, progress_interval=0.05)
        """)
    pids = [int(p) for p in script.stdout.readline().split()]
    assert len(pids) == 2, script.stderr.read()
    return script, pids


def test_ctrl_c_in_the_parent_stops_workers_and_frees_segments():
    script, pids = start_sleeping_workers()
    assert segments_of(script.pid) != []
    script.send_signal(signal.SIGINT)
    _, err = script.communicate(timeout=30)
    assert script.returncode != 0 and "KeyboardInterrupt" in err
    assert all(process_gone(pid) for pid in pids)
    assert segments_of(script.pid) == []


def test_workers_die_with_a_killed_parent_and_its_segments_get_swept():
    script, pids = start_sleeping_workers()
    script.kill()
    script.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while not all(process_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(process_gone(pid) for pid in pids)
    hogwild.share({}).close()                # sweeps what the dead owner left, if anything
    assert segments_of(script.pid) == []
