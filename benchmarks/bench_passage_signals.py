"""Time the learned setting's passes with the output head on the answer rows only, against the head on every position.

    python benchmarks/bench_passage_signals.py xor-attriqa-match:fi --limit 5 \
        --model gemma3-270m --text native

The learned setting of ``mirage score xor-attriqa`` runs, per item, CTI's two passes and the passage signals (one
pass over the prompt before the first passage, one short pass per passage). Every pass needs the logits of the
answer positions only. **full_head**, what the scorer did before: the signals' passes ran the model's output head on
every input position and kept the answer rows afterwards. **kept_rows**, today's
:func:`mirage.attribution.forward.causal_pass`: the head runs on the answer rows only (``logits_to_keep``). The two runs
alternate item by item on the same loaded model; the script checks the log-probabilities agree (max |difference|),
prints the seconds of each, the ratio, and writes ``benchmarks/results/passage_signals.json``. A large vocabulary gains
most (Gemma 3: 262k entries, SmolLM2: 49k). Run it on an otherwise idle machine.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch
from harness import Text, limit_arg, main, model_arg, text_arg, threads_arg

from mirage import Mirage
from mirage.attribution.serialization import library_versions
from mirage.attribution.tokenization import tokenize_answer
from mirage.data import resolve
from mirage.likelihood import signals as ps
from mirage.options import cli_arg
from mirage.scoring.xor_attriqa import SIGNALS, prepare_item, xor_attriqa_pipeline
from mirage.scoring.xor_data import load_xor_attriqa


def full_head(lm: Any, positions: Any, **kwargs: Any) -> Any:
    """The pass as it ran before: the output head over every position, the wanted rows sliced afterwards."""
    out = lm.model(**kwargs)
    out.logits = out.logits[:, torch.tensor(list(positions) or [0], device=lm.device)]
    return out


def timed(m: Mirage, prep: Any, answer_ids: list[int], cti: Any, head: Any) -> tuple[float, ps.PassageSignals]:
    """Seconds of the learned setting's signal passes, given CTI's log-probabilities as the scorer gives them (CTI's
    own passes aside: they kept the head on the answer rows before too), and the signals."""
    ps.causal_pass = head
    t = time.perf_counter()
    sig = ps.passage_signals(m.lm, prep, answer_ids, prepare=m.prepare, logprob=cti.logprobs,
                             none_logprob=cti.contextless_logprobs,
                             **SIGNALS)
    return time.perf_counter() - t, sig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    data: str = cli_arg(flag="data", help="an XOR-AttriQA JSONL file, or a dataset such as xor-attriqa-match:fi")
    limit: int = limit_arg(5, help="rows")
    model: str = model_arg()
    text: Text = text_arg()
    threads: int | None = threads_arg()
    out: str = cli_arg("benchmarks/results/passage_signals.json", flag="--out",
                       help="the JSON file the run is added to (one entry per model and text)")


def run(args: Options) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    m = Mirage.from_pretrained(args.model, config=xor_attriqa_pipeline())  # the scorer's prompt
    kept = ps.causal_pass
    items = [i for i in load_xor_attriqa(resolve(args.data), text=args.text, limit=args.limit).items
             if len(i.passages) > 1]
    rows = []
    for item in items:
        text, prep = prepare_item(m, item)
        answer = tokenize_answer(m.lm.tokenizer, text)
        ids = answer.ids
        cti = m.score_tokens(prep, answer, targets="none").cti
        timed(m, prep, ids, cti, kept)  # warm-up of this item's shapes
        before, sig_before = timed(m, prep, ids, cti, full_head)
        after, sig_after = timed(m, prep, ids, cti, kept)
        diff = max((abs(a - b) for ra, rb in zip(sig_before.only_logprob, sig_after.only_logprob)
                    for a, b in zip(ra, rb)), default=0.0)
        rows.append({"key": item.key, "prompt_tokens": len(prep.tokens.ids), "answer_tokens": len(ids),
                     "n_docs": len(item.passages), "full_head_s": round(before, 3), "kept_rows_s": round(after, 3),
                     "max_abs_diff": diff})
        print(f"{item.key}: {len(prep.tokens.ids)} prompt tokens, {len(item.passages)} passages: "
              f"full head {before:.2f} s, kept rows {after:.2f} s, max |Δ log p| {diff:.2g}")
    ps.causal_pass = kept
    total_before = sum(r["full_head_s"] for r in rows)
    total_after = sum(r["kept_rows_s"] for r in rows)
    summary = {"model": args.model, "text": args.text, "data": args.data, "items": len(rows),
               "vocab": m.lm.model.config.get_text_config().vocab_size, "threads": torch.get_num_threads(),
               "full_head_s": round(total_before, 2), "kept_rows_s": round(total_after, 2),
               "speedup": round(total_before / total_after, 2) if total_after else None,
               "max_abs_diff": max((r["max_abs_diff"] for r in rows), default=0.0), "rows": rows,
               "versions": library_versions()}
    print(f"{args.model}: signal passes {total_before:.1f} s -> {total_after:.1f} s "
          f"({summary['speedup']}x), max |Δ log p| {summary['max_abs_diff']:.2g}")
    out = Path(args.out)
    runs = json.loads(out.read_text()) if out.exists() else {}
    runs[f"{args.model}/{args.text}"] = summary
    out.write_text(json.dumps(runs, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Options, run)
