"""``mirage bias-protocol``: the studies of a protocol file run into their own folders, each taking the generations
it shares with the studies before it (on the embedded model, two XOR-AttriQA-derived items, 8 new tokens), the
overview table, resuming, and the protocol file's errors. The shipped protocol file is checked without a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage.bias.cli import check_protocol_study
from mirage.bias.full_protocol import (
    OverviewRow,
    StudyPlan,
    generation_files,
    load_protocol,
    overview_rows,
    overview_table,
    run_protocol,
    study_argv,
)
from mirage.bias.protocol import BIAS_CONFIG_DIR
from mirage.cli import main
from mirage.config import ConfigError

ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"
SMALL = ["--ndocs", "3", "--max-doc-words", "25", "--max-new-tokens", "8"]


def _study(folder: Path, name: str, metadata: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(f"model: smollm2-135m-instruct\ndata: {ROWS}\nbias:\n  metadata: {metadata}\n"
                    "  modes: [vanilla, informed]\n")
    return path


def _protocol(folder: Path, text: str) -> Path:
    path = folder / "protocol.yaml"
    path.write_text(text)
    return path


def test_the_shipped_protocol_names_every_study_config():
    studies = load_protocol(BIAS_CONFIG_DIR / "protocol.yaml")
    assert [s.name for s in studies] == ["hai", "gender", "race", "mixed_grid", "names", "retrievers", "explain",
                                         "sweep_k", "rage"]
    assert studies[6].args == ("--explain",) and studies[6].config == studies[0].config
    assert {s.config.name for s in studies} == {p.name for p in (BIAS_CONFIG_DIR / "studies").glob("*.yaml")} - {
        "external_answers.yaml"}  # answers generated elsewhere need a file the protocol cannot have
    plans = {s.name: check_protocol_study(s, study_argv(s, Path("out"), [])) for s in studies}  # no model: flags only
    assert {n: p.reuses for n, p in plans.items()} == {**dict.fromkeys(plans, True), "retrievers": False}
    assert all(p.own_reuse == () for p in plans.values())  # --retriever (in its config) cannot take --reuse


def test_a_studys_flags_are_checked_as_mirage_bias_parses_them(tmp_path):
    _study(tmp_path, "hai", "hai")

    def check(*args: str, config: str = "hai.yaml"):
        study = load_protocol(_protocol(tmp_path, f"studies:\n  - {{name: s, config: {config}, "
                                                  f"args: {json.dumps(list(args))}}}\n"))[0]
        return check_protocol_study(study, study_argv(study, tmp_path / "out", ["--limit", "2"]))

    assert check("--metadata", "race") == StudyPlan(reuses=True)
    # the flag forms argparse takes: = and abbreviations; per retriever or on outside answers, no --reuse
    for args in (["--retriever=bm25"], ["--retr", "bm25"], ["--answers", "a.jsonl"], ["--write"]):
        assert check(*args).reuses is False, args
    (tmp_path / "own.yaml").write_text("bias:\n  metadata: gender\n  reuse: [runs/old_hai]\n")
    assert check(config="own.yaml") == StudyPlan(reuses=True, own_reuse=("runs/old_hai",))  # kept beside the protocol's
    for args in (["-o", "x"], ["-ox"], ["--out", "x"], ["--outp=x"], ["--conf", "hai.yaml"], ["--reuse-f", "x"],
                 ["--reuse", "x"]):
        with pytest.raises(ConfigError, match=r"protocol study 's' .*its args may not set the output folder"):
            check(*args)
    with pytest.raises(ConfigError, match="protocol study 's' .*unrecognized arguments: --metadta"):
        check("--metadta", "race")
    with pytest.raises(ConfigError, match="protocol study 's' .*argument --ndocs: .*'many'"):
        check("--ndocs", "many")


@pytest.mark.slow
def test_studies_share_generations_and_the_overview_gathers_them(tmp_path, monkeypatch, capsys, one_thread):
    from mirage.bias.runner import BiasStudy

    generated = []
    real = BiasStudy.generate

    def counting(self, planned):
        generated.append((planned.item.id, planned.mode, tuple(planned.labels)))
        return real(self, planned)

    monkeypatch.setattr(BiasStudy, "generate", counting)
    _study(tmp_path, "hai", "hai")  # named relative to the protocol file below; gender by its absolute path
    gender = _study(tmp_path, "gender", "gender")
    small = json.dumps(SMALL)
    protocol = _protocol(tmp_path, f"studies:\n  - {{name: hai, config: hai.yaml, args: {small}}}\n"
                                   f"  - {{name: gender, config: {gender}, args: {small}}}\n")
    out = tmp_path / "run"
    assert main(["bias-protocol", str(protocol), "-o", str(out), "--limit", "2", "--quiet"]) == 0
    # hai: 2 items × 2 modes; gender: only its informed mode, its vanilla one is hai's
    assert sorted(m for _i, m, _l in generated) == ["informed"] * 4 + ["vanilla"] * 2
    assert sum(1 for _i, m, labels in generated if {"a man", "a woman"} & set(labels)) == 2
    records = {name: [json.loads(line) for line in (out / name / "generations.jsonl").read_text().splitlines()]
               for name in ("hai", "gender")}
    vanilla = {r["key"]: r for r in records["hai"] if r["mode"] == "vanilla"}
    assert [r for r in records["gender"] if r["mode"] == "vanilla"] == list(vanilla.values())
    rows = overview_rows(out)  # by folder name
    assert [(r.study, r.metadata, r.k, r.n_items) for r in rows] == [("gender", "gender", 3, 2), ("hai", "hai", 3, 2)]
    assert [r.study for r in overview_rows(out, ["hai", "gender"])] == ["hai", "gender"]  # the protocol's order
    table = (out / "protocol.md").read_text()
    assert table.index("| hai | hai | 3 | 2 |") < table.index("| gender | gender | 3 | 2 |")  # as the file runs them
    assert table.count("| hai | hai | 3 | 2 |") == 2 and table.count("| gender | gender | 3 | 2 |") == 2
    saved = json.loads((out / "protocol.json").read_text())
    assert saved == [r.to_dict() for r in overview_rows(out, ["hai", "gender"])]
    assert [OverviewRow.from_dict(r) for r in saved] == overview_rows(out, ["hai", "gender"])  # loads back
    assert set(saved[0]["figures"]) == {"self", "mirage"}
    assert saved[1]["figures"]["mirage"]["precision_vanilla"] is not None

    generated.clear()  # a re-run resumes (float32 named, as on a GPU): nothing left to generate, the same overview
    assert main(["bias-protocol", str(protocol), "-o", str(out), "--limit", "2", "--quiet", "--only", "gender",
                 "--device", "cpu", "--dtype", "float32"]) == 0
    assert generated == [] and (out / "protocol.md").read_text() == table
    capsys.readouterr()
    # another dtype reaches every study: its generations would differ, so the study refuses to mix them in
    assert main(["bias-protocol", str(protocol), "-o", str(out), "--limit", "2", "--quiet", "--only", "gender",
                 "--dtype", "bfloat16"]) == 1
    err = capsys.readouterr().err
    assert "--dtype bfloat16" in err and "dtype: None in the file, 'bfloat16' now" in err
    assert generated == [] and "0 of 1 studies finished (gender did not" in err
    assert main(["bias-protocol", str(protocol), "-o", str(out), "--only", "race"]) == 2  # not in the file


def test_overview_only_and_the_protocol_files_errors(tmp_path, capsys, monkeypatch):
    out = tmp_path / "empty"
    assert main(["bias-protocol", "-o", str(out), "--overview-only"]) == 0
    assert "0 finished results" in (out / "protocol.md").read_text()
    assert main(["bias-protocol", str(tmp_path / "nothere.yaml"), "-o", str(out)]) == 2
    assert "nothere.yaml: protocol file not found" in capsys.readouterr().err
    hai = _study(tmp_path, "hai", "hai")
    cases = {
        "studies: {}\n": "must be a list of studies",
        "studies:\n  - {name: a/b, config: hai.yaml}\n": "name must be a folder name",
        "studies:\n  - {name: a, config: hai.yaml}\n  - {name: a, config: hai.yaml}\n": "used twice",
        "studies:\n  - {name: a, config: nothere.yaml}\n": "config nothere.yaml not found",
        "studies:\n  - {name: a, config: hai.yaml, args: --ndocs 3}\n": "args must be a list",
        "studies:\n  - {name: a, config: hai.yaml, seed: 3}\n": "must be a mapping with keys name, config",
    }
    assert hai.is_file()
    for text, message in cases.items():
        with pytest.raises(ConfigError, match=message):
            load_protocol(_protocol(tmp_path, text))
        assert main(["bias-protocol", str(tmp_path / "protocol.yaml"), "-o", str(out)]) == 2
        assert message in capsys.readouterr().err
    # a study whose settings are wrong stops the protocol before anything runs, naming the study
    (tmp_path / "bad.yaml").write_text("bias:\n  metadata: nosuch\n")
    protocol = _protocol(tmp_path, "studies:\n  - {name: a, config: hai.yaml}\n  - {name: b, config: bad.yaml}\n")
    ran = tmp_path / "ran"
    assert main(["bias-protocol", str(protocol), "-o", str(ran)]) == 2
    assert "protocol study 'b' (" in capsys.readouterr().err and not ran.exists()
    # a study refused while it runs (here its data is missing) is reported, and the others still run; no model loads
    (tmp_path / "nodata.yaml").write_text(f"data: {tmp_path / 'absent.jsonl'}\nbias:\n  metadata: hai\n")
    protocol = _protocol(tmp_path, "studies:\n  - {name: a, config: nodata.yaml}\n  - {name: b, config: nodata.yaml}\n")
    assert main(["bias-protocol", str(protocol), "-o", str(ran)]) == 1
    err = capsys.readouterr().err
    assert err.count("absent.jsonl: not an XOR-AttriQA file") == 2 and "0 of 2 studies finished (a, b did not" in err
    assert (ran / "protocol.md").is_file()
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="runs in one process"):
        run_protocol(protocol, ran, run=main, check=check_protocol_study)


def test_generation_files_take_sweep_points_and_skip_rank_files(tmp_path):
    for rel in ("generations.jsonl", "k2/generations.jsonl", "k5/generations.jsonl",
                "k8/generations.rank0-of-2.jsonl", "bm25/generations.jsonl"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    assert [p.relative_to(tmp_path).as_posix() for p in generation_files(tmp_path)] == [
        "bm25/generations.jsonl", "generations.jsonl", "k2/generations.jsonl", "k5/generations.jsonl"]
    assert generation_files(tmp_path / "absent") == []
    # a study folder that is a link (a run made elsewhere), and a sweep point linked inside one; a link back up is
    # walked once
    elsewhere = tmp_path.parent / f"{tmp_path.name}_elsewhere"
    for rel in ("run/k10", "point"):
        (elsewhere / rel).mkdir(parents=True, exist_ok=True)
        (elsewhere / rel / "generations.jsonl").write_text("")
    (tmp_path / "linked").symlink_to(elsewhere / "run")
    (tmp_path / "k2" / "k10").symlink_to(elsewhere / "point")
    (tmp_path / "k5" / "loop").symlink_to(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in generation_files(tmp_path)] == [
        "bm25/generations.jsonl", "generations.jsonl", "k2/generations.jsonl", "k2/k10/generations.jsonl",
        "k5/generations.jsonl", "linked/k10/generations.jsonl"]


def test_overview_rows_follow_the_protocol_and_sweep_values_and_skip_other_results(tmp_path):
    shipped = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
    for rel in ("zother", "sweep_k/k10", "sweep_k/k2", "hai", "retrievers/dense", "retrievers/bm25"):
        (tmp_path / rel).mkdir(parents=True)
        (tmp_path / rel / "results.json").write_bytes((shipped / "bias_smollm2_hai" / "results.json").read_bytes())
    (tmp_path / "sweep_k" / "sweep.json").write_text("{}")  # a sweep's points sort by value; retrievers by name
    answers_only = json.loads((shipped / "bias_smollm2_hai" / "results.json").read_text())
    del answers_only["sources"]["mirage"]  # answers from elsewhere, no local model: self-citations only
    (tmp_path / "zother" / "results.json").write_text(json.dumps(answers_only))
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "results.json").write_text("[]")  # JSON, but no study's result
    (tmp_path / "xor").mkdir()  # another command's results.json is not a study
    (tmp_path / "xor" / "results.json").write_bytes((shipped / "xor_attriqa_smollm2_en" / "results.json").read_bytes())
    rows = overview_rows(tmp_path, ["hai", "sweep_k", "retrievers"])
    assert [r.study for r in rows] == ["hai", "sweep_k/k2", "sweep_k/k10", "retrievers/bm25", "retrievers/dense",
                                       "zother"]
    assert set(rows[-1].figures) == {"self"} and rows[-1].modes == rows[0].modes
    f = rows[0].figures["mirage"]  # the shipped hai study's figures, as its tables.md gives them
    assert (round(f["precision_vanilla"], 1), round(f["recall_vanilla"], 1)) == (46.1, 67.4)
    # CAS and CAB over the query pairs whose answers do not echo the prompt (CAS 134 of 141, CAB 136)
    assert round(f["cas_precision_informed"], 2) == 18.76 and f["cas_precision_informed_p"] < 0.01
    assert (round(f["cab_precision"], 2), round(f["cab_recall"], 2)) == (-0.31, 1.47)
    assert "| hai | hai | 5 | 141 | mirage | 46.1 / 67.4 | 1.70 | 18.76** | 17.48** | -0.31 | 1.47 | – |" in \
        overview_table(rows)


def test_the_walk_below_a_protocol_folder_is_capped_and_loop_safe(tmp_path, monkeypatch):
    """overview_rows walks the protocol's output folder: a folder link back up is read once, and past the cap the walk
    stops in one line instead of reading on."""
    from mirage.bias import full_protocol
    from mirage.data.inputs import InputError

    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "loop").symlink_to(tmp_path, target_is_directory=True)
    assert full_protocol.overview_rows(tmp_path) == []
    for k in range(5):
        (tmp_path / f"study{k}").mkdir()
    monkeypatch.setattr(full_protocol, "MAX_WALK_FOLDERS", 4)
    with pytest.raises(InputError, match=r"more than 4 folders below"):
        full_protocol.overview_rows(tmp_path)


def test_bias_protocol_given_a_list_says_what_a_protocol_file_is(one_line_error, tmp_path):
    protocol = tmp_path / "protocol.yaml"
    protocol.write_text("- name: hai\n  config: studies/hai.yaml\n", encoding="utf-8")
    line = one_line_error(["bias-protocol", str(protocol), "-o", str(tmp_path / "out")])
    assert "expected a protocol file" in line and "'studies'" in line and "top level is a YAML list" in line
    assert "prompt, generation, cti" not in line  # what a pipeline config holds: another kind of file
