"""Runs split across processes (mirage.runs.sharding): the shard arithmetic and stores, then real two-process runs under
``torchrun`` (gloo on CPU) of ``mirage score xor-attriqa`` and ``mirage attribute`` on the embedded model, checked
against one-process runs of the same commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.runs.sharding import Shard, ShardedJSONL, ShardError, consolidate, in_shards, shard_files, shard_path
from mirage.scoring.xor_data import load_xor_attriqa

DATA = Path(__file__).parents[1] / "data"
XOR_VAL = DATA / "xor_attriqa_match" / "val.jsonl"
ROOT = Path(__file__).resolve().parents[2]


def test_ranks_own_disjoint_shares_covering_every_key():
    keys = [f"{i}:{i * 7919 % 1000:03d}" for i in range(300)]
    shares = [{k for k in keys if Shard(rank=r, world=3).owns(k)} for r in range(3)]
    assert set().union(*shares) == set(keys)
    assert sum(len(s) for s in shares) == len(keys)
    assert all(len(s) > 50 for s in shares)  # the hash spreads keys, not all to one rank
    assert all(Shard().owns(k) for k in keys)


def test_shard_from_env(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert Shard.from_env() == Shard(0, 1)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "3")
    assert Shard.from_env() == Shard(3, 4)
    monkeypatch.setenv("RANK", "4")
    with pytest.raises(ShardError, match="RANK < WORLD_SIZE"):
        Shard.from_env()
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(ShardError, match="integers"):
        Shard.from_env()


def test_sharded_store_reads_every_rank_and_consolidates_in_index_order(tmp_path):
    base = tmp_path / "out.jsonl"
    stores = [ShardedJSONL(base, Shard(r, 2)) for r in range(2)]
    for index in (3, 0, 2, 1):
        stores[index % 2].write({"key": f"k{index}", "index": index})
    stores[1].write({"key": "k1", "index": 1})  # a duplicate (e.g. a retried item) is kept once
    assert stores[0].path == shard_path(base, 0, 2) and not base.exists()
    # A store opened under another world size sees everything: resuming with 3 processes, or 1, skips done keys.
    assert ShardedJSONL(base, Shard(2, 3)).done == {"k0", "k1", "k2", "k3"}
    assert len(ShardedJSONL(base, Shard()).records()) == 5
    consolidate(base)
    assert shard_files(base) == [base]
    assert [r["index"] for r in ShardedJSONL(base, Shard()).records()] == [0, 1, 2, 3]


def test_a_rank_never_rewrites_another_ranks_file(tmp_path):
    """Rank 1 may be mid-append (a torn last line) while rank 0 opens its store: rank 0 only reads that file."""
    base = tmp_path / "out.jsonl"
    other = shard_path(base, 1, 2)
    other.write_text('{"key": "a", "mirage_shard": "1-of-2"}\n{"key": "b", "val', encoding="utf-8")
    store = ShardedJSONL(base, Shard(0, 2))
    assert store.done == {"a"}
    assert other.read_text(encoding="utf-8").endswith('"val')  # untouched
    assert [r["key"] for r in store.records()] == ["a"]


def test_in_shards_runs_once_in_one_process(tmp_path):
    calls = []

    def work(store_for):
        store = store_for(tmp_path / "s.jsonl")
        calls.append(store.shard)
        return "done"

    assert in_shards(work, Shard()) == "done"
    assert calls == [Shard()]


def test_unsynchronized_ranks_finish_their_share_and_a_plain_run_merges(tmp_path, monkeypatch):
    """Ranks started as separate jobs (no rendezvous) each do their share; one more plain run merges."""
    monkeypatch.setenv("MIRAGE_SHARD_NO_SYNC", "1")
    keys = [f"item-{i}" for i in range(12)]
    computed: list[str] = []

    def work(store_for):
        store = store_for(tmp_path / "s.jsonl")
        for k in keys:
            if k not in store.done and store.owns(k):
                computed.append(k)
                store.write({"key": k})
        return sorted(r["key"] for r in store.records())

    assert in_shards(work, Shard(0, 2)) is None
    assert in_shards(work, Shard(1, 2)) is None
    assert sorted(computed) == sorted(keys)
    monkeypatch.delenv("MIRAGE_SHARD_NO_SYNC")
    assert in_shards(work, Shard()) == sorted(keys)
    assert len(computed) == len(keys)  # the merge computed nothing again
    assert shard_files(tmp_path / "s.jsonl") == [tmp_path / "s.jsonl"]


def _torchrun(args: list[str], tmp_path: Path, *, ranks: int = 2) -> subprocess.CompletedProcess:
    """``mirage`` under torchrun with ``ranks`` processes (1: a plain process), each on one CPU thread, so that one
    process and two run the same arithmetic (thread counts change float summation order)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks)]
    cmd = [*(launcher if ranks > 1 else [sys.executable]), "-m", "mirage.cli", *args]
    proc = subprocess.run(cmd, check=False, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _without_run_details(results: dict) -> dict:
    return {k: v for k, v in results.items() if k not in {"versions"}}


@pytest.mark.slow
def test_two_torchrun_ranks_give_the_single_process_results(tmp_path):
    items = load_xor_attriqa(XOR_VAL, text="en").items
    assert {r for item in items for r in range(2) if Shard(r, 2).owns(item.key)} == {0, 1}, "both ranks get work"

    args = ["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--quiet"]
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    _torchrun([*args, "-o", str(single)], tmp_path, ranks=1)
    proc = _torchrun([*args, "-o", str(sharded)], tmp_path)
    assert "rank 1 of 2: shard done" in proc.stderr
    one = json.loads((single / "results.json").read_text())
    two = json.loads((sharded / "results.json").read_text())
    assert _without_run_details(two) == _without_run_details(one)
    assert shard_files(sharded / "scores.jsonl") == [sharded / "scores.jsonl"]
    def keys(run):
        return sorted(json.loads(line)["key"] for line in (run / "scores.jsonl").read_text().splitlines())

    # every record one process writes (item records, CCI rows, passage signals), each once; a rank's calibration
    # search sees only part of the items, so it may have asked for a few rows more
    assert set(keys(single)) <= set(keys(sharded)) and len(set(keys(sharded))) == len(keys(sharded))
    assert sum(1 for line in (sharded / "scores.jsonl").read_text().splitlines() if '"cti"' in line) == len(items)


@pytest.mark.slow
def test_two_torchrun_ranks_attribute_like_one_process(tmp_path):
    items = [it for it in json.loads((ROOT / "examples" / "rag_items.json").read_text()) if it.get("output")]
    (tmp_path / "items.json").write_text(json.dumps(items))
    args = ["attribute", str(tmp_path / "items.json"), "--quiet"]
    _torchrun([*args, "-o", str(tmp_path / "one.jsonl")], tmp_path, ranks=1)
    _torchrun([*args, "-o", str(tmp_path / "two.jsonl")], tmp_path)
    one = [json.loads(x) for x in (tmp_path / "one.jsonl").read_text().splitlines()]
    two = [json.loads(x) for x in (tmp_path / "two.jsonl").read_text().splitlines()]
    assert [r["key"] for r in two] == [r["key"] for r in one]  # merged in input order
    for a, b in zip(one, two):
        assert [s["mirage_citations"] for s in a["sentences"]] == [s["mirage_citations"] for s in b["sentences"]]
        assert [t["cti"] for t in a["tokens"]] == [t["cti"] for t in b["tokens"]]
    assert shard_files(tmp_path / "two.jsonl") == [tmp_path / "two.jsonl"]
    assert sorted(p.name for p in tmp_path.glob("two.*")) == ["two.jsonl"]  # no rank file left, not even empty ones


def test_each_rank_defaults_to_the_gpu_of_its_local_rank(monkeypatch):
    """No GPU here: torch.cuda's availability and count are faked to check the device choice alone."""
    import torch

    from mirage.attribution.models import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert default_device() == torch.device("cuda", 1)
    monkeypatch.delenv("LOCAL_RANK")
    assert default_device() == torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert default_device() == torch.device("cpu")
