"""Progress reports of a training run: the protocol every trainer shares, and its bar.

`fa.train`, `fa.hogwild.run` and every model's `fit` take the same `progress`
callable and call it as `progress(done, per_second)`: `done` the examples trained
so far in the run (counting on across epochs, never going back), `per_second` the
rate over the time since the previous report. The last call of a run has the run's
total. `fa.progress_bar(total)` is such a callable; so is a one-line adapter of a
tqdm bar:

    bar = tqdm.tqdm(total=n, unit="examples")
    model.fit(data, progress=lambda done, per_second: bar.update(done - bar.n))

The same trainers take `callback(epoch, loss)`, called after each epoch with
epochs numbered from 1 and the epoch's mean loss per example.
"""
import math
import sys
import time

from fastad.checks import check_int, check_number

__all__ = ["ProgressBar", "progress_bar", "TERMINAL_INTERVAL", "LOG_INTERVAL"]

TERMINAL_INTERVAL = 0.1   # seconds between two redraws on a terminal (tqdm's mininterval)
LOG_INTERVAL = 5.0        # seconds between two lines written to a file, a pipe or a log


class ProgressBar:
    """A `progress(done, per_second)` callable that shows a run's progress as tqdm does.

    On a terminal (`stream.isatty()`) it redraws one line in place with a carriage
    return, at most once every `TERMINAL_INTERVAL` (0.1) seconds. Anywhere else (a log
    file, a pipe, a captured stream) it writes one plain line per update, at most one
    every `LOG_INTERVAL` (5) seconds: a run reported every second (`fa.hogwild.run`'s
    default) leaves a line every 5 seconds, and updates rarer than that each get
    their line. `min_interval` (seconds) overrides either. The first update and the
    one that reaches `total` are always shown; an update held back by the interval
    is shown by `close()`.

    total      the examples the run will report (the bar and the share done), or
               None for a count and a rate without a bar
    desc       a label shown before the bar, or None
    stream     where to write (default sys.stderr)
    width      the bar's width in characters

    A terminal's line ends when `done` reaches `total`, or at `close()` (for a run
    without a total, or one that stopped short of it).

    >>> model.fit(train, epochs=5, progress=fa.progress_bar(5 * train.nnz, desc="BPR"))

    tqdm's own bar adapts in one line (fastad does not import tqdm):
    `progress=lambda done, per_second: bar.update(done - bar.n)`.
    """

    def __init__(self, total=None, desc=None, stream=None, width=30, min_interval=None):
        who = "progress_bar"
        self.total = None if total is None else check_int(who, "total", total)
        if desc is not None and not isinstance(desc, str):
            raise TypeError(f"{who}: desc must be a str or None, got {desc!r} ({type(desc).__name__})")
        self.desc = desc
        self.stream = sys.stderr if stream is None else stream
        if not all(callable(getattr(self.stream, method, None)) for method in ("write", "flush")):
            raise TypeError(f"{who}: stream must be a text stream with write() and flush() (such "
                            f"as sys.stderr), got {type(self.stream).__name__}")
        self.width = check_int(who, "width", width)
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(isatty()) if callable(isatty) else False
        self.min_interval = ((TERMINAL_INTERVAL if self.terminal else LOG_INTERVAL) if min_interval is None
                             else check_number(who, "min_interval", min_interval, at_least=0))
        self.shown_at = -math.inf
        self.held = None             # (done, per_second) of the last update not shown yet
        self.line_open = False       # a terminal line drawn and not yet ended
        self.line_width = 0

    def __call__(self, done, per_second):
        now = time.monotonic()
        finished = self.total is not None and done >= self.total
        if now - self.shown_at < self.min_interval and not finished:
            self.held = done, per_second
            return
        self._show(done, per_second)
        self.shown_at = now
        if finished:
            self._end_line()

    def close(self):
        """Show the update that the interval held back, and end a terminal's line."""
        if self.held is not None:
            self._show(*self.held)
        self._end_line()

    def _show(self, done, per_second):
        self.held = None
        label = f"  {self.desc}: " if self.desc else "  "
        if self.total is None:
            count = f"{done:>11,} examples"
        else:
            filled = int(self.width * min(done, self.total) / self.total)
            count = f"[{'#' * filled}{'.' * (self.width - filled)}] {done:>11,}/{self.total:,} examples"
        line = f"{label}{count}  {per_second:>12,.0f} examples/s"
        if self.terminal:
            # padded to the previous line's width, so that no tail of a longer one stays
            self.stream.write("\r" + line.ljust(self.line_width))
            self.line_width, self.line_open = max(self.line_width, len(line)), True
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def _end_line(self):
        if self.line_open:
            self.stream.write("\n")
            self.stream.flush()
            self.line_open, self.line_width = False, 0


# The name the trainers' docs use (as tqdm's bar is the class `tqdm`).
progress_bar = ProgressBar


class ProgressRate:
    """Calls `progress(done, per_second)` with the examples `done` so far and the rate over
    the time since its previous call (or since it was made, at `done`)."""

    def __init__(self, progress, done=0):
        self.progress, self.time, self.done = progress, time.monotonic(), done

    def __call__(self, done):
        now = time.monotonic()
        self.progress(done, (done - self.done) / max(now - self.time, 1e-9))
        self.time, self.done = now, done
