import os

import pytest


def _fastad_segments():
    if not os.path.isdir("/dev/shm"):
        return set()
    return {name for name in os.listdir("/dev/shm") if name.startswith("fastad")}


@pytest.fixture(autouse=True)
def no_leaked_shared_memory():
    """Fail any test after which a fastad shared-memory segment is left in /dev/shm."""
    before = _fastad_segments()
    yield
    leaked = _fastad_segments() - before
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"
