"""The GPU figures in ``benchmarks/results/gpu`` (an H200 run of ``benchmarks/gpu_figures.sh``) come from the same
pipeline as this CPU's: the float32 attribution the GPU stored for an ELI5 answer agrees with the one computed here
on the same answer. No GPU here: the GPU's side is the shipped file, the CPU's side runs now on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

from mirage.data import resolve
from mirage.runs.files import read_json
from mirage.scoring.metrics import attribution_details, attribution_parity

GPU = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "gpu"


def test_the_shipped_gpu_files_say_what_ran_them():
    attribution = json.loads((GPU / "attribution_gpu.json").read_text())
    precision = json.loads((GPU / "precision_gpu.json").read_text())
    scoring = json.loads((GPU / "xor_scoring_gpu.json").read_text())
    exact = json.loads((GPU / "xor_scoring_gpu_fp32.json").read_text())
    assert attribution["device"].startswith("cuda") and "H200" in attribution["device_name"]
    assert precision["device"].startswith("cuda") and "H200" in precision["machine"]
    assert scoring["device"].startswith("cuda") and scoring["dtype"] == "bfloat16"
    # float32 on the GPU: the same tables for every row or the needed ones, one item at a time or batched
    assert exact["dtype"] == "float32" and exact["identical_results_for_existing_settings"] is True
    assert exact["batched"]["after_batch8"]["max_abs_metric_difference_vs_after"] < 1e-4
    assert all(row["same_selected"] and row["same_citations"] for row in attribution["rows"])


def test_the_gpu_float32_attribution_matches_this_cpu(embedded_mirage, data_dir):  # the ELI5 questions: eli5-alce
    stored = read_json(GPU / "precision_gpu_details.json.gz")
    assert stored["device"].startswith("cuda")
    item = json.loads(resolve("eli5-alce").read_text())[1]  # the 54-token answer of the three
    case = {"question": item["question"], "docs": item["docs"][:5]}  # as benchmarks/bench_precision.py gives it
    cfg = embedded_mirage.config.replace(aggregation={"keep_saliency": True})
    res = embedded_mirage.attribute_item({**case, "output": stored["answers"][1]}, config=cfg)
    parity = attribution_parity(stored["variants"]["float32"][1], attribution_details(res))
    assert parity["same_selected"] and parity["same_citations"], parity
    assert parity["max_cti_abs_diff"] < 1e-3, parity
    assert parity["saliency_spearman_min"] > 0.999, parity


def test_attention_without_cudnn_changes_only_the_attention_backend(real_tokenizer):
    """What mirage applies to a model it runs on a GPU (``models.without_cudnn_attention``; cuDNN's attention builds
    a plan per new sequence length: ``profile_gpu.json``) turns cuDNN's attention off for the model's forward pass
    only, and leaves its logits, gradients, signature and generation as they were. No GPU here: the flag is read
    inside the wrapped pass on this CPU; the speed it buys is the stored GPU profile's."""
    import inspect

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.models import without_cudnn_attention

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([real_tokenizer("The Ikhwan were formed in 1913.")["input_ids"]])
    embeds = model.get_input_embeddings()(ids).detach()

    def run() -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        leaf = embeds.clone().requires_grad_(True)
        logits = model(inputs_embeds=leaf).logits
        (grad,) = torch.autograd.grad(logits[0, -1].logsumexp(-1), leaf)
        tokens = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)[0].tolist()
        return logits.detach(), grad, tokens

    before = run()
    original = model.forward
    seen = []
    model.model.layers[0].register_forward_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    assert without_cudnn_attention(without_cudnn_attention(model)) is model
    assert model.forward.__wrapped__ == original  # wrapped once
    after = run()
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the setting is the pass's alone
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]) and before[2] == after[2]
    assert "logits_to_keep" in inspect.signature(model.forward).parameters


def test_the_gpu_profile_shows_where_a_new_prompt_shape_went():
    """The stored GPU profile (``benchmarks/profile_attribution.py`` before the fix above) holds the cuDNN plan
    building that made every new prompt shape cost about 0.16 s more than a warm repeat."""
    profile = json.loads((GPU / "profile_gpu_cudnn.json").read_text())
    cold = {row["op"]: row for row in profile["profiles"]["cold"]}
    warm = {row["op"]: row for row in profile["profiles"]["warm"]}
    assert cold["aten::_cudnn_attention_forward"]["self_cpu_ms"] > 10 * warm["aten::_cudnn_attention_forward"][
        "self_cpu_ms"]
