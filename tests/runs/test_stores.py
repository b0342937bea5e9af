"""Result stores never lose or rewrite data (mirage.runs.store): foreign files refused untouched, only a torn last line
repaired, settings checked on resume, one writer at a time, keys independent of position and safe for any text.
Property-based fuzz of random file contents, encodings, truncations and concurrent appends."""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mirage.runs.store import ResumableJSONL, StoreError, content_key, dumps_record, item_keys, read_records

ROOT = Path(__file__).resolve().parents[2]
SETTINGS = {"model": "smollm2-135m-instruct", "config": {"cti": {"std_k": 1.0}, "cci": {"top_k": None}}}


def _store(path: Path, **kwargs) -> ResumableJSONL:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ResumableJSONL(path, **kwargs)


def test_a_foreign_file_is_refused_and_left_byte_for_byte(tmp_path):
    for content in (b"notes\n{\"a\": 1}\n", b"notes\n", b'[{"question": "q", "docs": []}]\n',
                    b'{"question": "q", "docs": []}\n', b"\xff\xfe\x00binary", b'{"key": 5}\n'):
        path = tmp_path / "notes.txt"
        path.write_bytes(content)
        with pytest.raises(StoreError, match="not a mirage results file"):
            ResumableJSONL(path)
        assert path.read_bytes() == content


def test_only_a_torn_last_line_is_repaired(tmp_path):
    path = tmp_path / "out.jsonl"
    path.write_text('{"key": "a", "v": 1}\n{"key": "b", "v": 2}\n{"key": "c", "v"')
    with pytest.warns(UserWarning, match="torn last line"):
        store = ResumableJSONL(path)
    assert store.done == {"a", "b"}
    assert path.read_text() == '{"key": "a", "v": 1}\n{"key": "b", "v": 2}\n'
    # A whole record that lost its newline is kept, and the next record starts on a line of its own.
    path.write_text('{"key": "a"}\n{"key": "b"}')
    store = ResumableJSONL(path)
    store.write({"key": "c"})
    assert [r["key"] for r in read_records(path)] == ["a", "b", "c"]
    # A damaged middle line is skipped (its item is redone) but never removed.
    path.write_text('{"key": "a"}\n{"key": "b", oops\n{"key": "c"}\n')
    with pytest.warns(UserWarning, match="damaged"):
        store = ResumableJSONL(path)
    assert store.done == {"a", "c"} and "oops" in path.read_text()


def test_other_settings_are_refused_naming_each_difference(tmp_path):
    path = tmp_path / "out.jsonl"
    ResumableJSONL(path, settings=SETTINGS).write({"key": "k", "x": 1})
    assert ResumableJSONL(path, settings=SETTINGS).done == {"k"}
    other = {"model": "gemma3-270m", "config": {"cti": {"std_k": 2.0}, "cci": {"top_k": None}}}
    with pytest.raises(StoreError) as err:
        ResumableJSONL(path, settings=other)
    assert "model: 'smollm2-135m-instruct' in the file, 'gemma3-270m' now" in str(err.value)
    assert "config.cti.std_k: 1.0 in the file, 2.0 now" in str(err.value)
    # Records without settings (an older mirage) are not silently taken as matching.
    legacy = tmp_path / "legacy.jsonl"
    legacy.write_text('{"key": "k"}\n')
    with pytest.raises(StoreError, match="carry no settings"):
        ResumableJSONL(legacy, settings=SETTINGS)


def _hold_store(path: str, ready, release) -> None:
    store = ResumableJSONL(path)  # the lock lives as long as the store
    ready.set()
    release.wait(30)
    del store


def test_a_second_process_cannot_write_the_same_file(tmp_path):
    path = tmp_path / "out.jsonl"
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_store, args=(str(path), ready, release))
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StoreError, match="another running mirage process"):
            ResumableJSONL(path)
    finally:
        release.set()
        holder.join(30)
    ResumableJSONL(path).write({"key": "after"})  # the lock died with its process
    assert [r["key"] for r in read_records(path)] == ["after"]


def test_keys_depend_on_content_not_position_and_take_any_text():
    a, b, c = {"question": "a"}, {"question": "b"}, {"question": "\ud800 lone surrogate"}
    first = item_keys([a, b])
    assert item_keys([c, a, b])[1:] == first  # prepending an item changes no other key
    assert item_keys([a, a, b]) == [first[0], first[0] + "~2", first[1]]  # identical items keep a record each
    assert content_key(c) != content_key({"question": "\udc00 lone surrogate"})
    line = dumps_record({"key": "k", "text": c["question"]})
    assert json.loads(line)["text"] == c["question"]
    line.encode("utf-8")  # written as valid UTF-8
    assert json.loads(dumps_record({"key": "k", "x": [float("nan"), 1.5, float("inf")]}))["x"] == [None, 1.5, None]


def test_errors_are_recorded_once_per_item(tmp_path):
    path = tmp_path / "out.errors.jsonl"
    for _ in range(3):
        store = ResumableJSONL(path, settings=SETTINGS)
        store.write_once({"key": "k1", "error": "bad"})
        store.write_once({"key": "k2", "error": "bad"})
    assert [r["key"] for r in read_records(path)] == ["k1", "k2"]


# -- fuzz ------------------------------------------------------------------------------------------------------------

_records = st.lists(st.fixed_dictionaries({"key": st.text(max_size=8), "v": st.text(max_size=20)}), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=_records, cut=st.integers(min_value=0, max_value=10_000))
def test_fuzz_a_store_killed_at_any_byte_keeps_every_finished_record(tmp_path_factory, records, cut):
    path = tmp_path_factory.mktemp("kill") / "out.jsonl"
    store = _store(path)
    for r in records:
        store.write(r)
    data = path.read_bytes()
    cut = min(cut, len(data))
    path.write_bytes(data[:cut])  # what a kill -9 mid-write leaves
    *lines, tail = data[:cut].split(b"\n")
    finished = [json.loads(line) for line in lines]
    try:  # a whole record that lost only its newline is kept (no proper prefix of a record parses)
        finished.append(json.loads(tail))
    except ValueError:
        pass
    if not finished and 0 < cut < len(b'{"key": "'):  # too little left to tell it is a record: refused, untouched
        with pytest.raises(StoreError):
            _store(path)
        assert path.read_bytes() == data[:cut]
        return
    reopened = _store(path)
    assert [r["key"] for r in reopened.records()] == [r["key"] for r in finished]
    reopened.write({"key": "next"})
    assert [r["key"] for r in read_records(path)] == [r["key"] for r in finished] + ["next"]


def test_a_whole_last_record_without_its_newline_is_kept_and_the_next_starts_a_line(tmp_path):
    path = tmp_path / "out.jsonl"
    store = _store(path)
    store.write({"key": "a", "v": "x"})
    store.write({"key": "b", "v": "y"})
    path.write_bytes(path.read_bytes()[:-1])  # killed between the record and its newline
    reopened = _store(path)
    assert [r["key"] for r in reopened.records()] == ["a", "b"]
    reopened.write({"key": "c"})
    assert [r["key"] for r in read_records(path)] == ["a", "b", "c"]
    assert path.read_bytes().count(b"\n") == 3


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.one_of(st.binary(max_size=300),
                         st.text(max_size=200).map(lambda t: t.encode("utf-16")),
                         st.text(max_size=200).map(lambda t: t.encode("latin-1", "replace")),
                         st.lists(st.dictionaries(st.text(max_size=5), st.integers(), max_size=3), max_size=4)
                         .map(lambda rs: "".join(json.dumps(r) + "\n" for r in rs).encode())))
def test_fuzz_any_existing_file_is_either_refused_untouched_or_kept(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("any") / "out.jsonl"
    path.write_bytes(content)
    before = read_records(path)
    try:
        store = _store(path)
    except StoreError:
        assert path.read_bytes() == content  # refused: not one byte changed
        return
    after = path.read_bytes()
    # Accepted: at most a torn mirage tail was cut (or a lost newline restored); every record is still there.
    assert after == content or content.startswith(after.rstrip(b"\n")) or after == content + b"\n"
    assert read_records(path) == before
    store.write({"key": "new"})
    assert read_records(path) == before + [{"key": "new"}]


def _append_many(path: str, tag: str, n: int, results) -> None:
    try:
        store = ResumableJSONL(path)
    except StoreError:
        results.put((tag, "refused"))
        return
    for i in range(n):
        store.write({"key": f"{tag}-{i}"})
    results.put((tag, "wrote"))


def test_fuzz_concurrent_writers_never_interleave_or_duplicate(tmp_path):
    path = tmp_path / "out.jsonl"
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_append_many, args=(str(path), f"p{i}", 200, results)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    outcomes = dict(results.get(timeout=5) for _ in procs)
    writers = [t for t, o in outcomes.items() if o == "wrote"]
    keys = [r["key"] for r in read_records(path)]
    assert len(keys) == len(set(keys)) == 200 * len(writers)  # nothing lost, nothing twice
    assert all(line.strip() for line in path.read_text().splitlines())
    for tag in writers:
        assert [k for k in keys if k.startswith(tag + "-")] == [f"{tag}-{i}" for i in range(200)]


def test_python_dash_m_mirage_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "mirage", "attribute", "--help"], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert "--output" in out.stdout


def test_a_whole_file_write_that_fails_leaves_the_previous_version(tmp_path, monkeypatch):
    """Summaries, reports and merged files are replaced whole (mirage.runs.store.write_atomic): a write that dies midway
    (here: the flush to disk fails after 100 kB were written) keeps the earlier file byte for byte and leaves no
    temporary file behind; text that cannot be encoded is refused before anything is written."""
    from mirage.runs import store as runs

    path = tmp_path / "run" / "results.json"
    assert runs.write_atomic(path, '{"agreement": 81.9}\n') == path  # makes the folder
    before = path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(runs.os, "fsync", disk_full)
        with pytest.raises(OSError, match="No space"):
            runs.write_atomic(path, "x" * 100_000)
    assert path.read_bytes() == before
    with pytest.raises(UnicodeEncodeError):
        runs.write_atomic(path, "x" * 100_000 + "\ud800")
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["results.json"]
    runs.write_atomic(path, "é\n")
    assert path.read_text(encoding="utf-8") == "é\n"
    runs.write_atomic(path, b"\x93NUMPY")  # bytes are written as they are (the embedding cache)
    assert path.read_bytes() == b"\x93NUMPY"


def test_a_store_on_a_pipe_is_refused_at_once_never_waiting_for_a_reader(tmp_path, capsys):
    """A FIFO as a results file (``mirage attribute … -o FIFO``): appending a record larger than the pipe's buffer
    waited for a reader for ever, and no re-run could resume it; it is refused in one line before the model loads,
    the pipe left as it was."""
    import os

    from mirage.cli import main

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(StoreError, match=rf"^{fifo} is a pipe or device, not a file; .*give a file path") as err:
        ResumableJSONL(fifo)
    assert "\n" not in str(err.value) and fifo.is_fifo()
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"question": "q?", "docs": [{"title": "t", "text": "x."}], "output": "a."}) + "\n")
    assert main(["attribute", str(items), "-o", str(fifo), "--quiet"]) == 2
    err_text = capsys.readouterr().err
    assert "is a pipe or device, not a file" in err_text and "Traceback" not in err_text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items.jsonl", "out.jsonl"]  # no errors file either


def _lock_is_free(path: Path) -> bool:
    """Whether another open file description could take the store's flock now (as another process would)."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_closing_a_store_releases_its_lock_once_no_store_of_the_process_holds_it(tmp_path):
    path = tmp_path / "out.jsonl"
    first = ResumableJSONL(path)
    second = ResumableJSONL(path)  # the same process shares one lock
    first.write({"key": "a"})
    first.close()
    assert not _lock_is_free(path)  # the second store still holds it
    second.write({"key": "b"})
    with second:
        pass
    assert _lock_is_free(path)
    second.close()  # idempotent
    with pytest.raises(StoreError, match="was closed"):
        first.write({"key": "c"})
    other = {**SETTINGS, "model": "another"}  # the file's records carry no settings: refused
    with ResumableJSONL(path), pytest.raises(StoreError) as refused:
        ResumableJSONL(path, settings=other)  # refused while the first is open: it must keep no hold of its own
    assert _lock_is_free(path)  # also while the refused store lives on in the traceback `refused` keeps
    del refused
    with ResumableJSONL(path) as again:  # reopened, it locks the file anew
        assert again.done == {"a", "b"}
        assert not _lock_is_free(path)
    assert _lock_is_free(path)


def test_read_records_reads_a_store_shipped_gzipped(tmp_path):
    import gzip

    path = tmp_path / "scores.jsonl"
    with ResumableJSONL(path, settings=SETTINGS) as store:
        store.write({"key": "a", "x": 1})
        store.write({"key": "b", "x": "é"})
    (tmp_path / "scores.jsonl.gz").write_bytes(gzip.compress(path.read_bytes() + b'{"key": "torn'))
    assert read_records(tmp_path / "scores.jsonl.gz") == read_records(path)
    assert [r["key"] for r in read_records(path)] == ["a", "b"]


def test_a_store_shipped_gzipped_resumes_and_the_gz_is_left_as_it_is(tmp_path):
    """A run folder whose store was shipped compressed (``scores.jsonl.gz`` alone, as the repository's results keep
    them): opening the store resumes it (its keys are done), new records go to the plain file, the ``.gz`` is not
    touched; a damaged ``.gz`` is refused in one line naming it."""
    import gzip

    path = tmp_path / "scores.jsonl"
    with ResumableJSONL(path, settings=SETTINGS) as store:
        store.write({"key": "a", "x": 1})
    shipped = tmp_path / "scores.jsonl.gz"
    shipped.write_bytes(gzip.compress(path.read_bytes()))
    path.unlink()
    before = shipped.read_bytes()
    with ResumableJSONL(path, settings=SETTINGS) as store:
        assert store.done == {"a"}
        store.write({"key": "b", "x": 2})
    assert [r["key"] for r in read_records(path)] == ["a", "b"] and shipped.read_bytes() == before
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(StoreError, match=r"bad\.jsonl\.gz: cannot resume"):
        ResumableJSONL(tmp_path / "bad.jsonl")
    assert not (tmp_path / "bad.jsonl").exists()
