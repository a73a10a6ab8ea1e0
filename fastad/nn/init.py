"""Parameter initialisers (`fa.nn.init`), in place, with torch.nn.init's formulas.

Fan convention: fastad multiplies `x @ W`, so a 2-D weight has shape
(fan_in, fan_out); for more dimensions fan_in = shape[0] * r and
fan_out = shape[1] * r with r = prod(shape[2:]). (torch stores (out, in):
its fans are these with the first two axes swapped.)

Every function takes `generator=`, a numpy Generator, for reproducible draws
(a fresh unseeded one when None), writes into the Parameter's value in place
and returns the Parameter. `uniform_` and `normal_` draw in the Parameter's
dtype straight into its value (no float64 draw, no temporary the size of the
table); a table of more than 2**20 values is drawn in chunks of 2**20, each from its own
stream spawned from one draw of `generator`, which `threads=` fills in
parallel: the values depend on the generator and the table's size, never on
the number of threads.

>>> w = fa.Parameter(np.empty((784, 128)))
>>> fa.nn.init.kaiming_uniform_(w, nonlinearity="relu", generator=np.random.default_rng(0))
"""
import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from fastad._engine.graph import Parameter
from fastad import random as fastad_random
from fastad.checks import check_int

__all__ = ["calculate_gain", "xavier_normal_", "xavier_uniform_", "kaiming_normal_",
           "kaiming_uniform_", "uniform_", "normal_", "zeros_", "ones_"]

_CHUNK = 1 << 20        # values per stream of a larger table (4 MiB of float32)


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for `nonlinearity` (torch.nn.init.calculate_gain):
    1 for "linear"/"sigmoid", 5/3 for "tanh", sqrt(2) for "relu",
    sqrt(2 / (1 + slope**2)) for "leaky_relu" (slope = param, default 0.01),
    3/4 for "selu".

    >>> fa.nn.init.calculate_gain("tanh")
    1.6666666666666667
    """
    if nonlinearity in ("linear", "identity", "sigmoid"):
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: the negative slope must be a number, got {slope!r}")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}; expected one of "
                     f"linear, identity, sigmoid, tanh, relu, leaky_relu, selu")


def _target(who, param, generator):
    if not isinstance(param, Parameter):
        raise TypeError(f"{who}: expected a fastad Parameter, got {type(param).__name__}")
    generator = fastad_random.generator(who, generator)
    value = param.value if param.device == "cpu" else param.numpy()
    return value, generator


def _write(param, value, contents):
    """Write `contents` into `_target`'s array and make it count (that array is the
    value itself on the CPU, a host copy of a device Parameter's value otherwise);
    returns the Parameter."""
    value[...] = contents
    if param.device != "cpu":
        param.set_value(value)
    return param


def _fans(who, shape):
    if len(shape) < 2:
        raise ValueError(f"{who}: fan_in and fan_out need a Parameter with at least 2 dimensions, "
                         f"got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[0] * receptive, shape[1] * receptive


def _fill(who, param, value, rng, threads, draw):
    """Fill `value` (`_target`'s array, C-contiguous) by `draw(generator, flat_slice)` in
    place: in one call from `rng` when it holds at most _CHUNK values, else chunk by chunk
    from streams spawned from one draw of `rng`, on `threads` threads; returns the Parameter."""
    threads = 1 if threads is None else check_int(who, "threads", threads, 1)
    flat = value.reshape(-1)
    if flat.size <= _CHUNK:
        draw(rng, flat)
    else:
        starts = range(0, flat.size, _CHUNK)
        streams = np.random.SeedSequence(rng.integers(2**63)).spawn(len(starts))

        def fill(k):
            draw(np.random.default_rng(streams[k]), flat[starts[k]:starts[k] + _CHUNK])

        if threads == 1:
            for k in range(len(starts)):
                fill(k)
        else:       # numpy draws without the GIL: the chunks fill on all the threads
            with ThreadPoolExecutor(min(threads, len(starts))) as pool:
                list(pool.map(fill, range(len(starts))))
    if param.device != "cpu":
        param.set_value(value)
    return param


def uniform_(param, a=0.0, b=1.0, generator=None, threads=None):
    """Fill with draws from U(a, b), in the Parameter's dtype, in place (`threads`: fill
    a table of more than 2**20 values on that many threads; see the module's docstring).

    >>> fa.nn.init.uniform_(w, -0.1, 0.1, generator=np.random.default_rng(0))
    """
    value, rng = _target("uniform_", param, generator)
    if not a <= b:
        raise ValueError(f"uniform_: need a <= b, got a={a!r}, b={b!r}")
    low, width = value.dtype.type(a), value.dtype.type(b - a)

    def draw(generator, out):
        generator.random(out=out, dtype=out.dtype)
        out *= width
        out += low
    return _fill("uniform_", param, value, rng, threads, draw)


def normal_(param, mean=0.0, std=1.0, generator=None, threads=None):
    """Fill with draws from N(mean, std**2), in the Parameter's dtype, in place (no
    float64 draw for a float32 table; `threads`: fill a table of more than 2**20 values
    on that many threads, the same values whatever their number).

    >>> fa.nn.init.normal_(emb, std=0.01, generator=np.random.default_rng(0))
    >>> fa.nn.init.normal_(big_table, generator=np.random.default_rng(0), threads=8)
    """
    value, rng = _target("normal_", param, generator)
    if not std >= 0:
        raise ValueError(f"normal_: std must be >= 0, got {std!r}")
    scale, shift = value.dtype.type(std), value.dtype.type(mean)

    def draw(generator, out):
        generator.standard_normal(out=out, dtype=out.dtype)
        if scale != 1:
            out *= scale
        if shift != 0:
            out += shift
    return _fill("normal_", param, value, rng, threads, draw)


def zeros_(param):
    """Fill with 0.

    >>> fa.nn.init.zeros_(bias)
    """
    return _write(param, _target("zeros_", param, None)[0], 0)


def ones_(param):
    """Fill with 1.

    >>> fa.nn.init.ones_(scale)
    """
    return _write(param, _target("ones_", param, None)[0], 1)


def _scaled(who, param, generator, uniform, spread):
    """Fill with U(-s, s) (`uniform`) or N(0, s**2), s = spread(fan_in, fan_out), the draw
    of xavier_* and kaiming_* (an empty Parameter is left as it is); returns the Parameter."""
    value, rng = _target(who, param, generator)
    if value.size:
        s = spread(*_fans(who, value.shape))
        _write(param, value, rng.uniform(-s, s, size=value.shape) if uniform
               else rng.normal(0.0, s, size=value.shape))
    return param


def xavier_uniform_(param, gain=1.0, generator=None):
    """Glorot uniform: U(-a, a) with a = gain * sqrt(6 / (fan_in + fan_out)).

    >>> fa.nn.init.xavier_uniform_(w, gain=fa.nn.init.calculate_gain("tanh"))
    """
    return _scaled("xavier_uniform_", param, generator, True, lambda fan_in, fan_out:
                   math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out)))


def xavier_normal_(param, gain=1.0, generator=None):
    """Glorot normal: N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out)).

    >>> fa.nn.init.xavier_normal_(w)
    """
    return _scaled("xavier_normal_", param, generator, False, lambda fan_in, fan_out:
                   gain * math.sqrt(2.0 / (fan_in + fan_out)))


def _kaiming_std(who, a, mode, nonlinearity, fan_in, fan_out):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{who}: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(param, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He uniform: U(-b, b) with b = sqrt(3) * gain / sqrt(fan), fan = fan_in or
    fan_out per `mode`, gain = calculate_gain(nonlinearity, a).

    >>> fa.nn.init.kaiming_uniform_(w, nonlinearity="relu")
    """
    return _scaled("kaiming_uniform_", param, generator, True, lambda *fans:
                   math.sqrt(3.0) * _kaiming_std("kaiming_uniform_", a, mode, nonlinearity, *fans))


def kaiming_normal_(param, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """He normal: N(0, std**2) with std = gain / sqrt(fan) (see kaiming_uniform_).

    >>> fa.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    """
    return _scaled("kaiming_normal_", param, generator, False, lambda *fans:
                   _kaiming_std("kaiming_normal_", a, mode, nonlinearity, *fans))
