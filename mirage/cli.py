"""The ``mirage`` command: one explicit table of subcommands (:func:`commands`), each added by a ``register``
function of the module that runs it; importing a module never adds a command.

    mirage attribute INPUT.json -o OUTPUT.jsonl [--model NAME] [--config FILE] [--prompt selfcitation|standard]
                     [--cti-std K | --cti-threshold T] [--cci-top-k N | --cci-top-percent P]
    mirage score {xor-attriqa,eli5} …   (mirage.scoring.cli)
    mirage bias DATA -o DIR …            (mirage.bias.cli)
    mirage retrieve BEIR_DIR -o run.trec (mirage.bias.cli)
    mirage view RESULTS.jsonl [OTHER.jsonl] -o report.html   (or a `mirage bias` / `mirage score eli5` run folder)
    mirage tune {data,sft,reward,eval} … (mirage.tune.cli)
"""

from __future__ import annotations

import argparse
import functools
import gc
import logging
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.attribution.models import ModelLoadError
from mirage.checks import non_negative_int, positive_int
from mirage.config import ConfigError
from mirage.data.inputs import InputError, NothingToScore
from mirage.options import add_options, cli_arg, options_from_args
from mirage.registry import PluginError, load_plugins
from mirage.runs.benchmark_options import score_help
from mirage.runs.experiment import ExperimentConfig, add_experiment_args
from mirage.runs.progress import terminal_progress, write_line
from mirage.runs.sharding import ShardError, report_share_done
from mirage.runs.store import StoreError, disk_error_message

__all__ = ["COMMAND_GC_THRESHOLD", "build_parser", "command", "commands", "main"]

#: Adds one subcommand (its parser and handler) to the ``mirage`` subparsers.
Register = Callable[[argparse._SubParsersAction], None]


def check_output_file(output: str | Path, inputs: list[str | Path]) -> None:
    """Refuse an output that is a directory or one of the inputs (writing results there would destroy it)."""
    out = Path(output)
    if out.is_dir():
        raise InputError(f"-o {output} is a directory; give a file path, e.g. {Path(output) / 'attributed.jsonl'}.")
    for inp in inputs:
        same = out.resolve() == Path(inp).resolve()
        if not same and out.exists() and Path(inp).exists():
            same = os.path.samefile(out, inp)
        if same:
            raise InputError(f"-o {output} is the input file; results go to a new file (e.g. "
                             f"{out.with_name(out.stem + '.attributed.jsonl')}), never over the input.")


def cmd_attribute(args: argparse.Namespace) -> int:
    """Attribute every item of INPUT; one JSON line per item in OUTPUT, resumable
    (:func:`mirage.runs.attribute.attribute_file`)."""
    from mirage.data import resolve
    from mirage.runs.attribute import AttributeOptions, attribute_file
    from mirage.views.rendering import result_to_text

    args.input = str(resolve(args.input))  # a file, or a dataset of RAG items (e.g. eli5-alce)
    options = options_from_args(AttributeOptions, args)
    check_output_file(options.output, [options.input])
    exp = ExperimentConfig.from_args(args, command="attribute")
    skipped = attribute_file(exp, options, progress=terminal_progress,
                             on_result=None if options.quiet else lambda res: write_line(result_to_text(res)))
    if skipped is None:
        return report_share_done(f"merges into {options.output}")
    return 0 if skipped == 0 else 3


ATTRIBUTE_HELP = "attribute answers of a JSON/JSONL file of items"
VIEW_HELP = "write a browsable static HTML report of a results JSONL (or compare two), a bias run or an ELI5 run"


def register_attribute(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage attribute``."""
    from mirage.runs.attribute import AttributeOptions

    att = sub.add_parser("attribute", help=ATTRIBUTE_HELP)
    add_options(att, AttributeOptions, ["input", "output"])
    add_options(att, ExperimentConfig, ["limit", "skip"], unset=True)
    add_options(att, AttributeOptions, ["quiet"])
    add_experiment_args(att)
    att.set_defaults(func=cmd_attribute)


def cmd_view(args: argparse.Namespace) -> int:
    """``mirage view``: the HTML report of a results file, of two side by side, or of a run folder
    (:mod:`mirage.views.view`)."""
    from mirage.views.view import write_view

    check_output_file(args.output, args.results)
    out = write_view(args.results, args.output, title=args.title, max_items=args.max_items, offset=args.offset)
    print(f"wrote {out}", file=sys.stderr)
    return 0


@dataclass(frozen=True, kw_only=True)
class ViewOptions:
    """What ``mirage view`` shows and where (:func:`mirage.views.view.write_view`)."""

    results: tuple[str, ...] = cli_arg(flag="results", metavar="RESULTS", help=(
        "JSONL written by `mirage attribute`; give two (two models or two settings) to compare them side by side, "
        "items matched by question and documents. Or one run folder: a bias study (`mirage bias -o DIR`: "
        "generations.jsonl[.gz] and results.json; per query its modes side by side, filters for queries whose "
        "citations moved, the study's tables) or an ELI5 run (`mirage score eli5 -o DIR`: answers.jsonl and "
        "results.json)"))
    output: str = cli_arg("report.html", flag="--output", aliases=("-o",), help=(
        "HTML file to write (default: report.html); an existing file is replaced only if it is a page mirage view "
        "wrote"))
    title: str | None = cli_arg(None, flag="--title", help="page title (default: the results file or folder names)")
    #: None: :data:`mirage.views.report.MAX_ITEMS` (the parser shows and sets it).
    max_items: int | None = cli_arg(None, flag="--max-items", type=positive_int, metavar="N", help=(
        "items of a results file one page shows; the page and a warning say how many the file holds and which "
        "--offset shows the next ones"))
    offset: int = cli_arg(0, flag="--offset", type=non_negative_int, metavar="N", help=(
        "the position of a results file's first item on the page (default: 0; with --max-items 500, --offset 500 "
        "is the second page)"))


def register_view(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage view``."""
    from mirage.views.report import MAX_ITEMS

    view = sub.add_parser("view", help=VIEW_HELP)
    add_options(view, ViewOptions, defaults={"max_items": MAX_ITEMS})
    view.set_defaults(func=cmd_view)


@dataclass(frozen=True)
class Command:
    """One subcommand: its name and one-line help, which ``mirage --help`` lists without importing the module that
    runs it, and ``register``, which returns that module's register function (importing it only then)."""

    name: str
    help: str
    register: Callable[[], Register]


def _register_methods() -> Register:
    from mirage.scoring.methods_cli import register

    return register


def _register_score() -> Register:
    from mirage.scoring.cli import register

    return register


def _register_bias() -> Register:
    from mirage.bias.cli import register

    return register


def _register_retrieve() -> Register:
    from mirage.bias.cli import register_retrieve

    return register_retrieve


def _register_bias_protocol() -> Register:
    from mirage.bias.cli import register_protocol

    return functools.partial(register_protocol, run=main)  # each study runs as its own mirage bias command


def _register_report() -> Register:
    from mirage.views.pages import register

    return register


def _register_tune() -> Register:
    from mirage.tune.cli import register

    return register


def _register_data() -> Register:
    from mirage.data.cli import register

    return register


def commands() -> list[Command]:
    """The subcommands, in ``--help`` order. A command's module is imported only when that command is parsed, so
    ``mirage --help`` and ``mirage attribute …`` never import the benchmark and bias modules (nor torch)."""
    return [
        Command("attribute", ATTRIBUTE_HELP, lambda: register_attribute),
        Command("score", score_help(), _register_score),
        Command("bias", "attribution sensitivity (CAS) and bias (CAB) to document metadata, for self-citations and "
                        "mirage's citations", _register_bias),
        Command("bias-protocol", "run every study of an attribution-bias protocol file, each reusing what the others "
                                 "generated", _register_bias_protocol),
        Command("retrieve", "rank a BEIR corpus for each query (bm25, dense) and write a TREC run file",
                _register_retrieve),
        Command("view", VIEW_HELP, lambda: register_view),
        Command("tune", "citation fine-tuning: build training data, train a LoRA adapter (SFT, then a reward "
                        "or a preference stage), evaluate its citations", _register_tune),
        Command("methods", "document attribution methods: list them, train AT2's head weights", _register_methods),
        Command("data", "datasets by name: list them, get them into the cache (download, or --from a local copy)",
                _register_data),
        Command("report", "write a run folder's results page (DIR/README.md) from its results alone", _register_report),
    ]


def _command_name(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first word that is not an option (the top-level options take no value)."""
    return next((arg for arg in argv if not arg.startswith("-")), None)


class MirageParser(argparse.ArgumentParser):
    """The ``mirage`` parser (and, through ``add_subparsers``, every subcommand's): a mistyped subcommand, choice or
    flag is answered with the nearest valid one (:func:`mirage.registry.did_you_mean`), and arguments no parser
    knows are reported with the usage of the subcommand they were given to, not the top-level one."""

    def parse_args(self, args: Sequence[str] | None = None, namespace: Any = None) -> Any:  # type: ignore[override]
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = self.parse_known_args(argv, namespace)
        if extras:
            self._subcommand_parser(argv).error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed

    def _subcommand_parser(self, argv: Sequence[str]) -> argparse.ArgumentParser:
        """The innermost (sub)command parser that ``argv`` names (``mirage score eli5 …``: eli5's)."""
        parser: argparse.ArgumentParser = self
        for word in argv:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if not word.startswith("-") and subs and word in subs[0].choices:
                parser = subs[0].choices[word]
        return parser

    def error(self, message: str) -> Any:  # type: ignore[override]
        from mirage.registry import did_you_mean

        hints = []
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            hints.append(did_you_mean(choice.group(1), re.findall(r"'?([^',]+)'?(?:, |$)", choice.group(2))))
        if message.startswith("unrecognized arguments:"):
            flags = [f for f in self._option_string_actions if f.startswith("--")]
            for word in message.split(":", 1)[1].split():
                if word.startswith("--"):
                    hint = did_you_mean(word.split("=", 1)[0], flags, n=1)
                    hints.append(f"{word}: {hint}" if hint else "")
        hint = "; ".join(h for h in hints if h)
        super().error(f"{message}; {hint}" if hint else message)


@dataclass(frozen=True)
class MainOptions:
    """The options of ``mirage`` itself, before the command."""

    verbose: bool = cli_arg(False, flag="--verbose", aliases=("-v",), help="log progress details")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``mirage`` argument parser. Without ``argv`` every subcommand of :func:`commands` is built in full; with
    it, only the one ``argv`` names (the others are listed by name and help only), so parsing imports nothing else."""
    load_plugins()  # the installed plug-ins' registrations (a benchmark, a method) before any command reads them
    parser = MirageParser(prog="mirage", description="Model-internals-based RAG answer attribution.")
    add_options(parser, MainOptions)
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = None if argv is None else _command_name(argv)
    for command in commands():
        if argv is None or command.name == wanted:
            command.register()(sub)
        else:
            sub.add_parser(command.name, help=command.help, add_help=False)
    return parser


def _record_run(args: argparse.Namespace, argv: Sequence[str]) -> None:
    """A run folder (``-o DIR``) gets its provenance and results page."""
    if isinstance(getattr(args, "output", None), str):
        from mirage.views.pages import record_run

        record_run(args.output, argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mirage`` command."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser(argv)
    except PluginError as err:
        print(f"mirage: error: {err}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if not args.verbose:
        warnings.filterwarnings("default", module="mirage")
    try:
        status = args.func(args)
        if status == 0:
            _record_run(args, argv)
        return status
    except (ConfigError, InputError, ModelLoadError, ShardError, StoreError) as err:
        if isinstance(err, NothingToScore):
            _record_run(args, argv)  # what the run found before it stopped gets its page
        print(f"mirage: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # the disk: full, read-only, not allowed (a store keeps what it wrote before)
        logging.getLogger(__name__).info("the error in full:", exc_info=True)
        print(f"mirage: error: {disk_error_message(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: every finished item is on disk already
        print("mirage: interrupted; what was finished is saved: run the same command again to resume.",
              file=sys.stderr)
        return 130


#: Allocations between two youngest-generation collections in a :func:`command` process (Python's default: 700).
COMMAND_GC_THRESHOLD = 10_000


def command() -> int:
    """The ``mirage`` console script and ``python -m mirage``: :func:`main` in a process that ends with the command.

    The process tunes Python's cyclic garbage collector, which otherwise costs a short command seconds: the imports
    of torch and transformers create millions of objects, each of the collector's full passes walks them all, and so
    does the collection at exit. Here the youngest generation is
    collected every :data:`COMMAND_GC_THRESHOLD` allocations instead of 700 (the full passes stop during imports), and
    whatever is alive when the command returns is frozen (:func:`gc.freeze`), so that the exit's collection skips it.
    Objects are still freed by reference counting as before; only cycles wait longer. :func:`main`, which tests and
    Python callers run inside their own process, changes nothing of the collector's."""
    gc.set_threshold(COMMAND_GC_THRESHOLD, *gc.get_threshold()[1:])
    try:
        return main()
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(command())
