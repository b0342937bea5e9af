"""Same outputs before and after a change of the code: run the main command, XOR-AttriQA scoring and the attribution
benchmark at two revisions of this repository, in one shell, one after the other, and compare what they wrote.

    python benchmarks/identity_check.py --before 4789d43 --after HEAD --xor xor-attriqa-match:val --limit 8 \
        --out benchmarks/results/restructure_identity.json

Each revision is checked out into a temporary git worktree and run with that tree first on ``PYTHONPATH`` (so the
installed ``mirage`` does not leak in). Compared, after dropping the fields that differ on every run (timings, the
versions block, dates): every JSON / JSONL file both runs wrote under the same name, record by record, floats as
written. A file only the later revision writes (a newer output) is listed, not counted as a difference; a results
file's keys the later revision added are listed too, and every value both hold must be equal. The benchmark's
mirage and reference times of both revisions are recorded side by side (wall-clock on whatever machine runs it: a
ratio, never an assertion).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import ROOT, limit_arg, main, threads_arg

from mirage.options import cli_arg

LEGACY_DATA = ""  # --legacy-data

#: Fields whose values change from run to run by nature (clock and environment), dropped before comparing.
VOLATILE = ("seconds", "timings", "timing", "versions", "created", "date", "elapsed", "wall_s", "peak", "load_s",
            "generation_s", "mirage_s", "reference_s", "mirage_cti_s", "mirage_cci_s", "speedup",
            "attribution_over_generation", "mirage_peak", "command", "machine", "path", "data_files", "provenance")


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not any(k == f or k.endswith("_" + f) for f in VOLATILE)}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _records(path: Path) -> list[Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        text = f.read()
    if ".jsonl" in path.name:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def _portable(text: str) -> str:
    """A recorded value without the machine's absolute paths: each becomes ``…/`` and its last name."""
    return re.sub(r"(?<![^\"\s])/(?:[\w.-]+/)+([\w.-]+)", r"…/\1", text)


def _subset_equal(before: Any, after: Any, where: str, added: list[str], differ: list[str]) -> None:
    """Every value ``before`` holds is equal in ``after``; keys only ``after`` has are listed in ``added``."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key in after.keys() - before.keys():
            added.append(f"{where}/{key}")
        for key in before:
            if key not in after:
                differ.append(f"{where}/{key}: missing after")
            else:
                _subset_equal(before[key], after[key], f"{where}/{key}", added, differ)
    elif before != after:
        differ.append(_portable(f"{where}: {json.dumps(before)[:80]} -> {json.dumps(after)[:80]}"))


def compare(before_dir: Path, after_dir: Path) -> dict[str, Any]:
    """File by file comparison of two output folders (JSON / JSONL, gzipped or not)."""
    def files(d: Path) -> dict[str, Path]:
        return {str(p.relative_to(d)): p for p in sorted(d.rglob("*"))
                if p.is_file() and (".json" in p.name) and "errors" not in p.name}
    b, a = files(before_dir), files(after_dir)
    out: dict[str, Any] = {"only_after": sorted(a.keys() - b.keys()), "only_before": sorted(b.keys() - a.keys()),
                           "files": {}}
    for name in sorted(b.keys() & a.keys()):
        rb, ra = [_strip(r) for r in _records(b[name])], [_strip(r) for r in _records(a[name])]
        added: list[str] = []
        differ: list[str] = []
        if len(rb) != len(ra):
            differ.append(f"{len(rb)} records before, {len(ra)} after")
        for i, (x, y) in enumerate(zip(rb, ra)):
            _subset_equal(x, y, f"[{i}]", added, differ)
        out["files"][name] = {"records": len(rb), "identical": not differ and not added,
                              "same_values": not differ, "added_keys": sorted(set(added))[:50],
                              "differences": differ[:20]}
    return out


def _run(cmd: list[str], tree: Path, log: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    if LEGACY_DATA:  # revisions from before datasets by name read this folder
        env["MIRAGE_SHARED_DATA"] = LEGACY_DATA
    start = time.perf_counter()
    with log.open("a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        subprocess.run(cmd, cwd=tree, env=env, stdout=f, stderr=subprocess.STDOUT, check=True)
    return time.perf_counter() - start


def run_side(rev: str, work: Path, args: Options, xor_file: Path, calibrate_file: Path) -> dict[str, Any]:
    """Check out ``rev`` into ``work/tree`` and run the three jobs there (on the XOR-AttriQA rows of ``xor_file``,
    calibrated on ``calibrate_file``); their outputs under ``work/out``."""
    tree, out = work / "tree", work / "out"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), rev], cwd=ROOT, check=True,
                   capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True,
                            check=True).stdout.strip()
    out.mkdir(parents=True)
    log = work / "log.txt"
    py = sys.executable
    seconds = {
        "attribute": _run([py, "-m", "mirage", "attribute", "examples/rag_items.json", "-o",
                           str(out / "attribute" / "attributed.jsonl"), "--max-new-tokens", str(args.max_new_tokens)],
                          tree, log),
        "score_xor_attriqa": _run([py, "-m", "mirage", "score", "xor-attriqa", str(xor_file), "--limit",
                                   str(args.limit), "--settings", "ex", "cal", "--calibrate-on",
                                   str(calibrate_file), "-o", str(out / "xor"), "--quiet"], tree, log),
        "bench_attribution": _run([py, "benchmarks/bench_attribution.py", "--threads", str(args.threads),
                                   "--max-new-tokens", str(args.bench_tokens), "--out", str(work / "bench.json")],
                                  tree, log),
    }
    return {"commit": commit, "seconds": seconds, "bench": json.loads((work / "bench.json").read_text())}


def _data_file(name: str) -> Path:
    """A dataset name (through the data cache) or a path."""
    if Path(name).exists():
        return Path(name).resolve()
    from mirage.data import resolve

    return Path(resolve(name)).resolve()


@dataclasses.dataclass(frozen=True, kw_only=True)
class Options:
    before: str = cli_arg(flag="--before", help="the earlier revision")
    after: str = cli_arg("HEAD", flag="--after", help="the later revision")
    xor: str = cli_arg("xor-attriqa-match:val", flag="--xor", help="XOR-AttriQA rows to score (name or file)")
    calibrate_on: str = cli_arg("xor-attriqa-match:train", flag="--calibrate-on",
                                help="MIRAGE-CAL's calibration rows")
    limit: int = limit_arg(8, help="rows of each XOR-AttriQA file")
    max_new_tokens: int = cli_arg(64, flag="--max-new-tokens", metavar="N", help="the main command's answer length")
    bench_tokens: int = cli_arg(32, flag="--bench-tokens", metavar="N", help="the benchmark's answer length")
    threads: int = threads_arg(1)
    legacy_data: str = cli_arg("", flag="--legacy-data", help="for revisions from before datasets by name: the "
                               "folder they read the data from (a copy of the data, as MIRAGE_SHARED_DATA; "
                               "default: none)")
    out: str = cli_arg(flag="--out", help="the JSON file to write")


def run(args: Options) -> int:
    global LEGACY_DATA
    LEGACY_DATA = str(Path(args.legacy_data).resolve()) if args.legacy_data else ""
    xor_file, calibrate_file = _data_file(args.xor), _data_file(args.calibrate_on)
    with tempfile.TemporaryDirectory(prefix="mirage-identity-") as tmp:
        sides = {}
        try:
            for side, rev in (("before", args.before), ("after", args.after)):
                sides[side] = run_side(rev, Path(tmp) / side, args, xor_file, calibrate_file)
            outputs = {job: compare(Path(tmp) / "before" / "out" / job, Path(tmp) / "after" / "out" / job)
                       for job in ("attribute", "xor")}
        finally:
            for side in ("before", "after"):
                if (Path(tmp) / side / "tree").exists():
                    subprocess.run(["git", "worktree", "remove", "--force", str(Path(tmp) / side / "tree")], cwd=ROOT,
                                   check=False, capture_output=True)
    rows_b = {r["id"]: r for r in sides["before"]["bench"]["rows"]}
    bench = []
    for row in sides["after"]["bench"]["rows"]:
        old = rows_b.get(row["id"], {})
        bench.append({"id": row["id"], "answer_tokens": row.get("answer_tokens"),
                      "mirage_s_before": old.get("mirage_s"), "mirage_s_after": row.get("mirage_s"),
                      "after_over_before": round(row["mirage_s"] / old["mirage_s"], 3) if old.get("mirage_s") else None,
                      "reference_s_before": old.get("reference_s"), "reference_s_after": row.get("reference_s"),
                      "same_selected_before": old.get("same_selected"), "same_selected_after": row.get("same_selected"),
                      "same_citations_before": old.get("same_citations"),
                      "same_citations_after": row.get("same_citations")})
    bench_same = compare_bench(sides["before"]["bench"], sides["after"]["bench"])
    result = {
        "command": "python benchmarks/identity_check.py " + shlex.join(sys.argv[1:]),
        "before": sides["before"]["commit"], "after": sides["after"]["commit"],
        "identical": all(f["same_values"] for o in outputs.values() for f in o["files"].values()) and bench_same,
        "outputs": outputs, "bench_outputs_identical": bench_same, "bench": bench,
        "job_seconds": {side: s["seconds"] for side, s in sides.items()},
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({k: result[k] for k in ("before", "after", "identical", "bench_outputs_identical")}))
    for job, o in outputs.items():
        for name, f in o["files"].items():
            print(f"{job}/{name}: {f['records']} records, same values: {f['same_values']}, added keys: "
                  f"{len(f['added_keys'])}")
    for row in bench:
        print(f"bench {row['id']}: mirage {row['mirage_s_before']} s before, {row['mirage_s_after']} s after "
              f"({row['after_over_before']}x)")
    return 0 if result["identical"] else 1


def compare_bench(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """The benchmark's outputs other than times: per row its tokens, selection and agreement with the reference."""
    keys = ("id", "answer_tokens", "prompt_tokens", "context_tokens", "documents", "selected", "same_selected",
            "same_citations")
    return [{k: r.get(k) for k in keys} for r in before["rows"]] == [{k: r.get(k) for k in keys} for r in after["rows"]]


if __name__ == "__main__":
    main(Options, run)
