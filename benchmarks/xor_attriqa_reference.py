"""XOR-AttriQA passage predictions of mirage beside the reference procedure (inseq ``attribute_context``, see
:mod:`mirage.peers.inseq`) on the same model, prompts and items.

    python benchmarks/xor_attriqa_reference.py RUN_DIR DATA.jsonl [DATA.jsonl ...] --limit 2 [--model NAME]

RUN_DIR is the output directory of ``mirage score xor-attriqa`` on the same files (its ``scores.jsonl`` holds
mirage's per-token scores, so mirage is not run again). For each item, both procedures' CTI scores and MIRAGE-EX
passage predictions (top-3 and top-5 %) are compared, and both are scored against the human labels. Prints JSON.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness import Text, limit_arg, main, model_arg, text_arg

from mirage import Mirage
from mirage.attribution.cti import select_tokens
from mirage.config import CCIConfig, CTIConfig
from mirage.options import cli_arg
from mirage.peers.inseq import fit_to_prompt_context, passage_predictions, run_reference
from mirage.runs.store import read_records
from mirage.scoring import metrics as M
from mirage.scoring.benchmarks import stored_xor_pipeline
from mirage.scoring.xor_attriqa import prepare_item, scores_from_records
from mirage.scoring.xor_data import load_xor_attriqa
from mirage.scoring.xor_eval import CCI_SELECTIONS, build_views, predict, selected_tokens


def _pearson(a: list[float], b: list[float]) -> float | None:
    if len(a) != len(b) or len(a) < 2:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = sum((x - ma) ** 2 for x in a) ** 0.5
    vb = sum((y - mb) ** 2 for y in b) ** 0.5
    return None if va == 0 or vb == 0 else sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (va * vb)


def _top(values: list[float], k: int) -> list[int]:
    return sorted(range(len(values)), key=lambda j: -values[j])[:k]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    run_dir: str = cli_arg(flag="run_dir", help="a mirage score xor-attriqa run folder (its scores.jsonl)")
    data: tuple[str, ...] = cli_arg(flag="data", help="the XOR-AttriQA files it scored")
    limit: int = limit_arg(2, help="rows of each file")
    model: str = model_arg(help="the model the run used")
    text: Text = text_arg()


def run(args: Options) -> int:
    cfg = stored_xor_pipeline(Path(args.run_dir) / "scores.jsonl", args.model)  # the run's own prompt
    stored = scores_from_records(read_records(Path(args.run_dir) / "scores.jsonl"))
    m = Mirage.from_pretrained(args.model, config=cfg)
    selections = {name: CCIConfig(**{**vars(cfg.cci), **sel}) for name, sel in CCI_SELECTIONS.items()}
    ex = CTIConfig(metric=cfg.cti.metric, std_k=cfg.cti.std_k)
    rows, labels, preds = [], [], {("mirage", s): [] for s in selections} | {("reference", s): [] for s in selections}
    for path in args.data:
        for item in load_xor_attriqa(path, text=args.text, limit=args.limit).items:
            if item.key not in stored:
                continue
            _, prep = prepare_item(m, item, config=cfg)
            ref = run_reference(m.lm.model, m.lm.tokenizer, prompt=prep.prompt.text,
                                contextless_prompt=prep.prompt.contextless_text, context=prep.prompt.context,
                                answer=item.answer, std_k=cfg.cti.std_k)
            # inseq's context scores are re-aligned to the context tokens inside the prompt (mirage.peers.inseq),
            # which are mirage's context positions: map them to passages with mirage's own token-to-document map.
            docs = list(prep.tokens.context_docs)
            row = {"file": item.file, "line": item.line, "labels": list(item.labels), "notes": list(ref.notes)}
            row["notes"] += fit_to_prompt_context(ref, m.lm.tokenizer, prep.tokens)
            if len(docs) != len(ref.context_tokens):
                rows.append(row)
                continue
            view = build_views([item], stored, selections)[0]
            ours_sel = selected_tokens(view, ex)
            ref_sel = tuple(ref.selected)
            sc = stored[item.key]
            # CCI scores are compared on the context tokens inseq scored (its slice may miss one at an end).
            a, b = ref.scored
            row.update(cci_pearson={t: _pearson(sc.cci[t][a:b], ref.cci_scores[t][a:b]) for t in ref_sel if sc.cci},
                       cci_top5_overlap={t: len(set(_top(sc.cci[t][a:b], 5)) & set(_top(ref.cci_scores[t][a:b], 5)))
                                         for t in ref_sel if sc.cci})
            row.update(mirage_cti=sc.cti, reference_cti=ref.cti_scores, cti_pearson=_pearson(sc.cti, ref.cti_scores),
                       mirage_selected=list(ours_sel), reference_selected=list(ref_sel),
                       reference_recomputed_selected=list(select_tokens(ref.cti_scores, ex)[0]))
            labels += list(item.labels)
            for name, sel_cfg in selections.items():
                ours = predict(view, ours_sel, name)
                theirs = passage_predictions(ref, docs, sel_cfg, len(item.passages))
                row[f"mirage_{name}"], row[f"reference_{name}"] = ours, theirs
                preds[("mirage", name)] += ours
                preds[("reference", name)] += theirs
            rows.append(row)
    summary = {}
    for (who, name), p in preds.items():
        if p:
            c = M.BinaryCounts.of(p, labels)
            summary[f"{who}_ex_{name}"] = {k: fn(c) for k, fn in M.BINARY_METRICS.items()}
    for name in selections:
        a, b = preds[("mirage", name)], preds[("reference", name)]
        if a:
            summary[f"same_prediction_ex_{name}_pct"] = 100 * sum(x == y for x, y in zip(a, b)) / len(a)
    print(json.dumps({"items": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    main(Options, run)
