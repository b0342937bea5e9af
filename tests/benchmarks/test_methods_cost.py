"""``benchmarks/methods_cost.py`` on the real embedded model and the repository's data slices: each method's cost per
answer on a short (XOR-AttriQA) and a long (an ELI5 reference answer cut to 64-128 tokens) answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"


def test_each_method_is_costed_on_a_short_and_a_long_answer(tmp_path):
    out = tmp_path / "cost.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "methods_cost.py"),
                          "--methods", "attention_last", "leave_one_out", "--limit", "1", "--threads", "2",
                          "--short", str(DATA / "xor_attriqa_match" / "val.jsonl"),
                          "--long", str(DATA / "eli5_alce" / "eli5_eval_sample.json"), "-o", str(out)],
                         check=False, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    rows = data["rows"]
    assert sorted((r["answers"], r["method"]) for r in rows) == [
        ("long", "attention_last"), ("long", "leave_one_out"), ("short", "attention_last"), ("short", "leave_one_out")]
    long_tokens = {r["answer_tokens"] for r in rows if r["answers"] == "long"}
    short_tokens = {r["answer_tokens"] for r in rows if r["answers"] == "short"}
    assert len(long_tokens) == 1 and 64 <= long_tokens.pop() <= 128 and max(short_tokens) < 64
    for r in rows:
        assert r["seconds"] > 0 and r["cpu_seconds"] > 0 and r["forward_passes"] >= 1 and r["backward_passes"] == 0
    # leave-one-out: a pass per document plus the full prompt's (attention: one pass)
    assert {r["forward_passes"] for r in rows if r["method"] == "attention_last"} == {1}
    assert all(r["forward_passes"] > 1 for r in rows if r["method"] == "leave_one_out")
    assert set(data["summary"]) == {"attention_last", "leave_one_out"}
    assert data["summary"]["leave_one_out"]["long"]["answers"] == 1 and data["command"].startswith("python ")
