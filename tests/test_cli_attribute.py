"""`mirage attribute` end to end on the embedded model: output lines, bad items reported, resume without redoing."""

import json
import subprocess
import sys

import pytest

from mirage.cli import main


def _items(xor_item):
    docs = [{"title": d["title"], "text": " ".join(d["text"].split()[:40])} for d in xor_item["docs"][:2]]
    return [
        {"id": "good-1", "question": xor_item["question"], "docs": docs, "output": xor_item["output"]},
        {"id": "no-docs", "question": "Where?", "docs": []},
        {"id": "good-2", "question": xor_item["question"], "docs": docs[:1], "output": xor_item["output"] + " [1]."},
        {"id": "empty-question", "question": "  ", "docs": docs},
    ]


def test_attribute_writes_results_reports_bad_items_and_resumes(tmp_path, xor_item, capsys):
    src = tmp_path / "in.json"
    src.write_text(json.dumps(_items(xor_item)))
    out = tmp_path / "out.jsonl"
    assert main(["attribute", str(src), "-o", str(out), "--cci-top-k", "3"]) == 3  # 3: some items were skipped
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in lines] == ["good-1", "good-2"]
    assert lines[1]["sentences"][0]["self_citations"] == [1] and lines[1]["answer"] == xor_item["output"] + "."
    assert all(r["config"]["cci"]["top_k"] == 3 and r["config"]["cci"]["top_percent"] is None for r in lines)
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert [(e["index"], "docs" in e["error"] or "question" in e["error"]) for e in errors] == [(1, True), (3, True)]
    printed = capsys.readouterr()
    assert "mirage" in printed.out and "item 1, field 'docs'" in printed.err

    # A second run finds both good items done and loads no model; the output is unchanged.
    before = out.read_text()
    assert main(["attribute", str(src), "-o", str(out), "--cci-top-k", "3"]) == 3
    assert out.read_text() == before
    assert "2 of 4 items already" in capsys.readouterr().err


def test_a_torn_last_line_is_dropped_and_the_item_redone(tmp_path, xor_item):
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(json.dumps(it) for it in _items(xor_item)[:1]) + "\n")
    out = tmp_path / "out.jsonl"
    out.write_text('{"key": "0:deadbeef", "trunc')  # a run killed mid-write
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["id"] == "good-1"


def test_malformed_json_and_unknown_model_are_clear_errors(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"question": "q", "docs": [}]')
    assert main(["attribute", str(bad), "-o", str(tmp_path / "o.jsonl")]) == 2
    assert "not valid JSON at line 1" in capsys.readouterr().err
    good = tmp_path / "good.json"
    good.write_text(json.dumps([{"question": "q", "docs": [{"text": "t"}]}]))
    assert main(["attribute", str(good), "-o", str(tmp_path / "o.jsonl"), "--model", "/no/such/model"]) == 2
    assert "Cannot load model '/no/such/model'" in capsys.readouterr().err


def test_module_entry_point_sees_every_command():
    out = subprocess.run([sys.executable, "-m", "mirage.cli", "--help"], capture_output=True, text=True, check=True)
    for command in ("attribute", "score", "bias", "view"):
        assert command in out.stdout


def test_the_command_process_tunes_the_garbage_collector_and_main_does_not():
    """The console script (``command``) collects the young generation every COMMAND_GC_THRESHOLD allocations and
    freezes what is alive when the command returns; ``main``, which callers run inside their own process, leaves the
    collector as it found it."""
    code = ("import gc, sys\nfrom mirage import cli\nsys.argv = ['mirage', 'data', 'list']\n"
            "before = gc.get_threshold()\nassert cli.main(['data', 'list']) == 0\n"
            "assert gc.get_threshold() == before and gc.get_freeze_count() == 0\n"
            "assert cli.command() == 0\n"
            "print(gc.get_threshold()[0], gc.get_freeze_count() > 0, before[1:] == gc.get_threshold()[1:])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    from mirage.cli import COMMAND_GC_THRESHOLD

    assert out.stdout.splitlines()[-1] == f"{COMMAND_GC_THRESHOLD} True True"


def _no_model(monkeypatch):
    """Fail the test if the command tries to load a model."""
    from mirage.pipeline import Mirage

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(Mirage, "from_pretrained", refuse)


def test_output_equal_to_input_is_refused_and_the_input_kept(tmp_path, xor_item, capsys):
    src = tmp_path / "same.json"
    src.write_text(json.dumps(_items(xor_item)))
    before = src.read_bytes()
    assert main(["attribute", str(src), "-o", str(src), "--limit", "1"]) == 2
    assert "is the input file" in capsys.readouterr().err
    assert src.read_bytes() == before
    assert main(["attribute", str(src), "-o", str(tmp_path / "./same.json")]) == 2  # another spelling of the path
    assert src.read_bytes() == before


def test_a_foreign_output_file_is_refused_untouched(tmp_path, capsys):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    notes = tmp_path / "notes.txt"
    notes.write_text('notes\n{"a": 1}\n')
    assert main(["attribute", str(empty), "-o", str(notes)]) == 2
    assert "not a mirage results file" in capsys.readouterr().err
    assert notes.read_text() == 'notes\n{"a": 1}\n'


def test_invalid_items_are_reported_once_without_loading_the_model(tmp_path, monkeypatch, capsys):
    _no_model(monkeypatch)
    src = tmp_path / "in.jsonl"
    bad = [{"question": "", "docs": [{"text": "t"}]}, {"question": "q", "docs": []}, "not an object",
           {"question": "q", "docs": [{"title": 0, "text": "t"}]}]
    src.write_text("\n".join(json.dumps(b) for b in bad) + "\n{broken\n")
    out = tmp_path / "out.jsonl"
    for _ in range(2):
        assert main(["attribute", str(src), "-o", str(out)]) == 3
    errors = [json.loads(line) for line in (tmp_path / "out.jsonl.errors.jsonl").read_text().splitlines()]
    assert [e["index"] for e in errors] == [0, 1, 2, 3, 4]  # re-running adds no duplicate
    assert "item 3, field 'docs[0].title'" in errors[3]["error"]
    assert "5 invalid; attributing 0" in capsys.readouterr().err


def test_negative_limit_is_an_argument_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["attribute", "x.json", "-o", str(tmp_path / "o.jsonl"), "--limit", "-1"])
    assert exit_.value.code == 2 and "must be an integer >= 0, got '-1'" in capsys.readouterr().err


def test_resume_keys_items_by_content_and_refuses_other_settings(tmp_path, xor_item, capsys):
    good = _items(xor_item)[0]
    other = {**good, "id": "other", "docs": good["docs"][1:]}
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps(good) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    # Prepending an item shifts every position: only the new item is attributed, nothing is duplicated.
    src.write_text(json.dumps(other) + "\n" + json.dumps(good) + "\n")
    assert main(["attribute", str(src), "-o", str(out), "--quiet"]) == 0
    assert "1 of 2 items already" in capsys.readouterr().err
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == ["good-1", "other"] and len({r["key"] for r in records}) == 2
    # Other settings: refused with the differences named, the results kept as they were.
    before = out.read_bytes()
    assert main(["attribute", str(src), "-o", str(out), "--cti-std", "2", "--cci-top-k", "1"]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "config.cti.std_k: 1.0 in the file, 2.0 now" in err
    assert "config.cci.top_k: None in the file, 1 now" in err
    assert out.read_bytes() == before
