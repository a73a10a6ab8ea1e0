"""Per-example loops run in compiled code: `fastad.train`, and `fastad.predict` (forward only).

A Python loop of `set_value`/`forward`/`backward`/`step` costs a few
microseconds per example in interpreter overhead alone. `train` runs the same
steps over whole feed arrays with no Python between them, which is what makes
a million sparse examples a second per core possible (and what Hogwild
workers call on their shard).
"""
import time
from collections.abc import Mapping

import numpy as np
cimport numpy as cnp
from cpython.ref cimport PyObject
from libc.math cimport isfinite
from libc.string cimport memcpy

from fastad.checks import check_callable
from fastad._engine.graph cimport (Variable, Parameter, Plan, RowGather, RowStep, replay_forward,
                              replay_plan_forward, seed_scalar_grad, replay_plan_backward,
                              claim_parameters, release_parameters, check_int, check_flag, value_array)
from fastad.optim.optimizers cimport Optimizer
from fastad.optim.schedule cimport RULE_NONE, Schedule, read_schedule, scheduled_rate
from fastad.training.sampler cimport Sampler
from fastad.training.feeds import FeedSampler
from fastad.training.fusion import fused_loss

cnp.import_array()


cdef int _check_sampled_ids(str who, Variable root, Sampler sampler) except -1:
    """Run the graph with the largest id the sampler can write into each leaf in turn,
    so that an id out of range fails here (IndexError), before any Parameter changes.
    A leaf that the graph reads as more than ids into a table (embedding_bag's offsets, which
    a leaf full of one value does not make) is checked by its op on every example instead."""
    for k, (leaf, top) in enumerate(zip(sampler.leaves, sampler.largest_ids())):
        if top < 0:
            continue
        saved = np.array(leaf.value)
        try:
            leaf.set_value(np.full(leaf.shape, top, dtype=np.int64))
            replay_forward(root)
        except IndexError as err:
            raise IndexError(f"{who}: the sampler writes ids up to {top}{sampler.origin_of(k, top)} "
                             f"into leaf {k} of {type(sampler).__name__}, out of range for the "
                             f"graph ({err}); nothing was {'trained' if who == 'train' else 'run'}") from None
        except ValueError:
            continue
        finally:
            leaf.set_value(saved)
    return 0


cdef int _require_leaves_in_graph(str who, str root_name, Plan plan, Variable root,
                                  Sampler sampler) except -1:
    """ValueError when the sampler fills a leaf that `root` (the loss, the output) does not
    read: its data would change nothing."""
    below = {id(parent) for node in plan.fwd + (root,) for parent in (<Variable>node).parents}
    below.add(id(root))
    for k, leaf in enumerate(sampler.leaves):
        if id(leaf) not in below:
            raise ValueError(f"{who}: leaf {k} of {type(sampler).__name__}, {leaf!r}, is not in "
                             f"the {root_name}'s graph, so its data would change nothing; feed "
                             f"the leaves the {root_name} was built on")
    return 0


cdef list _route_rows_to_steps(Plan plan, Variable root, Optimizer opt):
    """Route the gradient rows of each Parameter that only row gathers read to `opt`'s row
    step (`Optimizer.row_step`), so that each row takes its update inside backward: no
    gradient kept, no separate step and zero_grad passes over its rows. No pass reads the
    table after its update: the gathers copied (or used) its rows in forward. A step that
    is exact only when each example sends a row once (`RowStep.one_source`: a stateful
    optimizer's) takes a Parameter only when one source (one ids leaf of one gather) reads
    it, by a gather that sends it in one call (RowGather.sends_once) and not as a dense
    gradient (RowGather.dense_grad). Returns the (gather, table, step) of each table routed,
    which train routes back to the tables' gradients at its end."""
    trained = {id(p) for p in opt._params}
    readers = {}                  # id(Parameter) -> whether every node reading it is a row gather
    sources = {}                  # id(table) -> the ids leaves that row gathers read it by
    unsteady = set()              # id(table) of the tables a gather gives a dense gradient
                                  # or sends in parts
    for node in plan.fwd + (root,):
        for parent in (<Variable>node).parents:
            if isinstance(parent, Parameter):
                readers[id(parent)] = readers.get(id(parent), True) and isinstance(node, RowGather)
        if isinstance(node, RowGather):
            for ids, table in (<RowGather>node).sources:
                sources.setdefault(id(table), []).append(ids)
                if (<RowGather>node).dense_grad or not (<RowGather>node).sends_once:
                    unsteady.add(id(table))
    routed = []
    cdef RowStep step
    for p in plan.params:
        if not readers.get(id(p), False) or id(p) not in trained or (<Parameter>p).on_device:
            continue
        step = opt.row_step(<Parameter>p)
        if step is None:
            continue
        if step.one_source and (len(sources[id(p)]) != 1 or id(p) in unsteady):
            continue
        for node in plan.fwd + (root,):
            if isinstance(node, RowGather) and any(t is p for t in (<RowGather>node).tables):
                (<RowGather>node).route(<Variable>p, step)
                routed.append((node, p, step))
    return routed


cdef list _row_prefetches(Plan plan, Variable root, Sampler sampler, list routed,
                          Optimizer opt):
    """(leaf index, array) for each host table that a row gather of the graph reads by one
    of the sampler's leaves, then for each state array of a table routed to a stateful row
    step (an optimizer's rule past plain SGD's updates its state rows beside the table's):
    the rows the sampler loads ahead for the next example."""
    position = {id(leaf): k for k, leaf in enumerate(sampler.leaves)}
    targets, seen, leaves_of = [], set(), {}
    for node in plan.fwd + (root,):
        if isinstance(node, RowGather):
            for ids, table in (<RowGather>node).sources:
                key = (position.get(id(ids)), id(table))
                if key[0] is not None and not (<Variable>table).on_device and key not in seen:
                    seen.add(key)
                    targets.append((key[0], value_array(<Variable>table)))
                    leaves_of.setdefault(id(table), []).append(key[0])
    for _, table, step in routed:
        if (<RowStep>step).plain_sgd_rate() == NULL:
            index = next(i for i, p in enumerate(opt._params) if p is table)
            targets += [(leaf, state) for state in opt._state[index]
                        for leaf in leaves_of.get(id(table), ())]
    return targets


cdef struct Loop:
    # One run of `train`: its settings and counters (the objects are borrowed: train holds them).
    PyObject* python_optimizer   # any object with step() and zero_grad(), when not a fastad one
    PyObject* progress           # callable(done, per_second), or NULL
    Py_ssize_t report_every, schedule_every, epochs
    bint check_finite            # a non-finite loss stops the run (_raise_non_finite)
    bint fused                   # the plan replays fused nodes in place of the loss's chain
    Schedule schedule
    Py_ssize_t done
    Py_ssize_t reported          # `done` at the last progress report (0 before the first)
    double reported_at           # time.monotonic() then (or at the start of the run)
    long long schedule_steps
    double total                 # the loss summed over the current epoch


cdef int _run_epoch(Loop* loop, Sampler sampler, Plan plan, Variable root, Optimizer fast_opt,
                    Py_ssize_t epoch) except -1 nogil:
    """One epoch of examples: sample, forward, check the loss is finite, backward, step,
    zero_grad. Runs without the GIL unless a node, the optimizer (fast_opt None: a Python
    one), the progress callback or a non-finite loss needs Python. The lr schedule's step
    comes after forward, which does not read the rate: an example stopped there takes none."""
    cdef double before = 0, value
    cdef bint due
    loop.total = 0
    while True:
        due = loop.schedule.rule != RULE_NONE and loop.done % loop.schedule_every == 0
        if due:     # the share of the run done before this example sets a run-long decay
            before = sampler.epoch_progress()
        if not sampler.next_example():
            break
        replay_plan_forward(plan)
        value = (<double*>root.val_ptr)[0] if root.f64 else (<float*>root.val_ptr)[0]
        if loop.check_finite and not isfinite(value):
            with gil:       # before backward, whose row steps would update Parameters
                _raise_non_finite(plan, root, sampler, value, loop.fused)
        loop.total += value
        if due:
            fast_opt._lr = scheduled_rate(&loop.schedule, loop.schedule_steps,
                                         (epoch + before) / loop.epochs)
            loop.schedule_steps += 1
        seed_scalar_grad(root)
        replay_plan_backward(plan)
        if fast_opt is not None:
            fast_opt.step_cpu(True)
        else:
            with gil:
                (<object>loop.python_optimizer).step()
                (<object>loop.python_optimizer).zero_grad()
        loop.done += 1
        if loop.progress != NULL and loop.done % loop.report_every == 0:
            with gil:
                _report_progress(loop)
    return 0


cdef int _raise_non_finite(Plan plan, Variable root, Sampler sampler, double loss,
                           bint fused) except -1:
    """FloatingPointError for an example whose loss came out `loss` (NaN or Inf), naming the
    first value in forward order that holds a non-finite entry: a leaf (one the sampler fills,
    a Parameter), or else the node that produced it from finite inputs (`fused`: a node of
    the fused graph replayed in place of the loss's chain, which the message says). Reads the
    graph's values only here, on the failure path."""
    cdef Variable x
    for x in _forward_values(plan, root):
        entry = _first_non_finite(x)
        if entry is not None:     # found at the latest at the root, whose value is the loss
            break
    if not x.is_leaf:
        culprit = (f"'{x.op_name}' (shape {x._shape}) produced {entry} from finite inputs "
                   f"({', '.join(repr(p.op_name) for p in x.parents)})")
        if fused:
            culprit += (" (a fused node that fa.train replays in place of the loss's chain of "
                        "ops; fuse=False names the op of the chain)")
    else:
        fed = [k for k, leaf in enumerate(sampler.leaves) if leaf is x]
        culprit = f"the {type(x).__name__}"
        if isinstance(x, Parameter) and (<Parameter>x).name is not None:
            culprit += f" {(<Parameter>x).name!r}"
        culprit += f" of shape {x._shape}"
        if fed:
            culprit += f" that {type(sampler).__name__} fills (its leaf {fed[0]}) holds {entry}"
        elif isinstance(x, Parameter):
            culprit += (f" holds {entry}: an earlier update made it non-finite (a learning rate "
                        f"too large?), or it started so")
        else:
            culprit += f", which the sampler does not fill, holds {entry}"
    raise FloatingPointError(f"the loss is {loss}: {culprit}. This example changed no Parameter; "
                             f"the examples before it were applied (fa.train's check_finite=False "
                             f"trains through non-finite losses)")


cdef list _forward_values(Plan plan, Variable root):
    """The leaves and nodes of root's graph in forward order: each node after its inputs,
    each leaf just before the first node that reads it."""
    order, seen = [], set()
    for node in plan.fwd + (root,):
        for x in (<Variable>node).parents + (node,):
            if id(x) not in seen:
                seen.add(id(x))
                order.append(x)
    return order


cdef object _first_non_finite(Variable x):
    """"nan at index (i, j)" for the first NaN or Inf entry of x's value, or None."""
    bad = np.flatnonzero(~np.isfinite(value_array(x)))
    if not len(bad):
        return None
    index = np.unravel_index(bad[0], x._shape)
    return str(value_array(x)[index]) + (f" at index {tuple(int(i) for i in index)}" if x.size > 1 else "")


cdef int _report_progress(Loop* loop) except -1:
    """progress(examples done in the run, examples a second since the last report): the
    clock is read only here, when a report is due, never per example."""
    cdef double now = time.monotonic()
    (<object>loop.progress)(loop.done, (loop.done - loop.reported) / max(now - loop.reported_at, 1e-9))
    loop.reported, loop.reported_at = loop.done, now
    return 0


def train(loss, optimizer, feeds, epochs=1, shuffle=False, seed=None, progress=None,
          Py_ssize_t report_every=100_000, lr_schedule=None, Py_ssize_t schedule_every=1,
          callback=None, *, check_finite=True, fuse=True):
    """Train by replaying one graph per example, in compiled code.

    For each example: the sampler writes it into the graph's leaves, then
    `loss.forward()`, `loss.backward()`, `optimizer.step()`, `optimizer.zero_grad()`,
    with no Python in between. When the optimizer offers a row step (every built-in one does),
    a Parameter read only by row gathers takes each row's update inside backward (see
    `_route_rows_to_steps`).

    loss       a one-element Variable built once over the sampler's leaves.
    optimizer  any fastad optimizer over the parameters to train (or any object
               with step() and zero_grad(), called through Python).
    feeds      {leaf: array of N rows}, which make a `FeedSampler` with
               `shuffle` and `seed` (which it checks); or a sampler (`fa.data.FeedSampler`,
               `PairwiseSampler`, `SkipGramSampler`).
    epochs     passes over the data (a sampler's epoch: see its docstring).
    progress   optional `progress(done, per_second)` (`fa.progress_bar(total)`, the
               protocol of `fa.hogwild.run` and every `fit`): the examples done so
               far in the run, counting on across epochs, and the rate since the
               previous report; called every `report_every` examples and once at
               the end with the run's total (epochs x the sampler's examples).
    callback   optional `callback(epoch, loss)` after each epoch: epochs numbered
               from 1, `loss` the epoch's mean loss per example (per replay of the
               graph), as the list `train` returns has it.
    lr_schedule  a fastad scheduler of `optimizer` (StepLR, CosineAnnealingLR,
               LinearWarmup, LinearDecay) applied inside the loop: one scheduler
               step every `schedule_every` examples; LinearDecay without
               total_steps decays over this whole run. The scheduler's
               last_epoch advances by the steps taken.
    check_finite  True (the default): an example whose loss is NaN or Inf stops the run
               with a FloatingPointError, before its backward, naming the epoch, the
               example (as the sampler places it: "row 7 of the feeds") and the first
               value of the graph, in forward order, that holds a NaN or Inf: a leaf
               (a feed's NaN label or Inf feature, a Parameter gone non-finite), or the
               op that produced it from finite inputs (`fa.log` of a negative number).
               That example changes no Parameter, no optimizer state and takes no lr
               schedule step; the examples before it stay applied. The check costs one
               comparison an example. False: train through, as a Python loop would (the
               weights then usually become NaN).
    fuse       when the loss's whole graph is a chain of ops that fused nodes compute
               (BPR's `-sum(logsigmoid(vector_dot(U[u], V[i] - V[j])))`, skip-gram's
               `-sum(logsigmoid(gather_dot(W, c, C, ctx) * signs) * mask)`: see
               `fastad.training.fusion`), replay the fused nodes in its place: the same
               loss to rounding, for a fraction of the chain's cost. False replays the
               graph as built (the values of a Python loop of forward, backward and
               step, bit for bit).

    Before the first example, the ids the sampler can write are checked against
    the graph (a forward with the largest ones), so an id out of range is an
    IndexError with the Parameters untouched.

    The loop runs without the GIL. For its run it claims the Parameters of the
    graph and of the optimizer: another thread that trains, backpropagates into,
    steps or zeroes those Parameter objects meanwhile gets a RuntimeError (Hogwild
    threads each make their own Parameter over shared memory, `fa.hogwild.share`).

    Returns the mean loss of each epoch (a list of floats; nan for an epoch that had no
    examples, as a Hogwild worker's whose share the others took).

    >>> u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    >>> loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])).sum()
    >>> opt = fa.optim.SGD([U, V], lr=0.05)
    >>> fa.train(loss, opt, fa.data.PairwiseSampler(csr, u, i, j, seed=0), epochs=5,
    ...          lr_schedule=fa.optim.LinearDecay(opt, min_lr=1e-4))
    """
    if not isinstance(loss, Variable) or (<Variable>loss).size != 1:
        raise TypeError("train: `loss` must be a one-element fastad Variable")
    if not (<Variable>loss).requires_grad:
        raise RuntimeError("train: `loss` does not depend on any Parameter")
    if (<Variable>loss).on_device:
        raise ValueError(f"train: the compiled loop runs on the CPU, and `loss` is on "
                         f"{loss.device}; on a GPU, replay the step (forward, "
                         f"backward, optimizer.step) or capture it with fa.cuda.capture")
    if not hasattr(optimizer, "step") or not hasattr(optimizer, "zero_grad"):
        raise TypeError("train: `optimizer` must have step() and zero_grad() (a fastad optimizer)")
    if isinstance(optimizer, Optimizer) and (<Optimizer>optimizer)._device_state is not None:
        raise ValueError("train: the compiled loop runs on the CPU, and the optimizer's "
                         "Parameters are on a GPU; build the graph and the optimizer on one device")
    check_int("train", "epochs", epochs, 0)
    check_int("train", "report_every", report_every, 1)
    check_int("train", "schedule_every", schedule_every, 1)
    check_callable("train", "progress", progress)
    check_callable("train", "callback", callback)
    check_finite = check_flag("train", "check_finite", check_finite, True)
    cdef bint fuse_chains = check_flag("train", "fuse", fuse, True)
    cdef Sampler sampler
    if isinstance(feeds, Sampler):
        if shuffle or seed is not None:
            raise ValueError("train: shuffle and seed are the sampler's to set; pass them to it")
        sampler = feeds
    elif isinstance(feeds, Mapping):
        sampler = FeedSampler(feeds, shuffle=shuffle, seed=seed)
    else:
        raise TypeError(f"train: feeds must be a dict {{leaf: array}} or a sampler, got {type(feeds).__name__}")
    cdef Loop loop
    loop.schedule.rule, loop.schedule.base, loop.schedule.a, loop.schedule.b = RULE_NONE, 0, 0, 1
    if lr_schedule is not None:
        read_schedule("train", lr_schedule, optimizer, &loop.schedule)
    cdef Variable root = <Variable>loss
    cdef Plan plan = root._get_plan()
    _require_leaves_in_graph("train", "loss", plan, root, sampler)
    if fuse_chains:
        fused = fused_loss(loss, sampler.leaves)
        if fused is not None:
            root = <Variable>fused
            plan = root._get_plan()
    loop.fused = root is not loss
    # A fastad optimizer is called through C; any other object with step()/zero_grad() through Python.
    cdef Optimizer fast_opt = optimizer if isinstance(optimizer, Optimizer) else None
    loop.python_optimizer = <PyObject*>optimizer
    loop.progress = <PyObject*>progress if progress is not None else NULL
    loop.report_every, loop.schedule_every = report_every, schedule_every
    loop.check_finite = check_finite
    loop.epochs = epochs
    loop.done = loop.reported = 0
    loop.schedule_steps = 0
    cdef Py_ssize_t epoch = 0
    means = []
    cdef list routed = []
    cdef list claimed = claim_parameters("train", list(plan.params) + (fast_opt.params if fast_opt is not None else []))
    try:
        _check_sampled_ids("train", root, sampler)
        loop.reported_at = time.monotonic()
        try:
            optimizer.zero_grad()
            if fast_opt is not None:
                routed = _route_rows_to_steps(plan, root, fast_opt)
            sampler.set_row_prefetches(_row_prefetches(plan, root, sampler, routed, fast_opt))
            for epoch in range(loop.epochs):
                sampler.begin_epoch(epoch)
                with nogil:
                    _run_epoch(&loop, sampler, plan, root, fast_opt, epoch)
                sampler.end_epoch()
                mean = loop.total / sampler.epoch_examples if sampler.epoch_examples else float("nan")
                means.append(mean)
                if callback is not None:
                    callback(epoch + 1, mean)
            if progress is not None and (loop.done == 0 or loop.done % report_every):
                _report_progress(&loop)
        except (IndexError, FloatingPointError) as err:
            # Name the example (a bad id, a non-finite loss); the examples before it have been applied.
            raise type(err)(f"train: epoch {epoch + 1}, {sampler.where()}: {err}") from err
        finally:
            sampler.set_row_prefetches([])
            for node, table, _ in routed:
                (<RowGather>node).route(<Variable>table, None)
            if fast_opt is not None and loop.done:
                fast_opt.mark_stepped()
            if lr_schedule is not None:
                lr_schedule.last_epoch += loop.schedule_steps
    finally:
        release_parameters(claimed)
    return means


cdef Py_ssize_t _predict_rows(Sampler sampler, Plan plan, Variable output, char* dst,
                              Py_ssize_t n) except -1 nogil:
    """Up to n examples: fill the leaves, replay the forward, copy the output's values to
    the next row of dst; how many there were."""
    cdef Py_ssize_t done = 0, row_bytes = output.size * (8 if output.f64 else 4)
    while done < n and sampler.next_example():
        replay_plan_forward(plan)
        memcpy(dst + done * row_bytes, output.val_ptr, row_bytes)
        done += 1
    return done


def predict(output, feeds):
    """The values of `output` for every example, by replaying its forward in compiled code:
    what `fa.train` does without backward or steps, for a graph built over one example.

    output  a Variable built once over the leaves that `feeds` fill (a model's logits,
            scores, or any value of the graph).
    feeds   {leaf: array of N rows} (as `fa.train`'s), or a `fa.data.FeedSampler` or
            `BagSampler` without shuffle (a Hogwild shard's rank and workers give its
            rows): the examples in their order.

    Returns an array of shape (examples,) + output.shape, in output's dtype: row r is the
    output of example r. Nothing is trained and no gradient is kept; the ids the feeds can
    write are checked against the graph first (an IndexError names the leaf). Random ops
    draw as they do in a forward: build the graph in eval mode (`model.eval()`) to predict.

    >>> logit = w0 + fa.embedding_bag(W, ids, offs, mode="sum", include_last_offset=True)
    >>> fa.predict(logit, fa.data.BagSampler(ids, offs, test_ids, test_offsets)).shape
    (20000, 1)
    """
    if not isinstance(output, Variable):
        raise TypeError(f"predict: `output` must be a fastad Variable, got {type(output).__name__}")
    if (<Variable>output).on_device:
        raise ValueError(f"predict: the compiled loop runs on the CPU, and `output` is on "
                         f"{output.device}")
    cdef Sampler sampler
    if isinstance(feeds, FeedSampler):
        if feeds.shuffled:
            raise ValueError("predict: the sampler shuffles its rows; give one without shuffle "
                             "so that row r of the result is example r")
        sampler = feeds
    elif isinstance(feeds, Mapping):
        sampler = FeedSampler(feeds)
    elif isinstance(feeds, Sampler):
        raise TypeError(f"predict: {type(feeds).__name__} draws its examples at random; give "
                        f"feeds {{leaf: array}} or a FeedSampler or BagSampler")
    else:
        raise TypeError(f"predict: feeds must be a dict {{leaf: array}} or a FeedSampler, got "
                        f"{type(feeds).__name__}")
    cdef Variable out = <Variable>output
    cdef Plan plan = out._get_plan()
    _require_leaves_in_graph("predict", "output", plan, out, sampler)
    _check_sampled_ids("predict", out, sampler)
    result = np.empty((sampler.examples_per_epoch,) + tuple(out.shape), dtype=out.dtype)
    cdef char* dst = <char*>cnp.PyArray_DATA(result)
    cdef Py_ssize_t n = result.shape[0], done
    sampler.begin_epoch(0)
    try:
        with nogil:
            done = _predict_rows(sampler, plan, out, dst, n)
    except IndexError as err:
        raise IndexError(f"predict: {sampler.where()}: {err}") from err
    sampler.end_epoch()
    return result[:done]
