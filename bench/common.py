"""Shared benchmark plumbing: alternate timings of competitors in one process."""
import argparse
import functools
import gc
import importlib.util
import os
import platform
import resource
import statistics
import time

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples")


@functools.cache
def example(name):
    """examples/<name>.py as a module (`example_<name>`: bench/ has modules of the same names),
    for a benchmark that measures an example's model or data. The OPENBLAS_NUM_THREADS default
    an example sets for itself is taken back, so that the processes a later benchmark starts
    see the environment as it was."""
    had_blas_threads = "OPENBLAS_NUM_THREADS" in os.environ
    spec = importlib.util.spec_from_file_location(f"example_{name}", os.path.join(EXAMPLES, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not had_blas_threads:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)
    return module


def torch_or_none():
    """PyTorch if installed (the comparator is optional), pinned to one thread."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def dynet_or_none():
    """DyNet (the dynet38 package) if installed (an optional comparator), or None. Its
    autobatching is chosen per graph, by dynet.renew_cg(autobatching=...). Loading its
    library turns on flush-to-zero for the whole process: whatever runs after it in one
    process (both sides of every later benchmark of bench/run.py) sees subnormals as 0."""
    try:
        import dynet
    except ImportError:
        return None
    return dynet


def dynet_step(dy, model, trainer, build, autobatching):
    """A DyNet train step as its users write one: step(example) makes a fresh graph
    (autobatched or not), builds build(example)'s loss in it, and returns its value after
    the backward pass and one trainer update. `model` stays referenced by the step: DyNet
    frees the parameters with their collection."""
    def step(example):
        dy.renew_cg(autobatching=autobatching)
        loss = build(example)
        value = loss.value()
        loss.backward()
        trainer.update()
        return value
    step.model = model
    return step


def classifier_steps(data, labels, logits, params, lr, torch=None, torch_model=None):
    """The train steps of one classifier, fastad's and (when `torch` is given) PyTorch's,
    for `alternate`: SGD at `lr` on the cross-entropy of batch k of `data`/`labels`, the
    batches taken in turn. `logits(x)` builds fastad's network on the Input x over
    `params`; `torch_model()` returns PyTorch's twin holding the same initial weights
    (made before fastad's first forward, which moves batch-norm statistics). Both
    sides' first losses must agree."""
    import fastad as fa
    state = {"next": 0}

    def next_batch():
        state["next"] = (state["next"] + 1) % len(data)
        return state["next"]

    reference = torch_model() if torch is not None else None
    x, y = fa.Input(data[0]), fa.IndexInput(labels[0])
    loss = fa.nn.cross_entropy(logits(x), y)
    first_loss = loss.item()
    opt = fa.optim.SGD(params, lr=lr)

    def fastad_step():
        k = next_batch()
        x.set_value(data[k])
        y.set_value(labels[k])
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
        return 1

    candidates = {"fastad": fastad_step}
    if torch is None:
        return candidates
    tdata, tlabels = torch.from_numpy(data), torch.from_numpy(labels)
    topt = torch.optim.SGD(reference.parameters(), lr=lr)
    torch_first = torch.nn.functional.cross_entropy(reference(tdata[0]), tlabels[0]).item()
    assert abs(torch_first - first_loss) < 1e-4 * abs(first_loss), \
        f"fastad and torch disagree: {first_loss} vs {torch_first}"

    def torch_step():
        k = next_batch()
        out = torch.nn.functional.cross_entropy(reference(tdata[k]), tlabels[k])
        topt.zero_grad()
        out.backward()
        topt.step()
        return 1

    candidates["torch"] = torch_step
    return candidates


def fastad_train_step(loss, opt):
    """fastad's train step on `loss` (a graph built anew or replayed): backward, the optimizer's
    step, zero_grad. Returns the loss's value, as the `step` of `timed_epoch` does."""
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()


def torch_train_step(loss, opt):
    """PyTorch's usual train step on `loss`: zero_grad, backward, the optimizer's step. Returns
    the loss's value, as the `step` of `timed_epoch` does."""
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss.item()


def timed_epoch(step, examples):
    """(examples per second, mean loss) of one pass of `step(example)` (which returns the
    example's loss) over `examples`. Python's cyclic collector runs first, outside the
    clock: a full collection of what the process made before (the data, the libraries'
    imports: tens of ms, about a third of a quick epoch) would otherwise land on whichever
    library's epoch its threshold happened to trip in."""
    gc.collect()
    t0 = time.perf_counter()
    total = sum(step(example) for example in examples)
    return len(examples) / (time.perf_counter() - t0), total / len(examples)


def timed_minibatches(step, data, size):
    """(examples per second, mean loss an example) of one pass of `step(minibatch)` (which
    returns the sum of the minibatch's losses) over `data` in minibatches of `size`."""
    batches = [data[i:i + size] for i in range(0, len(data), size)]
    rate, mean = timed_epoch(step, batches)
    return rate * len(data) / len(batches), mean * len(batches) / len(data)


def alternate(candidates, repeats, min_time=0.05):
    """Time each candidate `repeats` times, alternating A, B, A, B ... in this process.

    `candidates` maps a name to a zero-argument function that performs the
    workload once and returns how many units of work it did (examples, nodes
    ...). Each timing runs the function enough times to last `min_time`.
    Returns {name: median seconds per unit}.
    """
    loops = {}
    for name, fn in candidates.items():
        fn()                                      # warm up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < min_time / 4:
            fn()
            n += 1
        loops[name] = max(1, int(n * 4 * min_time / max(time.perf_counter() - t0, 1e-9) / 4))
    samples = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            units = 0
            t0 = time.perf_counter()
            for _ in range(loops[name]):
                units += fn()
            samples[name].append((time.perf_counter() - t0) / units)
    return {name: statistics.median(s) for name, s in samples.items()}


def cpu_seconds():
    """The CPU seconds of every thread of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def not_installed(module, install):
    """The reason a benchmark against `module` is skipped ("... is not installed (pip install
    `install`)"), or None when it can be imported."""
    if importlib.util.find_spec(module) is None:
        return f"{module} is not installed (pip install {install})"
    return None


def machine():
    """One line describing where the figures were measured."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def report(rows):
    """Print one line per row: fastad's time per unit, PyTorch's, and the speed-up."""
    for r in rows:
        line = f"{r['workload']}: fastad {r['fastad'] * 1e9:10.1f} ns/{r['unit']} ({1 / r['fastad']:,.0f}/s)"
        if r.get("peer"):
            line += (f" | {r['peer_name']} {r['peer'] * 1e9:10.1f} ns/{r['unit']}"
                     f" | speed-up {r['peer'] / r['fastad']:6.2f}x")
        if r.get("torch"):
            line += (f" | torch {r['torch'] * 1e9:10.1f} ns/{r['unit']}"
                     f" | speed-up {r['torch'] / r['fastad']:6.1f}x")
        print(line + f"   [target: {r['target']}]")


def cli(run, doc, show=report, skip_reason=None, **options):
    """The command line of one benchmark module: `python bench/NAME.py [--quick] [--OPTION N]`,
    each of `options` (name=help) an int option passed to `run` as that keyword when given;
    `show` prints `run`'s rows; `skip_reason()`, when given, says why this machine cannot
    run it (then printed instead), or None."""
    from blas_threads import pin_blas_to_one_thread

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller data")
    for name, help in options.items():
        ap.add_argument("--" + name.replace("_", "-"), type=int, help=help)
    args = {name: value for name, value in vars(ap.parse_args()).items() if value is not None}
    reason = skip_reason() if skip_reason is not None else None
    if reason:
        print(f"skipped: {reason}")
        return
    print(machine())
    print("BLAS:", pin_blas_to_one_thread())
    show(run(**args))
