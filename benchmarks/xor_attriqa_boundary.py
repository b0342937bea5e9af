"""How much of a stored XOR-AttriQA run's passage predictions rest on the token that closes the documents block.

mirage maps every prompt token that overlaps a document's rendered entry to that document (as the reference
procedure does once its slice is aligned). The last entry ends with a newline, and tokenizers often merge it with the
template's next newline (Gemma: ``"\\n" + "\\n" -> "\\n\\n"``), so one token straddles the end of the documents block:
half document, half template. That separator position can carry the largest saliency of all context tokens, and it
counts for the last passage.

This script re-evaluates a finished ``mirage score xor-attriqa`` run (no attribution is recomputed: CCI of every other
token does not depend on which tokens count as context) twice: as run, and with the straddling tokens removed from
the context. It re-tokenizes each prompt to find those tokens, prints both tables and writes JSON. mirage now leaves
such tokens out of the context (``mirage.attribution.prompts.tokenize_prompt``); ``--write-run`` converts a run made
before that change::

    python benchmarks/xor_attriqa_boundary.py RUN_DIR DATA.jsonl [DATA.jsonl ...] --calibrate-on VAL.jsonl \\
        --model NAME --text en|native [-o OUT.json]
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness import Text, main, model_arg, text_arg

from mirage import Mirage, MirageConfig
from mirage.options import cli_arg
from mirage.runs.store import read_records
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import ItemScores, prepare_item, run_lengths, scores_from_records
from mirage.scoring.xor_data import XorItem, load_xor_attriqa
from mirage.scoring.xor_eval import evaluate

SETTINGS = ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct", "mirage_raw")


def straddling(m: Mirage, cfg: MirageConfig, item: XorItem, n_stored: int) -> list[int]:
    """Indices, among a stored run's context tokens, of the tokens that reach past the documents block.

    A run made before mirage left those tokens out stored every token
    overlapping a document's entry; a run made since stored only the tokens inside the block (nothing to drop)."""
    _, prep = prepare_item(m, item, config=cfg)
    overlapping = [pos for pos, (a, b) in enumerate(prep.tokens.offsets)
                   if b > a and any(min(b, e) > max(a, s) for s, e in prep.prompt.doc_spans)]
    inside = set(prep.tokens.context_positions)
    if n_stored == len(inside):
        return []
    if n_stored != len(overlapping):
        raise SystemExit(f"{item.key}: {n_stored} stored context scores, but the prompt has {len(inside)} context "
                         f"tokens ({len(overlapping)} overlapping documents); was the run made with another prompt or "
                         "model?")
    return [j for j, pos in enumerate(overlapping) if pos not in inside]


def without(scores: ItemScores, drop: list[int]) -> ItemScores:
    if not scores.cci or not drop:
        return scores
    dropped = set(drop)
    keep = [j for j in range(len(scores.cci[0])) if j not in dropped]
    docs = scores.docs_per_context_token()
    return dataclasses.replace(scores, cci=[[v[j] for j in keep] for v in scores.cci],
                               context_docs=run_lengths([docs[j] for j in keep]))


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    run_dir: str = cli_arg(flag="run_dir", help="a finished mirage score xor-attriqa run folder")
    data: tuple[str, ...] = cli_arg(flag="data", help="the XOR-AttriQA files it scored")
    calibrate_on: str = cli_arg(flag="--calibrate-on", help="the calibration file it was calibrated on")
    model: str = model_arg(help="the model the run used")
    text: Text = text_arg()
    output: str | None = cli_arg(None, flag="--output", aliases=("-o",), help="the JSON file to write")
    write_run: str | None = cli_arg(None, flag="--write-run", metavar="DIR", help="also write DIR/scores.jsonl (and "
                                    "run.json) with the straddling tokens dropped: the scores a run with mirage's "
                                    "current rule (context tokens inside the documents block) stores, so `mirage "
                                    "score xor-attriqa … -o DIR` re-evaluates it without recomputing attribution")


def run(args: Options) -> int:
    cfg = stored_xor_pipeline(Path(args.run_dir) / "scores.jsonl", args.model)  # the run's own prompt
    stored = scores_from_records(read_records(Path(args.run_dir) / "scores.jsonl"))
    test = [i for path in args.data for i in load_xor_attriqa(path, text=args.text).items]
    cal = load_xor_attriqa(args.calibrate_on, text=args.text).items
    m = Mirage.from_pretrained(args.model, config=cfg)
    trimmed, n_items, n_dropped = {}, 0, 0
    for item in [*test, *cal]:
        sc = stored.get(item.key)
        if sc is None:
            continue
        drop = straddling(m, cfg, item, len(sc.cci[0])) if sc.cci else []
        trimmed[item.key] = without(sc, drop)
        n_items += 1
        n_dropped += bool(drop)
    out = {"run_dir": args.run_dir, "model": args.model, "text": args.text, "items": n_items,
           "items_with_a_straddling_context_token": n_dropped, "as_run": {}, "straddling_dropped": {}}
    for name, scores in (("as_run", stored), ("straddling_dropped", trimmed)):
        report = evaluate(test, scores, config=cfg, calibration_items=cal).to_dict()
        for setting in SETTINGS:
            out[name][setting] = {metric: report[metric][setting]["avg"]
                                  for metric in ("agreement", "f1", "balanced_accuracy", "roc_auc")
                                  if setting in report[metric]}
    print(f"{n_dropped} of {n_items} items have a context token straddling the end of the documents block")
    print(f"{'setting':14s} {'agreement':>19s} {'F1':>15s} {'balanced acc.':>15s} {'ROC-AUC':>15s}"
          "   (as run -> dropped)")
    for setting in SETTINGS:
        a, b = out["as_run"][setting], out["straddling_dropped"][setting]
        cells = []
        for metric, fmt in (("agreement", ".1f"), ("f1", ".1f"), ("balanced_accuracy", ".1f"), ("roc_auc", ".3f")):
            cells.append(f"{a[metric]:{fmt}} -> {b[metric]:{fmt}}" if metric in a else "-")
        print(f"{setting:14s} " + " ".join(f"{c:>15s}" for c in cells))
    if args.write_run:
        target = Path(args.write_run)
        target.mkdir(parents=True, exist_ok=True)
        (target / "run.json").write_text((Path(args.run_dir) / "run.json").read_text())
        with (target / "scores.jsonl").open("w") as f:
            for key, rec in stored.items():
                f.write(json.dumps(trimmed.get(key, rec).to_dict(), ensure_ascii=False) + "\n")
    if args.output:
        Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    main(Options, run)
