"""Attribution on a CPU at lower precision and other thread counts: time and parity against float32, in one run.

    python benchmarks/bench_precision.py [--model smollm2-135m-instruct] [--eli5 2] [--threads 2]
        [--answer-tokens N] [--variants float32_1thread bfloat16 float16 cci_bfloat16 cci_float16]
        [--out benchmarks/results/precision.json]

The ELI5 answers are generated once (float32, greedy) and then force-decoded by every variant, so each attributes the
same tokens: float32 at ``--threads`` threads (the baseline), float32 at one thread, the model loaded in
bfloat16 and in float16 (CTI's scores are computed in float32 either way; the backward passes run in the model's
dtype), and the float32 model with ``cci.precision`` bfloat16 or float16 (``cci_bfloat16``, ``cci_float16``: CTI in
float32, only CCI's passes under autocast). For each variant: the seconds of attribution per answer, the ratio to the baseline, the generation time of
the baseline, and parity: the largest CTI score difference, whether the selected tokens and the sentence citations
are the same, and the rank correlation of the CCI saliency rows of the tokens both selected. The CPU's flags that
decide whether half precision has hardware support (``avx512_bf16``, ``amx_bf16``, ``avx512_fp16``) are recorded.
Nothing is asserted; numbers are wall-clock on whatever machine runs it.
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

from benchmarks import SHARED_DATA
from mirage import Mirage
from mirage.models import cpu_flags

SHARED_ELI5 = SHARED_DATA / "eli5_alce" / "eli5_eval_sample.json"
#: (name, model dtype, threads or None for --threads, cci.precision)
VARIANTS = (("float32", "float32", None, "model"), ("float32_1thread", "float32", 1, "model"),
            ("bfloat16", "bfloat16", None, "model"), ("float16", "float16", None, "model"),
            ("cci_bfloat16", "float32", None, "bfloat16"), ("cci_float16", "float32", None, "float16"))


def half_precision_flags() -> list[str]:
    """The flags of this CPU that decide half precision's speed (empty where they cannot be read)."""
    return sorted(f for f in cpu_flags() if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16",
                                                     "amx_tile"})


def _spearman(a: list[float], b: list[float]) -> float:
    ra = torch.tensor(a, dtype=torch.float64).argsort().argsort().double()
    rb = torch.tensor(b, dtype=torch.float64).argsort().argsort().double()
    return float(torch.corrcoef(torch.stack([ra, rb]))[0, 1])


def _cases(n: int) -> list[dict]:
    if SHARED_ELI5.exists():
        items = json.loads(SHARED_ELI5.read_text())
        return [{"question": it["question"], "docs": it["docs"][:5]} for it in items[:n]]
    items = json.loads((ROOT / "examples" / "rag_items.json").read_text())
    return [{"question": it["question"], "docs": it["docs"]} for it in items[:n]]


def _attribute(m: Mirage, case: dict, answer: str, precision: str = "model"):
    t = time.perf_counter()
    cfg = m.config.replace(aggregation={"keep_saliency": True}, cci={"precision": precision})
    res = m.attribute_item({**case, "output": answer}, config=cfg)
    return res, time.perf_counter() - t


def _parity(base, other) -> dict:
    cti_a = [t.cti for t in base.tokens]
    cti_b = [t.cti for t in other.tokens]
    sel_a = [t.index for t in base.tokens if t.context_sensitive]
    sel_b = [t.index for t in other.tokens if t.context_sensitive]
    rows_a = dict(zip(base.saliency.answer_tokens, base.saliency.to_numpy().tolist())) if base.saliency else {}
    rows_b = dict(zip(other.saliency.answer_tokens, other.saliency.to_numpy().tolist())) if other.saliency else {}
    both = sorted(set(rows_a) & set(rows_b))
    corr = [_spearman(list(rows_a[i]), list(rows_b[i])) for i in both]
    return {"max_cti_abs_diff": max(abs(x - y) for x, y in zip(cti_a, cti_b)),
            "max_cti": max(abs(x) for x in cti_a),
            "same_selected": sel_a == sel_b,
            "same_citations": [s.mirage_citations for s in base.sentences] == [s.mirage_citations for s in other.sentences],
            "saliency_spearman_min": min(corr) if corr else None,
            "saliency_spearman_mean": sum(corr) / len(corr) if corr else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--eli5", type=int, default=2, help="ELI5 questions (answers generated once, float32)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads of the baseline (default 2)")
    ap.add_argument("--answer-tokens", type=int, help="cut each generated answer to its first N tokens")
    ap.add_argument("--variants", nargs="+", choices=[v[0] for v in VARIANTS], default=[v[0] for v in VARIANTS],
                    help="variants to run (float32 always runs: it is the baseline)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "precision.json"))
    args = ap.parse_args()
    cases = _cases(args.eli5)
    torch.set_num_threads(args.threads)
    base_model = Mirage.from_pretrained(args.model, device="cpu", dtype="float32")
    answers, gen_s = [], []
    for case in cases:
        t = time.perf_counter()
        res = base_model.attribute_item({**case, "output": None})
        gen_s.append(res.timings.get("generation") or (time.perf_counter() - t))
        answer = res.answer
        if args.answer_tokens:
            tok = base_model.lm.tokenizer
            answer = tok.decode(tok(answer, add_special_tokens=False)["input_ids"][:args.answer_tokens])
        answers.append(answer)
    results: dict[str, dict] = {}
    baseline: list = []
    out = {"model": args.model, "machine": platform.processor() or platform.machine(), "cpu_flags": half_precision_flags(),
           "torch": torch.__version__, "answer_tokens": [len(base_model.lm.tokenizer(a)["input_ids"]) for a in answers],
           "generation_s": gen_s, "variants": results}
    for name, dtype, threads, precision in VARIANTS:
        if name != "float32" and name not in args.variants:
            continue
        torch.set_num_threads(threads or args.threads)
        m = base_model if dtype == "float32" else Mirage.from_pretrained(args.model, device="cpu", dtype=dtype)
        _attribute(m, cases[0], answers[0], precision)  # warm-up (kernel selection, allocator)
        runs = [_attribute(m, case, answer, precision) for case, answer in zip(cases, answers)]
        seconds = [s for _r, s in runs]
        if name == "float32":
            baseline = [r for r, _s in runs]
        parity = [_parity(b, r) for b, (r, _s) in zip(baseline, runs)]
        results[name] = {"dtype": dtype, "cci_precision": precision, "threads": threads or args.threads,
                         "seconds": seconds,
                         "total_s": sum(seconds), "parity": parity}
        print(f"{name:>16}: {sum(seconds):7.2f} s for {len(runs)} answers  "
              f"(x{results[name]['total_s'] / results['float32']['total_s']:.2f} of float32)  "
              f"max |ΔCTI| {max(p['max_cti_abs_diff'] for p in parity):.2e}  "
              f"same tokens {all(p['same_selected'] for p in parity)}  "
              f"same citations {all(p['same_citations'] for p in parity)}", flush=True)
        if m is not base_model:
            del m
        base_total = results["float32"]["total_s"]  # written after each variant: a long one lost loses only itself
        out["ratio_to_float32"] = {k: round(v["total_s"] / base_total, 2) for k, v in results.items()}
        if not args.answer_tokens:
            out["attribution_over_generation"] = {k: round(v["total_s"] / sum(gen_s), 2) for k, v in results.items()}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out.get(k) for k in ("cpu_flags", "ratio_to_float32", "attribution_over_generation")},
                     indent=2))


if __name__ == "__main__":
    main()
