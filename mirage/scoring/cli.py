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
from pathlib import Path
from typing import Any

from mirage.checks import int_flag
from mirage.config import ConfigError
from mirage.runs.experiment import (
    ExperimentConfig,
    add_experiment_args,
    add_trained_questions_arg,
    non_negative_int,
    positive_int,
)
from mirage.runs.progress import terminal_progress


def _add_run_args(parser: argparse.ArgumentParser, *, skip: set[str], benchmark: str) -> None:
    """The experiment flags (as ``mirage attribute``, less the pipeline flags the command sets itself), the row limit,
    the output directory and --quiet."""
    parser.add_argument("--limit", type=non_negative_int, default=None,
                        help="only the first N rows of each file (quick looks)")
    parser.add_argument("-o", "--output", required=True,
                        help="output directory (results.json, the plot, and per-item outputs: re-running resumes)")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    add_trained_questions_arg(parser)
    add_experiment_args(parser, skip=skip, benchmark=benchmark)


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
    print(f"wrote {Path(args.output) / 'results.json'} and {Path(args.output) / figure} "
          f"({report.bad_rows['count']} bad rows skipped).", file=sys.stderr)
    return 0


def cmd_xor_attriqa(args: argparse.Namespace) -> int:
    from mirage.config import preset_option
    from mirage.scoring.benchmarks import XorAttriQAOptions, run_xor_attriqa
    from mirage.scoring.tables import xor_legend, xor_table

    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    if not exp.data:
        raise ConfigError("give at least one XOR-AttriQA file (DATA…), or 'data' in the --config file.")
    if "learned" in args.settings:
        print("mirage: note: --settings learned is now --settings likelihood (the passage-likelihood classifier); "
              "the old name will go.", file=sys.stderr)
        args.settings = ["likelihood" if s == "learned" else s for s in args.settings]
    calibrate_by = args.calibrate_by or preset_option(exp.pipeline.preset, "xor-attriqa", "calibrate_by", "global")
    options = XorAttriQAOptions(
        output=args.output, calibrate_by=calibrate_by, nli_dir=args.nli_dir, faithfulness=args.faithfulness,
        all_tokens=args.all_tokens, groups=tuple(args.settings), batch_items=args.batch_items,
        group_passages=args.group_passages, self_match=args.self_match, reuse_from=args.reuse_from,
        keep_trained_questions=bool(args.keep_trained_questions))
    report = run_xor_attriqa(exp, options, mirage=_model_loader(exp), progress=terminal_progress)
    return _finish(args, report, lambda r: f"{xor_table(r)}\n\n{xor_legend(r)}", "sweep.png")


def cmd_eli5(args: argparse.Namespace) -> int:
    from mirage.scoring.benchmarks import ELI5Options, run_eli5
    from mirage.scoring.tables import eli5_table

    exp = ExperimentConfig.from_args(args, command="eli5")
    if not exp.data:
        raise ConfigError("give an ALCE-format file (DATA), or 'data' in the --config file.")
    judge = None
    if exp.nli:
        from mirage.scoring.nli import HFNLIJudge

        print(f"loading NLI judge {exp.nli} …", file=sys.stderr)
        judge = HFNLIJudge.from_pretrained(exp.nli, device=exp.device)
    options = ELI5Options(output=args.output, ndocs=args.ndocs, at_most=args.at_most_citations,
                          faithfulness=args.faithfulness, keep_trained_questions=bool(args.keep_trained_questions))
    report = run_eli5(exp, options, mirage=_model_loader(exp), judge=judge, progress=terminal_progress)
    return _finish(args, report, eli5_table, "length_bins.png")


def _run(func):
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
    score = sub.add_parser("score", help="score a benchmark of the method's paper: xor-attriqa, eli5")
    bench = score.add_subparsers(dest="benchmark", required=True)

    xor = bench.add_parser("xor-attriqa", help="agreement of passage attributions with XOR-AttriQA human labels",
                           description="Force-decode each annotated answer, attribute it to its passages and compare "
                                       "with the human AIS labels, per language, beside the NLI and trivial "
                                       "baselines. Writes DIR/results.json and DIR/sweep.png.")
    xor.add_argument("data", nargs="*", help="XOR-AttriQA JSONL files (match or per-passage release)")
    xor.add_argument("--text", choices=["en", "native"], default=None,
                     help="en: English translations (English models, default); native: the annotated text")
    xor.add_argument("--faithfulness", action="store_true",
                     help="also score how much each citation set matters to the model (mirage.scoring.faithfulness)")
    xor.add_argument("--calibrate-on", nargs="+", metavar="FILE",
                     help="splits to calibrate on (e.g. train.jsonl val.jsonl; never the test files): MIRAGE-CAL's "
                          "CTI thresholds and the learned passage classifier are fitted on their pooled items")
    xor.add_argument("--settings", nargs="+", choices=["ex", "cal", "likelihood", "learned"],
                     default=["ex", "cal", "likelihood"],
                     help="settings to compute (default all): ex (MIRAGE-EX), cal (MIRAGE-CAL and the top-%% sweep), "
                          "likelihood (the passage-likelihood classifier and the passage score; needs no CCI row; "
                          "'learned' is its old name)")
    xor.add_argument("--all-tokens", action="store_true",
                     help="compute CCI for every answer token of every item (slower; needed only for the "
                          "threshold-free mirage_raw ROC-AUC); by default only the tokens some setting selects")
    xor.add_argument("--batch-items", type=positive_int, metavar="N",
                     help="run the passes (CTI and CCI) of N new items in padded batches (default: 8 on a GPU, 1 on a CPU)")
    xor.add_argument("--group-passages", action="store_true",
                     help="rows of the per-passage release (xor_attriqa_full) with the same question and answer "
                          "become one item with all their passages, as a match row (default: one item per row)")
    xor.add_argument("--calibrate-by", choices=["global", "language"], default=None,
                     help="one threshold, or one per language of the calibration split (as the reference code); "
                          "default global, language under --preset authors")
    xor.add_argument("--self-match", action="store_true",
                     help="a one-pass self-match check (the paper's Algorithm 1 without its beam search and its "
                          "reshuffled passage orders): generate each answer once, greedily, with the scoring model "
                          "(same prompt, the file's passage order), keep the rows where it reproduces the annotated "
                          "answer, and attribute its own generation; "
                          "DIR/matches.jsonl holds every generation, results.json the rows kept")
    xor.add_argument("--reuse-from", metavar="RUN_DIR",
                     help="start from the stored model outputs of another run (same model, prompt and CCI target), "
                          "so a run that changes only selection or aggregation (a preset, a CTI spread, the "
                          "calibration) computes only the rows it adds; used while this run's store is empty")
    xor.add_argument("--nli-dir", help="folder of <split>.nli-*.json baseline predictions (default: beside DATA)")
    _add_run_args(xor, skip={"--cci-top-k", "--cci-top-percent", "--cti-threshold", "--max-citations",
                             "--max-new-tokens", "--sample", "--temperature", "--top-p", "--seed"},
                  benchmark="xor-attriqa")
    xor.set_defaults(func=_run(cmd_xor_attriqa))

    eli5 = bench.add_parser("eli5", help="ELI5 (ALCE): MIRAGE citations beside the model's self-citations",
                            description="Generate answers, keep their self-citations, attribute the same text with "
                                        "MIRAGE and compare the two. Writes DIR/results.json and "
                                        "DIR/length_bins.png.")
    eli5.add_argument("data", nargs="?", help="ALCE-format JSON/JSONL file, or hf:OWNER/REPO/FILE (needs datasets)")
    eli5.add_argument("--seeds", type=int_flag, nargs="+", help="generation seeds (default: the config's seed)")
    eli5.add_argument("--ndocs", type=int_flag, default=5, help="documents given to the model (default 5)")
    eli5.add_argument("--nli", help="Hugging Face NLI judge for ALCE citation quality "
                                    "(the paper: google/t5_xxl_true_nli_mixture)")
    eli5.add_argument("--faithfulness", action="store_true",
                      help="also score how much each citation set matters to the model (mirage.scoring.faithfulness)")
    eli5.add_argument("--at-most-citations", type=int_flag, default=3, help="citations judged per sentence (ALCE: 3)")
    _add_run_args(eli5, skip={"--seed"}, benchmark="eli5")
    eli5.set_defaults(func=_run(cmd_eli5))
