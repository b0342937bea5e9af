"""Flags made from a dataclass's fields (:mod:`mirage.options`): the annotation says the argument's shape, the
metadata its flag and help, and the parsed namespace builds the options object back."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Literal

import pytest

from mirage.checks import ConfigError, integer, setfield
from mirage.options import add_options, cli_arg, flag_help, given_options, options_argv, options_from_args


@dataclass(frozen=True, kw_only=True)
class Toy:
    data: tuple[str, ...] = cli_arg(flag="data", help="input files")
    output: str = cli_arg(flag="--output", aliases=("-o",), help="where to write")
    view: Literal["en", "native"] = cli_arg("en", flag="--view", help="text view")
    k: int = cli_arg(5, flag="--k", help="documents per question")
    scale: float | None = cli_arg(None, flag="--scale", help="a factor")
    sides: tuple[Literal["first", "second"], Literal["first", "second"]] = cli_arg(
        ("first", "first"), flag="--sides", metavar=("REL", "NONREL"), help="two sides")
    seeds: tuple[int, ...] = cli_arg((), flag="--seeds", help="seeds")
    fast: bool = cli_arg(False, flag="--fast", help="go fast")
    size: str = cli_arg("auto", flag="--size", cli_default=None, help="a size (default: as the preset says)")
    hidden: int = 3

    def __post_init__(self) -> None:
        setfield(self, "toy.k", integer, minimum=1)


def _parser(**options) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_options(parser, Toy, **options)
    return parser


def test_the_annotation_gives_the_arguments_shape():
    actions = {a.dest: a for a in _parser()._actions}
    assert "hidden" not in actions  # no flag in its metadata: not on the command line
    assert actions["data"].nargs == "+" and actions["data"].option_strings == []
    assert actions["output"].option_strings == ["-o", "--output"] and actions["output"].required
    assert actions["view"].choices == ["en", "native"] and actions["view"].default == "en"
    assert actions["k"].type("3.0") == 3 and actions["scale"].type("0.5") == 0.5
    assert actions["sides"].nargs == 2 and actions["sides"].choices == ["first", "second"]
    assert actions["seeds"].nargs == "+" and actions["seeds"].default is None
    assert actions["fast"].nargs == 0 and actions["fast"].default is False
    assert actions["size"].default is None and not hasattr(actions["size"], "config_default")
    assert actions["k"].help == "documents per question (default: 5)"  # the field's default, said once
    assert actions["size"].help == "a size (default: as the preset says)"


def test_the_namespace_builds_the_options_back():
    args = _parser().parse_args(["a", "b", "-o", "out", "--k", "2", "--sides", "second", "first", "--fast"])
    toy = options_from_args(Toy, args)
    assert toy == Toy(data=("a", "b"), output="out", k=2, sides=("second", "first"), fast=True)
    assert options_from_args(Toy, _parser().parse_args(["a", "-o", "o"]), size="big").size == "big"
    with pytest.raises(ConfigError, match=r"^toy\.k must be an integer >= 1, got 0\.$"):
        options_from_args(Toy, _parser().parse_args(["a", "-o", "o", "--k", "0"]))
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        _parser().parse_args(["a", "-o", "o", "--view", "fr"])


def test_unset_flags_leave_what_a_file_or_preset_set():
    parser = _parser(unset=True, only=["view", "k", "fast"])
    actions = {a.dest: a for a in parser._actions}
    assert actions["view"].default is None and actions["view"].config_default == "en"
    assert actions["fast"].default is None
    assert given_options(Toy, parser.parse_args([]), ["view", "k", "fast"]) == {}
    assert given_options(Toy, parser.parse_args(["--k", "4", "--fast"]), ["view", "k", "fast"]) == {"k": 4,
                                                                                                 "fast": True}


def test_a_command_can_give_a_field_its_own_help_and_arity():
    parser = _parser(only=["data"], override={"data": {"nargs": "?", "help": "one file"}})
    (action,) = [a for a in parser._actions if a.dest == "data"]
    assert (action.nargs, action.help) == ("?", "one file")
    assert flag_help("x", ("a", "b")) == "x (default: a b)" and flag_help("x", ()) == "x"
    assert flag_help("x (default 2)", 3) == "x (default 2)" and flag_help("x", True) == "x (default: true)"


@dataclass(frozen=True)
class Repeated:
    sweep: Literal["answer", "context", "both"] | None = cli_arg(None, flag="--sweep", nargs="?", const="both",
                                                                 help="a sweep (alone: both)")
    note: tuple[str, ...] | None = cli_arg(None, flag="--note", action="append", help="a note (repeatable)")


def test_a_flag_can_stand_alone_or_repeat():
    """``const``: the value of a flag given without one (``nargs="?"``); ``action="append"``: a tuple field gathers
    one value per repetition of its flag."""
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_options(parser, Repeated)
    assert options_from_args(Repeated, parser.parse_args([])) == Repeated()
    assert options_from_args(Repeated, parser.parse_args(["--sweep"])).sweep == "both"
    assert options_from_args(Repeated, parser.parse_args(["--sweep", "answer"])).sweep == "answer"
    got = options_from_args(Repeated, parser.parse_args(["--note", "a b", "--note", "c"]))
    assert got.note == ("a b", "c")
    with pytest.raises(argparse.ArgumentError, match="invalid choice"):
        parser.parse_args(["--sweep", "all"])
    with pytest.raises(TypeError, match="unknown metadata"):
        cli_arg(None, flag="--x", help="x", store="no")


def test_options_give_back_the_words_that_set_them():
    """:func:`options_argv` is the inverse of the parse: from an instance or a namespace, the words that, parsed
    again, give the same values; every set value explicit, the shortest name, nothing for None, () or False."""
    toy = Toy(data=("a", "b c"), output="out", k=2, sides=("second", "first"), fast=True, seeds=(1, 2))
    argv = options_argv(Toy, toy)
    assert argv == ["a", "b c", "-o", "out", "--view", "en", "--k", "2", "--sides", "second", "first",
                    "--seeds", "1", "2", "--fast", "--size", "auto"]
    assert options_from_args(Toy, _parser().parse_args(argv)) == toy
    args = _parser().parse_args(["a", "-o", "o"])
    assert options_argv(Toy, args) == ["a", "-o", "o", "--view", "en", "--k", "5", "--sides", "first", "first"]
    assert options_argv(Toy, args, skip=["view", "sides"]) == ["a", "-o", "o", "--k", "5"]
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_options(parser, Repeated)
    repeated = Repeated(sweep="answer", note=("a b", "c"))
    assert options_argv(Repeated, repeated) == ["--sweep", "answer", "--note", "a b", "--note", "c"]
    assert options_from_args(Repeated, parser.parse_args(options_argv(Repeated, repeated))) == repeated
    assert options_argv(Repeated, Repeated()) == []


@dataclass(frozen=True, kw_only=True)
class Renamed:
    ndocs: int = cli_arg(5, flag="--ndocs", dest="k", renamed_from=("--k",), help="documents per question")
    fast: bool = cli_arg(False, flag="--fast", renamed_from=("--quick",), help="go fast")
    seeds: tuple[int, ...] = cli_arg((), flag="--seeds", renamed_from=("--seed-list",), help="seeds")
    tags: tuple[str, ...] = cli_arg((), flag="--tag", action="append", renamed_from=("--label",), help="one tag")


def test_an_old_spelling_sets_what_the_flag_sets_says_so_and_stays_out_of_the_help(capsys):
    parser = argparse.ArgumentParser(prog="mirage", exit_on_error=False)
    add_options(parser, Renamed)
    old = parser.parse_args(["--k", "3.0", "--quick", "--seed-list", "1", "2", "--label", "a", "--tag", "b"])
    warned = capsys.readouterr().err.splitlines()
    assert options_from_args(Renamed, old) == Renamed(ndocs=3, fast=True, seeds=(1, 2), tags=("a", "b"))
    assert warned == [f"mirage: warning: {o} is now {n}; the old spelling still works but will go"
                      for o, n in [("--k", "--ndocs"), ("--quick", "--fast"), ("--seed-list", "--seeds"),
                                   ("--label", "--tag")]]
    new = parser.parse_args(["--ndocs", "3", "--fast", "--seeds", "1", "2", "--tag", "a", "--tag", "b"])
    assert vars(new) == vars(old) and not capsys.readouterr().err
    assert vars(parser.parse_args([])) == {"k": 5, "fast": False, "seeds": None, "tag": None}  # the flag's defaults
    assert "--k" not in parser.format_help() and "--quick" not in parser.format_help()
    with pytest.raises(argparse.ArgumentError, match="argument --k: must be an integer"):
        parser.parse_args(["--k", "many"])  # the old spelling checks its value as the flag does
    assert options_argv(Renamed, new) == ["--ndocs", "3", "--fast", "--seeds", "1", "2", "--tag", "a", "--tag", "b"]
