"""``mirage score xor-attriqa`` and ``mirage score eli5`` end to end on the embedded smollm2 model and the data slices
in tests/data (see tests/data/README.md), kept small for a shared CPU: resumption, bad rows, results' shape."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mirage import cli
from mirage.runs.experiment import ExperimentConfig
from mirage.scoring.benchmarks import ELI5Options, XorAttriQAOptions, run_eli5
from mirage.scoring.xor_eval import SETTINGS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parents[1] / "data"
XOR_VAL = DATA / "xor_attriqa_match" / "val.jsonl"
ELI5 = DATA / "eli5_alce" / "eli5_eval_sample.json"
ELI5_ARGS = ["--ndocs", "2", "--max-new-tokens", "24"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def no_model(monkeypatch):
    """Fail if anything loads a model: everything must come from the stored per-item outputs."""
    from mirage.pipeline import Mirage

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded although every item was already done")

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(refuse))


@pytest.fixture(scope="module")
def xor_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("xor")
    args = ["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--limit", "2", "-o", str(out)]
    assert cli.main(args) == 0
    return out, args


def test_xor_attriqa_results_shape(xor_run, capsys):
    out, _ = xor_run
    res = json.loads((out / "results.json").read_text())
    langs = ["ja", "fi"]  # the first two rows of the slice
    for metric in ("agreement", "precision", "recall", "f1", "balanced_accuracy", "roc_auc"):
        assert set(SETTINGS) <= set(res[metric]), metric
        for setting in SETTINGS:
            assert list(res[metric][setting]) == [*langs, "avg"]
            for value in res[metric][setting].values():
                hi = 1.0 if metric == "roc_auc" else 100.0
                assert value is None or 0.0 <= value <= hi
    assert res["counts"]["all"] == {"items": 2, "pairs": 3, "supporting": 2}
    # cite-none agrees exactly on the unsupported pairs: 1 of 2 in ja, 0 of 1 in fi
    assert res["agreement"]["cite_none"] == {"ja": 50.0, "fi": 0.0, "avg": 25.0}
    assert res["sweep"]["percents"][0] == 3 and res["sweep"]["percents"][-1] == 100
    assert len(res["sweep"]["agreement"]["ex"]["avg"]) == len(res["sweep"]["percents"])
    assert len(res["sweep"]["agreement"]["cal"]["avg"]) == len(res["sweep"]["percents"])
    assert set(res["calibration"]["thresholds"]) == {"top3", "top5pct"}
    assert res["bad_rows"]["count"] == 0
    assert res["settings"]["model"] == "smollm2-135m-instruct" and res["settings"]["text"] == "en"
    assert res["settings"]["config"]["prompt"]["name"] == "standard"
    assert (out / "sweep.png").stat().st_size > 1000
    records = _lines(out / "scores.jsonl")
    scores = [r for r in records if "cti" in r]  # one item record each; CCI rows and passage signals beside them
    assert len(scores) == 2 and all(len(s["cti"]) == len(s["tokens"]) for s in scores)
    assert {r["item"] for r in records if "token" in r} <= {s["key"] for s in scores}
    assert res["roc_auc"]["learned"]["avg"] is None or 0.0 <= res["roc_auc"]["learned"]["avg"] <= 1.0
    assert res["roc_auc"]["passage_score"] and (out / "learned.json").exists()


def test_xor_attriqa_resumes_without_duplicates(xor_run, no_model, capsys):
    out, args = xor_run
    before = (out / "scores.jsonl").read_text()
    assert cli.main(args) == 0
    assert (out / "scores.jsonl").read_text() == before
    keys = [s["key"] for s in _lines(out / "scores.jsonl")]
    assert len(keys) == len(set(keys)) and sum(1 for s in _lines(out / "scores.jsonl") if "cti" in s) == 2
    assert "Agreement with human labels" in capsys.readouterr().out


def test_xor_attriqa_reports_and_counts_bad_rows(xor_run, no_model, tmp_path, capsys):
    out, _ = xor_run
    rows = XOR_VAL.read_text().splitlines()
    good = json.loads(rows[0])
    path = tmp_path / "val.jsonl"
    path.write_text("\n".join([
        "{not json",
        json.dumps({**good, "split_passages_en": good["split_passages_en"][:1]}),  # 1 passage for 2 labels
        json.dumps({**good, "prediction_en": ""}),  # empty answer
        json.dumps({k: v for k, v in good.items() if k != "ais"}),  # missing labels
        rows[0],  # already scored in xor_run: no model needed
    ]) + "\n")
    assert cli.main(["score", "xor-attriqa", str(path), "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["bad_rows"]["count"] == 4
    assert [r["line"] for r in res["bad_rows"]["rows"]] == [1, 2, 3, 4]
    assert res["counts"]["all"]["items"] == 1
    err = capsys.readouterr().err
    assert f"{path}:2: 'split_passages_en' has 1 passages for 2 'ais' labels" in err
    assert "'ais' is missing" in err


def test_xor_attriqa_refuses_a_directory_of_another_run(xor_run, capsys):
    out, _ = xor_run
    assert cli.main(["score", "xor-attriqa", str(XOR_VAL), "--prompt", "selfcitation", "-o", str(out)]) == 2
    assert "another run" in capsys.readouterr().err


def test_the_python_api_runs_the_commands_prompt_and_scripts_read_it_from_the_run(xor_run, tmp_path):
    """``run_xor_attriqa`` with the experiment ``ExperimentConfig.from_dict`` gives (no pipeline section) runs the
    pipeline ``mirage score xor-attriqa`` runs (the "standard" prompt), so it resumes the command's run without
    computing anything; scripts that add rows to a stored run
    (benchmarks/learned_features.py --fill, cci_methods.py) take its pipeline from the run's run.json."""
    import shutil

    from mirage.config import ConfigError
    from mirage.scoring.benchmarks import run_xor_attriqa, stored_xor_pipeline
    from mirage.scoring.xor_attriqa import xor_attriqa_pipeline

    out, _ = xor_run

    def no_model():
        raise AssertionError("everything was stored: the model must not be needed")

    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct", "limit": 2,
                                             "data": {"eval": str(XOR_VAL), "calibrate_on": str(XOR_VAL)}},
                                            command="xor-attriqa")
    report = run_xor_attriqa(experiment, XorAttriQAOptions(output=str(out)), mirage=no_model)
    assert report is not None and report.counts["all"]["items"] == 2
    assert xor_attriqa_pipeline().prompt.name == "standard"
    stored = stored_xor_pipeline(out / "scores.jsonl", "smollm2-135m-instruct")
    assert stored.prompt.name == "standard" and stored == xor_attriqa_pipeline()
    with pytest.raises(ConfigError, match="model: 'smollm2-135m-instruct' there, 'gemma3-270m' now"):
        stored_xor_pipeline(out / "scores.jsonl", "gemma3-270m")
    other = tmp_path / "run"
    other.mkdir()
    run = json.loads((out / "run.json").read_text())
    (other / "run.json").write_text(json.dumps({**run, "template": "0" * 16}))  # the template's text changed since
    with pytest.raises(ConfigError, match="template"):
        stored_xor_pipeline(other / "scores.jsonl.gz", "smollm2-135m-instruct")
    shutil.rmtree(other)
    assert stored_xor_pipeline(other / "scores.jsonl", "any-model") == xor_attriqa_pipeline()  # no run.json


@pytest.fixture(scope="module")
def eli5_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("eli5")
    args = ["score", "eli5", str(ELI5), "--limit", "1", *ELI5_ARGS, "-o", str(out)]
    assert cli.main(args) == 0
    return out, args


def test_eli5_results_shape_and_resume(eli5_run, no_model, capsys):
    out, args = eli5_run
    res = json.loads((out / "results.json").read_text())
    for source in ("self", "mirage"):
        block = res["mean"][source]
        assert block["answers"] == 1 and block["sentences"] >= 1
        assert 0 <= block["no_citation_sentences_pct"] <= 100
        assert block["no_citation_answers_pct"] in (0.0, 100.0)
    agreement = res["mean"]["agreement"]
    assert set(agreement) >= {"neither", "only_a", "only_b", "both", "both_same_set", "both_pair_agreement"}
    assert agreement["neither"] + agreement["only_a"] + agreement["only_b"] + agreement["both"] == \
        res["mean"]["self"]["sentences"]
    assert list(res["per_seed"]) == ["42"] and res["judge"] is None
    assert res["settings"]["ndocs"] == 2 and res["settings"]["config"]["prompt"]["name"] == "selfcitation"
    answer = _lines(out / "answers.jsonl")[0]["result"]
    assert len(answer["docs"]) == 2 and answer["generated"]
    assert (out / "length_bins.png").exists()
    assert cli.main(args) == 0  # resumes: nothing left to do, no model loaded
    assert len(_lines(out / "answers.jsonl")) == 1
    assert "self-citation" in capsys.readouterr().out


def test_eli5_reports_and_counts_bad_rows(eli5_run, no_model, tmp_path, capsys):
    out, _ = eli5_run
    items = json.loads(ELI5.read_text())
    path = tmp_path / "eli5.json"
    path.write_text(json.dumps([items[0], {"question": "no documents"},
                                {"question": "bad document", "docs": [{"title": "t", "text": ""}]}], indent=1))
    assert cli.main(["score", "eli5", str(path), *ELI5_ARGS, "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["bad_rows"]["count"] == 2
    lines = [r["line"] for r in res["bad_rows"]["rows"]]
    text = path.read_text().splitlines()
    assert all(text[line - 1].strip() == "{" for line in lines)  # the line where each bad row starts
    assert "field 'docs' is missing" in capsys.readouterr().err
    assert res["mean"]["self"]["answers"] == 1


def test_eli5_with_an_nli_judge_scores_citation_quality(eli5_run, no_model):
    out, _ = eli5_run

    class Everything:
        name = "entails-everything"

        def entails(self, premise, hypothesis):
            return True

    from mirage.config import MirageConfig

    cfg = MirageConfig().replace(generation={"max_new_tokens": 24})
    experiment = ExperimentConfig("eli5", model="smollm2-135m-instruct", data=(str(ELI5),), limit=1, pipeline=cfg)
    report = run_eli5(experiment, ELI5Options(output=str(out), ndocs=2), judge=Everything())
    mirage, self_ = report.mean["mirage"], report.mean["self"]
    # Every cited sentence is supported and every citation precise; uncited sentences count against recall.
    assert mirage["citation_precision"] == (100.0 if mirage["citations_per_sentence"] else 0.0)
    assert mirage["citation_recall"] == pytest.approx(100 - mirage["no_citation_sentences_pct"])
    assert self_["citation_recall"] == pytest.approx(100 - self_["no_citation_sentences_pct"])
    assert (out / "judgments-entails-everything.jsonl").exists()
    assert "citation_recall" in report.length_bins


def test_experiment_config_file_gives_the_defaults(monkeypatch, capsys, data_dir):
    """configs/xor_attriqa_cora_mgen.yaml: model, text, data and calibration split (named datasets, read from the data
    cache) come from the file; flags win."""
    from mirage.data import resolve_all
    from mirage.scoring import benchmarks

    seen = {}

    def fake_run(experiment, options, **kwargs):
        seen.update(kwargs, experiment=experiment, options=options)
        raise SystemExit(0)

    monkeypatch.setattr(benchmarks, "run_xor_attriqa", fake_run)
    config = Path(__file__).resolve().parents[2] / "configs" / "xor_attriqa_cora_mgen.yaml"
    with pytest.raises(SystemExit):
        cli.main(["score", "xor-attriqa", "--config", str(config), "-o", "unused"])
    exp = seen["experiment"]
    assert exp.model == "gsarti/cora_mgen" and exp.text == "native" and seen["options"].output == "unused"
    assert [Path(p).name for p in resolve_all(exp.data)] == ["fi.jsonl", "ru.jsonl"]
    assert Path(resolve_all(exp.calibrate_on)[0]).name == "val.jsonl"
    assert exp.pipeline.prompt.name == "cora_mgen" and exp.pipeline.prompt.chat_template is False
    with pytest.raises(SystemExit):
        cli.main(["score", "xor-attriqa", str(XOR_VAL), "--config", str(config), "--model", "smollm2-135m-instruct",
                  "--text", "en", "--prompt", "standard", "-o", "unused"])
    exp = seen["experiment"]
    assert exp.model == "smollm2-135m-instruct" and exp.text == "en"
    assert exp.data == (str(XOR_VAL),) and exp.pipeline.prompt.name == "standard"


def test_hf_nli_judges_load_from_a_path(tiny_judges):
    from mirage.scoring.nli import HFNLIJudge

    for path in tiny_judges.values():
        judge = HFNLIJudge.from_pretrained(str(path), device="cpu")
        assert judge.entails("Cats purr.", "Cats make sounds.") in (True, False)
        assert judge.name == str(path)


def test_eli5_nli_flag_scores_with_the_judge(eli5_run, no_model, tiny_judges, capsys):
    out, _ = eli5_run
    judge = str(tiny_judges["bert"])
    assert cli.main(["score", "eli5", str(ELI5), "--limit", "1", *ELI5_ARGS, "--nli", judge, "-o", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["judge"] == judge
    for source in ("self", "mirage"):
        assert 0 <= res["mean"][source]["citation_recall"] <= 100
    assert "ALCE citation recall" in capsys.readouterr().out


def test_eli5_faithfulness_is_scored_per_method_and_resumed(eli5_run, tmp_path, capsys):
    import shutil

    from mirage.scoring.faithfulness import METHODS

    src, args = eli5_run
    out = tmp_path / "eli5-faith"
    shutil.copytree(src, out)  # the attributed answers are reused: only the faithfulness check runs
    run = [*args[:-1], str(out), "--faithfulness"]
    assert cli.main(run) == 0
    res = json.loads((out / "results.json").read_text())
    summary = res["faithfulness"]
    assert summary["n_results"] == 1 and summary["n_sentences"] >= 1
    assert set(summary["methods"]) == set(METHODS)
    assert all(m["n_sentences"] + m["n_empty"] == summary["n_sentences"] for m in summary["methods"].values())
    assert "drop" in capsys.readouterr().out
    first = (out / "faithfulness.jsonl").read_text()
    assert cli.main(run) == 0  # resumed: no answer checked twice
    assert (out / "faithfulness.jsonl").read_text() == first


def test_a_tuned_models_training_questions_are_left_out_and_counted(xor_run, no_model, monkeypatch, tmp_path,
                                                                     capsys):
    """The model's record names the first row's question: that test row is left out (the calibration rows are
    not), results.json's settings say so, and --keep-trained-questions keeps it, the page's command saying so; the
    scores come from the run's store."""
    import shutil

    from mirage.attribution import models
    from mirage.runs.experiment import question_digest
    from mirage.scoring.xor_data import load_xor_attriqa

    out, args = xor_run
    first = question_digest(load_xor_attriqa(XOR_VAL, limit=1).items[0].question)
    monkeypatch.setattr(models, "tuned_record", lambda model, **_: {"training": {"questions": [first]}}
                        if model == "smollm2-135m-instruct" else None)
    left, kept = tmp_path / "left", tmp_path / "kept"
    for copy in (left, kept):
        shutil.copytree(out, copy)
        (copy / "results.json").unlink()
    capsys.readouterr()
    assert cli.main([*args[:-1], str(left)]) == 0
    res = json.loads((left / "results.json").read_text())
    assert res["settings"]["trained_questions_left_out"] == 1 and res["counts"]["all"]["items"] == 1
    assert "1 of 2 test rows ask a question smollm2-135m-instruct was trained on" in capsys.readouterr().err
    assert cli.main([*args[:-1], str(kept), "--keep-trained-questions"]) == 0
    res = json.loads((kept / "results.json").read_text())
    assert res["settings"]["trained_questions_kept"] == 1 and res["counts"]["all"]["items"] == 2
    (kept / "provenance.json").unlink(missing_ok=True)  # the page's command rebuilt from the results
    assert cli.main(["report", str(kept)]) == 0
    page = (kept / "README.md").read_text()
    assert "--keep-trained-questions" in page and "trained_questions_kept" in page


def test_xor_attriqa_faithfulness(xor_run, tmp_path):
    import shutil

    from mirage.scoring.faithfulness import METHODS

    src, args = xor_run
    out = tmp_path / "xor-faith"
    shutil.copytree(src, out)
    assert cli.main([*args[:-1], str(out), "--faithfulness"]) == 0
    summary = json.loads((out / "results.json").read_text())["faithfulness"]
    assert summary["n_results"] == 2 and set(summary["methods"]) == set(METHODS)
    assert len(_lines(out / "faithfulness.jsonl")) == 2


def test_the_documented_benchmark_command_reads_dataset_names_of_several_parts(data_dir, tmp_path, capsys,
                                                                              monkeypatch, tiny_causal):
    """docs/benchmarks.md's EX / CAL command, as written there with ``-o DIR`` in a temporary folder and ``--limit 1``
    added (one row of each part): ``xor-attriqa-match:fi,ru`` and ``--calibrate-on xor-attriqa-match:train,val``
    read each part's file (they stopped at "…/_views/xor-attriqa-match=fi,ru is a directory", leaving run.json
    behind), and the results name each part. The tiny in-memory model stands in for smollm2 (the command's data
    handling is under test, and the real model's default settings take minutes per row on a shared CPU here)."""
    import re
    import shlex

    from mirage.pipeline import Mirage

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(lambda cls, *a, config=None, **k: cls(
        tiny_causal, config=config)))

    text = (Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    block = re.findall(r"```bash\n(.*?)\n```", text, flags=re.DOTALL)[0].replace("\\\n", " ")
    line = next(c for c in block.splitlines() if "# the paper's EX / CAL settings" in c)
    argv = shlex.split(line.split("#")[0])
    assert argv[:3] == ["mirage", "score", "xor-attriqa"] and "DIR" in argv
    out = tmp_path / "run"
    argv = [str(out) if a == "DIR" else a for a in argv[1:]] + ["--limit", "1"]
    assert cli.main(argv) == 0, capsys.readouterr().err
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["settings"]["data"] == ["xor-attriqa-match:fi", "xor-attriqa-match:ru"]
    assert res["settings"]["calibrate_on"] == ["xor-attriqa-match:train", "xor-attriqa-match:val"]
    assert set(res["f1"]["ex_top3"]) == {"fi", "ru", "avg"}


def test_bad_data_leaves_no_run_folder_behind(tmp_path, capsys):
    """A data file that cannot be read stops the command before the run folder is claimed (no run.json)."""
    out, bad = tmp_path / "run", tmp_path / "bad.jsonl"
    bad.write_bytes(b"\xff\xfe not UTF-8\n")
    assert cli.main(["score", "xor-attriqa", str(bad), "-o", str(out)]) != 0
    assert "UTF-8" in capsys.readouterr().err
    assert not (out / "run.json").exists()


def test_a_limit_that_cuts_the_calibration_files_is_said_and_a_tiny_calibration_set_warned_of(
        tmp_path, capsys, monkeypatch, tiny_causal):
    """``--limit`` keeps the first N rows of the calibration files too: the run says what it calibrated on, warns
    when that is too few to mean anything, and records the calibration set's size (the tiny in-memory model stands
    in for smollm2: only the data handling is under test)."""
    from mirage.pipeline import Mirage
    from mirage.scoring.benchmarks import MIN_CALIBRATION

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(lambda cls, *a, config=None, **k: cls(
        tiny_causal, config=config)))
    out = tmp_path / "run"
    assert cli.main(["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--limit", "2",
                     "--settings", "ex", "cal", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert ("mirage: warning: calibrating on 2 answers, " in err and f"fewer than {MIN_CALIBRATION} of each" in err
            and "--limit cuts each calibration file too" in err)
    size = json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["calibration_size"]
    assert size["answers"] == 2 and 0 <= size["supporting"] <= size["passages"]


def test_skip_reads_a_later_slice_of_the_data_and_never_of_the_calibration_files(tmp_path, capsys, monkeypatch,
                                                                                  tiny_causal):
    """``--skip 2 --limit 2`` scores rows 3-4 of the data (a confirming half after choosing on the first rows) and
    calibrates on the first 2 rows of the calibration file, as ``--limit 2`` alone does; the results record it and
    the page's command gives it back (the tiny in-memory model stands in for smollm2: only the rows are under
    test)."""
    from mirage.pipeline import Mirage
    from mirage.scoring.xor_data import load_xor_attriqa

    monkeypatch.setattr(Mirage, "from_pretrained", classmethod(lambda cls, *a, config=None, **k: cls(
        tiny_causal, config=config)))
    out = tmp_path / "run"
    assert cli.main(["score", "xor-attriqa", str(XOR_VAL), "--calibrate-on", str(XOR_VAL), "--skip", "2", "--limit",
                     "2", "--settings", "ex", "cal", "-o", str(out)]) == 0
    rows = load_xor_attriqa(XOR_VAL, limit=4).items
    assert [i.key for i in load_xor_attriqa(XOR_VAL, skip=2, limit=2).items] == [i.key for i in rows[2:]]
    res = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert res["settings"]["skip"] == 2 and res["settings"]["limit"] == 2
    assert res["counts"]["all"]["items"] == 2 and res["settings"]["calibration_size"]["answers"] == 2
    scored = {r["key"] for r in _lines(out / "scores.jsonl") if "cti" in r}
    assert scored == {i.key for i in rows}  # rows 1-2 for calibration, rows 3-4 scored
    assert "--skip 2 --limit 2" in (out / "README.md").read_text(encoding="utf-8")
    with pytest.raises(SystemExit):
        cli.main(["score", "xor-attriqa", str(XOR_VAL), "--skip", "-1", "-o", str(tmp_path / "bad")])
    assert "--skip" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_without_calibration_files_the_default_computes_no_passage_signal(tmp_path, capsys):
    """The passage-likelihood classifier is fitted on the calibration files: without ``--calibrate-on`` the default
    scorer computes no passage signal (a pass per passage) that no row would use, and says that the classifier was
    not run, as it says for MIRAGE-CAL."""
    out = tmp_path / "run"
    assert cli.main(["score", "xor-attriqa", str(XOR_VAL), "--limit", "1", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    res = json.loads((out / "results.json").read_text())
    assert res["settings"]["signals"] is False and "likelihood" in res["settings"]["groups"]
    assert "passage_score" not in res["roc_auc"] and "learned" not in res["agreement"]
    assert "Passage-likelihood classifier: not run (no --calibrate-on" in printed
    assert "MIRAGE-CAL: not run (no --calibrate-on)." in printed


@pytest.mark.parametrize("task", ["eli5", "xor-attriqa"])
def test_score_with_no_usable_row_fails_and_says_where_the_row_errors_are(capsys, tmp_path, task):
    data = tmp_path / "rows.jsonl"
    data.write_text('{"question": 3}\n[1, 2]\nnot json\n', encoding="utf-8")
    out = tmp_path / "run"
    assert cli.main(["score", task, str(data), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mirage: error: ") and "no row could be scored (3 bad row(s)" in err[-1]
    assert str(out / "errors.jsonl") in err[-1] and not any("Traceback" in line for line in err)
    assert not (out / "results.json").exists()  # no report of nulls
    rows = [json.loads(line) for line in (out / "errors.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 3] and all(r["file"] == str(data) and r["error"] for r in rows)


def test_eli5_table_counts_uncited_sentences_and_labels_old_results_for_what_they_measured():
    from dataclasses import asdict

    from mirage.scoring.eli5 import ELI5Report
    from mirage.scoring.metrics import citation_set_agreement
    from mirage.scoring.tables import eli5_table

    shipped = ROOT / "benchmarks" / "results" / "eli5_smollm2_selfcitation" / "results.json"
    report = ELI5Report.from_dict(json.loads(shipped.read_text(encoding="utf-8")))
    # results written before the split: their figures counted uncited sentences as agreeing, and say so now
    old = eli5_table(report)
    assert re.search(r"pairs agreeing, uncited sentences included \(%\) +87.7", old)
    assert "\n(sentence, document) pairs agreeing (%)" not in old
    # self-citation cites nothing, MIRAGE cites one sentence of three: counts, and no agreement figure
    agreement = asdict(citation_set_agreement([[], [], []], [[2], [], []], [3, 3, 3]))
    report.mean["agreement"], report.std["agreement"] = agreement, {k: None for k in agreement}
    table = eli5_table(report)
    assert re.search(r"sentences neither cites +2\n", table) and re.search(r"sentences only MIRAGE cites +1\n", table)
    assert re.search(r"of those both cite: \(sentence, document\) pairs agreeing \(%\) +-$", table, re.MULTILINE)
    assert "uncited sentences counted as agreeing" not in table
