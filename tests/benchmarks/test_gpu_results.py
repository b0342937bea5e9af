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


def test_the_gpu_profile_shows_where_a_new_prompt_shape_went():
    """The stored GPU profile (``benchmarks/profile_attribution.py`` before the fix,
    ``models.without_cudnn_attention``, tested in ``tests/attribution/test_big_models.py``) holds the cuDNN plan
    building that made every new prompt shape cost about 0.16 s more than a warm repeat."""
    profile = json.loads((GPU / "profile_gpu_cudnn.json").read_text())
    cold = {row["op"]: row for row in profile["profiles"]["cold"]}
    warm = {row["op"]: row for row in profile["profiles"]["warm"]}
    assert cold["aten::_cudnn_attention_forward"]["self_cpu_ms"] > 10 * warm["aten::_cudnn_attention_forward"][
        "self_cpu_ms"]
