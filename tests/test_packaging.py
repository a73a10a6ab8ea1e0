"""The release artifacts: an sdist that builds every extension, a wheel that holds them all.

One build for the module: the sdist from this checkout (`python -m build --sdist`);
then, inside a fresh virtual environment outside the tree, the wheel from that
sdist (what `pip install fastad-*.tar.gz` does first, kept as a file here) and
its install (what it does next); then the same wheel alone in a second fresh
environment. Each environment runs tests/install_smoke.py from a folder outside
the tree. Build isolation is off and each environment sees, after its own
site-packages, the site directories of the Python running these tests (a plain
interpreter, a venv, or a venv made with --system-site-packages), so the build
uses the setuptools, Cython, NumPy and pip installed with the test extra, nothing
is installed again and the extensions compile exactly once.

setup.py's own checks (missing sources, no C compiler, no Cython, an old NumPy) run on a
copy of setup.py beside empty .pyx files: they stop before anything compiles.
"""
import email.parser
import glob
import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile

import pytest

import fastad

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME_VERSION = f"fastad-{fastad.__version__}"
# every compiled module, as its path without the suffix (fastad/ops/linalg)
MODULES = sorted(os.path.splitext(os.path.relpath(path, ROOT))[0].replace(os.sep, "/")
                 for path in glob.glob(os.path.join(ROOT, "fastad", "**", "*.pyx"), recursive=True))
GENERATED_SUFFIXES = (".c", ".cpp", ".so", ".pyd", ".html", ".pyc", ".o")

C_COMPILER = (sysconfig.get_config_var("CC") or "cc").split()[0]
pytestmark = pytest.mark.skipif(
    shutil.which(C_COMPILER) is None,
    reason=f"building the sdist's extensions needs a C compiler ({C_COMPILER}, as Python was built "
           f"with), which is not on PATH")


def clean_env(**extra):
    """This process's environment without PYTHONPATH, so no source tree leaks into a child."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env.update(extra)
    return env


def run(command, cwd, **extra_env):
    done = subprocess.run(command, cwd=cwd, env=clean_env(**extra_env), capture_output=True, text=True)
    assert done.returncode == 0, (f"{' '.join(map(str, command))} exited {done.returncode}\n"
                                  f"stdout:\n{done.stdout[-4000:]}\nstderr:\n{done.stderr[-4000:]}")
    return done.stdout


def running_site_dirs():
    """The site directories on this interpreter's sys.path, in its order: its site-packages,
    the user site where enabled and, in a venv made with --system-site-packages, the base
    interpreter's site-packages after the venv's own."""
    candidates = [*site.getsitepackages()]
    if site.ENABLE_USER_SITE:
        candidates.append(site.getusersitepackages())
    candidates = {os.path.normcase(os.path.abspath(path)) for path in candidates}
    found = []
    for path in filter(None, sys.path):
        path = os.path.normcase(os.path.abspath(path))
        if path in candidates and path not in found:
            found.append(path)
    return found


# Written into each fresh environment's site-packages as a module, imported by a .pth file
# there: `site` processes that .pth right after adding the environment's own site-packages.
RUNNING_SITE_MODULE = '''"""Written by fastad's tests/test_packaging.py: this environment also sees, after its
own site-packages, the site directories of the Python that made it."""
import site

RUNNING_SITE_DIRS = {directories!r}

for directory in RUNNING_SITE_DIRS:
    site.addsitedir(directory)      # its own .pth files apply too, as they do in that Python

_own_site_packages = site.getsitepackages


def getsitepackages(prefixes=None):
    """This environment's site-packages, then those directories: what tools that search
    site-packages rather than sys.path (cuda-pathfinder, which finds CuPy's NVRTC) need."""
    found = _own_site_packages(prefixes)
    if prefixes is None:
        found += [directory for directory in RUNNING_SITE_DIRS if directory not in found]
    return found


site.getsitepackages = getsitepackages
'''


def fresh_venv(path):
    """A new virtual environment (without --system-site-packages) that sees, after its own
    site-packages, the site directories of the Python running this test (running_site_dirs()):
    a .pth file in its site-packages imports a module that adds each with site.addsitedir (so
    their .pth files apply) and appends them to site.getsitepackages(). It imports NumPy,
    SciPy, Cython, setuptools, pip and CuPy's NVRTC from where this Python does, whether that
    is a plain interpreter, a venv or a venv made with --system-site-packages (a nested
    --system-site-packages venv would see the base interpreter's site-packages instead of the
    running venv's)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=path.parent)
    python = path / "bin" / "python"
    purelib = run([str(python), "-I", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                  cwd=path.parent).strip()
    with open(os.path.join(purelib, "_fastad_running_site.py"), "w") as module:
        module.write(RUNNING_SITE_MODULE.format(directories=running_site_dirs()))
    with open(os.path.join(purelib, "_fastad_running_site.pth"), "w") as pth:
        pth.write("import _fastad_running_site\n")
    return python


def pip_install(python, archive, cwd):
    run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed",
         str(archive)], cwd=cwd)


def smoke(python, cwd):
    """tests/install_smoke.py, copied outside the tree and run there; returns its output."""
    script = cwd / "install_smoke.py"
    shutil.copy(os.path.join(ROOT, "tests", "install_smoke.py"), script)
    return run([str(python), "-I", str(script)], cwd=cwd)


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """{"sdist", "wheel": paths; "from_sdist", "from_wheel": smoke test outputs}."""
    base = tmp_path_factory.mktemp("release")
    dist = base / "dist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir", str(dist), ROOT],
        cwd=base)
    sdist = dist / f"{NAME_VERSION}.tar.gz"

    from_sdist = fresh_venv(base / "venv-sdist")
    run([str(from_sdist), "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-build-isolation",
         "--wheel-dir", str(dist), str(sdist)], cwd=base)
    (wheel,) = dist.glob(f"{NAME_VERSION}-*.whl")
    pip_install(from_sdist, wheel, cwd=base)

    from_wheel = fresh_venv(base / "venv-wheel")
    pip_install(from_wheel, wheel, cwd=base)
    return {"sdist": sdist, "wheel": wheel, "dist": dist,
            "from_sdist": smoke(from_sdist, base / "venv-sdist"),
            "from_wheel": smoke(from_wheel, base / "venv-wheel")}


def checkout_files(*patterns):
    return {os.path.relpath(path, ROOT) for pattern in patterns
            for path in glob.glob(os.path.join(ROOT, pattern), recursive=True)}


def assert_nothing_generated(names):
    generated = sorted(name for name in names if name.endswith(GENERATED_SUFFIXES)
                       or ".egg-info" in name or "__pycache__" in name)
    assert not generated, f"generated files in the archive: {generated}"


def test_sdist_holds_every_source_and_nothing_generated(release):
    with tarfile.open(release["sdist"]) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    needed = checkout_files("fastad/**/*.pyx", "fastad/**/*.pxd", "fastad/**/*.pyi", "fastad/**/*.h",
                            "fastad/py.typed", "fastad/**/*.py", "cuda/*", "tests/install_smoke.py")
    needed |= {"README.md", "LICENSE", "pyproject.toml", "setup.py", "MANIFEST.in", "PKG-INFO"}
    assert len(MODULES) > 0 and needed <= names, f"missing from the sdist: {sorted(needed - names)}"
    assert_nothing_generated(names)


def test_wheel_holds_every_extension_the_kernel_sources_and_the_stubs(release):
    with zipfile.ZipFile(release["wheel"]) as archive:
        names = set(archive.namelist())
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    needed = {f"{module}{suffix}" for module in MODULES}
    needed |= checkout_files("fastad/**/*.pyi", "fastad/**/*.pxd", "fastad/**/*.h", "fastad/py.typed",
                             "fastad/**/*.py")
    needed |= {f"fastad/cuda/src/{os.path.basename(path)}" for path in checkout_files("cuda/*")}
    needed.add(f"{NAME_VERSION}.dist-info/licenses/LICENSE")
    assert needed <= names, f"missing from the wheel: {sorted(needed - names)}"
    compiled = {name for name in names if name.endswith(suffix)}
    assert compiled == {f"{module}{suffix}" for module in MODULES}, compiled
    assert_nothing_generated(names - compiled)
    strays = sorted(name for name in names if name.startswith(("tests/", "cuda/", "examples/"))
                    or name.endswith(".pyx"))
    assert not strays, f"files that do not belong in the wheel: {strays}"


def test_wheel_metadata_declares_licence_pythons_and_urls(release):
    with zipfile.ZipFile(release["wheel"]) as archive:
        metadata = email.parser.Parser().parsestr(
            archive.read(f"{NAME_VERSION}.dist-info/METADATA").decode())
    assert (metadata["Name"], metadata["Version"]) == ("fastad", fastad.__version__)
    assert (metadata["License-Expression"], metadata["License-File"]) == ("MIT", "LICENSE")
    assert metadata["Requires-Python"] == ">=3.10"
    running = f"Programming Language :: Python :: {sys.version_info.major}.{sys.version_info.minor}"
    assert running in metadata.get_all("Classifier"), f"{running} is not declared"
    urls = dict(url.split(", ", 1) for url in metadata.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Source", "Issues"}, urls


def test_twine_check_passes_on_both_archives(release):
    output = run([sys.executable, "-m", "twine", "check", "--strict",
                  str(release["sdist"]), str(release["wheel"])], cwd=release["dist"])
    assert output.count("PASSED") == 2, output


@pytest.mark.parametrize("install", ["from_sdist", "from_wheel"])
def test_installed_package_passes_the_smoke_test_outside_the_tree(release, install):
    output = release[install]
    assert f"{len(MODULES)} compiled modules" in output, output
    for check in ("gradient: matches", "replay: the same graph", "hogwild: 2 spawned workers",
                  "smoke test passed"):
        assert check in output, output
    from fastad.cuda import compile_check
    if compile_check.nvrtc_available()[0]:
        assert "kernel compile: elementwise family" in output, output


WHERE_FROM = ("import json, sys, sysconfig, importlib\n"
              "modules = ('setuptools', 'numpy', 'Cython', 'pip')\n"
              "print(json.dumps({'files': {name: importlib.import_module(name).__file__ for name in modules},"
              " 'purelib': sysconfig.get_path('purelib'), 'path': sys.path,"
              " 'site_packages': __import__('site').getsitepackages()}))")


def test_fresh_venv_builds_with_the_running_pythons_packages_after_its_own(tmp_path):
    """The nested environment imports the build's tools from where this Python does (not from
    the base interpreter behind a venv, whose setuptools may be too old for pyproject.toml),
    its own site-packages, where pip installs the build, comes first, and
    site.getsitepackages() lists the same directories."""
    python = fresh_venv(tmp_path / "venv")
    here = json.loads(run([sys.executable, "-c", WHERE_FROM], cwd=tmp_path))
    nested = json.loads(run([str(python), "-c", WHERE_FROM], cwd=tmp_path))
    assert nested["files"] == here["files"], (nested["files"], here["files"])
    own = os.path.realpath(nested["purelib"])
    assert own.startswith(os.path.realpath(tmp_path / "venv") + os.sep), own
    nested_path = [os.path.realpath(path) for path in nested["path"]]
    running = [os.path.realpath(path) for path in running_site_dirs()]
    assert running and set(running) <= set(nested_path), (running, nested_path)
    positions = [nested_path.index(path) for path in [own, *running]]
    assert positions == sorted(positions), (own, running, nested_path)
    # what cuda-pathfinder searches for CuPy's NVRTC: the same directories, in the same order
    nested_site_packages = [os.path.realpath(path) for path in nested["site_packages"]]
    assert nested_site_packages[0] == own and set(running) <= set(nested_site_packages), \
        (own, running, nested_site_packages)


# --- setup.py's checks, on a copy beside empty sources: nothing compiles -----------------

def setup_copy(tmp_path, modules):
    shutil.copy(os.path.join(ROOT, "setup.py"), tmp_path / "setup.py")
    for module in modules:
        (tmp_path / f"{module}.pyx").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{module}.pyx").write_text("")
    return tmp_path


def run_setup(cwd, *arguments, python_prelude="", **extra_env):
    """setup.py run in `cwd` (after `python_prelude`, for faking the build environment)."""
    code = (f"{python_prelude}\nimport runpy, sys\nsys.argv = ['setup.py', *{list(arguments)!r}]\n"
            "runpy.run_path('setup.py', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=clean_env(**extra_env),
                          capture_output=True, text=True)


def build_ext_arguments(cwd):
    return ("build_ext", "--build-lib", str(cwd / "lib"), "--build-temp", str(cwd / "temp"))


def test_setup_py_names_the_missing_cython_sources(tmp_path):
    cwd = setup_copy(tmp_path, [m for m in MODULES if m not in ("fastad/_engine/graph", "fastad/training/loop")])
    done = run_setup(cwd, "--version")
    assert done.returncode != 0
    assert "missing fastad/_engine/graph.pyx, fastad/training/loop.pyx" in done.stderr, done.stderr


def test_setup_py_refuses_a_tree_without_cython_sources(tmp_path):
    done = run_setup(setup_copy(tmp_path, []), "--version")
    assert done.returncode != 0
    assert "found no Cython sources (fastad/**/*.pyx)" in done.stderr, done.stderr


def test_setup_py_refuses_a_cython_source_it_does_not_list(tmp_path):
    done = run_setup(setup_copy(tmp_path, MODULES + ["fastad/ops/extra"]), "--version")
    assert done.returncode != 0
    assert "fastad/ops/extra.pyx not listed in setup.py's COMPILED_MODULES" in done.stderr, done.stderr


def test_setup_py_lists_exactly_the_checkouts_cython_sources(tmp_path):
    done = run_setup(setup_copy(tmp_path, MODULES), "--version")
    assert done.returncode == 0, done.stderr


def test_setup_py_says_which_c_compiler_is_missing(tmp_path):
    cwd = setup_copy(tmp_path, MODULES)
    done = run_setup(cwd, *build_ext_arguments(cwd), CC="/nonexistent/bin/cc")
    assert done.returncode != 0
    assert "found no C compiler: '/nonexistent/bin/cc'" in done.stderr, done.stderr
    assert not (cwd / "fastad" / "_engine" / "graph.c").exists()       # stopped before cythonizing


def test_setup_py_refuses_to_compile_against_an_old_numpy(tmp_path):
    cwd = setup_copy(tmp_path, MODULES)
    done = run_setup(cwd, *build_ext_arguments(cwd),
                     python_prelude="import numpy; numpy.__version__ = '1.26.4'")
    assert done.returncode != 0
    assert "needs numpy>=2.0, and the build environment has numpy 1.26.4" in done.stderr, done.stderr
    assert not (cwd / "fastad" / "_engine" / "graph.c").exists()


def test_setup_py_names_a_missing_cython(tmp_path):
    cwd = setup_copy(tmp_path, MODULES)
    done = run_setup(cwd, *build_ext_arguments(cwd),
                     python_prelude="import sys; sys.modules['Cython'] = None")
    assert done.returncode != 0
    assert "needs Cython>=3.0, which is not installed in the build environment" in done.stderr, \
        done.stderr
