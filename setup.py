"""Build fastad's Cython extensions.

Environment switches (read at build time):
  FASTAD_NATIVE=1     add -march=native (binaries then run only on CPUs like this one)
  FASTAD_DEBUG=1      bounds checks on, -O0 -g: for hunting memory errors
  FASTAD_FAST_MATH=1  exp/log/tanh/sigmoid use fast approximations (see fastad_cy/fastmath.h)
"""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


def _flag(name):
    return os.environ.get(name, "").strip() not in ("", "0", "false", "False")


DEBUG = _flag("FASTAD_DEBUG")

compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-fno-math-errno"]
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
        "fastad_cy." + os.path.splitext(os.path.basename(path))[0],
        [path],
        include_dirs=[numpy.get_include(), "fastad_cy"],
        define_macros=macros,
        extra_compile_args=compile_args,
        libraries=["m"],   # bind expf/logf to libm's current symbols, not the slow compat ones
    )
    for path in sorted(glob.glob(os.path.join("fastad_cy", "*.pyx")))
]


class ParallelBuildExt(build_ext):
    """Compile the extensions on every core unless told otherwise."""

    def finalize_options(self):
        super().finalize_options()
        if not self.parallel:
            self.parallel = os.cpu_count() or 1


setup(
    ext_modules=cythonize(extensions, compiler_directives=directives, nthreads=os.cpu_count() or 1),
    cmdclass={"build_ext": ParallelBuildExt},
)
