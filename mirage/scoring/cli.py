"""``mirage score xor-attriqa`` and ``mirage score eli5``: parse arguments, call :mod:`mirage.scoring.benchmarks`,
print the table.

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
from mirage.runs.benchmark_options import ELI5_PIPELINE_SKIP, XOR_PIPELINE_SKIP, ELI5Options, XorAttriQAOptions
from mirage.runs.experiment import SCORE_HELP, ExperimentConfig, add_experiment_args
from mirage.runs.progress import terminal_progress

__all__ = ["register"]


@dataclass(frozen=True)
class ScoreTerminal:
    """What ``mirage score`` prints beside the files it writes (the runners print nothing)."""

    quiet: bool = cli_arg(False, flag="--quiet", help="do not print the table")


def _add_benchmark_args(parser: argparse.ArgumentParser, options: type, *, data: dict[str, str],
                        experiment: list[str], skip: set[str], benchmark: str,
                        func: Callable[[argparse.Namespace], int]) -> None:
    """A benchmark command's arguments, in this order: its data (``data``: the positional's nargs and help) and the
    ``experiment`` fields of :class:`ExperimentConfig` it reads, its ``options`` (the benchmark's own), the row
    limit, the output directory, --quiet, --keep-trained-questions and the experiment flags (as ``mirage attribute``,
    less the pipeline flags ``skip`` the command sets itself); ``func`` handles the command, an NLI judge's error
    reported in one line (:func:`_reporting_judge_errors`)."""
    add_options(parser, ExperimentConfig, ["data", *experiment], unset=True, override={"data": data})
    add_options(parser, options, skip=["output", "keep_trained_questions"])
    add_options(parser, ExperimentConfig, ["limit", "skip"], unset=True,
                override={"limit": {"help": "only the first N rows of each file (quick looks)"}})
    add_options(parser, options, ["output"])
    add_options(parser, ScoreTerminal)
    add_options(parser, options, ["keep_trained_questions"])
    add_experiment_args(parser, skip=skip, benchmark=benchmark)
    parser.set_defaults(func=_reporting_judge_errors(func))


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


def _finish(args: argparse.Namespace, report: Any, table: Callable[[Any], str], figure: str) -> int:
    """Report a benchmark run: bad rows, the table and faithfulness means, and where the results went (or, on a
    rank other than 0, that its share is done)."""
    if report is None:
        from mirage.runs.sharding import report_share_done

        return report_share_done()
    _report_bad_rows(report.bad_rows["rows"])
    if not args.quiet:
        print(table(report))
        _print_faithfulness(report.faithfulness)
    plot = Path(args.output) / figure  # none where no row has a sweep (--settings likelihood)
    print(f"wrote {Path(args.output) / 'results.json'}{f' and {plot}' if plot.is_file() else ''} "
          f"({report.bad_rows['count']} bad rows skipped).", file=sys.stderr)
    return 0


def cmd_xor_attriqa(args: argparse.Namespace) -> int:
    from mirage.config import preset_option
    from mirage.scoring.benchmarks import run_xor_attriqa
    from mirage.scoring.tables import xor_legend, xor_table

    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    if not exp.data:
        raise ConfigError("give at least one XOR-AttriQA file (DATA…), or 'data' in the --config file.")
    args.settings = [renamed(s, GROUP_ALIASES, "--settings {old} is now --settings {new}", note=True)
                     for s in args.settings]
    calibrate_by = args.calibrate_by or preset_option(exp.pipeline.preset, "xor-attriqa", "calibrate_by", "global")
    options = options_from_args(XorAttriQAOptions, args, calibrate_by=calibrate_by)
    report = run_xor_attriqa(exp, options, mirage=_model_loader(exp), progress=terminal_progress)
    return _finish(args, report, lambda r: f"{xor_table(r)}\n\n{xor_legend(r)}", "sweep.png")


def cmd_eli5(args: argparse.Namespace) -> int:
    from mirage.scoring.benchmarks import run_eli5
    from mirage.scoring.tables import eli5_table

    exp = ExperimentConfig.from_args(args, command="eli5")
    if not exp.data:
        raise ConfigError("give an ALCE-format file (DATA), or 'data' in the --config file.")
    judge = None
    if exp.nli:
        from mirage.scoring.nli import HFNLIJudge

        print(f"loading NLI judge {exp.nli} …", file=sys.stderr)
        judge = HFNLIJudge.from_pretrained(exp.nli, device=exp.device)
    options = options_from_args(ELI5Options, args)
    report = run_eli5(exp, options, mirage=_model_loader(exp), judge=judge, progress=terminal_progress)
    return _finish(args, report, eli5_table, "length_bins.png")


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
    """Add ``mirage score {xor-attriqa,eli5}``."""
    score = sub.add_parser("score", help=SCORE_HELP)
    bench = score.add_subparsers(dest="benchmark", required=True)

    xor = bench.add_parser("xor-attriqa", help="agreement of passage attributions with XOR-AttriQA human labels",
                           description="Force-decode each annotated answer, attribute it to its passages and compare "
                                       "with the human AIS labels, per language, beside the NLI and trivial "
                                       "baselines. Writes DIR/results.json and DIR/sweep.png.")
    _add_benchmark_args(xor, XorAttriQAOptions,
                        data={"nargs": "*", "help": "XOR-AttriQA JSONL files (match or per-passage release)"},
                        experiment=["text", "calibrate_on"],
                        skip=set(XOR_PIPELINE_SKIP),
                        benchmark="xor-attriqa", func=cmd_xor_attriqa)

    eli5 = bench.add_parser("eli5", help="ELI5 (ALCE): MIRAGE citations beside the model's self-citations",
                            description="Generate answers, keep their self-citations, attribute the same text with "
                                        "MIRAGE and compare the two. Writes DIR/results.json and "
                                        "DIR/length_bins.png.")
    _add_benchmark_args(eli5, ELI5Options,
                        data={"nargs": "?", "help": "ALCE-format JSON/JSONL file, or hf:OWNER/REPO/FILE (needs "
                                                    "datasets)"},
                        experiment=["seeds", "nli"], skip=set(ELI5_PIPELINE_SKIP), benchmark="eli5", func=cmd_eli5)
