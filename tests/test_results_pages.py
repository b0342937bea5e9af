"""Results pages (``mirage.views.pages``): every folder of benchmarks/results has the page ``mirage report`` writes from its
results alone; a run writes its page with its command and the SHA-256 of its data; a README.md mirage did not write
is never overwritten. The run test scores two rows of the XOR-AttriQA slice in tests/data on the embedded model."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from mirage import cli
from mirage.views.pages import page_folders, page_kind, render_page
from mirage.views.pages.core import MARK, PAGE
from mirage.views.pages.kinds import documents_cited

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
XOR_VAL = Path("tests") / "data" / "xor_attriqa_match" / "val.jsonl"  # relative to ROOT, as a user would give it


def test_every_results_folder_has_the_page_mirage_report_writes(tmp_path):
    """``mirage report -r`` over a copy of benchmarks/results rewrites every committed page byte for byte, and every
    folder with results (every top-level folder among them) has one."""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    folders = page_folders(copy)
    top = sorted(p.name for p in copy.iterdir() if p.is_dir())
    assert top and set(top) <= {p.name for p in folders if p.parent == copy}
    missing = [str(p.relative_to(copy)) for p in folders if not (p / PAGE).is_file()]
    assert not missing, f"folders without a committed results page (run `mirage report -r benchmarks/results`): {missing}"
    assert cli.main(["report", "--recursive", str(copy)]) == 0
    differ = [str(p.relative_to(copy)) for p in folders
              if (p / PAGE).read_text(encoding="utf-8") != (RESULTS / p.relative_to(copy) / PAGE).read_text(encoding="utf-8")]
    assert not differ, (f"committed pages that differ from what `mirage report` writes now: {differ}; after "
                        "changing results or their table writers, run `mirage report -r benchmarks/results`")


def test_folders_are_told_apart_by_their_results():
    kinds = {name: page_kind(RESULTS / name) for name in
             ("xor_attriqa_smollm2_en", "eli5_smollm2_selfcitation", "bias_smollm2_hai", "bias_smollm2_protocol",
              "tune_smollm2_sft", "gpu")}
    assert kinds == {"xor_attriqa_smollm2_en": "xor-attriqa", "eli5_smollm2_selfcitation": "eli5",
                     "bias_smollm2_hai": "bias-study", "bias_smollm2_protocol": "bias-protocol",
                     "tune_smollm2_sft": "tune", "gpu": "benchmark-json"}
    assert page_kind(RESULTS / "bias_smollm2_protocol" / "sweep_k") == "bias-sweep"
    assert page_kind(RESULTS / "bias_smollm2_hai" / "prompts") is None
    assert page_kind(RESULTS / "self_match") == "self-match-checks"  # folders of checks that kept nothing
    assert page_kind(RESULTS / "self_match" / "smollm2-135m-instruct_val") == "self-match"


def test_documents_cited_counts_answers_per_document_and_per_set_size():
    """The tuning table's two bases, kept apart: answers citing document n, and answers citing n documents."""
    answers = [{"cited": [1]}, {"cited": [1, 4]}, {"cited": []}, {"cited": [2, 3, 4]}]
    by_doc, by_size = documents_cited(answers)
    assert dict(by_doc) == {1: 2, 2: 1, 3: 1, 4: 2}
    assert dict(by_size) == {1: 1, 2: 1, 0: 1, 3: 1}


def test_memory_is_shown_in_gib_on_every_page():
    """Peak memory is recorded in MiB; every page shows it in GiB (÷ 1024), never in decimal GB."""
    tune = render_page(RESULTS / "tune_smollm2_reward")
    record = json.loads((RESULTS / "tune_smollm2_reward" / "reward_epoch.json").read_text())
    assert f"{record['peak_rss_mb'] / 1024:.2f} GiB" in tune
    bench = render_page(RESULTS)
    row = json.loads((RESULTS / "attribution.json").read_text())["rows"][0]
    assert f"{row['mirage_peak_mb'] / 1024:.2f} GiB" in bench
    assert " GB" not in tune + bench


@pytest.fixture(scope="module")
def xor_page_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("xor_page") / "run"
    args = ["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--limit", "2", "-o", str(out)]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        assert cli.main(args) == 0
    return out


def test_a_run_writes_its_page_with_its_command_and_data_checksum(xor_page_run):
    out = xor_page_run
    text = (out / PAGE).read_text(encoding="utf-8")
    assert text.startswith(MARK + "\n")
    sha = hashlib.sha256((ROOT / XOR_VAL).read_bytes()).hexdigest()
    assert f"| `{XOR_VAL.as_posix()}` | `{sha}` |" in text
    command = f"mirage score xor-attriqa {XOR_VAL.as_posix()} --calibrate-on {XOR_VAL.as_posix()} --limit 2 -o run"
    assert command in text
    assert str(out.parent) not in text and str(ROOT) not in text  # no machine paths
    assert "![sweep.png](sweep.png)" in text and "Agreement with human labels" in text


def test_mirage_report_rewrites_the_page_from_the_results_alone(xor_page_run, tmp_path, monkeypatch):
    """Moved elsewhere, away from the data and without a model, the folder's page is written again the same."""
    moved = tmp_path / "run"
    shutil.copytree(xor_page_run, moved)
    (moved / PAGE).unlink()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("mirage.pipeline.Mirage.from_pretrained",
                        classmethod(lambda *a, **k: pytest.fail("mirage report loaded a model")))
    assert cli.main(["report", "run"]) == 0
    assert (moved / PAGE).read_text(encoding="utf-8") == (xor_page_run / PAGE).read_text(encoding="utf-8")


def test_a_dataset_name_shows_the_checksum_the_data_registry_pins(tmp_path):
    """A run that read a dataset by name (as the runs record cached data) gets that file's pinned SHA-256."""
    registry = pytest.importorskip("mirage.data.registry")
    run = tmp_path / "eli5"
    shutil.copytree(RESULTS / "eli5_smollm2_selfcitation", run)
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    res["settings"]["data"] = "eli5-alce"
    (run / "results.json").write_text(json.dumps(res), encoding="utf-8")
    pinned = registry.DATASETS["eli5-alce"].parts["eli5-alce"][0].sha256
    assert pinned and f"| `eli5-alce` | `{pinned}` (pinned by `mirage data`) |" in render_page(run)


def test_a_readme_mirage_did_not_write_is_left_alone(tmp_path, capsys):
    run = tmp_path / "eli5"
    shutil.copytree(RESULTS / "eli5_smollm2_selfcitation", run)
    (run / PAGE).write_text("my notes\n", encoding="utf-8")
    assert cli.main(["report", str(run)]) == 2
    assert (run / PAGE).read_text(encoding="utf-8") == "my notes\n"
    assert "not written by mirage" in capsys.readouterr().err


def test_report_names_a_folder_without_results_and_a_results_file_that_is_not_json(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "holds no results" in capsys.readouterr().err
    (tmp_path / "sweep.json").write_text("{not json", encoding="utf-8")
    assert cli.main(["report", str(tmp_path / "sweep.json")]) == 2  # a file names its folder
    assert "sweep.json is not valid JSON" in capsys.readouterr().err
