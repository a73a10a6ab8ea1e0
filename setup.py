"""Build fastad's Cython extensions.

Environment switches (read at build time):
  FASTAD_NATIVE=1     add -march=native (binaries then run only on CPUs like this one)
  FASTAD_DEBUG=1      bounds checks on, -O0 -g: for hunting memory errors
  FASTAD_FAST_MATH=1  exp/log/tanh/sigmoid use fast approximations (see fastad/ops/fastmath.h)

Before compiling anything it checks, and stops with a message naming what is
missing: every module of COMPILED_MODULES has its .pyx source (fastad.ops.linalg:
fastad/ops/linalg.pyx; an sdist without them would otherwise install a package
that cannot import), there is a C compiler, and Cython and NumPy are new enough to
compile with.
"""
import glob
import importlib
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.sdist import sdist

#: The compiled modules fastad needs, each beside what it serves: fastad/ops/linalg.pyx
#: becomes fastad.ops.linalg.
COMPILED_MODULES = (
    "fastad._engine.graph",
    *(f"fastad.ops.{family}" for family in ("conv", "dropout", "elementwise", "fastmath", "fused",
                                            "gather_dot", "linalg", "losses", "ranking", "reduction",
                                            "shape", "sparse")),
    "fastad.optim.optimizers", "fastad.optim.schedule",
    "fastad.training.autobatch", "fastad.training.feeds", "fastad.training.loop",
    "fastad.training.sampler",
    "fastad.features._featuriser",
    "fastad.models.linear._online",
    "fastad.models.recsys._pairs",
    "fastad.models.text._dictionary", "fastad.models.text._shared", "fastad.models.text._windows",
)

#: The folders of the C headers the compiled modules include.
HEADER_DIRS = [os.path.join("fastad", folder) for folder in ("_engine", "ops", "optim")]

#: The oldest Cython and NumPy to compile with, as in pyproject's build-system.requires.
#: Extensions built against NumPy 2 also import under NumPy 1.23 and later, not the
#: other way round.
BUILD_REQUIREMENTS = {"Cython": (3, 0), "numpy": (2, 0)}


def _flag(name):
    return os.environ.get(name, "").strip() not in ("", "0", "false", "False")


def source_of(module):
    """The .pyx path of a dotted module name."""
    return os.path.join(*module.split(".")) + ".pyx"


def extension_sources():
    """{module name: its .pyx path} for COMPILED_MODULES; exits naming any .pyx missing or
    unlisted."""
    found = {os.path.splitext(path)[0].replace(os.sep, "."): path
             for path in glob.glob(os.path.join("fastad", "**", "*.pyx"), recursive=True)}
    missing = [name for name in COMPILED_MODULES if name not in found]
    if len(missing) == len(COMPILED_MODULES):
        sys.exit(f"error: found no Cython sources (fastad/**/*.pyx) in {os.getcwd()}: this source "
                 f"tree or sdist is incomplete, and fastad would install without its compiled core")
    if missing:
        sys.exit("error: fastad's Cython sources are incomplete: missing "
                 + ", ".join(source_of(name) for name in missing))
    unlisted = sorted(set(found) - set(COMPILED_MODULES))
    if unlisted:
        sys.exit("error: " + ", ".join(found[name] for name in unlisted)
                 + " not listed in setup.py's COMPILED_MODULES: add the module name there")
    return {name: found[name] for name in COMPILED_MODULES}


def require_c_compiler(compiler):
    """Exit with what to install when the compiler command distutils would run is not on PATH."""
    command = getattr(compiler, "compiler_so", None)     # unix-style compilers (gcc, clang)
    if command and shutil.which(command[0]) is None:
        sys.exit(f"error: fastad compiles C extensions and found no C compiler: {command[0]!r} "
                 f"(from $CC or Python's build configuration) is not on PATH. Install one "
                 f"(Debian/Ubuntu: apt-get install gcc python3-dev; Fedora: dnf install gcc "
                 f"python3-devel; macOS: xcode-select --install), or install a fastad wheel, "
                 f"which needs no compiler")


def build_requirement(name):
    """The build environment's module `name`; exits naming the version needed when it is
    missing or older than BUILD_REQUIREMENTS says."""
    oldest = BUILD_REQUIREMENTS[name]
    wanted = f"{name}>={'.'.join(map(str, oldest))}"
    try:
        module = importlib.import_module(name)
    except ImportError:
        sys.exit(f"error: compiling fastad's extensions needs {wanted}, which is not installed in "
                 f"the build environment: pip install '{wanted}', or build without "
                 f"--no-build-isolation (pip then installs it for the build)")
    version = tuple(int(part) for part in re.match(r"(\d+)\.(\d+)", module.__version__).groups())
    if version < oldest:
        sys.exit(f"error: compiling fastad's extensions needs {wanted}, and the build environment "
                 f"has {name} {module.__version__} ({os.path.dirname(module.__file__)}): upgrade it "
                 f"(pip install '{wanted}') or build without --no-build-isolation")
    return module


def generate_op_files():
    """Write the files fastad/ops/generate.py derives from the op manifest
    (fastad/ops/manifest.py): the op codes, the plain ops' functions and stubs. Runs
    first, so that every command (build_py's stubs, cythonize, sdist) sees them; a tree
    without the generator is left to the checks that name what it lacks."""
    generator = os.path.join("fastad", "ops", "generate.py")
    if os.path.isfile(generator):
        subprocess.run([sys.executable, generator], check=True)


generate_op_files()

DEBUG = _flag("FASTAD_DEBUG")

# -fno-trapping-math: fastad never traps on floating-point exceptions (NaN and Inf are
# checked by value), and without it gcc keeps selects such as relu's slope out of vector
# loops; results are bit for bit the same.
compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-math-errno", "-fno-trapping-math"]
if _flag("FASTAD_NATIVE"):
    compile_args.append("-march=native")
macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")]
if _flag("FASTAD_FAST_MATH"):
    macros.append(("FASTAD_FAST_MATH", "1"))

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}

extensions = [
    Extension(
        name,
        [path],
        include_dirs=list(HEADER_DIRS),
        # a changed header recompiles: the shared ones, and those beside the module
        depends=sorted(header for folder in (*HEADER_DIRS, os.path.dirname(path))
                       for header in glob.glob(os.path.join(folder, "*.h"))),
        define_macros=macros,
        extra_compile_args=compile_args,
        libraries=["m"],   # bind expf/logf to libm's current symbols, not the slow compat ones
    )
    for name, path in extension_sources().items()
]


class CheckedParallelBuildExt(build_ext):
    """Check the compiler, Cython and NumPy, then cythonize and compile on every core
    unless told otherwise.

    Cythonizing here rather than at import keeps `setup.py sdist` fast and its
    file list free of generated .c files."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1

    def build_extensions(self):
        require_c_compiler(self.compiler)
        build_requirement("Cython")
        numpy_include = build_requirement("numpy").get_include()
        from Cython.Build import cythonize

        cythonized = cythonize(self.extensions, compiler_directives=directives,
                               nthreads=os.cpu_count() or 1)
        generated_sources = {extension.name: extension.sources for extension in cythonized}
        for extension in self.extensions:
            extension.sources = generated_sources[extension.name]
            extension.include_dirs.insert(0, numpy_include)
        super().build_extensions()


class SourcesOnlySdist(sdist):
    """An sdist without setuptools' fastad.egg-info folder: it is generated, and every build
    from the sdist writes it anew from pyproject.toml (PKG-INFO stays, as the format requires)."""

    def make_distribution(self):
        egg_info = self.get_finalized_command("egg_info").egg_info
        self.filelist.files = [path for path in self.filelist.files
                               if os.path.commonpath([path, egg_info]) != egg_info]
        super().make_distribution()


setup(
    ext_modules=extensions,
    cmdclass={"build_ext": CheckedParallelBuildExt, "sdist": SourcesOnlySdist},
)
