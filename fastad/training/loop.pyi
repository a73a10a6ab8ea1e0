"""Type stubs for fastad/training/loop.pyx: the compiled per-example loops (train, predict)."""
from collections.abc import Callable, Mapping
from typing import Protocol, TypeAlias

import numpy as np
from numpy.typing import ArrayLike

from fastad._engine.graph import IndexInput, Input, Variable
from fastad.training.sampler import Sampler

# Any object with step() and zero_grad() will do; fastad's optimizers are called through C.
class _Steppable(Protocol):
    def step(self) -> object: ...
    def zero_grad(self) -> object: ...

# Mapping is invariant in its key type: a dict of IndexInput keys is no Mapping[Variable, ...].
_Feeds: TypeAlias = (Mapping[Input, ArrayLike] | Mapping[IndexInput, ArrayLike]
                     | Mapping[Variable, ArrayLike])

# A fastad scheduler: fastad.optim.StepLR, CosineAnnealingLR, LinearWarmup, LinearDecay.
class _CompiledSchedule(Protocol):
    last_epoch: int
    def compiled_rule(self) -> tuple[str, float, float, float]: ...

def train(loss: Variable, optimizer: _Steppable, feeds: _Feeds | Sampler, epochs: int = 1,
          shuffle: bool = False, seed: int | None = None,
          progress: Callable[[int, float], object] | None = None,
          report_every: int = 100_000, lr_schedule: _CompiledSchedule | None = None,
          schedule_every: int = 1,
          callback: Callable[[int, float], object] | None = None, *,
          check_finite: bool = True, fuse: bool = True) -> list[float]: ...

def predict(output: Variable, feeds: _Feeds | Sampler) -> np.ndarray: ...
