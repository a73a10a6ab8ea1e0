"""Shared-memory segments and their lifetime, for the other modules of fastad.parallel.

A segment is a file under /dev/shm (Linux; the object that
`multiprocessing.shared_memory.SharedMemory(name)` opens), mapped into each
process that uses it. Every fastad segment is named after a `Block`, the
segments of one owner (a `share` call, a `run`, a fastad.parallel.distributed
worker): `fastad_<owner pid>_<owner pid namespace>_<tag>_<suffix>`, the tag random
unless the block was given one. The
owner unlinks its block's segments when it ends, whatever happened; the
segments it made are registered with its resource tracker, which unlinks them
if the owner dies without cleanup (SIGKILL); and `sweep_stale_segments`
unlinks those of any owner (in this pid namespace) that no longer exists. A
process that only attaches a segment never unlinks it nor registers it.
"""
import mmap
import os
import re
import secrets
import sys
import threading
import time
from contextlib import suppress
from multiprocessing import resource_tracker

import numpy as np

__all__ = ["Block", "require_shm_dir", "create_segment", "attach_segment", "attach_or_create",
           "attach_or_create_lockable", "view", "lock_descriptor", "track", "untrack", "unlink_prefixed",
           "pid_alive", "sweep_stale_segments"]

_SHM_DIR = "/dev/shm"
_PREFIX = "fastad_"
_OWNED_NAME = re.compile(r"fastad_(\d+)_(\d+)_([^_]+)_")


def require_shm_dir():
    """OSError unless this system lists POSIX shared memory under /dev/shm."""
    if not os.path.isdir(_SHM_DIR):
        raise OSError(f"fastad.parallel needs POSIX shared memory listed under {_SHM_DIR} "
                      f"(Linux); this system ({sys.platform}) has no {_SHM_DIR}")


def _path(name):
    return os.path.join(_SHM_DIR, name)


def _map(fd):
    return mmap.mmap(fd, os.fstat(fd).st_size)


def create_segment(name, nbytes, reserve=True):
    """Make segment `name` of `nbytes` zero bytes (FileExistsError if it exists) and map it.

    `reserve`: its pages are taken now, so that a full /dev/shm is an OSError here, not a
    SIGBUS on a write later; without it, a page is taken when first written (for a segment
    of which a process writes only a part). It is not registered with any resource
    tracker: a segment of a `Block` is unlinked by its owner (`Block.create` also registers
    it)."""
    fd = os.open(_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        # An empty array still needs one mappable byte.
        if reserve:
            os.posix_fallocate(fd, 0, max(nbytes, 1))
        else:
            os.ftruncate(fd, max(nbytes, 1))
        return _map(fd)
    except BaseException:
        os.unlink(_path(name))
        raise
    finally:
        os.close(fd)


def attach_segment(name):
    """Map the existing segment `name` (FileNotFoundError if there is none)."""
    fd = os.open(_path(name), os.O_RDWR | os.O_NOFOLLOW)
    try:
        return _map(fd)
    finally:
        os.close(fd)


def attach_or_create(name, nbytes, fill, reserve=True):
    """(mapping, made): segment `name` attached if it exists, else made here with `nbytes`
    bytes (`reserve`: as create_segment) and filled by `fill(mapping)` before any other
    process can see it (`made` is then True). Of several processes or threads that ask at
    once, one makes it and the others attach to it: a reader sees either no segment or a
    completely filled one. `name` holds no "~" (the private names of the segments being
    filled have one)."""
    with suppress(FileNotFoundError):
        return attach_segment(name), False
    # Fill a private segment, then publish it under the final name with link(2), which fails
    # if the name exists.
    temp = f"{name}~{os.getpid()}_{threading.get_ident()}"
    mapping = create_segment(temp, nbytes, reserve)
    try:
        fill(mapping)
        os.link(_path(temp), _path(name))
    except FileExistsError:
        return attach_segment(name), False
    finally:
        _unlink(temp)
    return mapping, True


def _unlink(name):
    """Unlink segment `name`; nothing if it is gone already, or another user's."""
    with suppress(FileNotFoundError, PermissionError):
        os.unlink(_path(name))


def unlink_prefixed(prefix):
    """Unlink every segment whose name starts with `prefix`; the names unlinked."""
    names = {entry for entry in os.listdir(_SHM_DIR) if entry.startswith(prefix)}
    for name in names:
        _unlink(name)
    return names


def attach_or_create_lockable(name, nbytes, fill):
    """(mapping, descriptor): segment `name` attached or made as `attach_or_create` does,
    and `descriptor`, a file descriptor of the same file for `fcntl.flock` (open until the
    caller closes it, which releases its lock). A segment unlinked between its making and
    its opening here (by a dead process's resource tracker) is attached or made again: a
    lock opened by name apart from the mapping could fail, or lock another file of the same
    name. The mapping is made from a second open of the descriptor's file (Linux's
    /proc/self/fd): mmap keeps a duplicate of the descriptor it maps, which would keep the
    lock held after the caller closes the descriptor."""
    while True:
        attach_or_create(name, nbytes, fill)[0].close()       # it exists, filled
        try:
            fd = lock_descriptor(name)
        except FileNotFoundError:
            continue
        try:
            again = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)
            try:
                return _map(again), fd
            finally:
                os.close(again)
        except BaseException:
            os.close(fd)
            raise


def lock_descriptor(name):
    """A new file descriptor of segment `name`, for `fcntl.flock`: a lock between the
    processes that open it, released when they close it or die."""
    return os.open(_path(name), os.O_RDWR | os.O_NOFOLLOW)


def track(name):
    """Let this process's resource tracker unlink segment `name` if the process dies
    without cleanup."""
    resource_tracker.register("/" + name, "shared_memory")


def untrack(name):
    """Undo `track(name)` (the segment was unlinked, or is left to others)."""
    resource_tracker.unregister("/" + name, "shared_memory")


def view(mapping, shape, dtype, offset=0):
    """The C-contiguous array of `shape` and `dtype` over a mapped segment, from byte
    `offset` on (the array keeps the mapping alive)."""
    return np.ndarray(shape, dtype=dtype, buffer=mapping, offset=offset)


def _pid_namespace():
    """This process's pid namespace id: a pid in a segment name means nothing outside it."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


_PID_NAMESPACE = _pid_namespace()


def pid_alive(pid):
    """Whether process `pid` runs: an exited one not yet reaped (a zombie) maps no segment."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:        # someone else's live process
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def sweep_stale_segments(waiting_for=None, timeout=0.0):
    """Unlink fastad segments whose owner process (in this pid namespace) no longer exists.

    With `waiting_for` (a tag given to `Block`), first wait up to `timeout` seconds for the
    owners of the blocks of that tag to exit: processes told to stop, which may still be
    exiting when the sweep comes, and whose resource tracker may not unlink their segments
    (Ray's force-stopped workers sometimes left them)."""
    deadline = time.monotonic() + timeout
    while waiting_for is not None and time.monotonic() < deadline and any(
            pid_alive(int(match.group(1))) for match in map(_OWNED_NAME.match, os.listdir(_SHM_DIR))
            if match and match.group(3) == waiting_for and match.group(2) == _PID_NAMESPACE):
        time.sleep(0.02)
    for entry in os.listdir(_SHM_DIR):
        match = _OWNED_NAME.match(entry)
        if match and match.group(2) == _PID_NAMESPACE and not pid_alive(int(match.group(1))):
            _unlink(entry)


class Block:
    """The segments named after one prefix (those of a `share` call, of a `run`, of a
    fastad.parallel.distributed worker), as the process that owns them sees them: `free`
    unlinks them all, whichever process made them.

    Example::

        block = Block()
        mapping = block.create(block.prefix + "ranks", 64)   # tracked until free()
        ...
        block.free()
    """

    def __init__(self, tag=None):
        """`tag` (hex digits; default random) names the block in its segments' names: see
        sweep_stale_segments."""
        tag = secrets.token_hex(4) if tag is None else tag
        if not re.fullmatch(r"[0-9a-f]{1,32}", tag):
            raise ValueError(f"Block: tag must be 1 to 32 hex digits, got {tag!r}")
        self.prefix = f"{_PREFIX}{os.getpid()}_{_PID_NAMESPACE}_{tag}_"
        self.owner_pid = os.getpid()
        self.tracked = []          # names this process registered with its resource tracker
        self.closed = False

    def track(self, name):
        """Let the resource tracker unlink segment `name` if this process dies without cleanup."""
        track(name)
        self.tracked.append(name)

    def create(self, name, nbytes):
        """Make segment `name` (a name of this block) of `nbytes` zero bytes, tracked; its mapping."""
        mapping = create_segment(name, nbytes)
        self.track(name)
        return mapping

    def free(self):
        """Unlink every segment of the block: arrays, state made by any process, temporaries."""
        if os.getpid() != self.owner_pid or self.closed:
            return                      # a forked child's copy of the block owns nothing
        self.closed = True
        unlink_prefixed(self.prefix)
        for name in self.tracked:
            _unlink(name)
            untrack(name)
