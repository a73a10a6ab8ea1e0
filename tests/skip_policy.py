"""A skipped check is a failing check, except where the machine has no GPU.

The test suite compares fastad with PyTorch, compiles every kernel and runs the
device tests on the kernel emulator; a test that skips because an oracle or a
tool is missing proves nothing, so this plugin makes the run fail on any skip
whose reason does not start with `NO_GPU` (or, on a machine that has one,
`HAS_GPU`). The reasons are printed by `-rs` (pytest's addopts).

`--allow-skips` turns the check off for a deliberate partial run, for example on
a platform where the test extra cannot install PyTorch.
"""
import pytest

NO_GPU = "no GPU"
HAS_GPU = "has a GPU"
GPU_REASONS = (NO_GPU, HAS_GPU)


def skip_reason(report):
    """The reason of a skipped test report (a skip's longrepr is (path, line, reason))."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = longrepr[2]
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def is_allowed(reason):
    return reason.startswith(GPU_REASONS)


def pytest_addoption(parser):
    parser.addoption("--allow-skips", action="store_true", default=False,
                     help="do not fail the run on tests skipped for a reason other than the GPU")


def pytest_configure(config):
    config.pluginmanager.register(SkipPolicy(config.getoption("allow_skips")), "fastad-skip-policy")


class SkipPolicy:
    """Collects the skips not allowed above; fails the session and lists them at the end."""

    def __init__(self, allow_skips):
        self.allow_skips = allow_skips
        self.forbidden = []

    def pytest_runtest_logreport(self, report):
        if report.skipped and not hasattr(report, "wasxfail"):
            reason = skip_reason(report)
            if not is_allowed(reason):
                self.forbidden.append((report.nodeid, reason))

    def pytest_sessionfinish(self, session, exitstatus):
        if self.forbidden and not self.allow_skips and exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.forbidden:
            return
        verdict = "allowed by --allow-skips" if self.allow_skips else "the run fails"
        terminalreporter.section(f"skips not for want of a GPU: {verdict}", red=not self.allow_skips)
        for nodeid, reason in self.forbidden:
            terminalreporter.line(f"{nodeid}: {reason}")
        if not self.allow_skips:
            terminalreporter.line("install the test extra (pip install '.[test,distributed]'), "
                                  "or pass --allow-skips for a deliberate partial run")
