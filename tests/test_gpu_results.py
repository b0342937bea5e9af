"""The GPU figures in ``benchmarks/results/gpu`` (an H200 run of ``benchmarks/gpu_figures.sh``) come from the same
pipeline as this CPU's: the float32 attribution the GPU stored for an ELI5 answer agrees with the one computed here
on the same answer. No GPU here: the GPU's side is the shipped file, the CPU's side runs now on the embedded model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_precision import SHARED_ELI5, _cases, _details, _parity
from mirage.run_files import read_json

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "gpu"


def test_the_shipped_gpu_files_say_what_ran_them():
    attribution = json.loads((GPU / "attribution_gpu.json").read_text())
    precision = json.loads((GPU / "precision_gpu.json").read_text())
    scoring = json.loads((GPU / "xor_scoring_gpu.json").read_text())
    assert attribution["device"].startswith("cuda") and "H200" in attribution["device_name"]
    assert precision["device"].startswith("cuda") and "H200" in precision["machine"]
    assert scoring["device"].startswith("cuda") and scoring["identical_results_for_existing_settings"] is True
    assert all(row["same_selected"] and row["same_citations"] for row in attribution["rows"])


@pytest.mark.skipif(not SHARED_ELI5.exists(), reason="the ELI5 questions are read from ../shared/data")
def test_the_gpu_float32_attribution_matches_this_cpu(embedded_mirage):
    stored = read_json(GPU / "precision_gpu_details.json.gz")
    assert stored["device"].startswith("cuda")
    case = _cases(2)[1]  # the 54-token answer of the three
    cfg = embedded_mirage.config.replace(aggregation={"keep_saliency": True})
    res = embedded_mirage.attribute_item({**case, "output": stored["answers"][1]}, config=cfg)
    parity = _parity(stored["variants"]["float32"][1], _details(res))
    assert parity["same_selected"] and parity["same_citations"], parity
    assert parity["max_cti_abs_diff"] < 1e-3, parity
    assert parity["saliency_spearman_min"] > 0.999, parity
