"""Attribution on a CPU at lower precision and other thread counts: time and parity against float32, in one run.

    python benchmarks/bench_precision.py [--model smollm2-135m-instruct] [--eli5 2] [--threads 2]
        [--answer-tokens N] [--variants float32_1thread bfloat16 float16 cci_bfloat16 cci_float16]
        [--out benchmarks/results/precision.json]

The ELI5 answers are generated once (float32, greedy) and then force-decoded by every variant, so each attributes the
same tokens: float32 at ``--threads`` threads (the baseline), float32 at one thread, the model loaded in
bfloat16 and in float16 (CTI's scores are computed in float32 either way; the backward passes run in the model's
dtype), and the float32 model with ``cci.precision`` bfloat16 or float16 (``cci_bfloat16``, ``cci_float16``: CTI in
float32, only CCI's passes under autocast). For each variant: the seconds of attribution per answer, the ratio to the
baseline, the generation time of the baseline, and parity: the largest CTI score difference, whether the selected tokens
and the sentence citations are the same, and the rank correlation of the CCI saliency rows of the tokens both selected.
The CPU's flags that decide whether half precision has hardware support (``avx512_bf16``, ``amx_bf16``, ``avx512_fp16``)
are recorded.

Across devices: ``--device cuda`` runs the same on a GPU (``float32_1thread`` is skipped there), and ``--details
FILE`` keeps every variant's per-answer CTI scores, selected tokens, citations and saliency rows. A later run with
``--answers-from FILE`` (on a CPU, say) force-decodes that file's answers instead of generating its own, reports
whether its own greedy float32 answers are the same text, and measures the parity of every variant stored in FILE
against its own float32 baseline (``cross_parity`` in the output): GPU against CPU, same inputs.
Nothing is asserted; numbers are wall-clock on whatever machine runs it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import torch
from harness import ROOT, cached_dataset, device_arg, device_name, main, model_arg, threads_arg

from mirage import Mirage
from mirage.attribution.models import cpu_flags
from mirage.options import cli_arg
from mirage.runs.files import read_json
from mirage.scoring.metrics import attribution_details, attribution_parity

#: (name, model dtype, threads or None for --threads, cci.precision)
VARIANTS = (("float32", "float32", None, "model"), ("float32_1thread", "float32", 1, "model"),
            ("bfloat16", "bfloat16", None, "model"), ("float16", "float16", None, "model"),
            ("cci_bfloat16", "float32", None, "bfloat16"), ("cci_float16", "float32", None, "float16"))


def half_precision_flags() -> list[str]:
    """The flags of this CPU that decide half precision's speed (empty where they cannot be read)."""
    return sorted(f for f in cpu_flags() if f in {"avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_fp16",
                                                     "amx_tile"})


def _cases(n: int) -> list[dict]:
    sample = cached_dataset("eli5-alce")
    if sample is not None:
        items = json.loads(sample.read_text())
        return [{"question": it["question"], "docs": it["docs"][:5]} for it in items[:n]]
    items = json.loads((ROOT / "examples" / "rag_items.json").read_text())
    return [{"question": it["question"], "docs": it["docs"]} for it in items[:n]]


def _attribute(m: Mirage, case: dict, answer: str, precision: str = "model"):
    t = time.perf_counter()
    cfg = m.config.replace(aggregation={"keep_saliency": True}, cci={"precision": precision})
    res = m.attribute_item({**case, "output": answer}, config=cfg)
    return res, time.perf_counter() - t


def _summary(parity: list[dict]) -> str:
    return (f"max |ΔCTI| {max(p['max_cti_abs_diff'] for p in parity):.2e}  "
            f"same tokens {all(p['same_selected'] for p in parity)}  "
            f"same citations {all(p['same_citations'] for p in parity)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    model: str = model_arg()
    eli5: int = cli_arg(2, flag="--eli5", metavar="N", help="ELI5 questions (answers generated once, float32)")
    threads: int = threads_arg(2, help="torch CPU threads of the baseline")
    answer_tokens: int | None = cli_arg(None, flag="--answer-tokens", metavar="N",
                                        help="cut each generated answer to its first N tokens")
    variants: tuple[str, ...] = cli_arg(tuple(v[0] for v in VARIANTS), flag="--variants", nargs="*",
                                        choices=[v[0] for v in VARIANTS],
                                        help="variants to run (float32 always runs: it is the baseline)")
    device: str = device_arg("cpu", help="cpu or cuda")
    details: str | None = cli_arg(None, flag="--details", metavar="FILE",
                                  help="also write every variant's per-answer scores here (for --answers-from)")
    answers_from: str | None = cli_arg(None, flag="--answers-from", metavar="FILE",
                                       help="a --details file: attribute its answers and compare with its variants")
    out: str = cli_arg(str(ROOT / "benchmarks" / "results" / "precision.json"), flag="--out",
                       help="the JSON file to write")


def run(args: Options) -> None:
    other = read_json(args.answers_from) if args.answers_from else None
    answer_tokens = args.answer_tokens
    if other and answer_tokens is None:
        answer_tokens = other.get("answer_tokens_cut")  # own answers cut alike, so that they compare
    cases = _cases(len(other["answers"]) if other else args.eli5)
    torch.set_num_threads(args.threads)
    base_model = Mirage.from_pretrained(args.model, device=args.device, dtype="float32")
    device = base_model.lm.device
    gen_s, own_answers = [], []
    for case in cases:
        t = time.perf_counter()
        res = base_model.attribute_item({**case, "output": None})
        gen_s.append(res.timings.get("generation") or (time.perf_counter() - t))
        answer = res.answer
        if answer_tokens:
            tok = base_model.lm.tokenizer
            answer = tok.decode(tok(answer, add_special_tokens=False)["input_ids"][:answer_tokens])
        own_answers.append(answer)
    answers = other["answers"] if other else own_answers
    results: dict[str, dict] = {}
    details: dict[str, list[dict]] = {}
    out = {"model": args.model, "device": str(device), "machine": device_name(device),
           "cpu_flags": half_precision_flags(), "torch": torch.__version__,
           "answer_tokens": [len(base_model.lm.tokenizer(a)["input_ids"]) for a in answers],
           "generation_s": gen_s, "variants": results}
    if other:
        out["answers_from"] = {"file": args.answers_from, "machine": other.get("machine"),
                               "same_answers_as_own_float32_generation": [a == b for a, b in zip(answers, own_answers)]}
    for name, dtype, threads, precision in VARIANTS:
        if name != "float32" and name not in args.variants:
            continue
        if threads and device.type != "cpu":
            continue  # a thread count is a CPU variant
        torch.set_num_threads(threads or args.threads)
        m = base_model if dtype == "float32" else Mirage.from_pretrained(args.model, device=device, dtype=dtype)
        _attribute(m, cases[0], answers[0], precision)  # warm-up (kernel selection, allocator)
        runs = [_attribute(m, case, answer, precision) for case, answer in zip(cases, answers)]
        seconds = [s for _r, s in runs]
        details[name] = [attribution_details(r) for r, _s in runs]
        parity = [attribution_parity(b, d) for b, d in zip(details["float32"], details[name])]
        results[name] = {"dtype": dtype, "cci_precision": precision, "threads": threads or args.threads,
                         "seconds": seconds,
                         "total_s": sum(seconds), "parity": parity}
        print(f"{name:>16}: {sum(seconds):7.2f} s for {len(runs)} answers  "
              f"(x{results[name]['total_s'] / results['float32']['total_s']:.2f} of float32)  {_summary(parity)}",
              flush=True)
        if m is not base_model:
            del m
        base_total = results["float32"]["total_s"]  # written after each variant: a long one lost loses only itself
        out["ratio_to_float32"] = {k: round(v["total_s"] / base_total, 2) for k, v in results.items()}
        if not answer_tokens:
            out["attribution_over_generation"] = {k: round(v["total_s"] / sum(gen_s), 2) for k, v in results.items()}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        if args.details:
            Path(args.details).write_text(json.dumps({"machine": out["machine"], "device": out["device"],
                                                      "answer_tokens_cut": answer_tokens, "answers": answers,
                                                      "variants": details}) + "\n")
    if other:  # each of the other run's variants against this run's float32 baseline, answer by answer
        out["cross_parity"] = {}
        for name, runs in other["variants"].items():
            parity = [attribution_parity(b, d) for b, d in zip(details["float32"], runs)]
            out["cross_parity"][name] = parity
            print(f"{other.get('machine')} {name:>13} vs this float32: {_summary(parity)}", flush=True)
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: out.get(k) for k in ("cpu_flags", "ratio_to_float32", "attribution_over_generation")},
                     indent=2))


if __name__ == "__main__":
    main(Options, run)
