"""Shipped results of the benchmarks that need no model reproduce from what ships beside them: the commands of
docs/benchmarks.md's studies, run on the stored stores, give the stored JSON (no model is loaded). The scripts run as
the commands they are (``python benchmarks/NAME.py``), never imported: tests import the library alone."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def _close(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in set(a) | set(b) for d in _close(a.get(k), b.get(k), f"{path}/{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _close(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        return [] if abs(a - b) <= 1e-9 else [f"{path}: {a} != {b}"]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def run_script(script: str, argv: list[str]) -> int:
    """Run ``benchmarks/SCRIPT`` with ``argv`` as a command from the repository root; its exit status (its output is
    shown when it fails)."""
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *argv], cwd=ROOT, capture_output=True,
                         text=True, check=False)
    if run.returncode:
        print(run.stdout, run.stderr, sep="\n")
    return run.returncode


def _calibration_splits() -> list[str]:
    """XOR-AttriQA's calibration splits, by name, from the data cache (the ``data_dir`` fixture)."""
    from mirage.data import resolve

    return [str(resolve("xor-attriqa-match:train")), str(resolve("xor-attriqa-match:val"))]


def test_extra_signals_reproduce_from_the_shipped_stores(tmp_path, data_dir):
    """benchmarks/extra_signals.py (a second model's features, the yes/no judgment) on the calibration splits: the
    judge's values from ``judge_rows.jsonl.gz``, so ``--model`` is named but never loaded."""
    judge = tmp_path / "judge.jsonl"
    judge.write_bytes(gzip.decompress((RESULTS / "xor_attriqa_smollm2_en" / "judge_rows.jsonl.gz").read_bytes()))
    en, native = RESULTS / "xor_attriqa_smollm2_en", RESULTS / "xor_attriqa_gemma3_native" / "learned"
    cal = ["--calibrate-on", *_calibration_splits()]
    assert run_script("extra_signals.py", [str(en / "scores.jsonl.gz"), *cal,
                                           "--other", str(native / "scores.jsonl.gz"), "--judge", str(judge),
                                           "--model", "smollm2-135m-instruct",
                                           "-o", str(tmp_path / "en.json")]) == 0
    assert run_script("extra_signals.py", [str(native / "scores.jsonl.gz"), "--text", "native", *cal, "--other",
                                           str(en / "scores.jsonl.gz"), "--other-text", "en",
                                           "-o", str(tmp_path / "native.json")]) == 0
    for got, shipped in ((tmp_path / "en.json", en / "extra_signals.json"),
                         (tmp_path / "native.json", native / "extra_signals.json")):
        assert not _close(json.loads(got.read_text()), json.loads(shipped.read_text())), shipped


@pytest.mark.parametrize("view, model, store, methods", [
    ("en", "smollm2-135m-instruct", "xor_attriqa_smollm2_en", ["saliency", "input_x_gradient", "integrated_gradients"]),
    ("native", "gemma3-270m", "xor_attriqa_gemma3_native/learned", ["saliency", "input_x_gradient"]),
])
def test_cci_methods_reproduce_from_the_shipped_rows(tmp_path, data_dir, view, model, store, methods):
    """benchmarks/cci_methods.py (saliency, input x gradient, integrated gradients as passage scores) on the
    calibration splits: each method's rows from ``cci_rows/`` (``--store``), so ``--model`` is named but never
    loaded."""
    folder = RESULTS / store
    for method in methods:
        shipped = folder / "cci_rows" / f"rows.{method}.jsonl.gz"
        (tmp_path / f"rows.{method}.jsonl").write_bytes(gzip.decompress(shipped.read_bytes()))
    got = tmp_path / "cci_methods.json"
    assert run_script("cci_methods.py", [str(folder / "scores.jsonl.gz"), "--calibrate-on", *_calibration_splits(),
                                         "--model", model, "--text", view, "--store", str(tmp_path / "rows.jsonl"),
                                         "--methods", *methods, "--ig-steps", "8", "-o", str(got)]) == 0
    stored = json.loads((folder / "cci_methods.json").read_text())
    assert not _close(json.loads(got.read_text()), stored)
    assert stored["n_items"] == 110 and stored["n_items_left_out"] == 0  # every multi-passage calibration item


def test_the_scaling_results_reproduce_from_their_points(tmp_path, data_dir):
    """``benchmarks/results/scale_cpu``: its recorded ``--collect`` command, run on a copy of its points, writes the
    same results (growth exponents and each point's operation count included) and the same page; only the machine
    it is collected on and the output folder differ."""
    import shlex
    import shutil

    shipped = RESULTS / "scale_cpu"
    stored = json.loads((shipped / "results.json").read_text())
    argv = shlex.split(stored["command"])[2:]
    assert "--collect" in argv  # collected from points measured by earlier runs: no point runs here
    out = tmp_path / "scale_cpu"
    out.mkdir()
    shutil.copy(shipped / "points.jsonl", out / "points.jsonl")
    argv[argv.index("--out") + 1] = str(out)
    assert run_script("bench_scale.py", argv) == 0
    got = json.loads((out / "results.json").read_text())
    for key in ("command", "machine"):
        got.pop(key), stored.pop(key)
    assert _close(got, stored) == []
    assert [p["flops"] for p in got["points"] if p["status"] == "ok"]
    assert all(g["flop_exponent"] > 1 for g in got["growth"] if g["model"] == "smollm2-135m-instruct")
