"""The one epochs runner of the models: `EpochRunner` trains a model's epochs in this
process, in Hogwild workers (threads or processes) over shared weights, or on a GPU, as
its `RunSettings` say, over the `weights` it is given ({name: numpy array}, trained in
place).

What it asks of a model is written down as protocols (`typing.Protocol`, checked when a
worker starts):

- `ModelDescription`: the model as the runner receives it (picklable, since Hogwild
  processes receive it), whose `worker_graph(weights, settings, rank)` builds
- the `WorkerGraph` one worker replays: its `loss`, its `parameters`, and per epoch its
  data (`epoch_data`) and its loss per example (`epoch_loss`); a fit on a GPU asks for a
  `DeviceWorkerGraph`, which also draws batches on the host (`device_sampler`) and feeds
  them to the device (`device_feeds`).

The per-example loop stays compiled in `fa.train`: the runner adds nothing per example.
"""
import inspect
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from fastad._engine.graph import Parameter, Variable
from fastad.optim.schedule import scheduled_lr
from fastad.training.loop import train
from fastad import parallel as hogwild
from fastad.checks import check_choice, check_int
from fastad.cuda import check_device
from fastad.optim import FTRL, SGD, Adadelta, Adagrad, Adam, LinearDecay
from fastad.progress import ProgressRate

__all__ = ["OPTIMIZERS", "optimizer_options_of", "RunSettings", "ModelDescription", "WorkerGraph", "DeviceWorkerGraph", "EpochRunner",
           "run_worker"]

OPTIMIZERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam, "ftrl": FTRL, "adadelta": Adadelta}   # RunSettings.optimizer names


@dataclass(frozen=True)
class RunSettings:
    """How `EpochRunner` trains: the same for every worker (picklable, sent to processes).

    who             the caller, for messages ("BPR.fit")
    batch           the examples of one step (one replay of the graph)
    workers         Hogwild workers; 1 trains in this process
    start_method    how workers > 1 run: "threads", "fork" or "spawn" (`fa.hogwild.run`)
    device          "cpu", or the GPU ("cuda", "cuda:N") a one-worker run trains on
    optimizer, lr   the optimizer's name (`OPTIMIZERS`) and learning rate
    optimizer_options  the optimizer's other keyword arguments, as (name, value) pairs
                    (Adagrad's initial_accumulator_value=1 is LightFM's schedule)
    min_lr          None: a constant lr; else the lr falls linearly from `lr` to `min_lr`
                    over `epochs` epochs, within an epoch every `schedule_every` steps
                    with the sampler's progress (word2vec's schedule)
    first_epoch     the number of the first epoch (0, or 1 as `Recommender.fit` counts)
    samples         the examples an epoch draws, split among the workers (`share`);
                    None: the model's data decides
    """
    who: str
    batch: int
    workers: int = 1
    start_method: str = "threads"
    device: str = "cpu"
    optimizer: str = "sgd"
    lr: float = 0.05
    optimizer_options: tuple = ()
    min_lr: float | None = None
    epochs: int = 1
    first_epoch: int = 0
    samples: int | None = None

    @classmethod
    def for_fit(cls, who, workers, start_method, device, batch_size, **settings):
        """A model's `fit` settings, checked, their defaults decided here for every model:
        `start_method` None is "fork" on Linux, else "spawn"; `batch_size` None is 1 on the CPU
        and 1024 on a GPU, at most a worker's share of `samples`; a GPU fit has one worker."""
        check_choice(who, "start_method", start_method, [None] + hogwild.start_methods())
        device = check_device(who, device)
        batch = check_int(who, "batch_size", (1 if device == "cpu" else 1024) if batch_size is None
                          else batch_size)
        if device != "cpu" and workers != 1:
            raise ValueError(f"{who}: a fit on {device} runs in one process; workers must be 1, "
                             f"got {workers}")
        if settings.get("samples") is not None:
            batch = min(batch, settings["samples"] // workers)
        return cls(who=who, batch=batch, workers=workers, device=device, **settings,
                   start_method=start_method or ("fork" if sys.platform.startswith("linux") else "spawn"))

    @property
    def report_every(self):
        """The steps between two progress reports: about every 10,000 examples."""
        return max(1, 10_000 // self.batch)

    @property
    def schedule_every(self):
        """The steps between two lr updates of the decay to `min_lr`: about 256 examples."""
        return max(1, 256 // self.batch)

    def share(self, rank):
        """The examples of an epoch's `samples` that worker `rank` trains."""
        return self.samples // self.workers + (rank < self.samples % self.workers)

    def epoch_lrs(self, epoch):
        """(lr at the start, lr at the end) of `epoch` under the linear decay to `min_lr`."""
        index, drop = epoch - self.first_epoch, self.lr - self.min_lr
        # max: lr - drop * epochs / epochs can round to just below min_lr
        return (max(self.min_lr, self.lr - drop * index / self.epochs),
                max(self.min_lr, self.lr - drop * (index + 1) / self.epochs))


def optimizer_options_of(who, optimizer, options, lr):
    """A model's `optimizer_options` (None or a dict of the optimizer's keyword arguments) as
    the sorted (name, value) pairs of RunSettings, checked by making the optimizer with them."""
    if options is None:
        return ()
    if not isinstance(options, dict) or not all(isinstance(name, str) for name in options):
        raise TypeError(f"{who}: optimizer_options must be a dict of {optimizer}'s keyword arguments, "
                        f"got {options!r}")
    if "lr" in options:
        raise TypeError(f"{who}: give the learning rate as lr, not in optimizer_options")
    try:
        OPTIMIZERS[optimizer]([Parameter(np.zeros(1))], lr=lr, **options)
    except TypeError as err:
        raise TypeError(f"{who}: optimizer_options {options!r} are not {optimizer}'s: {err}") from err
    except ValueError as err:
        raise ValueError(f"{who}: optimizer_options: {err}") from err
    return tuple(sorted(options.items()))


@runtime_checkable
class WorkerGraph(Protocol):
    """The graph one worker replays, and its examples of each epoch.

    loss         the Variable each step minimises
    parameters   {name: Parameter} over the weights of the same names
    """
    loss: Variable
    parameters: dict[str, Parameter]

    def epoch_data(self, epoch: int) -> Any:
        """What `fa.train` replays for `epoch`: a compiled sampler, or {leaf: values} feeds."""

    def epoch_loss(self, mean: float, data: Any) -> tuple[float, int]:
        """(the mean loss per example, the examples) of an epoch whose loss per step averaged
        `mean` (from `fa.train`, or the device loop) over `data` (what `epoch_data` gave, or
        on a device the sampler)."""


@runtime_checkable
class DeviceWorkerGraph(WorkerGraph, Protocol):
    """A `WorkerGraph` that also trains on a GPU: the host draws each batch, the device
    replays the graph (its leaves there) on it."""

    def device_sampler(self, epoch: int) -> Any:
        """A compiled sampler drawing `epoch`'s batches on the host: the CPU fit's stream."""

    def device_feeds(self, drawn: Any) -> dict:
        """{device leaf: array} for a batch the sampler `drawn`."""


@runtime_checkable
class ModelDescription(Protocol):
    """The model as `EpochRunner` (and `run_worker`, in each Hogwild process) receives it:
    picklable, and able to build each worker's graph."""

    def worker_graph(self, weights: dict, settings: RunSettings, rank: int) -> WorkerGraph:
        """The graph worker `rank` replays, built over `weights` ({name: numpy array, or its
        Hogwild handle}) on `settings.device`: a `DeviceWorkerGraph` for a device."""


def _check_follows(who, thing, protocol, what):
    """`thing`, or a TypeError naming the members of `protocol` (one of this module's, its
    methods and attributes and its bases') that it lacks. (Member by member rather than by
    `isinstance`, which caches its answer for a class.)"""
    members = set()
    for base in protocol.__mro__:
        if base.__module__ == __name__:
            members.update(inspect.get_annotations(base))
            members.update(name for name, value in vars(base).items() if callable(value) and name[0] != "_")
    missing = sorted(name for name in members if not hasattr(thing, name))
    if missing:
        raise TypeError(f"{who}: {what} must be a runner.{protocol.__name__}; a {type(thing).__name__} "
                        f"lacks {', '.join(missing)}")
    return thing


class EpochRunner:
    """Trains `model`'s epochs over `weights` ({name: numpy array}) as `settings` say:
    `with EpochRunner(...) as runner: losses = runner.train(range(...), callback)`.

    One worker on the CPU trains the arrays themselves with one graph and optimizer
    for the whole fit; workers > 1 train them in threads (in place) or in processes
    (a copy in shared memory, copied back after each run of epochs); a device trains a
    copy there, copied back after each run. `progress(done, per_second)` is called during
    training with the examples done since the runner was made: the count goes on across
    epochs and runs (each step counting `settings.batch` examples).

    `state` ({weight name: {slot: array}}, the slots of the optimizer's `slot_names`, each
    array of its weight's shape and dtype), on the CPU: the optimizer state the workers start
    from and keep, as they keep the weights (threads train the arrays themselves, processes a
    copy in shared memory, copied back after each run): LightFM's Adagrad sums, carried from
    one `fit_partial` to the next. Without it, each runner's optimizer starts anew.
    """

    def __init__(self, model, weights, settings, progress=None, state=None):
        _check_follows(settings.who, model, ModelDescription, "the model")
        if state and settings.device != "cpu":
            raise ValueError(f"{settings.who}: optimizer state to carry (state=) is kept on the CPU; "
                             f"a fit on {settings.device} starts its optimizer anew")
        self.model, self.weights, self.settings, self.progress = model, weights, settings, progress
        prefix = OPTIMIZERS[settings.optimizer].__name__        # the optimizers' key: "Adagrad.sum"
        self.state = [(name, f"{prefix}.{slot}", array) for name, slots in (state or {}).items()
                      for slot, array in slots.items()]
        self.shared = self.worker = None
        self.reported = 0       # the `done` that `progress` heard last: the runs before end there

    def __enter__(self):
        settings = self.settings
        if settings.device != "cpu":
            self.worker = _Worker(self.model, self.weights, settings)
        else:
            self.shared = hogwild.share_for("threads" if settings.workers == 1 else settings.start_method,
                                            self.weights)
            for name, key, array in self.state:
                self.shared[name].start_state(key, array)
            if settings.workers == 1:
                self.worker = _Worker(self.model, self.shared, settings)
        return self

    def __exit__(self, *exc):
        if self.shared is not None:
            self.shared.close()
        return False

    def train(self, epochs, callback=None):
        """Train `epochs` (a range of epoch numbers) and return the mean loss per example of
        each, calling `callback(n, loss)` as the n-th ends (n counted from 1, the model holding
        its weights). Without a callback, all of them in one run: Hogwild processes start
        once, a device copies the weights back once."""
        runs = [epochs] if callback is None else [range(epoch, epoch + 1) for epoch in epochs]
        losses = []
        for run in runs:
            losses += self._run(run)
            if callback is not None:
                callback(len(losses), losses[-1])
        return losses

    def _run(self, epochs):
        """Train `epochs` (a range); returns their mean losses per example."""
        if self.worker is not None:
            results = [self.worker.run(epochs, lambda: self._reporter(self.settings.batch))]
            if self.settings.device != "cpu":
                for name, parameter in self.worker.graph.parameters.items():
                    self.weights[name][...] = parameter.numpy()
        else:
            results = hogwild.run(run_worker, workers=self.settings.workers,
                                  start_method=self.settings.start_method,
                                  args=(self.shared, self.settings, self.model, epochs),
                                  progress=self._reporter(1))
            if not hogwild.in_place(self.shared):
                for name, array in self.weights.items():
                    array[...] = self.shared[name].numpy()
                for name, key, array in self.state:
                    array[...] = self.shared[name].state_array(key)
        return [_mean_loss(results, i) for i in range(len(epochs))]

    def _reporter(self, examples_per_unit):
        """`progress(done, per_second)` for one `hogwild.run` (`done` in examples: unit 1) or
        one epoch in this process (`fa.train`'s, or the device loop's: in steps of a batch),
        `done` counted from 0, in examples counting on from the runs before; None without
        `progress`."""
        if self.progress is None:
            return None
        before = self.reported

        def report(done, per_second):
            self.reported = before + done * examples_per_unit
            self.progress(self.reported, per_second * examples_per_unit)
        return report


def _mean_loss(results, i):
    """The mean loss per example of epoch `i` of a run over the workers' `results`, each
    weighted by its examples of that epoch; a worker that trained nothing in it (its loss
    nan) is left out, and one worker's loss is its own."""
    trained = [(result["loss"][i], result["epoch_examples"][i]) for result in results
               if result["epoch_examples"][i]]
    if len(trained) == 1:
        return trained[0][0]
    examples = sum(n for _, n in trained)
    return sum(loss * n for loss, n in trained) / examples if examples else math.nan


def run_worker(rank, shared, settings, model, epochs):
    """The entry point of a Hogwild worker (a process or a thread): `model`'s graph
    over the `shared` weights trained for `epochs` on rank `rank`'s share. Returns
    `{"loss": mean loss per epoch, "examples": n, "epoch_examples": n per epoch, "seconds":
    training time}`."""
    # fa.train's progress reported to hogwild.run's
    return _Worker(model, shared, settings, rank).run(
        epochs, lambda: hogwild.train_progress(per_example=settings.batch))


class _Worker:
    """One worker's graph and optimizer, kept for every epoch it trains."""

    def __init__(self, model, weights, settings, rank=0):
        self.settings = settings
        _check_follows(settings.who, model, ModelDescription, "the model")
        self.graph = _check_follows(settings.who, model.worker_graph(weights, settings, rank),
                                    WorkerGraph if settings.device == "cpu" else DeviceWorkerGraph,
                                    "the model's worker_graph()")
        for name, parameter in self.graph.parameters.items():
            if parameter.name is None:      # named in fa.train's errors ("the Parameter 'U' ...")
                parameter.name = name
        name = check_choice(settings.who, "optimizer", settings.optimizer, sorted(OPTIMIZERS))
        self.optimizer = OPTIMIZERS[name](list(self.graph.parameters.values()), lr=settings.lr,
                                          **dict(settings.optimizer_options))

    def run(self, epochs, progress_of):
        """Train `epochs`; `progress_of()`, called as each epoch starts, gives its
        `progress(steps, steps_per_second)`, or None."""
        start, losses, examples = time.perf_counter(), [], []
        train_epoch = self._train_on_cpu if self.settings.device == "cpu" else self._train_on_device
        for epoch in epochs:
            mean, data = train_epoch(epoch, progress_of())
            loss, n = self.graph.epoch_loss(mean, data)
            del data        # the epoch's sampler and its arrays, freed before the next epoch's are made
            losses.append(loss)
            examples.append(n)
        return {"loss": losses, "examples": sum(examples), "epoch_examples": examples,
                "seconds": time.perf_counter() - start}

    def _schedule(self, epoch):
        """The epoch's `LinearDecay` (the optimizer's lr set to its start), or None."""
        if self.settings.min_lr is None:
            return None
        self.optimizer.lr, lr_to = self.settings.epoch_lrs(epoch)
        return LinearDecay(self.optimizer, min_lr=lr_to)

    def _train_on_cpu(self, epoch, progress):
        """One epoch in `fa.train`'s compiled loop: (its mean loss per step, its data)."""
        data = self.graph.epoch_data(epoch)
        try:
            means = train(self.graph.loss, self.optimizer, data, progress=progress,
                          report_every=self.settings.report_every, lr_schedule=self._schedule(epoch),
                          schedule_every=self.settings.schedule_every)
        except FloatingPointError as err:
            # fa.train's run is this one epoch: its message's "epoch 1" becomes the fit's epoch
            raise FloatingPointError(f"{self.settings.who}: epoch {epoch - self.settings.first_epoch + 1} "
                                     f"of the fit, {str(err).removeprefix('train: epoch 1, ')}") from err
        return means[0], data

    def _train_on_device(self, epoch, progress):
        """One epoch on the GPU: batches drawn on the host by the model's compiled sampler
        (the CPU fit's stream), fed to the device graph; the lr follows the schedule as
        `fa.train`'s does. Returns (the mean loss per step, the sampler)."""
        graph, optimizer, settings = self.graph, self.optimizer, self.settings
        schedule = self._schedule(epoch)
        rule = None if schedule is None else schedule.compiled_rule()
        sampler = graph.device_sampler(epoch)
        total, before, steps = None, 0.0, 0
        report = None if progress is None else ProgressRate(progress)
        for steps, drawn in enumerate(sampler.epoch(), 1):
            if rule is not None and (steps - 1) % settings.schedule_every == 0:
                optimizer.lr = scheduled_lr(*rule, 0, before)     # the epoch's share before this batch
            for leaf, value in graph.device_feeds(drawn).items():
                leaf.set_value(value)
            graph.loss.forward()
            optimizer.zero_grad()
            graph.loss.backward()
            optimizer.step()
            # summed on the device: no copy to the host per batch
            total = graph.loss.value.astype(np.float64) if total is None else total + graph.loss.value
            if rule is not None:
                before = sampler.progress()
            if report is not None and steps % settings.report_every == 0:
                report(steps)
        if report is not None and (steps == 0 or steps % settings.report_every):
            report(steps)
        return (float(total) / steps if steps else math.nan), sampler
