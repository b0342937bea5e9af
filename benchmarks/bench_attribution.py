"""Time mirage against the reference procedure (inseq attribute_context) on the same model and inputs, in one run.

    python benchmarks/bench_attribution.py [--model smollm2-135m-instruct] [--docs 3] [--words 80]
        [--max-new-tokens 48] [--out benchmarks/results/attribution.json]

For each case the answer is generated once by mirage (the generation time is reported), then both methods attribute
that same answer: mirage (CTI from two teacher-forced passes, batched CCI) and the reference (inseq, as the method's
authors ran it). Prints times, the ratio reference/mirage, and whether the context-sensitive tokens and sentence
citations agree. Numbers are wall-clock on whatever machine runs it; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.reference import run_reference
from mirage import Mirage, MirageConfig
from mirage.aggregation import cite_token, rank_documents
from mirage.config import CCIConfig
from mirage.generation import generate_answer
from mirage.sentences import sentence_index


def _cases(docs: int, words: int) -> list[dict]:
    items = json.loads((ROOT / "examples" / "rag_items.json").read_text())
    out = []
    for it in items:
        short = [{"title": d["title"], "text": " ".join(d["text"].split()[:words])} for d in it["docs"][:docs]]
        out.append({"id": it["id"], "question": it["question"], "docs": short, "output": it.get("output")})
    return out


def _reference_citations(res, prep, ref) -> list[list[int]]:
    cfg = CCIConfig(**res.config["cci"])
    spans = [(s.start, s.end) for s in res.sentences]
    per: dict[int, list] = {i: [] for i in range(len(spans))}
    for i in ref.selected:
        start = res.tokens[i].start
        while start < len(res.answer) and res.answer[start].isspace():
            start += 1
        per[sentence_index(spans, start)].append(cite_token(ref.cci_scores[i], prep.tokens.context_docs, cfg))
    return [rank_documents(per[i], res.config["aggregation"]["max_citations"]) for i in range(len(spans))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--docs", type=int, default=3)
    parser.add_argument("--words", type=int, default=80)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "attribution.json"))
    args = parser.parse_args()

    cfg = MirageConfig().replace(generation={"max_new_tokens": args.max_new_tokens})
    m = Mirage.from_pretrained(args.model, config=cfg)
    rows = []
    for case in _cases(args.docs, args.words)[: args.limit]:
        prep = m.prepare(case)
        gen_s = None
        if case["output"] is None:
            t = time.perf_counter()
            case["output"] = generate_answer(m.lm, prep.tokens.ids, cfg=cfg.generation).text
            gen_s = time.perf_counter() - t
        t = time.perf_counter()
        res = m.attribute_item(case)
        mirage_s = time.perf_counter() - t
        prep = m.prepare({**case, "output": res.answer})
        ref = run_reference(m.lm.model, m.lm.tokenizer, prompt=res.prompt, contextless_prompt=res.contextless_prompt,
                            context=res.context, answer=res.answer, std_k=cfg.cti.std_k)
        ours_sel = [t.index for t in res.tokens if t.context_sensitive]
        row = {
            "id": case["id"], "answer_tokens": len(res.tokens), "prompt_tokens": len(prep.tokens.ids),
            "context_tokens": len(prep.tokens.context_positions), "selected": len(ours_sel),
            "generation_s": gen_s, "mirage_s": mirage_s, "reference_s": ref.seconds,
            "speedup": ref.seconds / mirage_s,
            "attribution_over_generation": (mirage_s / gen_s) if gen_s else None,
            "same_selected": ours_sel == ref.selected,
            "same_citations": _reference_citations(res, prep, ref) == [s.mirage_citations for s in res.sentences],
        }
        rows.append(row)
        print(f"{row['id']:>10}  answer {row['answer_tokens']:>3} tok  context {row['context_tokens']:>4} tok  "
              f"selected {row['selected']:>2}  mirage {mirage_s:7.2f}s  reference {ref.seconds:7.2f}s  "
              f"ratio {row['speedup']:5.2f}x  gen {gen_s or 0:6.2f}s  same tokens {row['same_selected']}  "
              f"same citations {row['same_citations']}", flush=True)
    out = {"model": args.model, "device": str(m.lm.device), "torch_threads": torch.get_num_threads(),
           "machine": platform.processor() or platform.machine(), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
