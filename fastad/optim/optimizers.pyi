"""Type stubs for fastad/optim/optimizers.pyx: optimizers and gradient clipping."""
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from typing_extensions import Self

from fastad._engine.graph import Parameter, RowStep

__all__ = ["Optimizer", "SGD", "Adagrad", "Adam", "AdamW", "RMSprop", "Adadelta", "Adamax",
           "NAdam", "RAdam", "FTRL", "clip_grad_norm", "clip_grad_value", "set_step_hooks"]

class Optimizer:
    def __init__(self, params: Iterable[Parameter] | list[dict[str, Any]]) -> None: ...
    # Returns 0: a compiled method that reports errors by raising.
    def step(self) -> int: ...
    def zero_grad(self) -> None: ...
    @property
    def lr(self) -> float: ...
    @lr.setter
    def lr(self, value: float) -> None: ...
    param_groups: Final[list[MutableMapping[str, Any]]]
    params: Final[list[Parameter]]
    def hyperparameters(self) -> dict[str, float]: ...
    def state_dict(self) -> dict[str, float | int | NDArray[np.floating[Any]]]: ...
    def load_state_dict(self, state: Mapping[str, Any]) -> Self: ...
    def row_step(self, p: Parameter) -> RowStep | None: ...
    def apply_update(self) -> None: ...

class SGD(Optimizer):
    def __init__(self, params: Iterable[Parameter], lr: float, momentum: float = 0.0,
                 dampening: float = 0.0, nesterov: bool = False, weight_decay: float = 0.0) -> None: ...
    momentum: Final[float]
    dampening: Final[float]
    nesterov: Final[bool]
    weight_decay: Final[float]

# Plain SGD's row step (SGD.row_step).
class SGDRowStep(RowStep): ...

# The row step of every other built-in optimizer: its sparse rule (Optimizer.row_step).
class RuleRowStep(RowStep): ...

class Adagrad(Optimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-2, eps: float = 1e-10,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0) -> None: ...
    eps: Final[float]
    weight_decay: Final[float]
    initial_accumulator_value: Final[float]

# The hyperparameters of Adam, AdamW, Adamax, RAdam and NAdam (not used directly).
class _MomentOptimizer(Optimizer):
    beta1: Final[float]
    beta2: Final[float]
    eps: Final[float]
    weight_decay: Final[float]

class Adam(_MomentOptimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None: ...
    decoupled: Final[bool]

class AdamW(Adam):
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2) -> None: ...

class RMSprop(Optimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-2, alpha: float = 0.99,
                 eps: float = 1e-8, weight_decay: float = 0.0, momentum: float = 0.0) -> None: ...
    alpha: Final[float]
    eps: Final[float]
    weight_decay: Final[float]
    momentum: Final[float]

class Adadelta(Optimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 1.0, rho: float = 0.9,
                 eps: float = 1e-6, weight_decay: float = 0.0) -> None: ...
    rho: Final[float]
    eps: Final[float]
    weight_decay: Final[float]

class FTRL(Optimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 0.1, beta: float = 1.0,
                 l1: float = 0.0, l2: float = 0.0) -> None: ...
    beta: Final[float]
    l1: Final[float]
    l2: Final[float]

class Adamax(_MomentOptimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0) -> None: ...

class NAdam(_MomentOptimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum_decay: float = 4e-3,
                 decoupled_weight_decay: bool = False) -> None: ...
    momentum_decay: Final[float]
    decoupled_weight_decay: Final[bool]

class RAdam(_MomentOptimizer):
    def __init__(self, params: Iterable[Parameter], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled_weight_decay: bool = False) -> None: ...
    decoupled_weight_decay: Final[bool]

def clip_grad_norm(params: Parameter | Iterable[Parameter], max_norm: float,
                   norm_type: float = 2.0) -> float: ...
def clip_grad_value(params: Parameter | Iterable[Parameter], clip_value: float) -> None: ...

# For the runner of a worker (fa.distributed, synchronized Hogwild): hook_for(optimizer) gives
# each new Optimizer's step hook, hook(optimizer, steps) -> steps to its next call.
def set_step_hooks(hook_for: Callable[[Optimizer], Callable[[Optimizer, int], int] | None] | None) -> None: ...
