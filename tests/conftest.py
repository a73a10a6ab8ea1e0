import os
import re
import time

import pytest

# skip_policy: a skip for any reason but the GPU fails the run; pytester: tests of that plugin.
pytest_plugins = ["skip_policy", "pytester"]

_OWNER = re.compile(r"fastad_(\d+)_")
TRACKER_GRACE_S = 5.0     # how long a dead worker's resource tracker may take to unlink its segments


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner(name):
    owner = _OWNER.match(name)
    return int(owner.group(1)) if owner else None


def _fastad_segments(include_other_live_owners=False):
    """fastad segments in /dev/shm; unless asked, not those of other live processes
    (concurrent runs)."""
    if not os.path.isdir("/dev/shm"):
        return set()
    mine = set()
    for name in os.listdir("/dev/shm"):
        if not name.startswith("fastad"):
            continue
        owner = _owner(name)
        if not include_other_live_owners and owner not in (None, os.getpid()) and _alive(owner):
            continue
        mine.add(name)
    return mine


@pytest.fixture(autouse=True)
def no_leaked_shared_memory():
    """Fail any test after which a fastad shared-memory segment is left in /dev/shm.

    Segments that were there before the test are never counted, whoever owns them: a
    concurrent run's segment whose owner dies during this test is not this test's leak."""
    before = _fastad_segments(include_other_live_owners=True)
    yield
    leaked = _fastad_segments() - before
    # A worker process that died (killed, or os._exit) leaves its segments to its resource
    # tracker, which unlinks them once it sees the death: give it a moment. Segments of this
    # process have no such excuse.
    deadline = time.monotonic() + TRACKER_GRACE_S
    while leaked and not any(_owner(name) == os.getpid() for name in leaked) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
        leaked = _fastad_segments() - before
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"
