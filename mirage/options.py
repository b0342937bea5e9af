"""Command-line options made from frozen dataclasses: the one way every ``mirage`` command gets its flags.

A field that a command sets declares its flag in its metadata (:func:`cli_arg` writes it, or a plain ``metadata=``
dict as :mod:`mirage.config` does): ``flag`` (``--ndocs``; a name without dashes, ``data``, is a positional
argument) and ``help``, written once: ``--help``, the CLI reference and the configuration reference all show it.
The parser's argument follows the field's annotation: a ``bool`` is a switch (``store_true``), a ``Literal`` gives
the choices, ``tuple[X, ...]`` takes one or more values (``tuple[X, Y]`` two), ``int`` and ``float`` are read as
the field's check reads them (``--ndocs 3.0`` is 3, :func:`mirage.checks.flag_type`). The help shows the field's
default (:func:`flag_help`). Where the annotation does not say it all, the metadata does: ``aliases`` (``-o``),
``metavar``, ``type`` (a narrower argparse type, e.g. an integer >= 1), ``nargs``, ``choices`` (names, or a callable
giving them), ``dest``, ``required``, ``cli_default`` (the parser's default where it is not the field's: None =
"not given", so that a config file or preset decides), ``exclusive`` (fields that choose the same thing share a
name: their flags exclude each other), and argparse's ``const`` (the value of a flag given without one, with
``nargs="?"``) and ``action="append"`` (a tuple field collecting one value per repetition of its flag), and
``renamed_from`` (a flag's old spellings: each still parses, hidden from the help, and warns that it is now
``flag``). ``implies`` and ``later`` belong to :mod:`mirage.config`.

    add_options(parser, XorAttriQAOptions)                         # every field with a flag, in field order
    options = options_from_args(XorAttriQAOptions, args, output=…)  # the flags given, the class's defaults elsewhere
    argv = options_argv(XorAttriQAOptions, args)                    # and back: the words that give those values
    argv = options_argv(ELI5Options, settings, ["ndocs"], changed=True)  # from recorded settings: what is not default
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any, Literal, get_args, get_origin

from mirage.checks import float_flag, int_flag

__all__ = ["OptionField", "RenamedFlag", "add_options", "cli_arg", "flag_help", "given_options", "option_dest",
           "option_fields", "option_flag", "options_argv", "options_from_args", "value_type"]

#: The metadata keys :func:`add_options` reads (besides ``flag`` and ``help``).
_SPEC_KEYS = ("aliases", "metavar", "type", "nargs", "choices", "dest", "required", "cli_default", "exclusive",
              "const", "action", "renamed_from")


def cli_arg(default: Any = dataclasses.MISSING, *, flag: str, help: str,
            default_factory: Any = dataclasses.MISSING, **metadata: Any) -> Any:
    """A dataclass field settable from the command line: ``field(default=…, metadata={"flag": …, "help": …})`` with
    any of the metadata keys of the module docstring (``aliases=("-o",)``, ``metavar="N"``, …)."""
    unknown = sorted(set(metadata) - set(_SPEC_KEYS) - {"implies", "later"})
    if unknown:
        raise TypeError(f"cli_arg() got unknown metadata {unknown}; known: {sorted(_SPEC_KEYS)}")
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"flag": flag, "help": help, **metadata})


@dataclasses.dataclass(frozen=True)
class OptionField:
    """One field that declares a flag: the dataclass field, its resolved annotation and its metadata (with a
    command's ``override`` applied)."""

    field: dataclasses.Field
    hint: Any
    spec: Mapping[str, Any]

    @property
    def flag(self) -> str:
        return self.spec["flag"]

    @property
    def positional(self) -> bool:
        return not self.flag.startswith("-")

    @property
    def dest(self) -> str:
        return option_dest(self.spec)

    def default(self, defaults: Any = None) -> Any:
        """The field's default (``defaults``' value of it where given: an instance, or a mapping by field name);
        :data:`dataclasses.MISSING` for a field without one."""
        name = self.field.name
        if isinstance(defaults, Mapping) and name in defaults:
            return defaults[name]
        if defaults is not None and not isinstance(defaults, Mapping):
            return getattr(defaults, name)
        if self.field.default is not dataclasses.MISSING:
            return self.field.default
        if self.field.default_factory is not dataclasses.MISSING:
            return self.field.default_factory()
        return dataclasses.MISSING


def option_dest(spec: Mapping[str, Any]) -> str:
    """The namespace attribute of a field's flag: ``dest`` if given, else argparse's (``--at-most-citations`` →
    ``at_most_citations``; a positional's name)."""
    return spec.get("dest") or spec["flag"].lstrip("-").replace("-", "_")


def option_fields(cls: type, only: Sequence[str] | None = None, *, skip: Collection[str] = (),
                  override: Mapping[str, Mapping[str, Any]] | None = None) -> Iterator[OptionField]:
    """The fields of dataclass ``cls`` that declare a flag, in field order (or in the order of ``only``, field
    names), less those named (field or flag) in ``skip``; ``override``: per field name, metadata a command gives
    instead of the field's (a help of its own, a positional's ``nargs``)."""
    hints = typing.get_type_hints(cls)
    by_name = {f.name: f for f in dataclasses.fields(cls)}
    names = list(only) if only is not None else list(by_name)
    unknown = [name for name in [*names, *(override or {})] if name not in by_name]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field {unknown[0]!r}")
    for name in names:
        f = by_name[name]
        spec = {**f.metadata, **(override or {}).get(name, {})}
        if "flag" in spec and name not in skip and spec["flag"] not in skip:
            yield OptionField(f, hints[name], spec)


def option_flag(cls: type, name: str) -> str:
    """The flag of field ``name`` of ``cls`` (``option_flag(GenerationConfig, "do_sample")`` is ``--sample``): for
    code that names a flag, so that renaming it in the options class renames it there too."""
    for opt in option_fields(cls, [name]):
        return opt.flag
    raise TypeError(f"{cls.__name__}.{name} declares no flag")


def _unwrap(hint: Any) -> Any:
    """``X`` for ``X | None``; ``str`` for a union holding ``str`` (a value given as text, parsed by the field)."""
    if get_origin(hint) in (typing.Union, types.UnionType):
        args = [arg for arg in get_args(hint) if arg is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
        return str if str in args else args[0]
    return hint


def value_type(hint: Any) -> type:
    """``float`` for ``float | None``, ``str`` for a Literal of strings, the type itself otherwise."""
    hint = _unwrap(hint)
    if get_origin(hint) is Literal:
        return type(get_args(hint)[0])
    return hint


def _shape(hint: Any) -> tuple[Any, Any, list[Any] | None]:
    """``(element type, nargs, choices)`` of an annotation: ``tuple[int, ...]`` → ``(int, "+", None)``, ``tuple[Side,
    Side]`` → ``(str, 2, ["first", "second"])``, ``Literal["en", "native"]`` → ``(str, None, ["en", "native"])``."""
    hint = _unwrap(hint)
    nargs = None
    if get_origin(hint) is tuple:
        args = get_args(hint)
        nargs = "+" if len(args) == 2 and args[1] is Ellipsis else len(args)
        hint = _unwrap(args[0])
    if get_origin(hint) is Literal:
        return type(get_args(hint)[0]), nargs, list(get_args(hint))
    return hint, nargs, None


def flag_help(help_text: str, default: Any) -> str:
    """A flag's help with the default it stands for (``… (default: 200)``), unless it says its default already or
    there is none (None, or an empty list)."""
    if isinstance(default, (list, tuple)):
        default = " ".join(map(str, default)) or None
    if default is None or default is dataclasses.MISSING or "default" in help_text:
        return help_text
    return f"{help_text} (default: {str(default).lower() if isinstance(default, bool) else default})"


def add_options(parser: argparse.ArgumentParser | Any, cls: type, only: Sequence[str] | None = None, *,
                skip: Collection[str] = (), unset: bool = False, defaults: Any = None,
                override: Mapping[str, Mapping[str, Any]] | None = None) -> list[argparse.Action]:
    """Add to ``parser`` an argument for each field of ``cls`` that declares a flag (see the module docstring;
    ``only``, ``skip`` and ``override`` as :func:`option_fields` takes them). The parser's default is the field's,
    unless ``unset`` (every default None, a switch's too: "not given", so that what a config file or preset sets
    stays) or the field's ``cli_default`` says otherwise; ``defaults`` (an instance of ``cls``, or a mapping) gives
    the defaults the help shows where they are not the field's own. An argument whose parser default is None
    (unless its ``cli_default`` says so: its help tells what decides then) records the field's as ``config_default``,
    what "not given" stands for, which the CLI reference shows."""
    groups: dict[str, Any] = {}
    actions = []
    for opt in option_fields(cls, only, skip=skip, override=override):
        spec = opt.spec
        exclusive = spec.get("exclusive")
        if exclusive and exclusive not in groups:
            groups[exclusive] = parser.add_mutually_exclusive_group()
        target = groups[exclusive] if exclusive else parser
        names, kwargs, default = _argument(opt, opt.default(defaults), unset=unset)
        action: Any = target.add_argument(*names, **kwargs)  # carries mirage's config_default beside argparse's
        if action.default is None and "cli_default" not in opt.spec:  # "not given" stands for the field's default
            action.config_default = None if kwargs.get("action") == "store_true" or default == () else default
        actions.append(action)
        for old in spec.get("renamed_from", ()):
            target.add_argument(old, **_renamed_kwargs(action, kwargs.get("action", "store"), opt.flag))
    return actions


class RenamedFlag(argparse.Action):
    """An old spelling of a flag (``renamed_from``): it sets what the flag sets, and says on stderr, in one line,
    that the flag is now ``new``."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, kind: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, **kwargs)
        self.new, self.kind = new, kind

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"mirage: warning: {option_string} is now {self.new}; the old spelling still works but will go",
              file=sys.stderr)
        if self.kind == "store_true":
            values = True
        elif self.kind == "append":
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


def _renamed_kwargs(action: argparse.Action, kind: str, new: str) -> dict[str, Any]:
    """``add_argument`` keywords of an old spelling of ``action``'s flag (its argparse ``kind``: ``store``,
    ``store_true`` or ``append``): the same dest, value shape and checks, hidden from the help, and no default of
    its own (the flag's stands)."""
    shape = {"nargs": 0} if kind == "store_true" else {
        "nargs": action.nargs, "type": action.type, "choices": action.choices, "metavar": action.metavar,
        "const": action.const}
    return {"action": RenamedFlag, "dest": action.dest, "new": new, "kind": kind, "help": argparse.SUPPRESS,
            "default": argparse.SUPPRESS, **shape}


def _argument(opt: OptionField, default: Any, *, unset: bool) -> tuple[list[str], dict[str, Any], Any]:
    """The names and keywords of ``add_argument`` for one field, and the default its help shows."""
    spec = opt.spec
    base, nargs, choices = _shape(opt.hint)
    shown = None if default is dataclasses.MISSING else default
    kwargs: dict[str, Any] = {}
    parser_default: Any
    if _is_switch(opt):
        kwargs["action"] = "store_true"
        parser_default = None if unset else bool(shown)
        kwargs["help"] = spec["help"]
    else:
        kind = spec["type"] if "type" in spec else {int: int_flag, float: float_flag}.get(base)
        if kind is not None:
            kwargs["type"] = kind
        choices = spec.get("choices", choices)
        if callable(choices):
            choices = choices()
        if choices:
            kwargs["choices"] = list(choices)
        nargs = spec.get("nargs", None if spec.get("action") == "append" else nargs)  # append: one value a flag
        if nargs is not None:
            kwargs["nargs"] = nargs
        kwargs.update({key: spec[key] for key in ("const", "action") if key in spec})
        parser_default = None if unset else (list(shown) or None) if isinstance(shown, tuple) else shown
        kwargs["help"] = flag_help(spec["help"], shown)
    kwargs["default"] = spec.get("cli_default", parser_default)
    if "metavar" in spec:
        kwargs["metavar"] = spec["metavar"]
    if opt.positional:
        if kwargs["default"] is None:  # argparse's own: a ``*`` positional given no default is required
            del kwargs["default"]
        return [opt.flag], kwargs, shown
    if "dest" in spec:
        kwargs["dest"] = spec["dest"]
    if spec.get("required", default is dataclasses.MISSING):
        kwargs["required"] = True
    return [*spec.get("aliases", ()), opt.flag], kwargs, shown


def given_options(cls: type, args: argparse.Namespace, only: Sequence[str] | None = None, *,
                  skip: Collection[str] = ()) -> dict[str, Any]:
    """The fields of ``cls`` whose flags ``args`` holds a value for, by field name: not None, and for a switch only
    when given (True: a switch turns a field on, its False is "not given"); several values as a tuple."""
    out = {}
    for opt in option_fields(cls, only, skip=skip):
        value = getattr(args, opt.dest, None)
        if value is None or (value is False and _is_switch(opt)):
            continue
        out[opt.field.name] = tuple(value) if isinstance(value, list) else value
    return out


def _is_switch(opt: OptionField) -> bool:
    base, nargs, _choices = _shape(opt.hint)
    return base is bool and nargs is None and not opt.positional


def options_from_args(cls: type, args: argparse.Namespace, only: Sequence[str] | None = None, *,
                      skip: Collection[str] = (), **values: Any) -> Any:
    """An instance of ``cls`` from the flags ``args`` gives (:func:`given_options`), ``values`` on top; the fields
    neither sets keep the class's defaults (and its checks refuse a bad value, naming the field)."""
    return cls(**{**given_options(cls, args, only, skip=skip), **values})


def options_argv(cls: type, values: Any, only: Sequence[str] | None = None, *, skip: Collection[str] = (),
                 changed: bool = False, defaults: Any = None) -> list[str]:
    """The command-line words that give the fields of ``cls`` (``only``, ``skip`` as :func:`option_fields` takes
    them) the values ``values`` holds (an instance of ``cls``, a mapping by field name, as results record settings,
    or a parsed namespace, read by each flag's dest): positionals first, then each flag whose value is set, under its
    shortest name (``-o``), explicit even where the value is the default (so that the line reproduces it when a
    default changes), unless ``changed``: then only the values that differ from the field's default (``defaults``'
    where given, as :meth:`OptionField.default` reads it; a recorded list equals a tuple default). Not set: None, an
    empty tuple, a switch's False. The inverse of :func:`options_from_args`: parsed again, these words give the same
    values."""
    positional: list[str] = []
    flags: list[str] = []
    for opt in option_fields(cls, only, skip=skip):
        if isinstance(values, Mapping):
            value = values.get(opt.field.name)
        else:
            value = getattr(values, opt.field.name if dataclasses.is_dataclass(values) else opt.dest, None)
        if value is None or (value is False and _is_switch(opt)):
            continue
        if changed and _plain(value) == _plain(opt.default(defaults)):
            continue
        words = [str(v) for v in value] if isinstance(value, (list, tuple)) else [str(value)]
        if opt.positional:
            positional += words
            continue
        name = min([opt.flag, *opt.spec.get("aliases", ())], key=len)
        if _is_switch(opt):
            flags.append(name)
        elif opt.spec.get("action") == "append":
            flags += [word for value_word in words for word in (name, value_word)]
        elif words:
            flags += [name, *words]
    return positional + flags


def _plain(value: Any) -> Any:
    """``value`` as JSON holds it: tuples (nested too) as lists."""
    return [_plain(v) for v in value] if isinstance(value, (list, tuple)) else value
