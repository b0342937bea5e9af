"""Time ``mirage score xor-attriqa`` before and after "compute only what a setting needs", in one run.

    python benchmarks/bench_xor_scoring.py xor-attriqa-match:val,fi,ru --limit 5 --threads 2

Every run scores the first N rows of fi and ru, calibrated on the first N rows of val, with the same loaded model,
into fresh directories: **before** computes every answer token's CCI row (``all_tokens=True``, no passage signals:
what the scorer did until now); **after** the new default's CCI rows (those of the tokens some setting selects;
every row only for calibration items), without the passage signals, so its outputs are today's; and
**after_with_signals** the full new default, adding the single-passage passes that the learned and
passage-score settings need; and **learned_only** ``--settings learned`` (the headline setting: no CCI row at
all). With ``--batch-items N`` (N > 1) also **learned_only_batchN**: the same with the CTI passes of N new items
in one padded forward (``mirage score xor-attriqa --batch-items N``; the CPU default is 1), and the largest
difference of its learned setting's metrics from learned_only's; and **after_batchN**: after with N new items' passes
batched, CTI's and CCI's alike (one padded differentiable pass, one vmapped backward pass per target rank), with
whether its tables equal after's. Two calibration rows beyond the timed ones are scored first, untimed, so that
first-call costs (kernel loading on a GPU) fall in no run; ``--runs`` picks runs, ``--dtype`` the model's dtype. It
checks that ``results.json`` is identical for every pre-existing setting (and the sweep and the calibration) between
before and after, prints the wall time of each and the ratios, the seconds per test item by answer length, and writes
``benchmarks/results/xor_scoring.json``. Run it on an otherwise idle machine.

With ``--commands``, it times whole commands instead, each in its own process (interpreter start, imports, model
loading and scoring all counted), on the first N rows of fi only: **reference**, the reference procedure (inseq
``attribute_context``, :mod:`mirage.peers.inseq`) on every row and its MIRAGE-EX passage predictions at top-3 and
top-5 % (``python benchmarks/bench_xor_scoring.py --reference-command FI.jsonl``); **paper_settings**,
``mirage score xor-attriqa FI --settings ex`` (the paper's MIRAGE-EX at top-3 and top-5 %, what the reference
computes); and **default**, ``mirage score xor-attriqa FI`` with today's defaults. Then each procedure's model work
alone (``compute_only``: in a process of its own on a model loaded untimed, no interpreter start, import, load or
evaluation counted), the ceiling of the whole commands' ratio. An untimed process loads the model first, so that no
timed command pays the cold file cache alone, and every measurement runs in each of ``--repeats`` rounds (default 3),
each figure the median of its rounds, so that a slow spell of a shared machine falls on all alike. It prints each
command, its wall time and the reference's time over each, and writes ``benchmarks/results/xor_commands.json``:

    python benchmarks/bench_xor_scoring.py xor-attriqa-match:fi --commands --limit 6 --threads 2
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from statistics import median
from typing import Literal

import torch
from harness import (
    Text,
    UsageError,
    device_arg,
    device_name,
    dtype_arg,
    limit_arg,
    main,
    model_arg,
    text_arg,
    threads_arg,
)

from mirage import Mirage
from mirage.attribution.models import dtype_name
from mirage.data import resolve, resolve_files
from mirage.options import cli_arg
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.store import write_atomic
from mirage.scoring.benchmarks import XorAttriQAOptions, run_xor_attriqa
from mirage.scoring.xor_attriqa import score_item, score_item_batch, xor_attriqa_pipeline
from mirage.scoring.xor_data import load_xor_attriqa
from mirage.scoring.xor_eval import SETTINGS

#: (name, all_tokens, signals, settings): the scorer before (every CCI row); the new default without the passage
#: signals (the same outputs as before); the new default (plus the single-passage passes the learned setting needs);
#: and the learned setting alone (``--settings learned``: no CCI row, no gradient).
RUNS = (("before", True, False, ("ex", "cal", "learned")), ("after", False, False, ("ex", "cal", "learned")),
        ("after_with_signals", False, True, ("ex", "cal", "learned")), ("learned_only", False, True, ("learned",)))
METRICS = ("agreement", "precision", "recall", "f1", "balanced_accuracy", "roc_auc")


class Timed:
    """A progress callable that records when each item finishes (seconds per item key)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, iterable, total, stage):
        last = time.perf_counter()
        for item in iterable:
            yield item
            now = time.perf_counter()
            if stage == "xor-attriqa":
                self.seconds[item.key] = now - last
            last = now


def reference_row(m: Mirage, item, cfg) -> tuple:
    """The reference procedure on one row: the row prepared with mirage's prompt, and inseq's CTI and CCI of its
    annotated answer on that prompt."""
    from mirage.peers.inseq import run_reference
    from mirage.scoring.xor_attriqa import prepare_item

    _, prep = prepare_item(m, item, config=cfg)
    return prep, run_reference(m.lm.model, m.lm.tokenizer, prompt=prep.prompt.text,
                               contextless_prompt=prep.prompt.contextless_text, context=prep.prompt.context,
                               answer=item.answer, std_k=cfg.cti.std_k)


def reference_command(path: str, *, limit: int, model: str, text: str) -> dict:
    """The reference procedure as a whole command: the model loaded, then for each of the first ``limit`` rows of
    ``path`` inseq's CTI and CCI on mirage's prompt and its MIRAGE-EX passage predictions (top-3, top-5 %), scored
    against the human labels."""
    from mirage.config import CCIConfig
    from mirage.peers.inseq import passage_predictions
    from mirage.scoring import metrics as M
    from mirage.scoring.xor_eval import CCI_SELECTIONS

    cfg = xor_attriqa_pipeline()
    m = Mirage.from_pretrained(model, config=cfg)
    selections = {name: CCIConfig(**{**vars(cfg.cci), **sel}) for name, sel in CCI_SELECTIONS.items()}
    labels: list[bool] = []
    preds: dict[str, list[bool]] = {name: [] for name in selections}
    for item in load_xor_attriqa(resolve_files([path])[0], text=text, limit=limit).items:
        prep, ref = reference_row(m, item, cfg)
        docs = list(prep.tokens.context_docs)
        if len(docs) != len(ref.context_tokens):
            continue
        labels += list(item.labels)
        for name, selection in selections.items():
            preds[name] += passage_predictions(ref, docs, selection, len(item.passages))
    return {name: {k: fn(M.BinaryCounts.of(p, labels)) for k, fn in M.BINARY_METRICS.items()}
            for name, p in preds.items()}


def compute_split(path: str, *, procedure: str, limit: int, model: str, text: str) -> float:
    """``--compute-split``: one procedure's model work alone (``paper_settings``: mirage's ``--settings ex`` scoring of
    a row, :func:`score_item`, CTI then CCI of the tokens MIRAGE-EX selects; ``reference``: the reference procedure
    on the row), in this process on a model loaded untimed, over the first ``limit`` rows after one untimed row
    beyond them (first-call costs): its seconds. Each procedure runs in a process of its own, so that neither runs
    after the other on the same model."""
    cfg = xor_attriqa_pipeline()
    m = Mirage.from_pretrained(model, config=cfg)
    items = list(load_xor_attriqa(resolve_files([path])[0], text=text, limit=limit + 1).items)

    def ours(item) -> None:
        score_item(m, item, config=cfg)

    def reference(item) -> None:
        reference_row(m, item, cfg)

    run = {"paper_settings": ours, "reference": reference}[procedure]
    run(items[-1])
    start = time.perf_counter()
    for item in items[:limit]:
        run(item)
    return time.perf_counter() - start


def time_commands(data: str, *, limit: int, model: str, text: str, threads: int | None, out: str,
                  repeats: int = 3) -> None:
    """``--commands``: the reference procedure, ``mirage score xor-attriqa --settings ex`` and the default scorer,
    each a whole command in its own process on the first ``limit`` rows of ``data``'s fi file, then each procedure's
    model work alone (:func:`compute_split`); ``repeats`` rounds, each running every measurement once in turn, so that
    a slow spell of a shared machine falls on all alike. Each figure is the median of its rounds (every round's
    seconds recorded beside it)."""
    fi = data if not resolve(data).is_dir() else str(Path(data) / "fi.jsonl")  # a dataset name stays a name
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)} if threads else {}))
    walls: dict[str, list[float]] = defaultdict(list)
    alone: dict[str, list[float]] = defaultdict(list)
    commands: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        mirage = [sys.executable, "-m", "mirage", "score", "xor-attriqa", fi, "--limit", str(limit),
                  "--model", model, "--text", text]
        commands = {
            "reference": [sys.executable, "benchmarks/bench_xor_scoring.py", "--reference-command", fi, "--limit",
                          str(limit), "--model", model, "--text", text],
            "paper_settings": [*mirage, "--settings", "ex", "-o", str(Path(tmp) / "paper")],
            "default": [*mirage, "-o", str(Path(tmp) / "default")],
        }
        # Untimed: one process loads the model first, so that the operating system's file cache holds the weights
        # and the libraries for every timed command alike (the first command timed would otherwise pay it alone).
        root = Path(__file__).resolve().parents[1]
        subprocess.run([sys.executable, "-c", f"from mirage import Mirage; Mirage.from_pretrained({model!r})"],
                       check=True, env=env, stdout=subprocess.DEVNULL, cwd=root)
        for round_ in range(repeats):
            for name, command in commands.items():
                shutil.rmtree(Path(tmp) / name.replace("_settings", ""), ignore_errors=True)  # no resumed run
                start = time.perf_counter()
                subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               cwd=root)
                walls[name].append(time.perf_counter() - start)
                print(f"round {round_ + 1}, {name}: {walls[name][-1]:.1f} s  ({' '.join(command[1:])})")
            for procedure in ("reference", "paper_settings"):
                split = subprocess.run([sys.executable, "benchmarks/bench_xor_scoring.py", "--compute-split", fi,
                                        "--procedure", procedure, "--limit", str(limit), "--model", model, "--text",
                                        text], check=True, env=env, cwd=root, capture_output=True, text=True)
                alone[procedure].append(float(split.stdout.strip().splitlines()[-1]))
                print(f"round {round_ + 1}, {procedure}'s model work alone: {alone[procedure][-1]:.1f} s")
    seconds = {name: median(v) for name, v in walls.items()}
    work = {name: median(v) for name, v in alone.items()}
    result = {"model": model, "text": text, "limit": limit, "threads": threads, "data": data, "repeats": repeats,
              "commands": {name: " ".join(c[1:]).replace(tmp, "DIR") for name, c in commands.items()},
              "seconds": {name: round(s, 1) for name, s in seconds.items()},
              "rounds": {name: [round(s, 1) for s in v] for name, v in walls.items()},
              "reference_over": {name: round(seconds["reference"] / seconds[name], 2) for name in seconds
                                 if name != "reference"},
              "compute_only": {"rows": limit, "seconds": {k: round(v, 1) for k, v in work.items()},
                               "rounds": {k: [round(s, 1) for s in v] for k, v in alone.items()},
                               "reference_over_paper_settings": round(work["reference"] / work["paper_settings"], 2)}}
    print(json.dumps(result, indent=2))
    write_atomic(out, json.dumps(result, indent=2) + "\n")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    data_dir: str = cli_arg("xor-attriqa-match:val,fi,ru", flag="data_dir", nargs="?",
                            help="folder with fi.jsonl, ru.jsonl, val.jsonl (XOR-AttriQA match release), or the "
                                 "dataset xor-attriqa-match:val,fi,ru (`mirage data get` it first)")
    limit: int = limit_arg(5, help="rows of each file")
    model: str = model_arg()
    text: Text = text_arg()
    threads: int | None = threads_arg()
    batch_items: int | None = cli_arg(None, flag="--batch-items", metavar="N",
                                      help="also time learned_only with the CTI passes of N items batched (N > 1)")
    only_batch: bool = cli_arg(False, flag="--only-batch", help="with --batch-items: run only learned_only and its "
                               "batched twin (skip the CCI runs)")
    device: str | None = device_arg()
    dtype: str | None = dtype_arg()
    runs: tuple[str, ...] | None = cli_arg(None, flag="--runs", help="only these runs (names as printed)")
    out: str | None = cli_arg(None, flag="--out", help="results file (default benchmarks/results/xor_scoring.json, "
                              "with --commands benchmarks/results/xor_commands.json)")
    commands: bool = cli_arg(False, flag="--commands", help="time whole commands instead: the reference procedure, "
                             "--settings ex and the default")
    reference_command: str | None = cli_arg(None, flag="--reference-command", metavar="FILE",
                                            help="(used by --commands) run the reference procedure on FILE's first "
                                                 "--limit rows")
    compute_split: str | None = cli_arg(None, flag="--compute-split", metavar="FILE",
                                        help="(used by --commands) time one procedure's model work alone on FILE's "
                                             "first --limit rows")
    procedure: Literal["reference", "paper_settings"] = cli_arg("paper_settings", flag="--procedure",
                                                                help="(with --compute-split) the procedure timed")
    repeats: int = cli_arg(3, flag="--repeats", metavar="N",
                           help="with --commands: rounds of every measurement, each figure their median")


def run(args: Options) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.reference_command:
        print(json.dumps(reference_command(args.reference_command, limit=args.limit, model=args.model,
                                           text=args.text), indent=2))
        return
    if args.compute_split:
        print(compute_split(args.compute_split, procedure=args.procedure, limit=args.limit, model=args.model,
                            text=args.text))
        return
    if args.commands:
        time_commands(args.data_dir, limit=args.limit, model=args.model, text=args.text, threads=args.threads,
                      out=args.out or "benchmarks/results/xor_commands.json", repeats=args.repeats)
        return
    out_file = args.out or "benchmarks/results/xor_scoring.json"
    runs = [(*run, 1) for run in RUNS]  # the last field: items per batch of passes
    if args.batch_items and args.batch_items > 1:
        runs.insert(2, (f"after_batch{args.batch_items}", False, False, ("ex", "cal", "learned"), args.batch_items))
        runs.append((f"learned_only_batch{args.batch_items}", False, True, ("learned",), args.batch_items))
        if args.only_batch:
            runs = [r for r in runs if r[0].startswith("learned_only")]
    if args.runs:
        unknown = set(args.runs) - {r[0] for r in runs}
        if unknown:
            raise UsageError(f"--runs: unknown {sorted(unknown)}; choose from {[r[0] for r in runs]}")
        runs = [r for r in runs if r[0] in args.runs]
    data = resolve(args.data_dir)
    test = [data / "fi.jsonl", data / "ru.jsonl"]
    cal = [data / "val.jsonl"]
    m = Mirage.from_pretrained(args.model, device=args.device, dtype=args.dtype)
    reports, walls, timers = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        # first-call costs (kernel loading on a GPU) stay out of every timed run: two calibration rows after the
        # timed ones, scored untimed one at a time (every row, with signals) and batched
        warm = load_xor_attriqa(cal[0], text=args.text, limit=args.limit + 2).items[args.limit:]
        cfg = xor_attriqa_pipeline()
        for item in warm:
            score_item(m, item, config=cfg, targets="all", signals=True)
        if warm and args.batch_items and args.batch_items > 1:
            score_item_batch(m, warm, config=cfg, targets=["all"] * len(warm))
        for name, all_tokens, signals, groups, batch in runs:
            timers[name] = Timed()
            start = time.perf_counter()
            experiment = ExperimentConfig("xor-attriqa", model=args.model, data=test, calibrate_on=cal,
                                          text=args.text, limit=args.limit, pipeline=cfg)
            options = XorAttriQAOptions(output=str(Path(tmp) / name), all_tokens=all_tokens, signals=signals,
                                        groups=groups, batch_items=batch)
            report = run_xor_attriqa(experiment, options, mirage=m, progress=timers[name])
            walls[name] = time.perf_counter() - start
            reports[name] = report.to_dict()
            rows = sum(1 for line in (Path(tmp) / name / "scores.jsonl").read_text().splitlines()
                       if '"token"' in line)
            print(f"{name}: {walls[name]:.1f} s, {rows} CCI rows stored")
    def same(a: dict, b: dict) -> bool:
        """Identical tables for every pre-existing setting (the NLI baselines' settings exist only where their
        prediction files sit beside the data), sweep and calibration."""
        return all(a[metric].get(s) == b[metric].get(s) for metric in METRICS for s in SETTINGS) \
            and a["sweep"] == b["sweep"] and a["calibration"] == b["calibration"]

    def numbers(tree, prefix: str = "") -> dict[str, float]:
        if isinstance(tree, dict):
            return {k: v for key, sub in tree.items() for k, v in numbers(sub, f"{prefix}/{key}").items()}
        return {prefix: tree} if isinstance(tree, (int, float)) and not isinstance(tree, bool) else {}

    def compared(report: dict, settings) -> dict:
        parts = {metric: {s: report[metric].get(s) for s in settings} for metric in METRICS}
        return {**parts, "sweep": report["sweep"], "calibration": report["calibration"]}

    def max_difference(a: dict, b: dict, settings) -> float | None:
        x, y = numbers(compared(a, settings)), numbers(compared(b, settings))
        return max((abs(x[k] - y[k]) for k in x.keys() & y.keys()), default=None)

    def differing(a: dict, b: dict, settings) -> list[str]:
        """The table cells (metric/setting/language, sweep, calibration) that differ at all, at most 8."""
        x, y = numbers(compared(a, settings)), numbers(compared(b, settings))
        keys = sorted(k for k in x.keys() | y.keys() if x.get(k) != y.get(k))
        return [f"{k}: {x.get(k)} vs {y.get(k)}" for k in keys[:8]]

    identical = learned_same = None
    if "before" in reports and "after" in reports:  # after_with_signals adds settings, changes none
        identical = same(reports["before"], reports["after"])
    if "learned_only" in reports and "after_with_signals" in reports:
        learned_same = all(reports["learned_only"][metric].get("learned") == reports["after_with_signals"][
            metric].get("learned") for metric in METRICS)
    batched = {}
    for name, *_rest, batch in runs:
        twin = "learned_only" if name.startswith("learned_only") else "after"
        if batch > 1 and twin in reports:
            settings = ("learned",) if twin == "learned_only" else SETTINGS
            batched[name] = {f"identical_to_{twin}": same(reports[name], reports[twin]) if twin == "after" else None,
                             f"max_abs_metric_difference_vs_{twin}": max_difference(reports[name], reports[twin],
                                                                                   settings),
                             "differing": differing(reports[name], reports[twin], settings),
                             f"speedup_vs_{twin}": round(walls[twin] / walls[name], 2)}
    items = [i for p in test for i in load_xor_attriqa(p, text=args.text, limit=args.limit).items]
    length = {}
    for item in items:
        length[item.key] = len(m.lm.tokenizer(item.answer, add_special_tokens=False)["input_ids"])
    # a batch's items finish together, so per-item seconds exist only for unbatched runs
    by_len: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name, *_rest, batch in runs
                                                 if batch == 1}
    for name in by_len:
        for key, sec in timers[name].seconds.items():
            n = length.get(key, 0)
            bucket = "1" if n <= 1 else "2-4" if n <= 4 else "5-9" if n <= 9 else "10+"
            by_len[name][bucket].append(sec)
    per_len = {b: {name: round(median(by_len[name][b]), 2) if by_len[name].get(b) else None for name in by_len}
               for b in ("1", "2-4", "5-9", "10+")}
    device = m.lm.device
    out = {"model": args.model, "device": str(device), "dtype": dtype_name(m.lm.dtype),
           "device_name": device_name(device),
           "text": args.text, "limit": args.limit, "threads": torch.get_num_threads(),
           "seconds": {k: round(v, 1) for k, v in walls.items()},
           "speedup": {name: round(walls["before"] / walls[name], 2) for name in walls if "before" in walls
                       and name != "before"},
           "batched": batched,
           "identical_results_for_existing_settings": identical,
           "learned_only_equals_full_default_on_learned": learned_same, "median_seconds_per_test_item_by_answer_tokens":
           per_len, "test_items": len(items)}
    print(json.dumps(out, indent=2))
    write_atomic(out_file, json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main(Options, run)
