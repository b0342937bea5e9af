"""Check the reference procedure adapter (:mod:`mirage.peers.inseq`, inseq ``attribute_context``) against an independent
plain-torch computation of the same CTI and CCI scores, on three cases built from XOR-AttriQA validation rows.

    python benchmarks/reference_check.py [--data FILE]

``--data``: XOR-AttriQA-match validation rows (default: the dataset ``xor-attriqa-match:val``; ``mirage data get`` it
first). Nothing is asserted: it prints both computations side by side.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from harness import main

from mirage.data import resolve
from mirage.options import cli_arg
from mirage.peers.inseq import run_reference


def torch_cti(model, tokenizer, prompt, contextless_prompt, answer):
    """Teacher-forced per-answer-token KL(P_noctx||P_ctx) and KL(P_ctx||P_noctx)."""
    import torch
    import torch.nn.functional as F

    ans = tokenizer(answer, add_special_tokens=False).input_ids
    lps = []
    for p in (prompt, contextless_prompt):
        ids = tokenizer(p, add_special_tokens=False).input_ids + ans
        with torch.no_grad():
            logits = model(torch.tensor([ids], device=model.device)).logits[0].float()
        lps.append(F.log_softmax(logits[len(ids) - len(ans) - 1 : len(ids) - 1], -1))
    lp_ctx, lp_nc = lps
    kl_nc_ctx = (lp_nc.exp() * (lp_nc - lp_ctx)).sum(-1)
    kl_ctx_nc = (lp_ctx.exp() * (lp_ctx - lp_nc)).sum(-1)
    return kl_nc_ctx.tolist(), kl_ctx_nc.tolist()


def torch_cci(model, tokenizer, prompt, context, answer, idx, contrast_token):
    """L2 norm over hidden dim of d[log p_ctx(y) - log p_ctx(y_nc)]/d embeddings, on the context positions."""
    import torch

    ans = tokenizer(answer, add_special_tokens=False).input_ids
    p_ids = tokenizer(prompt, add_special_tokens=False).input_ids
    ids = torch.tensor([p_ids + ans[:idx]], device=model.device)
    emb = model.get_input_embeddings()(ids).detach().requires_grad_(True)
    lp = model(inputs_embeds=emb).logits[0, -1].float().log_softmax(-1)
    y, y_nc = ans[idx], tokenizer.convert_tokens_to_ids(contrast_token)
    target = lp[y] - lp[y_nc] if y_nc != y else lp[y]
    (grad,) = torch.autograd.grad(target, emb)
    n_before = len(tokenizer(prompt[: prompt.index(context)], add_special_tokens=False).input_ids)
    n_ctx = len(tokenizer(context, add_special_tokens=False).input_ids)
    return grad[0].norm(dim=-1)[n_before : n_before + n_ctx].tolist()


def _pearson(a, b) -> float:
    import torch

    x, y = torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64)
    x, y = x - x.mean(), y - y.mean()
    return float((x * y).sum() / (x.norm() * y.norm()))


def _demo_cases(tokenizer, data: Path):  # data: XOR-AttriQA-match val rows
    def chat(user):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )

    def fmt_docs(passages):
        return "".join(f"Document [{i + 1}](Title: ): {p}\n" for i, p in enumerate(passages))

    rows = [json.loads(line) for line in data.read_text().splitlines()]
    cases = []
    # 1: first val row, two passages, short answer
    r = rows[0]
    cases.append(("val[0] short answer", fmt_docs(r["split_passages_en"][:2]), r["query_en"], r["prediction_en"]))
    # 2: a ~20-token answer (val[40]), passages trimmed to keep the prompt < 400 tokens
    r = rows[40]
    cases.append(
        ("val[40] long answer", fmt_docs([" ".join(p.split()[:70]) for p in r["split_passages_en"][:2]]),
         r["query_en"], r["prediction_en"])
    )
    # 3: curly braces in documents and question (template escaping)
    docs = fmt_docs(["The {Ikhwan} militia first appeared in 1913 {see note}.", "Kashmir {x} is a region in Asia."])
    cases.append(("braces", docs, "When did the {Ikhwan} first appear?", "The Ikhwan first appeared in 1913."))
    out = []
    for name, docs, q, ans in cases:
        out.append(dict(  # noqa: C408
            name=name, prompt=chat(docs + "\nQuestion: " + q), contextless_prompt=chat("Question: " + q),
                        context=docs, answer=ans))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    data: str = cli_arg("xor-attriqa-match:val", flag="--data",
                        help="XOR-AttriQA-match val rows: a file or a dataset")


def run(args: Options) -> None:
    import torch

    from mirage.attribution.models import load_model

    data = resolve(args.data)
    torch.set_num_threads(2)
    lm = load_model("smollm2-135m-instruct")
    model, tok = lm.model, lm.tokenizer
    print(f"tokenizer adds BOS: {tok('x').input_ids != tok('x', add_special_tokens=False).input_ids}; "
          f"bos_token={tok.bos_token!r} (config bos id {model.config.bos_token_id})")
    for case in _demo_cases(tok, data):
        name = case.pop("name")
        ref = run_reference(model, tok, **case, std_k=1.0)
        n_prompt = len(tok(case["prompt"], add_special_tokens=False).input_ids)
        print(f"\n=== {name}: prompt {n_prompt} tok, answer {len(ref.answer_tokens)} tok, "
              f"context {len(ref.context_tokens)} tok, inseq {ref.seconds:.1f} s")
        print("answer tokens:", ref.answer_tokens)
        print("cti:", [round(s, 3) for s in ref.cti_scores], "threshold", round(ref.cti_threshold, 3))
        print("selected:", ref.selected, {i: (ref.answer_tokens[i], ref.contrast_tokens[i]) for i in ref.selected})
        print("notes:", ref.notes or "none")
        kl_fwd, kl_rev = torch_cti(model, tok, case["prompt"], case["contextless_prompt"], case["answer"])
        if len(kl_fwd) == len(ref.cti_scores):
            print(f"pearson(cti, KL(noctx||ctx)) = {_pearson(ref.cti_scores, kl_fwd):.4f}, "
                  f"max abs diff {max(abs(a - b) for a, b in zip(ref.cti_scores, kl_fwd)):.2e}")
            print(f"pearson(cti, KL(ctx||noctx)) = {_pearson(ref.cti_scores, kl_rev):.4f}")
        for idx in ref.selected[:2]:
            g = torch_cci(model, tok, case["prompt"], case["context"], case["answer"], idx, ref.contrast_tokens[idx])
            s = ref.cci_scores[idx]
            ratio = torch.tensor(s) / torch.tensor(g).clamp_min(1e-30)
            print(f"CCI token {idx} {ref.answer_tokens[idx]!r} vs {ref.contrast_tokens[idx]!r}: "
                  f"pearson {_pearson(s, g):.4f}, inseq/torch ratio median {ratio.median():.4f} "
                  f"[{ratio.min():.4f}, {ratio.max():.4f}], inseq sum {sum(s):.3f}")


if __name__ == "__main__":
    main(Options, run)
