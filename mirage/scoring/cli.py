"""``mirage score NAME``, one subcommand per registered benchmark (:data:`mirage.registry.BENCHMARKS`:
``xor-attriqa``, ``eli5``): parse its arguments, call its runner, print its table.

    mirage score xor-attriqa DATA... --model NAME [--text en|native] [--calibrate-on FILE...] -o DIR
    mirage score eli5 DATA --model NAME [--prompt selfcitation|standard] [--nli MODEL] [--seeds 1 2 3] -o DIR

Both accept ``--config FILE``: a pipeline YAML, or an experiment file (``configs/*.yaml``) whose top-level ``model``,
``data``, ``text``, ``limit``, ``seeds`` and ``nli`` are defaults for the flags of the same name
(:class:`mirage.runs.experiment.ExperimentConfig`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.compat import GROUP_ALIASES, renamed
from mirage.config import ConfigError
from mirage.options import add_options, cli_arg, options_from_args
from mirage.registry import BENCHMARKS
from mirage.runs.benchmark_options import Benchmark, ELI5Options, XorAttriQAOptions, resolve_ref, score_help
from mirage.runs.experiment import ExperimentConfig, add_experiment_args
from mirage.runs.progress import terminal_progress

__all__ = ["cmd_benchmark", "eli5_options", "register", "xor_options"]


@dataclass(frozen=True)
class ScoreTerminal:
    """What ``mirage score`` prints beside the files it writes (the runners print nothing)."""

    quiet: bool = cli_arg(False, flag="--quiet", help="do not print the table")


def _add_benchmark_args(parser: argparse.ArgumentParser, benchmark: Benchmark) -> None:
    """A benchmark command's arguments, in this order: its data (the positional's nargs and help) and the
    :class:`ExperimentConfig` fields it reads, its options (the benchmark's own), the row limit, the output directory,
    --quiet, --keep-trained-questions and the experiment flags (as ``mirage attribute``, less the pipeline flags the
    benchmark sets itself); :func:`cmd_benchmark` handles the command, an NLI judge's error reported in one line
    (:func:`_reporting_judge_errors`)."""
    options = benchmark.options
    add_options(parser, ExperimentConfig, ["data", *benchmark.experiment], unset=True,
                override={"data": dict(benchmark.data)})
    add_options(parser, options, skip=["output", "keep_trained_questions"])
    add_options(parser, ExperimentConfig, ["limit", "skip"], unset=True,
                override={"limit": {"help": "only the first N rows of each file (quick looks)"}})
    add_options(parser, options, ["output"])
    add_options(parser, ScoreTerminal)
    add_options(parser, options, ["keep_trained_questions"])
    add_experiment_args(parser, skip=set(benchmark.pipeline_skip), benchmark=benchmark.name)
    parser.set_defaults(func=_reporting_judge_errors(cmd_benchmark))


def _model_loader(exp: ExperimentConfig):
    """Load the experiment's model when first called, once however many stages ask for it."""
    exp.check_device()  # a bad --device fails now, not after the data was read

    def load():
        print(f"loading {exp.model} …", file=sys.stderr)
        return exp.load_mirage()

    return functools.cache(load)


def _print_faithfulness(summary: dict[str, Any] | None) -> None:
    if summary:
        from mirage.scoring.faithfulness import FaithfulnessSummary

        print(FaithfulnessSummary.from_dict(summary).to_text())


def _report_bad_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(f"skipped {row['file']}:{row['line']}: {row['error']}", file=sys.stderr)


def _finish(args: argparse.Namespace, report: Any, table: Callable[[Any], str], figure: str | None) -> int:
    """Report a benchmark run: bad rows, the table and faithfulness means, and where the results went (or, on a
    rank other than 0, that its share is done)."""
    if report is None:
        from mirage.runs.sharding import report_share_done

        return report_share_done()
    bad_rows = getattr(report, "bad_rows", None)  # a registered benchmark's report may have neither
    _report_bad_rows(bad_rows["rows"] if bad_rows else [])
    if not args.quiet:
        print(table(report))
        _print_faithfulness(getattr(report, "faithfulness", None))
    plot = Path(args.output) / figure if figure else None  # none where no row has a sweep (--settings likelihood)
    skipped = f" ({bad_rows['count']} bad rows skipped)" if bad_rows else ""
    print(f"wrote {Path(args.output) / 'results.json'}{f' and {plot}' if plot and plot.is_file() else ''}{skipped}.",
          file=sys.stderr)
    return 0


def cmd_benchmark(args: argparse.Namespace) -> int:
    """``mirage score NAME …``: the registered benchmark's experiment and options from the flags, its runner, its
    table printed."""
    benchmark = BENCHMARKS.lookup(args.benchmark)
    exp = ExperimentConfig.from_args(args, command=benchmark.name)
    if not exp.data:
        raise ConfigError(benchmark.missing_data)
    if benchmark.options_from is not None:
        options, extra = resolve_ref(benchmark.options_from)(args, exp)
    else:
        options, extra = options_from_args(benchmark.options, args), {}
    report = resolve_ref(benchmark.runner)(exp, options, mirage=_model_loader(exp), progress=terminal_progress,
                                           **extra)
    return _finish(args, report, resolve_ref(benchmark.table), benchmark.figure)


def xor_options(args: argparse.Namespace, exp: ExperimentConfig) -> tuple[XorAttriQAOptions, dict[str, Any]]:
    """``mirage score xor-attriqa``'s options: the flags, old setting-group names renamed with a note, and
    ``--calibrate-by`` from the preset when not given."""
    from mirage.config import preset_option

    args.settings = [renamed(s, GROUP_ALIASES, "--settings {old} is now --settings {new}", note=True)
                     for s in args.settings]
    calibrate_by = args.calibrate_by or preset_option(exp.pipeline.preset, "xor-attriqa", "calibrate_by", "global")
    return options_from_args(XorAttriQAOptions, args, calibrate_by=calibrate_by), {}


def eli5_options(args: argparse.Namespace, exp: ExperimentConfig) -> tuple[ELI5Options, dict[str, Any]]:
    """``mirage score eli5``'s options, and its NLI judge (``--nli``) loaded."""
    judge = None
    if exp.nli:
        from mirage.scoring.nli import HFNLIJudge

        print(f"loading NLI judge {exp.nli} …", file=sys.stderr)
        judge = HFNLIJudge.from_pretrained(exp.nli, device=exp.device)
    return options_from_args(ELI5Options, args), {"judge": judge}


def _reporting_judge_errors(func):
    def run(args: argparse.Namespace) -> int:
        from mirage.scoring.nli import NLIJudgeError

        try:
            return func(args)
        except NLIJudgeError as err:
            print(f"mirage: error: {err}", file=sys.stderr)
            return 2

    return run


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mirage score NAME`` for every registered benchmark (:data:`mirage.registry.BENCHMARKS`)."""
    score = sub.add_parser("score", help=score_help())
    bench = score.add_subparsers(dest="benchmark", required=True)
    for benchmark in BENCHMARKS.values():
        parser = bench.add_parser(benchmark.name, help=benchmark.help, description=benchmark.description)
        _add_benchmark_args(parser, benchmark)
