"""Parity of ``--preset authors`` with the authors' XOR-AttriQA scoring, re-implemented here on inseq's outputs.

    python benchmarks/authors_parity.py benchmarks/results/xor_attriqa_val_authors xor-attriqa-match:val \
        --out benchmarks/results/fidelity/parity_val40.json [--limit N] [--model NAME]

RUN_DIR is a ``mirage score xor-attriqa --preset authors`` run on the same rows: its ``pairs.jsonl`` holds mirage's
per-passage citations, its ``results.json`` the calibrated CTI thresholds, its ``run.json`` the prompt. For each
item, inseq's ``attribute_context`` runs as the authors' ``sec4_alignment/attribute-mirage.py`` runs it (CCI of
``contrast_prob_diff`` without ``logprob``, CCI for every token at or above the answer's mean CTI, ranked by CTI), and
the scoring of their ``MIRAGE_match.py`` is applied to its outputs (:mod:`mirage.peers.authors`, written from the
script's description):

* MIRAGE-EX: ``n`` = the tokens with ``score >= np.mean + np.std`` (population std); MIRAGE-CAL: ``n`` = the tokens at
  or above the calibrated threshold (mirage's, per language and selection, from the run's ``results.json``). The
  CCI rows of the first ``n`` ranked tokens are used; an answer with ``n = 0`` cites nothing.
* Each row's context scores lose the scaffolding tokens, then split into passages; the script finds ``<i>``
  markers (CORA's prompt), mirage's ``standard`` prompt writes ``Document [i]:``, so the passages here are the
  document-content tokens of each passage (:func:`mirage.peers.authors.passage_of_tokens`).
* Top-5 %: keep scores ``>= 0.95·max + 0.05·min`` over all passages' scores concatenated; top-3: ``>= np.sort(s)[-3]``
  (ties kept). A passage is cited when its kept scores, summed over the rows, are non-zero.

Writes the share of (item, passage) pairs predicted the same, per setting, and how both score against the labels
(OUT); per item, its CTI selection and the settings where a pair differs (OUT with ``.items.jsonl``).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness import UsageError, limit_arg, main, model_arg

from mirage import Mirage
from mirage.data import resolve
from mirage.options import cli_arg
from mirage.peers.authors import authors_citations, ex_threshold, passage_of_tokens, ranked_by_cti
from mirage.peers.inseq import fit_to_prompt_context, run_reference
from mirage.runs.store import read_records
from mirage.scoring import metrics as M
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import prepare_item
from mirage.scoring.xor_data import load_xor_attriqa

SETTINGS = ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    run_dir: str = cli_arg(flag="run_dir", help="a mirage score xor-attriqa --preset authors run folder")
    data: str = cli_arg(flag="data", help="the rows it scored (a file or a dataset name, e.g. xor-attriqa-match:val)")
    out: str = cli_arg(flag="--out", help="the JSON file to write")
    limit: int | None = limit_arg(help="only the first N rows")
    model: str | None = model_arg(None, help="the model (default: the run's model)")


def run(args: Options) -> int:
    folder = Path(args.run_dir)
    results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
    if results.get("settings", {}).get("config", {}).get("preset") != "authors":
        raise UsageError(f"{folder} was not run with --preset authors; run it with that preset first.")
    model = args.model or results["settings"]["model"]
    cal = results.get("calibration") or {}
    pairs: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in read_records(folder / "pairs.jsonl"):
        pairs[(rec["key"], rec["passage"])] = rec
    cfg = stored_xor_pipeline(folder / "scores.jsonl", model)
    m = Mirage.from_pretrained(model, config=cfg)
    tok = m.lm.tokenizer
    std_k = results["settings"]["config"]["cti"]["std_k"]

    items: list[dict[str, Any]] = []
    labels: dict[str, list[bool]] = {s: [] for s in SETTINGS}
    preds: dict[str, dict[str, list[bool]]] = {"mirage": {s: [] for s in SETTINGS}, "script": {s: [] for s in SETTINGS}}
    started = time.perf_counter()
    data = load_xor_attriqa(resolve(args.data), text=results["settings"].get("text", "en"), limit=args.limit)
    for item in data.items:
        if (item.key, 0) not in pairs:
            continue
        answer, prep = prepare_item(m, item, config=cfg)
        ref = run_reference(m.lm.model, tok, prompt=prep.prompt.text, contextless_prompt=prep.prompt.contextless_text,
                            context=prep.prompt.context, answer=answer, std_k=0.0, logprob=False)
        notes = list(ref.notes) + fit_to_prompt_context(ref, tok, prep.tokens)
        row: dict[str, Any] = {"key": item.key, "lang": item.lang, "notes": notes}
        items.append(row)
        if len(ref.context_tokens) != len(prep.tokens.context_docs):
            row["skipped"] = "context tokens differ"
            continue
        passages_of = passage_of_tokens(prep)
        rows = [ref.cci_scores[i] for i in ranked_by_cti(ref.selected, ref.cti_scores)]
        cti = np.array(ref.cti_scores)
        ex = ex_threshold(ref.cti_scores, std_k)
        row["cti_ex_threshold"] = ex
        row["ex_tokens"] = int(np.sum(cti >= ex))
        for setting in SETTINGS:
            sel = setting.split("_", 1)[1]
            if setting.startswith("ex"):
                threshold = ex
            else:
                threshold = (cal.get("by_language", {}).get(sel, {}).get(item.lang)
                             or cal.get("thresholds", {}).get(sel))
                if threshold is None:
                    continue
            theirs = authors_citations(ref.cti_scores, rows, threshold, passages_of, len(item.passages),
                                       3 if sel == "top3" else -5)
            ours = [bool(pairs[(item.key, p)]["settings"].get(setting, {}).get("cited")) for p in range(len(theirs))]
            preds["script"][setting] += theirs
            preds["mirage"][setting] += ours
            labels[setting] += [bool(x) for x in item.labels]
            if ours != theirs:
                row.setdefault("differs", {})[setting] = {"mirage": ours, "script": theirs}

    summary: dict[str, dict[str, Any]] = {}
    for setting in SETTINGS:
        a, b = preds["mirage"][setting], preds["script"][setting]
        if not a:
            continue
        entry: dict[str, Any] = {"pairs": len(a),
                                 "same_pct": round(100 * sum(x == y for x, y in zip(a, b)) / len(a), 2),
                                 "items_differing": sum(1 for r in items if setting in r.get("differs", {}))}
        for who, p in (("mirage", a), ("script", b)):
            c = M.BinaryCounts.of(p, labels[setting])
            for measure in ("f1", "balanced_accuracy"):
                value = M.BINARY_METRICS[measure](c)
                entry[f"{who}_{measure}"] = None if value is None else round(value, 2)
        summary[setting] = entry
    out = {"command": "python benchmarks/authors_parity.py " + shlex.join(sys.argv[1:]),
           "model": model, "run": folder.name, "items": len(items),
           "items_skipped": sum(1 for r in items if "skipped" in r),
           "seconds": round(time.perf_counter() - started, 1), "summary": summary,
           "per_item": Path(args.out).with_suffix(".items.jsonl").name}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    Path(args.out).with_suffix(".items.jsonl").write_text("".join(json.dumps(r) + "\n" for r in items),
                                                          encoding="utf-8")
    for setting, entry in summary.items():
        print(setting, json.dumps(entry))
    return 0


if __name__ == "__main__":
    main(Options, run)
