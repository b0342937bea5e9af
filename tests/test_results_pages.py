"""Results pages (``mirage.views.pages``): every folder of benchmarks/results has the page ``mirage report`` writes from its
results alone; a run writes its page with its command and the SHA-256 of its data; a README.md mirage did not write
is never overwritten. The run test scores two rows of the XOR-AttriQA slice in tests/data on the embedded model."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mirage import cli
from mirage.views.pages import core, page_folders, page_kind, record_run, render_page
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
    from mirage.data import registry
    run = tmp_path / "eli5"
    shutil.copytree(RESULTS / "eli5_smollm2_selfcitation", run)
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    res["settings"]["data"] = "eli5-alce"
    (run / "results.json").write_text(json.dumps(res), encoding="utf-8")
    pinned = registry.DATASETS["eli5-alce"].parts["eli5-alce"][0].sha256
    assert pinned and f"| `eli5-alce` | `{pinned}` (pinned by `mirage data`) |" in render_page(run)


def test_a_dataset_name_records_the_checksum_of_the_bytes_in_the_cache(data_folder, tmp_path, monkeypatch):
    """Provenance of a dataset name is the SHA-256 of the cached file it stands for (the bytes the run read), not the
    one the registry pins: an edited cache file is recorded as what it is."""
    from mirage.data import get
    from mirage.views.pages.core import data_entries, pinned_sha256

    monkeypatch.setenv("MIRAGE_DATA_DIR", str(tmp_path / "cache"))
    copy = tmp_path / "copy" / "eli5_alce"
    copy.mkdir(parents=True)
    shutil.copy(data_folder / "eli5_alce" / "eli5_alce_prompt.json", copy)
    cached = get("eli5-alce-prompt", source=copy.parent, progress=False)
    pinned = pinned_sha256("eli5-alce-prompt")
    assert data_entries(["eli5-alce-prompt"]) == [{"given": "eli5-alce-prompt", "sha256": pinned}]
    cached.write_bytes(cached.read_bytes().replace(b"Instruction", b"instruction", 1))
    edited = hashlib.sha256(cached.read_bytes()).hexdigest()
    assert edited != pinned
    assert data_entries(["eli5-alce-prompt"]) == [{"given": "eli5-alce-prompt", "sha256": edited}]
    assert data_entries(["xor-attriqa-match:fi"]) == [{"given": "xor-attriqa-match:fi", "sha256": None}]  # not read


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


def test_the_scaling_page_says_what_the_budget_changed_and_the_gpu_time_per_operation():
    """The GPU scaling page: each point's CPU seconds per TFLOP shown to three significant figures (a GPU's are
    thousandths), and, per budgeted point, for how many selected tokens CCI's three strongest context tokens (and the
    strongest one) are those of the same point without a budget."""
    text = render_page(RESULTS / "scale_gpu")
    per_operation = text.split("## Time per operation")[1].split("\n## ")[0]
    rates = [float(row.split("|")[-2]) for row in per_operation.splitlines() if row.startswith("| llama")]
    assert rates and min(rates) > 0
    assert "changes no score" not in text and "DIFFERENT" not in text
    assert ("budget 20GB: CCI's three strongest context tokens the same as without a budget for 16 (the strongest one "
            "for 18) of 18 selected answer tokens") in text
    assert "budget 40GB: CCI's three strongest context tokens the same as without a budget, for each of 18" in text


# -- hostile run folders (issue 64) -------------------------------------------------------------------------------------

ELI5 = RESULTS / "eli5_smollm2_selfcitation"


def _eli5_copy(where: Path, **settings) -> Path:
    """A copy of the committed ELI5 run folder (its page removed), with ``settings`` changed in its results."""
    shutil.copytree(ELI5, where, ignore=shutil.ignore_patterns(PAGE))
    res = json.loads((where / "results.json").read_text(encoding="utf-8"))
    res["settings"].update(settings)
    (where / "results.json").write_text(json.dumps(res), encoding="utf-8")
    return where


def test_a_runs_values_are_plain_text_on_its_page(tmp_path):
    """Model and data names, a command, versions and file names from a run folder are quoted as text: no raw HTML,
    no link, no heading, table row or code block of their own, in markdown or in the HTML the docs site makes of it."""
    import markdown

    run = _eli5_copy(tmp_path / "run", model="m\n# fake heading <script>alert(1)</script>",
                     data="d`x <img src=x onerror=alert(2)> & [a](javascript:alert(3)).json")
    command = "mirage score eli5 d\n```\n<script>alert(4)</script>\n```"
    (run / "provenance.json").write_text(json.dumps(
        {"command": command, "data": [{"given": "e\n| injected | row |", "sha256": "<b>5</b>"}]}), encoding="utf-8")
    res = json.loads((run / "results.json").read_text(encoding="utf-8"))
    res["versions"] = {"<i>torch</i>": "2\n## fake"}
    (run / "results.json").write_text(json.dumps(res), encoding="utf-8")
    (run / "<img src=x onerror=alert(6)>.txt").write_text("x", encoding="utf-8")
    (run / "[x](javascript:alert(7))").mkdir()
    text = render_page(run)
    lines = text.split("\n")
    assert lines[2] == "# ELI5 (ALCE): m # fake heading &lt;script>alert(1)&lt;/script>"
    assert not [line for line in lines if line.startswith(("# fake", "## fake", "| injected"))]
    assert f"````bash\n{command}\n````" in text  # a fence longer than any in the command
    assert "| `data` | d\\`x &lt;img src=x onerror=alert(2)> &amp; [a\\]" in text
    site = markdown.markdown(text, extensions=["tables", "pymdownx.superfences"])
    assert "<script" not in site and "<img src=x" not in site and "<b>5" not in site and "<i>torch" not in site
    assert 'href="javascript' not in site and "<h2>fake" not in site and "<td>row" not in site


def test_a_run_folder_takes_no_provenance_from_a_parent_that_did_not_write_it(tmp_path):
    """A stray provenance.json above a run folder (another user's /tmp/provenance.json above /tmp/x/run) decides
    neither the command nor the checksums its page shows."""
    (tmp_path / "provenance.json").write_text(json.dumps(
        {"command": "mirage evil --rm", "data": [{"given": "../shared/data/eli5_alce/eli5_eval_sample.json",
                                                  "sha256": "f" * 64}]}), encoding="utf-8")
    run = _eli5_copy(tmp_path / "x" / "run")
    text = render_page(run)
    assert "mirage evil" not in text and "f" * 64 not in text and "written by the run of" not in text
    assert "not recorded by the run" in text


def test_sweep_points_show_the_command_of_the_sweep_that_wrote_them(tmp_path):
    """The sweep records the folders it wrote in its provenance; each point's page shows the sweep's command."""
    run = tmp_path / "run"
    shutil.copytree(RESULTS / "bias_smollm2_protocol" / "sweep_k", run)
    argv = ["bias", "tests/data/beir_small", "--sweep", "k", "2", "5", "8", "10", "-o", str(run)]
    record_run(run, argv, cwd=tmp_path)
    assert sorted(json.loads((run / "provenance.json").read_text())["folders"]) == ["k10", "k2", "k5", "k8"]
    point = (run / "k2" / PAGE).read_text(encoding="utf-8")
    assert "This folder was written by the run of `../`:" in point
    assert "mirage bias tests/data/beir_small --sweep k 2 5 8 10 -o run" in point


def test_report_follows_no_folder_link(tmp_path):
    """A symbolic link that makes a loop below a run folder (twice, so a walk through it doubles at each level) is
    not followed: `mirage report -r` finishes, and lists the link neither as a run folder nor below one."""
    run = _eli5_copy(tmp_path / "run")
    (run / "x").mkdir()
    (run / "x" / "a").symlink_to(".", target_is_directory=True)
    (run / "x" / "b").symlink_to(".", target_is_directory=True)
    (run / "up").symlink_to("..", target_is_directory=True)
    done = subprocess.run([sys.executable, "-m", "mirage", "report", "-r", str(run)], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("wrote ")] == [f"wrote {run / PAGE}"]
    assert "x/a" not in (run / PAGE).read_text(encoding="utf-8")


def test_a_walk_below_a_run_folder_is_capped(tmp_path, monkeypatch, capsys):
    """Past MAX_FOLDERS folders below it, `mirage report -r` stops with one line naming the folder."""
    monkeypatch.setattr(core, "MAX_FOLDERS", 5)
    run = _eli5_copy(tmp_path / "run")
    for i in range(8):
        (run / "deep" / f"f{i}").mkdir(parents=True)
    assert cli.main(["report", "-r", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"more than 5 folders below {run}" in err and "Traceback" not in err


def test_report_r_names_each_folder_it_cannot_read_and_writes_the_others(tmp_path, capsys):
    """Results or a provenance of an unexpected shape: one line naming the folder's file, the other folders still
    get their pages, and the command fails at the end."""
    tree = tmp_path / "tree"
    bad_results = _eli5_copy(tree / "a")
    (bad_results / "results.json").write_text(json.dumps({"per_seed": 1, "length_bins": [], "settings": "x"}))
    bad_provenance = _eli5_copy(tree / "b")
    (bad_provenance / "provenance.json").write_text("[1, 2]", encoding="utf-8")
    bad_entry = _eli5_copy(tree / "c")
    (bad_entry / "provenance.json").write_text(json.dumps({"command": "x", "data": ["a.json"]}), encoding="utf-8")
    good = _eli5_copy(tree / "d")
    assert cli.main(["report", "-r", str(tree)]) == 2
    err = capsys.readouterr().err
    assert (good / PAGE).is_file() and not (bad_results / PAGE).exists() and not (bad_provenance / PAGE).exists()
    lines = err.strip().split("\n")
    assert f"wrote {good / PAGE}" in lines and "Traceback" not in err
    assert any(f"{bad_results / 'results.json'}" in line for line in lines)
    assert any(f"{bad_provenance / 'provenance.json'}" in line and "list" in line for line in lines)
    assert any(f"{bad_entry / 'provenance.json'}" in line and "data" in line for line in lines)
    assert lines[-1].startswith("mirage: error: 3 folders")
