"""Stores and outputs under hostile conditions (issue 39): files merely named like a rank's file are never folded nor
deleted; ``mirage view`` replaces only pages it wrote; an id names one item's result; errors resolved later are not
reported as current; a file where a folder belongs, a read-only folder, a full disk and Ctrl-C each give one line
(and keep every finished result). The ``mirage attribute`` runs are real runs of the embedded model on the example
items (force-decoded, short documents)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mirage.cli import main
from mirage.runs.sharding import SHARD_FIELD, Shard, ShardedJSONL, consolidate, in_shards, shard_files, shard_path
from mirage.runs.store import ResumableJSONL, StoreError, read_records
from mirage.views.view import PAGE_MARKER

ROOT = Path(__file__).resolve().parents[2]
BIAS_RUN = ROOT / "tests" / "data" / "bias_run_small"
ELI5_RUN = ROOT / "tests" / "data" / "eli5_run_small"


def _short(doc: dict, words: int = 40) -> dict:
    return {"title": doc["title"], "text": " ".join(doc["text"].split()[:words])}


@pytest.fixture(scope="module")
def items(example_items) -> list[dict]:
    """Four force-decoded items with short documents (fast to attribute): A, B, C, D."""
    by_id = {it["id"]: it for it in example_items}
    x0, x1 = by_id["xor-val-0"], by_id["xor-val-1"]
    d0, d1 = [_short(d) for d in x0["docs"][:2]], [_short(d) for d in x1["docs"]]
    return [{"id": "A", "question": x0["question"], "docs": d0, "output": x0["output"]},
            {"id": "B", "question": x1["question"], "docs": d1, "output": x1["output"]},
            {"id": "C", "question": x0["question"], "docs": d0[:1], "output": x0["output"] + " [1]."},
            {"id": "D", "question": x1["question"], "docs": d1[:1], "output": x1["output"] + " [1]."}]


def _write_items(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(it) + "\n" for it in items), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def attributed_a(tmp_path_factory, items, one_thread) -> Path:
    """A real results file of item A (``mirage attribute``), copied by the tests that resume from it."""
    folder = tmp_path_factory.mktemp("attributed")
    out = folder / "out.jsonl"
    assert main(["attribute", str(_write_items(folder / "in.jsonl", items[:1])), "-o", str(out), "--quiet"]) == 0
    return out


def _resume_from(attributed_a: Path, tmp_path: Path, items: list[dict]) -> tuple[Path, Path]:
    """(input, output) in ``tmp_path``: the output holding A's result, the input ``items``."""
    out = tmp_path / "out.jsonl"
    shutil.copy(attributed_a, out)
    return _write_items(tmp_path / "in.jsonl", items), out


def _no_model(monkeypatch):
    """Fail the test if the command tries to load a model."""
    from mirage.pipeline import Mirage

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Mirage, "from_pretrained", refuse)


def _one_line_error(err: str) -> str:
    """The error line of a command that failed cleanly: one line starting ``mirage:``, no traceback."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("mirage:")]
    assert len(lines) == 1, err
    return lines[0]


# --- 1. files named like a rank's file -------------------------------------------------------------------------------

def test_a_file_only_named_like_a_rank_file_is_never_read_folded_or_deleted(tmp_path):
    base = tmp_path / "notes.jsonl"
    contents = {
        "notes.rank1-of-3.jsonl": b"my notes\n",
        "notes.rank0-of-2.jsonl": b'{"key": "k1", "v": 1}\n',  # a store-looking record, not marked as rank 0 of 2
        "notes.rank1-of-2.jsonl": b'{"key": "k2", "mirage_shard": "0-of-2"}\n',  # marked, but as another rank
        "notes.rank2-of-4.jsonl": b"",  # empty: nothing says mirage wrote it
    }
    for name, data in contents.items():
        (tmp_path / name).write_bytes(data)

    def work(store_for):
        store = store_for(base)
        assert store.done == set()  # none of them is read as done work
        store.write({"key": "mine"})
        return store.records()

    assert [r["key"] for r in in_shards(work, Shard())] == ["mine"]
    for name, data in contents.items():
        assert (tmp_path / name).read_bytes() == data
    assert shard_files(base) == [base]
    assert [r["key"] for r in read_records(base)] == ["mine"]


def test_a_rank_file_mirage_wrote_is_folded_but_never_an_input(tmp_path):
    base = tmp_path / "out.jsonl"
    ShardedJSONL(base, Shard(1, 2)).write({"key": "k1", "index": 1})
    rank1 = shard_path(base, 1, 2)
    assert json.loads(rank1.read_text())[SHARD_FIELD] == "1-of-2"
    consolidate(base, keep=[rank1])  # the run's input: kept, not folded
    assert rank1.exists() and not base.exists()
    consolidate(base)
    assert not rank1.exists() and read_records(base) == [{"key": "k1", "index": 1}]  # the mark is gone


def test_rank_files_with_other_settings_or_a_foreign_own_file_are_refused_untouched(tmp_path):
    base = tmp_path / "out.jsonl"
    ShardedJSONL(base, Shard(1, 2), settings={"model": "a"}).write({"key": "k1"})
    rank1 = shard_path(base, 1, 2)
    before = rank1.read_bytes()
    with pytest.raises(StoreError, match="model: 'a' in the file, 'b' now"):
        in_shards(lambda store_for: store_for(base, settings={"model": "b"}), Shard())
    assert rank1.read_bytes() == before
    foreign = shard_path(base, 0, 2)
    foreign.write_text('{"key": "x"}\n')  # a store record, but not one rank 0 of 2 wrote
    with pytest.raises(StoreError, match="mirage did not write it as that rank"):
        ShardedJSONL(base, Shard(0, 2))
    assert foreign.read_text() == '{"key": "x"}\n'


def test_attribute_never_deletes_its_own_input_named_like_a_rank_file(tmp_path, items, one_thread, capsys):
    src = _write_items(tmp_path / "data.rank0-of-2.jsonl", items[:1])
    notes = tmp_path / "data.rank1-of-3.jsonl"
    notes.write_text("someone's notes\n")
    before = src.read_bytes()
    assert main(["attribute", str(src), "-o", str(tmp_path / "data.jsonl"), "--quiet"]) == 0
    assert src.read_bytes() == before and notes.read_text() == "someone's notes\n"
    assert [r["id"] for r in read_records(tmp_path / "data.jsonl")] == ["A"]
    assert "skipped" not in capsys.readouterr().err
    assert not (tmp_path / "data.jsonl.errors.jsonl").exists()  # no error: no errors file left behind


# --- 2. mirage view replaces only its own pages --------------------------------------------------------------------

def test_view_replaces_only_a_page_it_wrote(tmp_path, capsys):
    page = tmp_path / "bias.html"
    assert main(["view", str(BIAS_RUN), "-o", str(page)]) == 0
    assert PAGE_MARKER in page.read_text()[:4096]
    assert main(["view", str(BIAS_RUN), "-o", str(page), "--title", "again"]) == 0  # its own page: replaced
    assert "again" in page.read_text()
    eli5 = tmp_path / "eli5.html"  # the attribution report's template (as for a results file)
    assert main(["view", str(ELI5_RUN), "-o", str(eli5)]) == 0 and PAGE_MARKER in eli5.read_text()[:4096]
    capsys.readouterr()

    other_results = tmp_path / "b.jsonl"
    other_results.write_text('{"key": "k", "settings": {}, "question": "q"}\n')
    generations = tmp_path / "generations.jsonl"
    shutil.copy(tmp_path / "b.jsonl", generations)
    own_page = tmp_path / "mine.html"
    own_page.write_text("<!DOCTYPE html><html><head><title>my page</title></head></html>")
    for target in (other_results, generations, own_page):
        before = target.read_bytes()
        assert main(["view", str(ELI5_RUN), "-o", str(target)]) == 2
        line = _one_line_error(capsys.readouterr().err)
        assert f"-o {target} exists and is not a page mirage view wrote" in line
        assert target.read_bytes() == before


# --- 3. an id names one item's result ------------------------------------------------------------------------------

def test_an_edited_item_under_a_stored_id_is_refused_before_the_model_loads(tmp_path, items, attributed_a,
                                                                           monkeypatch, capsys):
    edited = {**items[0], "question": items[0]["question"] + " (edited)"}
    src, out = _resume_from(attributed_a, tmp_path, [edited])
    before = out.read_bytes()
    _no_model(monkeypatch)
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert "has id 'A'" in line and "an id names one item's result" in line and "Give a new -o" in line
    assert out.read_bytes() == before
    # The item as it was is no conflict: its stored result is found done.
    _write_items(src, [items[0]])
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    assert out.read_bytes() == before


# --- 4. errors resolved later --------------------------------------------------------------------------------------

def test_an_item_that_failed_once_and_then_succeeded_is_no_longer_an_error(tmp_path, items, attributed_a,
                                                                         monkeypatch, capsys, one_thread):
    """A transient failure (a torch out-of-memory, say) cannot be produced on demand here: attribute_item is faked
    to raise for item B in the first run only; the second run is the real pipeline."""
    from mirage.pipeline import Mirage

    src, out = _resume_from(attributed_a, tmp_path, items[:2])
    errors = Path(str(out) + ".errors.jsonl")
    real = Mirage.attribute_item

    def out_of_memory(self, item, **kwargs):
        if item.get("id") == "B":
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(self, item, **kwargs)

    monkeypatch.setattr(Mirage, "attribute_item", out_of_memory)
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 3
    assert "0 attributed, 1 skipped (see" in capsys.readouterr().err
    assert [e["index"] for e in read_records(errors)] == [1]

    monkeypatch.setattr(Mirage, "attribute_item", real)
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "done: 1 attributed." in err and "skipped" not in err
    assert [r["id"] for r in read_records(out)] == ["A", "B"]
    assert not errors.exists()  # its only error is resolved: nothing is reported as current


def test_errors_of_items_still_failing_stay_and_resolved_ones_go(tmp_path):
    from mirage.runs.store import drop_resolved

    errors = tmp_path / "out.jsonl.errors.jsonl"
    with ResumableJSONL(errors, settings={"m": 1}) as store:
        for key in ("a", "b", "c"):
            store.write({"key": key, "error": f"{key} failed"})
    assert drop_resolved(errors, {"b"}, settings={"m": 1}) == 2
    assert [r["key"] for r in read_records(errors)] == ["a", "c"]
    notes = tmp_path / "notes.jsonl"  # not a store with these settings: refused, untouched
    notes.write_text('{"key": "a"}\n')
    with pytest.raises(ValueError, match="carry no settings"):
        drop_resolved(notes, {"a"}, settings={"m": 1})
    assert notes.read_text() == '{"key": "a"}\n'


# --- 5. one line instead of a traceback ----------------------------------------------------------------------------

def test_an_output_under_a_regular_file_is_one_line(tmp_path, items, monkeypatch, capsys):
    _no_model(monkeypatch)
    src = _write_items(tmp_path / "in.jsonl", items[:1])
    somefile = tmp_path / "somefile.txt"
    somefile.write_text("keep me\n")
    assert main(["attribute", str(src), "-o", str(somefile / "out.jsonl")]) == 2
    assert f"{somefile} is a file, not a folder" in _one_line_error(capsys.readouterr().err)
    assert main(["view", str(ELI5_RUN), "-o", str(somefile / "sub" / "page.html")]) == 2
    assert f"{somefile} is a file, not a folder" in _one_line_error(capsys.readouterr().err)
    assert main(["bias", str(src), "-o", str(somefile)]) == 2  # a run folder's -o that is a file
    assert f"{somefile}: a file is there where a folder belongs" in _one_line_error(capsys.readouterr().err)
    assert somefile.read_text() == "keep me\n"


@pytest.fixture
def read_only_dir(tmp_path):
    """A folder nothing may be written in. Not root: chmod 555, as a user meets it. Root ignores permissions, so
    there a read-only tmpfs is mounted on it (skipped where the machine allows no mount)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)], capture_output=True,
                           check=False)
    if mount.returncode != 0:
        pytest.skip(f"running as root, and no read-only mount can be made here: {mount.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_folder_is_one_line_naming_the_output(read_only_dir, tmp_path, items, monkeypatch, capsys):
    _no_model(monkeypatch)
    src = _write_items(tmp_path / "in.jsonl", items[:1])
    out = read_only_dir / "out.jsonl"
    assert main(["attribute", str(src), "-o", str(out)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{out}: cannot write there" in line
    page = read_only_dir / "page.html"
    assert main(["view", str(ELI5_RUN), "-o", str(page)]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{page}: cannot write there" in line and ".tmp" not in line  # the real file, not a temporary one
    assert list(read_only_dir.iterdir()) == []


def test_a_full_disk_mid_run_keeps_every_finished_result_and_says_so(tmp_path, items, attributed_a, monkeypatch,
                                                                     capsys, one_thread):
    """A full disk is simulated: os.write is monkeypatched to write half of item B's record to the output, then
    raise OSError(ENOSPC), as a disk that fills up mid-line does."""
    src, out = _resume_from(attributed_a, tmp_path, items[:2])
    before = out.read_bytes()
    real_write = os.write
    inode = out.stat().st_ino

    def full_disk(fd, data):
        if os.fstat(fd).st_ino == inode:
            real_write(fd, bytes(data[: len(data) // 2]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full_disk)
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert f"{out}: the disk is full" in line and "run the same command again to resume" in line
    assert out.read_bytes() == before  # A's result whole; nothing of B's half-written line

    monkeypatch.setattr(os, "write", real_write)
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    assert [r["id"] for r in read_records(out)] == ["A", "B"]


def test_ctrl_c_is_one_line_exit_130_and_the_same_command_resumes(tmp_path, items, attributed_a, capsys,
                                                                  one_thread):
    """A real SIGINT to a real ``mirage attribute`` process, sent once it has written a result. The child starts with
    SIGINT at its default, as under a terminal: a suite launched in the background (``cmd &`` in a script, ``nohup``)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the child would run on."""
    src, out = _resume_from(attributed_a, tmp_path, items)
    args = ["attribute", str(src), "-o", str(out), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    saved = signal.getsignal(signal.SIGINT)
    if saved == signal.SIG_IGN:  # an ignored signal stays ignored across exec; a handled one resets to the default
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        proc = subprocess.Popen([sys.executable, "-m", "mirage.cli", *args], env=env, stderr=subprocess.PIPE,
                                text=True)
    finally:
        signal.signal(signal.SIGINT, saved)
    try:
        while proc.poll() is None and len(read_records(out)) < 2:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    line = _one_line_error(err)
    assert "interrupted" in line and "run the same command again to resume" in line
    done = [r["id"] for r in read_records(out)]
    assert done[:2] == ["A", "B"] and len(done) < 4
    assert main(args) == 0
    assert [r["id"] for r in read_records(out)] == ["A", "B", "C", "D"]
