"""``mirage score xor-attriqa`` and ``mirage score eli5``: parse arguments, call :mod:`mirage.scoring.benchmarks`,
print the table.

    mirage score xor-attriqa DATA... --model NAME [--text en|native] [--calibrate-on FILE] -o DIR
    mirage score eli5 DATA --model NAME [--prompt selfcitation|standard] [--nli MODEL] [--seeds 1 2 3] -o DIR

Both accept ``--config FILE``: a pipeline YAML, or an experiment file (``configs/*.yaml``) whose top-level ``model``,
``data``, ``text``, ``limit``, ``seeds`` and ``nli`` are defaults for the flags of the same name.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from ..cli import CONFIG_FLAGS, EXTRA_COMMANDS, check_device_args, config_from_args, non_negative_int
from ..config import ConfigError, MirageConfig

DEFAULT_MODEL = "smollm2-135m-instruct"


def _progress(iterable, total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, dynamic_ncols=True)


def _add_model_args(parser: argparse.ArgumentParser, *, skip: set[str]) -> None:
    """The shared model and pipeline flags (as ``mirage attribute``), less those the command sets itself."""
    parser.add_argument("--model", default=None,
                        help=f"embedded model name, Hugging Face id or local path (default: {DEFAULT_MODEL})")
    parser.add_argument("--config", help="YAML config: pipeline sections, and for experiment files model/data/text/…")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--dtype", help="float32, bfloat16 or float16 (default: bf16/fp16 on GPU, fp32 on CPU)")
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the hub")
    parser.add_argument("--limit", type=non_negative_int, default=None, help="only the first N rows of each file (quick looks)")
    parser.add_argument("-o", "--output", required=True,
                        help="output directory (results.json, the plot, and per-item outputs: re-running resumes)")
    parser.add_argument("--quiet", action="store_true", help="do not print the table")
    for flag, (_section, _field, kind, help_text) in CONFIG_FLAGS.items():
        if flag in skip:
            parser.set_defaults(**{flag.lstrip("-").replace("-", "_"): None})
        else:
            parser.add_argument(flag, type=kind, default=None, help=help_text)


def _experiment(args: argparse.Namespace) -> dict[str, Any]:
    """The top-level keys of the --config file (empty without one)."""
    if not args.config:
        return {}
    try:
        data = yaml.safe_load(Path(args.config).read_text()) or {}
    except (OSError, ValueError, yaml.YAMLError) as err:  # ValueError: not UTF-8 text
        raise ConfigError(f"--config {args.config}: cannot read it as a YAML file ({err}).") from err
    return data if isinstance(data, dict) else {}


def _config(args: argparse.Namespace, exp: dict[str, Any], *, default_prompt: str | None) -> MirageConfig:
    cfg = config_from_args(args)
    prompt_in_file = isinstance(exp.get("prompt"), dict) and ({"name", "path"} & set(exp["prompt"]))
    if default_prompt and args.prompt is None and not prompt_in_file:
        cfg = cfg.replace(prompt={"name": default_prompt})
    return cfg


def _model_loader(args: argparse.Namespace, name: str, cfg: MirageConfig):
    check_device_args(args)  # a bad --device fails now, not after the data was read

    def load():
        from ..pipeline import Mirage

        print(f"loading {name} …", file=sys.stderr)
        return Mirage.from_pretrained(name, config=cfg, device=args.device, dtype=args.dtype,
                                      trust_remote_code=args.trust_remote_code)

    return functools.cache(load)  # one model, however many stages ask for it


def _print_faithfulness(summary: dict[str, Any] | None) -> None:
    if summary:
        from ..faithfulness import FaithfulnessSummary

        print(FaithfulnessSummary.from_dict(summary).to_text())


def _report_bad_rows(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        print(f"skipped {row['file']}:{row['line']}: {row['error']}", file=sys.stderr)


def _finish(args: argparse.Namespace, report: Any, table: Callable[[Any], str], figure: str) -> int:
    """Report a benchmark run: bad rows, the table and faithfulness means, and where the results went (or, on a
    rank other than 0, that its share is done)."""
    if report is None:
        from ..sharding import report_share_done

        return report_share_done()
    _report_bad_rows(report.bad_rows["rows"])
    if not args.quiet:
        print(table(report))
        _print_faithfulness(report.faithfulness)
    print(f"wrote {Path(args.output) / 'results.json'} and {Path(args.output) / figure} "
          f"({report.bad_rows['count']} bad rows skipped).", file=sys.stderr)
    return 0


def cmd_xor_attriqa(args: argparse.Namespace) -> int:
    from .benchmarks import run_xor_attriqa
    from .tables import xor_table

    exp = _experiment(args)
    cfg = _config(args, exp, default_prompt="standard")
    data_cfg = exp.get("data")
    data = args.data or (data_cfg.get("eval") if isinstance(data_cfg, dict) else data_cfg) or []
    if isinstance(data, str):
        data = [data]
    if not data:
        raise ConfigError("give at least one XOR-AttriQA file (DATA…), or 'data' in the --config file.")
    calibrate_on = args.calibrate_on or (data_cfg.get("calibrate_on") if isinstance(data_cfg, dict) else None)
    name = args.model or exp.get("model") or DEFAULT_MODEL
    report = run_xor_attriqa(
        _model_loader(args, name, cfg), data, out_dir=args.output, model_name=name, config=cfg,
        text=args.text or exp.get("text") or "en", calibrate_on=calibrate_on, calibrate_by=args.calibrate_by,
        nli_dir=args.nli_dir, limit=args.limit if args.limit is not None else exp.get("limit"),
        faithfulness=args.faithfulness, progress=_progress)
    return _finish(args, report, xor_table, "sweep.png")


def cmd_eli5(args: argparse.Namespace) -> int:
    from .benchmarks import run_eli5
    from .tables import eli5_table

    exp = _experiment(args)
    cfg = _config(args, exp, default_prompt=None)
    gen = {k: v for k, v in (("do_sample", True if args.sample else None), ("temperature", args.temperature),
                             ("top_p", args.top_p)) if v is not None}
    if gen:
        cfg = cfg.replace(generation=gen)
    data_cfg = exp.get("data")
    source = args.data or (data_cfg.get("eval") if isinstance(data_cfg, dict) else data_cfg)
    if isinstance(source, list):
        source = source[0] if source else None
    if not source:
        raise ConfigError("give an ALCE-format file (DATA), or 'data' in the --config file.")
    name = args.model or exp.get("model") or DEFAULT_MODEL
    nli = args.nli or exp.get("nli")
    judge = None
    if nli:
        from .nli import HFNLIJudge

        print(f"loading NLI judge {nli} …", file=sys.stderr)
        judge = HFNLIJudge.from_pretrained(nli, device=args.device)
    report = run_eli5(
        _model_loader(args, name, cfg), source, out_dir=args.output, model_name=name, config=cfg,
        seeds=args.seeds or exp.get("seeds") or [cfg.generation.seed], ndocs=args.ndocs, judge=judge,
        at_most=args.at_most_citations, limit=args.limit if args.limit is not None else exp.get("limit"),
        faithfulness=args.faithfulness, progress=_progress)
    return _finish(args, report, eli5_table, "length_bins.png")


def _run(func):
    def run(args: argparse.Namespace) -> int:
        from .nli import NLIJudgeError

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
                     help="also score how much each citation set matters to the model (mirage.faithfulness)")
    xor.add_argument("--calibrate-on", help="split to calibrate MIRAGE-CAL's CTI threshold on (e.g. val.jsonl)")
    xor.add_argument("--calibrate-by", choices=["global", "language"], default="global",
                     help="one threshold, or one per language of the calibration split (as the reference code)")
    xor.add_argument("--nli-dir", help="folder of <split>.nli-*.json baseline predictions (default: beside DATA)")
    _add_model_args(xor, skip={"--cci-top-k", "--cci-top-percent", "--cti-threshold", "--max-citations",
                               "--max-new-tokens", "--seed"})
    xor.set_defaults(func=_run(cmd_xor_attriqa))

    eli5 = bench.add_parser("eli5", help="ELI5 (ALCE): MIRAGE citations beside the model's self-citations",
                            description="Generate answers, keep their self-citations, attribute the same text with "
                                        "MIRAGE and compare the two. Writes DIR/results.json and "
                                        "DIR/length_bins.png.")
    eli5.add_argument("data", nargs="?", help="ALCE-format JSON/JSONL file, or hf:OWNER/REPO/FILE (needs datasets)")
    eli5.add_argument("--seeds", type=int, nargs="+", help="generation seeds (default: the config's seed)")
    eli5.add_argument("--ndocs", type=int, default=5, help="documents given to the model (default 5)")
    eli5.add_argument("--nli", help="Hugging Face NLI judge for ALCE citation quality "
                                    "(the paper: google/t5_xxl_true_nli_mixture)")
    eli5.add_argument("--faithfulness", action="store_true",
                      help="also score how much each citation set matters to the model (mirage.faithfulness)")
    eli5.add_argument("--at-most-citations", type=int, default=3, help="citations judged per sentence (ALCE: 3)")
    eli5.add_argument("--sample", action="store_true", help="sample answers (seeds then differ) instead of greedy")
    eli5.add_argument("--temperature", type=float, help="sampling temperature")
    eli5.add_argument("--top-p", type=float, help="nucleus sampling p")
    _add_model_args(eli5, skip={"--seed"})
    eli5.set_defaults(func=_run(cmd_eli5))


if register not in EXTRA_COMMANDS:
    EXTRA_COMMANDS.append(register)
