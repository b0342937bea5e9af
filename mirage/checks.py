"""One way to check a configuration value, shared by every config class and by the flags made from their fields.

Each check takes where the value sits (``section.field``), the user's value and its bounds, and returns the value
normalised, or raises one one-line :class:`ConfigError`: ``cci.top_k must be an integer >= 1, got 3.7.``, or for a
choice ``cti.metric='jss' is not valid; choose one of 'kl_noctx_ctx', 'js', …; did you mean 'js'?``. The user's value
is shown bounded (:func:`mirage.data.inputs.short_repr`). The rules, the same for every config class:

- :func:`integer`: an ``int`` (never a ``bool``); an integer-valued float such as ``3.0`` (what YAML gives for
  ``3.0``) is accepted and stored as ``3``; ``3.5``, ``"3"``, NaN and infinities are refused;
- :func:`number`: an ``int`` or ``float`` (never a ``bool``), stored as ``float``, finite, within its bounds;
  :func:`probability` and :func:`positive` are its two common ranges;
- :func:`boolean`: ``true``/``false`` only; :func:`string`: a string (a path also a ``pathlib.Path``, stored as
  ``str``); :func:`paths`: a path or a list of paths;
- :func:`literal`: one of fixed choices; :func:`registered`: a name of a registry (built-in names accepted without
  importing the registry's module);
- :func:`seed`: an integer in [0, 2**63);
- any of them takes ``optional=True`` to let ``None`` through.

:func:`setfield` applies a check to a field of a frozen dataclass in ``__post_init__`` and stores the normalised
value; :func:`flag_type` makes an argparse ``type=`` of a check, reading the flag's text as a number first, so that
``--cci-top-k 3.0`` and ``top_k: 3.0`` get the same verdict.
"""

from __future__ import annotations

import argparse
import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NoReturn, get_args, get_origin

from mirage.data.inputs import short_repr
from mirage.registry import did_you_mean

__all__ = ["ConfigError", "boolean", "fail", "flag_type", "float_flag", "int_flag", "integer", "literal",
           "non_negative_int", "not_one_of", "number", "paths", "positive", "positive_int", "probability", "registered",
           "seed", "setfield", "show", "string"]


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the fix."""


def show(value: Any) -> str:
    """A user's value in a message: bounded, whatever its size (:func:`mirage.data.inputs.short_repr`)."""
    return short_repr(value, 60)


def fail(where: str, expected: str, value: Any, hint: str = "") -> NoReturn:
    """``where must be EXPECTED, got VALUE[; hint].``"""
    subject = f"{where} " if where else ""
    raise ConfigError(f"{subject}must be {expected}, got {show(value)}{'; ' + hint if hint else ''}.")


def _is_integral(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return isinstance(value, numbers.Integral) or (math.isfinite(value) and float(value).is_integer())


def integer(where: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
            below: int | None = None, optional: bool = False, expected: str = "", hint: str = "") -> int | None:
    """An integer within ``[minimum, maximum]`` (and ``< below``), stored as ``int``; see the module docstring."""
    if value is None and optional:
        return None
    if not expected:
        bounds = [f">= {minimum}"] if minimum is not None else []
        bounds += [f"<= {maximum}"] if maximum is not None else []
        bounds += [f"< {below}"] if below is not None else []
        expected = "an integer" + (" " + " and ".join(bounds) if bounds else "")
    if not _is_integral(value):
        fail(where, expected, value, hint)
    converted = int(value)
    if ((minimum is not None and converted < minimum) or (maximum is not None and converted > maximum)
            or (below is not None and converted >= below)):
        fail(where, expected, value, hint)
    return converted


def number(where: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
           above: float | None = None, optional: bool = False, expected: str = "", hint: str = "") -> float | None:
    """A finite number within ``[minimum, maximum]`` (and ``> above``), stored as ``float``."""
    if value is None and optional:
        return None
    if not expected:
        low = f"({above}" if above is not None else f"[{minimum}" if minimum is not None else ""
        if low and maximum is not None:
            expected = f"a number in {low}, {maximum}]"
        elif low:
            expected = f"a finite number {'>' if above is not None else '>='} {low[1:]}"
        elif maximum is not None:
            expected = f"a finite number <= {maximum}"
        else:
            expected = "a finite number"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        fail(where, expected, value, hint)
    converted = float(value)
    if (not math.isfinite(converted) or (minimum is not None and converted < minimum)
            or (maximum is not None and converted > maximum) or (above is not None and converted <= above)):
        fail(where, expected, value, hint)
    return converted


def probability(where: str, value: Any, **options: Any) -> float | None:
    """A number in [0, 1]."""
    return number(where, value, minimum=0, maximum=1, **options)


def positive(where: str, value: Any, **options: Any) -> float | None:
    """A finite number > 0."""
    return number(where, value, above=0, **options)


#: Seeds are integers in [0, 2**63): what torch, Python's ``random`` and the stores all take.
SEED_BOUND = 2**63


def seed(where: str, value: Any, **options: Any) -> int | None:
    """A seed: an integer in [0, 2**63)."""
    return integer(where, value, minimum=0, below=SEED_BOUND, expected="an integer in [0, 2**63)", **options)


def boolean(where: str, value: Any, *, optional: bool = False, hint: str = "") -> bool | None:
    """``True`` or ``False`` (not 0/1, not ``"false"``)."""
    if value is None and optional:
        return None
    if not isinstance(value, bool):
        fail(where, "true or false", value, hint)
    return value


def string(where: str, value: Any, *, optional: bool = False, path: bool = False, nonempty: bool = False,
           expected: str = "a string", hint: str = "") -> str | None:
    """A string (``path``: also an ``os.PathLike``, stored as ``str``; ``nonempty``: not blank)."""
    if value is None and optional:
        return None
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or (nonempty and not value.strip()):
        fail(where, expected, value, hint or ("or null" if optional and expected == "a string" else ""))
    return value


def paths(where: str, value: Any, *, expected: str = "a path or a list of paths") -> tuple[str, ...]:
    """A path or a sequence of paths as a tuple of strings."""
    if isinstance(value, (str, os.PathLike)):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(v, (str, os.PathLike)) for v in value):
        fail(where, expected, value)
    return tuple(os.fspath(v) for v in value)


def _choices(choices: Any) -> tuple[str, ...]:
    """The names of a ``Literal`` type, or of an iterable of names."""
    return get_args(choices) if get_origin(choices) is not None else tuple(choices)


def not_one_of(where: str, value: Any, choices: Iterable[str], fix: str = "") -> NoReturn:
    """``where=VALUE is not valid; choose one of …[ (fix)][; did you mean …?]``."""
    names = list(choices)
    close = did_you_mean(value, names) if isinstance(value, str) else ""
    raise ConfigError(f"{where}={show(value)} is not valid; choose one of {', '.join(map(repr, names))}"
                      f"{f' ({fix})' if fix else ''}{'; ' + close if close else '.'}")


def literal(where: str, value: Any, choices: Any, *, optional: bool = False) -> str | None:
    """One of ``choices`` (a ``Literal`` type or names)."""
    if value is None and optional:
        return None
    allowed = _choices(choices)
    if not isinstance(value, str) or value not in allowed:
        not_one_of(where, value, allowed)
    return value


def registered(where: str, value: Any, registry: Mapping[str, Any] | Callable[[], Mapping[str, Any]], *,
               builtin: Any = (), how: str = "") -> str:
    """A name of ``registry`` (or of the callable giving it, called only when ``value`` is not a ``builtin`` name,
    so that a built-in name is accepted without importing the registry's module); ``how``: where to register one."""
    if isinstance(value, str) and value in _choices(builtin):
        return value
    names = registry() if callable(registry) else registry
    if not isinstance(value, str) or value not in names:
        choices = dict.fromkeys([*_choices(builtin), *names])  # built-ins first, in their order
        not_one_of(where, value, choices, f"or register one with {how}" if how else "")
    return value


def setfield(obj: Any, where: str, check: Callable[..., Any], **options: Any) -> None:
    """Check the field of ``obj`` named by the last part of ``where`` (``"cci.top_k"`` → ``obj.top_k``) with
    ``check`` and store the normalised value (``object.__setattr__``: the config dataclasses are frozen)."""
    name = where.rsplit(".", 1)[-1]
    value = getattr(obj, name)
    checked = check(where, value, **options)
    if checked is not value:
        object.__setattr__(obj, name, checked)


def _read_number(text: str) -> Any:
    """A flag's text as the number it writes (``"3"`` → 3, ``"3.0"`` → 3.0, ``"1e-3"`` → 0.001), or the text."""
    for parse in (int, float):
        try:
            return parse(text)
        except ValueError:
            pass
    return text


def flag_type(check: Callable[..., Any], **options: Any) -> Callable[[str], Any]:
    """An argparse ``type=`` giving the verdict of ``check`` (with ``options``) on the number a flag's text writes;
    a refusal is argparse's one-line error: ``argument --limit: must be an integer >= 0, got '2.5'``."""

    def parse(text: str) -> Any:
        value = _read_number(text)
        try:
            return check("", value, **options)
        except ConfigError as err:
            if isinstance(value, str):  # what the user typed, not the str of a number
                raise argparse.ArgumentTypeError(str(err)) from None
            raise argparse.ArgumentTypeError(str(err).replace(f"got {show(value)}", f"got {show(text)}")) from None

    parse.__name__ = check.__name__
    return parse


#: argparse types of the two number kinds, for flags made from config fields (their bounds are the field's check).
int_flag = flag_type(integer)
float_flag = flag_type(number)
#: argparse types: an integer >= 0 / >= 1, read as a config field's integer is (:func:`integer`: ``3.0`` is 3, ``3.5``
#: is refused).
non_negative_int = flag_type(integer, minimum=0)
positive_int = flag_type(integer, minimum=1)
