"""Argument checks shared by fastad's constructors, fits and data helpers.

Each check returns the argument in the form it checks for, or raises a
TypeError (an argument of the wrong type) or a ValueError (a value out of
range, or not one of the accepted options) whose message names the caller
(`who`), the argument, the value it got and what was expected:

>>> check_int("BPR", "dim", 0)
Traceback (most recent call last):
ValueError: BPR: dim must be >= 1, got 0

The compiled modules keep their own checks (fastad/_engine/graph.pyx), which run
without the interpreter.
"""
import math
import numbers

import numpy as np

__all__ = ["check_int", "check_sizes", "check_seed", "check_number", "check_choice", "check_flag",
           "check_callable", "either"]


def _got(value):
    """What a type error says it got: the value and its type."""
    return f"{value!r} ({type(value).__name__})"


def check_int(who, name, value, minimum=1):
    """`value` as an int >= `minimum` (any int when `minimum` is None); a bool, a float
    or a string is a TypeError, even one that holds a whole number."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an int, got {_got(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{who}: {name} must be >= {minimum}, got {value}")
    return int(value)


def check_sizes(who, **sizes):
    """The sizes given as name=value, each checked to be an int >= 1, as a tuple in that order.

    >>> n_users, dim = check_sizes("BPR", n_users=1000, dim=32)
    """
    return tuple(check_int(who, name, value) for name, value in sizes.items())


def check_seed(who, seed):
    """`seed` as an int >= 0, or None (fresh entropy, or `fa.manual_seed`'s stream)."""
    return None if seed is None else check_int(who, "seed", seed, minimum=0)


def check_number(who, name, value, above=None, at_least=None, below=None, at_most=None):
    """`value` as a float: a finite real number (not a bool) that is > `above`,
    >= `at_least`, < `below` and <= `at_most`, for those bounds that are given.

    >>> check_number("BatchNorm1d", "momentum", 0.1, at_least=0, at_most=1)
    0.1
    """
    low = above if above is not None else at_least
    high = below if below is not None else at_most
    if low is not None and high is not None:
        expected = (f"a number in {'(' if above is not None else '['}{low:g}, "
                    f"{high:g}{')' if below is not None else ']'}")
    else:
        expected = " ".join(["a finite number"] + [
            f"{relation} {bound:g}" for relation, bound in
            ((">", above), (">=", at_least), ("<", below), ("<=", at_most)) if bound is not None])
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {name} must be {expected}, got {_got(value)}")
    number = float(value)
    if not (math.isfinite(number) and (above is None or number > above)
            and (at_least is None or number >= at_least) and (below is None or number < below)
            and (at_most is None or number <= at_most)):
        raise ValueError(f"{who}: {name} must be {expected}, got {value!r}")
    return number


def check_choice(who, name, value, choices):
    """`value` if it is one of `choices` (strings, and None where None is an option);
    else a ValueError that lists them."""
    if not (value is None or isinstance(value, str)) or value not in choices:
        raise ValueError(f"{who}: {name} must be one of {choices}, got {value!r}")
    return value


def check_flag(who, name, value):
    """`value` as a bool: True or False (numpy's too), or the ints 0 and 1; anything
    else (a string, None, 2) is a TypeError rather than a guess at what it means."""
    if not isinstance(value, (bool, np.bool_)) and not (
            isinstance(value, numbers.Integral) and value in (0, 1)):
        raise TypeError(f"{who}: {name} must be True or False, got {_got(value)}")
    return bool(value)


def check_callable(who, name, value):
    """`value` if it is callable or None, else a TypeError."""
    if value is not None and not callable(value):
        raise TypeError(f"{who}: {name} must be callable or None, got {_got(value)}")
    return value


def either(who, name, value, default, other_name, other_value):
    """An argument that has two names, fastad's (`name`, whose default is `default`) and a
    peer library's (`other_name`, say "gensim's vector_size", unset when None): the one
    given, or a TypeError when both are.

    >>> either("BPR", "dim", None, None, "implicit's factors", 64)
    64
    """
    if other_value is None:
        return value
    if value is not default and value != default:
        raise TypeError(f"{who}: give {name} or {other_name}, not both")
    return other_value


def look_up(mapping, key, missing):
    """`mapping[key]`, or a KeyError whose message is `missing()` (a callable, so that a key
    that is there costs no message), raised without the lookup's own KeyError attached."""
    try:
        return mapping[key]
    except KeyError:
        raise KeyError(missing()) from None


def check_ids(who, name, ids, limit, what):
    """`ids` (one id or an array of them) as an int64 array of values in [0, limit), or
    TypeError/IndexError naming `name` and the first id out of range (and where it is)."""
    array = np.asarray(ids)
    if array.dtype.kind not in "iu":
        if array.size == 0:
            return array.astype(np.int64)
        raise TypeError(f"{who}: {name} must be integer ids, got dtype {array.dtype}")
    bad = (array < 0) | (array >= limit)
    if bad.any():
        first = np.flatnonzero(bad)[0]
        if array.ndim == 0:
            found = f"is {array[()]}"
        else:
            position = tuple(int(i) for i in np.unravel_index(first, array.shape))
            where = position if array.ndim > 1 else position[0]
            found = f"holds {array.flat[first]} at position {where}"
        raise IndexError(f"{who}: {name} {found}, outside the {limit} {what} (ids 0..{limit - 1})")
    return array.astype(np.int64)
