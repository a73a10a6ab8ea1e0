"""tests/skip_policy.py: the run fails on a skip for any reason but the GPU, and says why."""
import pytest

SKIPS = """
import pytest

def test_without_gpu():
    pytest.skip("no GPU: CuPy sees no device")

def test_without_an_oracle():
    pytest.importorskip("a_module_that_is_not_installed")

def test_that_runs():
    assert True
"""

GPU_ONLY = """
import pytest

def test_without_gpu():
    pytest.skip("no GPU: CuPy sees no device")

def test_on_a_gpu_machine():
    pytest.skip("has a GPU: this checks the error raised without one")

@pytest.mark.xfail(reason="an expected failure is not a skip")
def test_expected_to_fail():
    assert False
"""


def run(pytester, source, *args):
    pytester.makepyfile(test_sample=source)
    return pytester.runpytest("-p", "skip_policy", "-p", "no:cacheprovider", *args)


def test_a_skip_for_a_missing_oracle_fails_the_run_and_names_it(pytester):
    result = run(pytester, SKIPS)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines([
        "*skips not for want of a GPU: the run fails*",
        "test_sample.py::test_without_an_oracle: could not import 'a_module_that_is_not_installed'*",
    ])
    assert "test_sample.py::test_without_gpu:" not in result.stdout.str()


def test_skips_for_the_gpu_alone_pass(pytester):
    result = run(pytester, GPU_ONLY)
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(skipped=2, xfailed=1)
    assert "not for want of a GPU" not in result.stdout.str()


def test_allow_skips_lists_them_but_passes(pytester):
    result = run(pytester, SKIPS, "--allow-skips")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*skips not for want of a GPU: allowed by --allow-skips*"])


def test_a_real_failure_keeps_its_exit_code(pytester):
    result = run(pytester, SKIPS + "\ndef test_broken():\n    assert False\n")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1, skipped=2, failed=1)

