"""Activation functions as Modules (`fa.nn.ReLU()`, ...), for `Sequential` and for
models that keep their layers as attributes, with PyTorch's names; plus
`Identity` and `Flatten`. Each calls the function of the same name in `fa`."""
from fastad_cy.elementwise import (elu, gelu, hardtanh, leaky_relu, logsigmoid, relu, sigmoid, silu,
                                   softplus, tanh)
from fastad_cy.reduction import log_softmax, softmax
from fastad_cy.graph import Input
from fastad_cy.shape import reshape
from fastad.checks import check_int
from fastad.nn.module import Module

__all__ = ["ReLU", "LeakyReLU", "GELU", "ELU", "SiLU", "Hardtanh", "Tanh", "Sigmoid", "Softplus", "LogSigmoid", "Softmax", "LogSoftmax",
           "Identity", "Flatten"]


class _Pointwise(Module):
    function = None

    def forward(self, x):
        return type(self).function(x)


class ReLU(_Pointwise):
    """max(x, 0): `fa.relu` as a Module."""
    function = relu


class Tanh(_Pointwise):
    """`fa.tanh` as a Module."""
    function = tanh


class Sigmoid(_Pointwise):
    """`fa.sigmoid` as a Module."""
    function = sigmoid


class Softplus(_Pointwise):
    """log(1 + exp(x)): `fa.softplus` as a Module."""
    function = softplus


class LogSigmoid(_Pointwise):
    """`fa.logsigmoid` as a Module."""
    function = logsigmoid


class LeakyReLU(Module):
    """x for x > 0, else negative_slope * x: `fa.leaky_relu` as a Module."""

    def __init__(self, negative_slope=0.01):
        super().__init__()
        leaky_relu(Input(0.0), negative_slope)      # checks negative_slope now, not at the first call
        self.negative_slope = negative_slope

    def forward(self, x):
        return leaky_relu(x, self.negative_slope)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}"


class GELU(Module):
    """x * Phi(x): `fa.gelu` as a Module (`approximate="tanh"` for PyTorch's tanh form)."""

    def __init__(self, approximate="none"):
        super().__init__()
        gelu(Input(0.0), approximate)           # checks `approximate` now, not at the first call
        self.approximate = approximate

    def forward(self, x):
        return gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


class ELU(Module):
    """x for x > 0, else alpha * (exp(x) - 1): `fa.elu` as a Module."""

    def __init__(self, alpha=1.0):
        super().__init__()
        elu(Input(0.0), alpha)
        self.alpha = alpha

    def forward(self, x):
        return elu(x, self.alpha)

    def extra_repr(self):
        return f"alpha={self.alpha}"


class SiLU(_Pointwise):
    """x * sigmoid(x): `fa.silu` as a Module."""
    function = silu


class Hardtanh(Module):
    """x clamped into [min_val, max_val]: `fa.hardtanh` as a Module."""

    def __init__(self, min_val=-1.0, max_val=1.0):
        super().__init__()
        hardtanh(Input(0.0), min_val, max_val)
        self.min_val, self.max_val = min_val, max_val

    def forward(self, x):
        return hardtanh(x, self.min_val, self.max_val)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Softmax(Module):
    """`fa.softmax(x, axis)` as a Module (`dim` is accepted as PyTorch's name for axis)."""

    function = softmax

    def __init__(self, axis=-1, dim=None):
        super().__init__()
        self.axis = check_int(type(self).__name__, "axis" if dim is None else "dim",
                              axis if dim is None else dim, minimum=None)

    def forward(self, x):
        return type(self).function(x, axis=self.axis)

    def extra_repr(self):
        return f"axis={self.axis}"


class LogSoftmax(Softmax):
    """`fa.log_softmax(x, axis)` as a Module."""

    function = log_softmax


class Identity(Module):
    """Returns its input unchanged (a placeholder layer)."""

    def forward(self, x):
        return x


class Flatten(Module):
    """Keeps the first axis (the batch) and flattens the rest: (n, a, b) -> (n, a * b)."""

    def forward(self, x):
        if len(x.shape) < 1:
            raise ValueError(f"Flatten: expected an input with a batch axis, got shape {x.shape}")
        return reshape(x, (x.shape[0], -1))
