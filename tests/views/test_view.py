"""``mirage view`` (mirage/views/view.py) under hostile outputs and sizes (issue 64): a pipe or device as ``-o`` is
written into and never read (a read of a FIFO waits for ever), and a results file of any size makes a page of at most
``--max-items`` items, saying what it leaves out, read in memory that follows the page, not the file. The results
are copies of one real attributed answer (the ELI5 run of tests/data)."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from mirage.cli import main
from mirage.views.view import PAGE_MARKER

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = ROOT / "tests" / "data" / "eli5_run_small" / "answers.jsonl.gz"


def _results(path: Path, n: int) -> Path:
    """A results file of ``n`` copies of one real attributed answer (about 28 kB a line), ids ``answer-0`` …"""
    record = json.loads(gzip.decompress(ANSWERS.read_bytes()).splitlines()[0])["result"]
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            f.write(json.dumps({"key": f"k{i}", "index": i, **record, "id": f"answer-{i}"}) + "\n")
    return path


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _view(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``mirage view ARGS`` in its own process, stopped after two minutes: a read of a pipe that waits for ever
    fails the test instead of hanging it."""
    return subprocess.run([sys.executable, "-m", "mirage", "view", *args], capture_output=True, check=False,
                          timeout=120, cwd=cwd)


def test_a_pipe_or_device_output_is_written_into_never_read(tmp_path):
    results = _results(tmp_path / "r.jsonl", 1)
    # -o /dev/stdout into a pipe: the page comes out (it used to read /dev/stdout for its mark and wait for ever)
    run = _view(str(results), "-o", "/dev/stdout", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith(b"<!DOCTYPE html>") and PAGE_MARKER.encode() in run.stdout[:4096]
    assert Path("/dev/stdout").is_symlink() or not Path("/dev/stdout").is_file()  # not replaced by a file
    fifo = tmp_path / "page.fifo"
    os.mkfifo(fifo)
    run = _view(str(results), "-o", str(fifo), cwd=tmp_path)  # nobody reads it: one line at once, no wait
    assert run.returncode == 2
    line = _one_line(run.stderr.decode())
    assert f"{fifo} is a pipe no process reads" in line and "give a file path" in line

    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        fcntl.fcntl(reader, fcntl.F_SETPIPE_SZ, 2**20)  # room for the whole page: the write never waits here
        assert main(["view", str(results), "-o", str(fifo)]) == 0
        page = b""
        while chunk := os.read(reader, 2**16):
            page += chunk
    finally:
        os.close(reader)
    assert page.startswith(b"<!DOCTYPE html>") and b"answer-0" in page
    assert fifo.is_fifo()  # still the pipe, not a page put in its place
    assert main(["view", str(results), "-o", os.devnull]) == 0 and Path(os.devnull).is_char_device()


def test_a_large_results_file_is_paged_the_page_and_stderr_say_so(tmp_path, capsys, monkeypatch):
    results = _results(tmp_path / "big.jsonl", 200)  # 5.7 MB
    page = tmp_path / "page.html"
    small = _results(tmp_path / "small.jsonl", 3)  # a file within the cap: no note (and the templates compiled)
    assert main(["view", str(small), "-o", str(page)]) == 0 and "This page shows items" not in page.read_text()
    tracemalloc.start()
    try:
        with pytest.warns(UserWarning, match=r"shows items 1–5 of each file \(big\.jsonl holds 200\): --offset 5 "
                                             r"shows the next 5"):
            assert main(["view", str(results), "-o", str(page), "--max-items", "5"]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, peak  # five results and their page (about 1 MB); all 200 took about 40 MB
    html = page.read_text(encoding="utf-8")
    assert html.count('class="entry"') == 5 and "answer-4" in html and "answer-5" not in html
    assert "This page shows items 1–5 of each file (big.jsonl holds 200)" in html
    assert page.stat().st_size < results.stat().st_size / 20

    with pytest.warns(UserWarning, match="shows items 196–200 of each file .*--offset 190 the ones before"):
        assert main(["view", str(results), "-o", str(page), "--max-items", "5", "--offset", "195"]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.count('class="entry"') == 5 and 'href="#item-196"' in html and "answer-199" in html
    assert "answer-194" not in html
    capsys.readouterr()
    assert main(["view", str(results), "-o", str(page), "--offset", "200"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert "--offset 200 is past the results of" in line and "give an offset below 200" in line

    # without --max-items the default cap applies (MAX_ITEMS, 500: here made 3 so as not to render 500 items)
    monkeypatch.setattr("mirage.views.report.MAX_ITEMS", 3)
    with pytest.warns(UserWarning, match="shows items 1–3 of each file"):
        assert main(["view", str(results), "-o", str(page)]) == 0
    assert page.read_text(encoding="utf-8").count('class="entry"') == 3
