"""Smoke test of an installed fastad: `python install_smoke.py`, run outside the source tree.

tests/test_packaging.py runs it in fresh virtual environments holding the sdist's
build and the wheel; cibuildwheel runs it on every release wheel. It imports fastad
and every compiled module (one per stub) and checks they all come from this environment's
site-packages (never from a source tree or another environment), then computes
one gradient, replays the graph, runs one Hogwild training, and, where CuPy's
NVRTC loads, compiles one kernel family from the installed kernel sources.
Prints one line per check; exits non-zero at the first failure.
"""
import glob
import importlib
import importlib.metadata
import os
import sys
import sysconfig

import numpy as np


def check_installed_here(fa):
    from fastad.ops import generate

    # every compiled module has its stub beside it: import them all, not only those fastad uses;
    # the stubs generated from the op manifest (which those stubs star-import) are there too
    package = os.path.dirname(fa.__file__)
    generated = {name for name in generate.OUTPUTS if name.endswith(".pyi")}
    ops_folder = os.path.dirname(generate.__file__)
    assert generated <= set(os.listdir(ops_folder)), f"generated stubs missing: {sorted(generated)}"
    stubs = [path for path in glob.glob(os.path.join(package, "**", "*.pyi"), recursive=True)
             if os.path.basename(path) not in generated]
    for stub in stubs:
        dotted = os.path.relpath(os.path.splitext(stub)[0], os.path.dirname(package)).replace(os.sep, ".")
        importlib.import_module(dotted)
    site_dirs = {os.path.realpath(sysconfig.get_path(key)) for key in ("purelib", "platlib")}
    modules = {name: module for name, module in sys.modules.items()
               if name.split(".")[0] == "fastad" and getattr(module, "__file__", None)}
    strays = {name: module.__file__ for name, module in modules.items()
              if not any(os.path.realpath(module.__file__).startswith(site + os.sep)
                         for site in site_dirs)}
    assert not strays, f"modules imported from outside {sorted(site_dirs)}: {strays}"
    compiled = sorted(name for name, module in modules.items()
                      if module.__file__.endswith(sysconfig.get_config_var("EXT_SUFFIX")))
    assert len(compiled) == len(stubs), f"compiled modules {compiled}, stubs {sorted(stubs)}"
    installed_version = importlib.metadata.version("fastad")
    assert installed_version == fa.__version__, \
        f"fastad.__version__ is {fa.__version__} but the installed distribution is {installed_version}"
    print(f"import: fastad {fa.__version__} and {len(compiled)} compiled modules "
          f"from {sorted(site_dirs)}")


def check_gradient_and_replay(fa):
    w = fa.Parameter(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype=fa.float64)
    x = fa.Input(np.array([[1.0, -1.0]]), dtype=fa.float64)
    loss = fa.sum(fa.square(x @ w))
    loss.backward()
    # loss = sum_j (x w)_j^2, so d loss / d w = 2 x^T (x w)
    expected = 2 * x.value.T @ (x.value @ w.value)
    assert np.allclose(w.grad, expected), f"gradient {w.grad.tolist()}, expected {expected.tolist()}"
    print("gradient: matches 2 x^T (x w)")

    w.zero_grad()
    x.set_value(np.array([[0.5, 2.0]]))
    loss.forward()
    loss.backward()
    expected_loss = float(np.sum((x.value @ w.value) ** 2))
    expected = 2 * x.value.T @ (x.value @ w.value)
    assert np.isclose(loss.item(), expected_loss), \
        f"replayed loss {loss.item()}, expected {expected_loss}"
    assert np.allclose(w.grad, expected), \
        f"replayed gradient {w.grad.tolist()}, expected {expected.tolist()}"
    print("replay: the same graph on new data gives the new loss and gradient")


def check_hogwild(fa):
    if not os.path.isdir("/dev/shm"):
        print("hogwild: not checked (fa.hogwild keeps its segments in /dev/shm, which this "
              "system lacks)")
        return
    train, _ = fa.data.planted_preferences(50, 40, n_train=4_000, n_test=1_000)
    model = fa.models.BPR(50, 40, dim=8)
    before = model.U.value.copy()
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        results = fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=2, args=(shared, train, 2))
        trained = shared["U"].numpy().copy()
    assert [r["examples"] for r in results] == [2_000, 2_000], f"worker results {results}"
    assert not np.allclose(trained, before), "Hogwild workers left the shared factors unchanged"
    print("hogwild: 2 spawned workers trained the shared factors")


def check_kernel_compiles():
    from fastad.cuda import compile_check, kernels

    source_dir = kernels.source_dir()
    assert source_dir.parts[-3:] == ("fastad", "cuda", "src"), f"kernel sources read from {source_dir}"
    available, why = compile_check.nvrtc_available()
    if not available:
        print(f"kernel compile: not checked ({why})")
        return
    family = "elementwise"
    lowered = compile_check.nvrtc_compile(family)
    print(f"kernel compile: {family} family, {len(lowered)} kernels, compiled by {why} from {source_dir}")


def main():
    import fastad as fa

    check_installed_here(fa)
    check_gradient_and_replay(fa)
    check_hogwild(fa)
    check_kernel_compiles()
    print("smoke test passed")


if __name__ == "__main__":
    main()
