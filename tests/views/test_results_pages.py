"""Results pages (``mirage.views.pages``): every folder of benchmarks/results has the page ``mirage report`` writes from
its results alone; a run writes its page with its command and the SHA-256 of its data; a README.md mirage did not write
is never overwritten. The run test scores two rows of the XOR-AttriQA slice in tests/data on the embedded model."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mirage import cli
from mirage.data.registry import is_spec
from mirage.views.pages import core, page_folders, page_kind, record_run, render_page
from mirage.views.pages.core import MARK, PAGE
from mirage.views.pages.tune import documents_cited

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
XOR_VAL = Path("tests") / "data" / "xor_attriqa_match" / "val.jsonl"  # relative to ROOT, as a user would give it


def test_every_results_folder_has_the_page_mirage_report_writes(tmp_path, data_if_present):
    """``mirage report -r`` over a copy of benchmarks/results rewrites every committed page byte for byte, and every
    folder with results (every top-level folder among them) has one. (A bias study's page finds its ``--limit`` from
    its data, by name from the data cache: the project's data folder imported.)"""
    copy = tmp_path / "results"
    shutil.copytree(RESULTS, copy)
    folders = page_folders(copy)
    top = sorted(p.name for p in copy.iterdir() if p.is_dir())
    assert top and set(top) <= {p.name for p in folders if p.parent == copy}
    missing = [str(p.relative_to(copy)) for p in folders if not (p / PAGE).is_file()]
    assert not missing, ("folders without a committed results page (run `mirage report -r benchmarks/results`): "
                         f"{missing}")
    assert cli.main(["report", "--recursive", str(copy)]) == 0
    differ = [str(p.relative_to(copy)) for p in folders
              if (p / PAGE).read_text(encoding="utf-8")
              != (RESULTS / p.relative_to(copy) / PAGE).read_text(encoding="utf-8")]
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


def test_a_readme_that_is_a_pipe_is_left_alone_never_read(tmp_path):
    """A README.md that is a FIFO is no page mirage wrote: refused in one line (reading it for the mark waited for
    ever; the run is its own process, stopped after two minutes, so that a wait fails instead of hanging)."""
    import os

    run = tmp_path / "eli5"
    shutil.copytree(RESULTS / "eli5_smollm2_selfcitation", run)
    (run / PAGE).unlink()
    os.mkfifo(run / PAGE)
    out = subprocess.run([sys.executable, "-m", "mirage", "report", str(run)], capture_output=True, text=True,
                         check=False, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "not written by mirage" in out.stderr and out.stderr.count("\n") == 1
    assert (run / PAGE).is_fifo()


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


# -- hostile run folders (issue 64) -----------------------------------------------------------------------------------

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


# -- every page's command reproduces its results ----------------------------------------------------------------------


def _page_commands(page_text: str) -> list[list[str]]:
    """The commands in the fenced bash blocks of a page's ``## Command`` section, one per line, shlex-split."""
    section = page_text.split("\n## Command\n", 1)[1].split("\n## ", 1)[0] if "\n## Command\n" in page_text else ""
    blocks = re.findall(r"^```bash\n(.*?)\n```$", section, flags=re.DOTALL | re.MULTILINE)
    return [shlex.split(line) for block in blocks for line in block.splitlines() if line.strip()]


def _data_args(args: argparse.Namespace) -> list[str]:
    return [str(v) for name in ("data", "calibrate_on", "eval") for v in
            (getattr(args, name, None) if isinstance(getattr(args, name, None), list) else [getattr(args, name, None)])
            if v is not None]


def _same_data(given: str, recorded: str, folder: Path | None = None) -> bool:
    """The command's data is what the run read: the same name or path, the dataset name of the run's local copy
    (its files have the SHA-256 the data registry pins), or the name the folder's ``data_names.json`` records for it
    (checked by test_data_names_hold_the_rows_each_run_read)."""
    from mirage.data.registry import is_spec
    from mirage.views.pages.core import data_names, registered_name

    if given == recorded or (folder is not None and data_names(folder).get(recorded) == given):
        return True
    return Path(recorded).exists() and given == registered_name(recorded) and is_spec(given)


def _readable(data: str, folder: Path) -> str:
    """The path a bias study reads for the data its results record: the cached file of the name its folder's
    ``data_names.json`` gives, else the recorded path."""
    from mirage.data import resolve
    from mirage.data.inputs import InputError
    from mirage.views.pages.core import data_names

    name = data_names(folder).get(data)
    try:
        return str(resolve(name)) if name else data
    except InputError:  # not in this data cache
        return data


def _questions(data: str, config: dict, run: Path | None) -> list[str] | None:
    """The ids of the questions a bias study of ``data`` with ``config`` has without a limit; None without the data."""
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items

    if not Path(data).exists():
        return None
    cfg = BiasConfig.from_dict(config)
    return [i.id for i in build_items(data, dataclasses.replace(cfg, docs="retrieved"), run=run)]


def _check_bias(folder: Path, args: argparse.Namespace, argv: list[str]) -> None:
    from mirage.bias.cli import bias_config_from_args
    from mirage.bias.items import read_bias_items
    from mirage.runs.experiment import ExperimentConfig

    res = json.loads((folder / "results.json").read_text())
    exp = ExperimentConfig.from_args(args, command="bias")
    cfg = json.loads(json.dumps(dataclasses.asdict(bias_config_from_args(args))))
    assert exp.model == res["model"] and _same_data(args.data, res["data"], folder)
    for name in ("metadata", "k", "modes", "docs", "rage_similar", "explain", "n_relevant", "seed", "mixed",
                 "max_doc_words", "rewrite", "relevant_side"):
        assert cfg[name] == res["config"][name], name
    recorded = res.get("mirage_config") or {}
    assert exp.pipeline.prompt.name == recorded["prompt"]["name"]
    assert exp.pipeline.generation.max_new_tokens == recorded["generation"]["max_new_tokens"]
    retrievers = folder.parent / "retrievers.json"
    runs = json.loads(retrievers.read_text())["runs"] if retrievers.is_file() else {}
    assert args.retriever == ([runs[folder.name]["retriever"]] if folder.name in runs else None)
    run = folder / "run.trec" if folder.name in runs else None
    every = _questions(_readable(res["data"], folder), res["config"], run)
    left_out = int(res.get("trained_questions_left_out") or 0)  # built by the limit, then left out as trained
    if args.limit is not None:
        ids = [i.id for i in read_bias_items(folder / "items.jsonl")] if (folder / "items.jsonl").is_file() else None
        assert args.limit == res["n_items"] + left_out and (ids is None or len(ids) == res["n_items"])
        assert every is None or ids is None or set(ids) <= set(every[:args.limit]), "the first questions of the data"
    else:
        assert every is None or len(every) == res["n_items"] + left_out, (
            "all questions, or a --limit the page leaves out")


def _check_xor(folder: Path, args: argparse.Namespace, argv: list[str]) -> None:
    from mirage.runs.experiment import ExperimentConfig

    s = json.loads((folder / "results.json").read_text())["settings"]
    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    assert exp.model == s["model"] and exp.text == s.get("text", "en") and exp.limit == s.get("limit")
    assert (exp.skip or 0) == s.get("skip", 0)
    data, cal = list(exp.data), list(exp.calibrate_on or ())
    assert len(data) == len(_strings(s["data"])) and all(map(_same_data, data, _strings(s["data"])))
    assert len(cal) == len(_strings(s.get("calibrate_on"))) and all(
        map(_same_data, cal, _strings(s.get("calibrate_on"))))
    def groups(names: list[str]) -> list[str]:  # "learned" is the old name of "likelihood"
        return sorted("likelihood" if n == "learned" else n for n in names)

    assert groups(args.settings) == groups(s.get("groups") or ["cal", "ex", "likelihood"])
    assert list(args.methods or ()) == list(s.get("methods") or ())
    config = s.get("config") or {}
    assert exp.pipeline.prompt.name == config["prompt"]["name"]
    pipeline = exp.pipeline.to_dict()
    for section in ("cti", "cci", "aggregation"):
        assert pipeline[section] == {**pipeline[section], **config.get(section, {})}, section


def _check_eli5(folder: Path, args: argparse.Namespace, argv: list[str]) -> None:
    from mirage.runs.experiment import ExperimentConfig

    s = json.loads((folder / "results.json").read_text())["settings"]
    exp = ExperimentConfig.from_args(args, command="eli5")
    assert exp.model == s["model"] and exp.limit == s.get("limit") and list(exp.seeds) == s["seeds"]
    assert (exp.skip or 0) == s.get("skip", 0)
    assert len(exp.data) == len(_strings(s["data"])) and all(map(_same_data, exp.data, _strings(s["data"])))


def _check_self_match(folder: Path, args: argparse.Namespace, argv: list[str]) -> None:
    from mirage.runs.experiment import ExperimentConfig

    s = json.loads((folder / "self_match.json").read_text())
    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    assert args.self_match and exp.model == s["model"] and exp.text == s["text"]
    assert list(exp.data) == s["data"] and exp.pipeline.prompt.name == s["prompt"]["name"]


def _check_tune(folder: Path, args: argparse.Namespace, argv: list[str]) -> None:
    if getattr(args, "config", None):  # sft / reward: the run's YAML, kept in the folder
        assert (folder / args.config).is_file()
        return
    records = [json.loads(p.read_text()) for p in folder.glob("*.json")]
    record = next(r for r in records if isinstance(r, dict) and r.get("command")
                  and shlex.split(r["command"])[1:] == argv)
    assert record["model"] == args.model


def _strings(value) -> list[str]:
    return [] if value is None else [str(v) for v in value] if isinstance(value, list) else [str(value)]


CHECKS = {"bias-study": _check_bias, "xor-attriqa": _check_xor, "eli5": _check_eli5, "self-match": _check_self_match,
          "tune": _check_tune}
PAGES_WITH_COMMANDS = sorted(p.parent for p in RESULTS.rglob(PAGE) if _page_commands(p.read_text(encoding="utf-8")))


@pytest.mark.parametrize("folder", PAGES_WITH_COMMANDS, ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_a_pages_command_parses_to_the_settings_its_results_record(folder, data_if_present):
    """Each command a results page prints, parsed by mirage's own parser, asks for what the results record (model,
    data, limit, retriever, k, modes, prompt, seeds, …: the last block where a changed default adds one), and names
    its data by dataset name or by a file of the repository, never a machine's folder (``../shared``) or a file
    of a run's output (``out/``) that a user cannot have."""
    commands = _page_commands((folder / PAGE).read_text(encoding="utf-8"))
    kind = page_kind(folder)
    if kind in ("xor-attriqa", "bias-study"):
        commands = commands[-1:]  # a recorded command and, where a default changed since, the same run today
    for argv in commands:
        assert argv[0] == "mirage"
        args = cli.build_parser(argv[1:]).parse_args(argv[1:])
        for data in _data_args(args):
            assert not Path(data).is_absolute() and ".." not in Path(data).parts, data
            assert is_spec(data) or (ROOT / data).exists() and Path(data).parts[0] != "out", data
        CHECKS[kind](folder, args, argv[1:])


DATA_NAMED = sorted(p.parent for p in RESULTS.rglob(core.DATA_NAMES))


@pytest.mark.parametrize("folder", DATA_NAMED, ids=lambda p: p.relative_to(RESULTS).as_posix())
def test_data_names_hold_the_rows_each_run_read(folder, data_dir):
    """Each ``data_names.json`` (a run's local data file recorded after the run by a dataset name) is true: the
    study of the name builds the questions the run's generations answered, each with its relevant document in the
    same place and the same documents in its prompt (for a run that marked its documents' sentences, once its marks
    are taken out); where the run recorded the file's SHA-256 it is the one the registry pins."""
    from mirage.bias.protocol import BiasConfig
    from mirage.bias.study import build_items
    from mirage.data import resolve
    from mirage.data.fetch import sha256_of
    from mirage.runs.store import read_records

    res = json.loads((folder / "results.json").read_text())
    name = core.data_names(folder)[res["data"]]
    cfg = BiasConfig.from_dict(res["config"])
    items = {i.id: i for i in build_items(str(resolve(name)), dataclasses.replace(cfg, docs="retrieved"))}
    gens = read_records(folder / "generations.jsonl.gz")
    assert gens and {g["item_id"] for g in gens} <= set(items)
    for g in gens:
        item = items[g["item_id"]]
        assert list(item.relevant) == g["relevant"] and item.question[:40] in g["prompt"], g["key"]
        prompt = re.sub(r" \[\d+\]", "", g["prompt"]) if cfg.sentence_mark else g["prompt"]  # the marks written
        assert all(" ".join(d.text.split()[:12]) in " ".join(prompt.split()) for d in item.docs), g["key"]
    if (folder / core.PROVENANCE).is_file():
        recorded = [d.get("sha256") for d in core.read_provenance(folder / core.PROVENANCE).data
                    if d["given"] == res["data"]]
        assert recorded in ([], [None], [sha256_of(resolve(name))])


def test_a_data_name_that_is_not_a_dataset_is_refused_naming_the_file(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RESULTS / "bias_smollm2_base_fi_ru", run)
    (run / core.DATA_NAMES).write_text(json.dumps({"format": 1, "names": {"out/tune/xor_fi_ru.jsonl": "../elsewhere"}}))
    with pytest.raises(core.InputError, match="data_names.json: 'names' must map"):
        core.named_data(run, "out/tune/xor_fi_ru.jsonl")
    (run / core.DATA_NAMES).write_text("[1, 2]")
    with pytest.raises(core.InputError, match="data_names.json"):
        core.data_names(run)
    (run / core.DATA_NAMES).unlink()
    assert core.named_data(run, "out/tune/xor_fi_ru.jsonl") == "out/tune/xor_fi_ru.jsonl"  # no record: as given


def test_hashing_a_data_folder_is_capped(tmp_path, monkeypatch):
    """A data folder's checksum reads its files through no folder link, and stops in one line past the cap."""
    from mirage.data.inputs import InputError
    from mirage.views.pages import core

    (tmp_path / "d").mkdir()
    for k in range(3):
        (tmp_path / "d" / f"{k}.jsonl").write_text("{}\n", encoding="utf-8")
    (tmp_path / "d" / "loop").symlink_to(tmp_path, target_is_directory=True)
    first = core.file_sha256(tmp_path / "d")
    assert first == core.file_sha256(tmp_path / "d")
    monkeypatch.setattr(core, "MAX_HASHED_FILES", 2)
    with pytest.raises(InputError, match=r"holds more than 2 files"):
        core.file_sha256(tmp_path / "d")
