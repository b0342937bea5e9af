"""``run_bias_study`` and ``mirage bias`` on a model mirage tuned: the questions its record says it was trained on
(``training.questions`` of its ``mirage-adapter.json``) are left out by default, kept with
``--keep-trained-questions``, and the results, the tables and stderr say how many; a base model (no record) keeps
every question. The model is faked (its answers written by hand), so no model runs here."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mirage.bias.protocol import BiasConfig
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult
from mirage.bias.runner import BiasStudy
from mirage.bias.study import run_bias_study, summarize_run
from mirage.cli import main
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.runs.experiment import question_digest

ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"  # three items: xor_bias_rows-1, -3 and -4
TRAINED = "When was the Ikhwan party formed?"  # the question of xor_bias_rows-1
CFG = BiasConfig(k=3, baseline_draws=20)
OTHERS = ("How many sub-divisions are there in North Twenty Four Parganas district of West Bengal?",
          "What is the population of Korpilahti?")  # the questions of xor_bias_rows-3 and -4


def _tuned(folder: Path, questions: list[str]) -> str:
    """A folder with the record mirage writes beside a tuned model, naming the questions it was trained on."""
    folder.mkdir()
    record = {"base_model": "smollm2-135m-instruct", "stage": "sft",
              "training": {"questions": sorted(question_digest(q) for q in questions)}}
    (folder / "mirage-adapter.json").write_text(json.dumps(record), encoding="utf-8")
    return str(folder)


def _model(name: str) -> SimpleNamespace:
    """Enough of a Mirage for the study (its answers come from :func:`_answering`)."""
    return SimpleNamespace(lm=SimpleNamespace(name=name, dtype="torch.float32"), config=MirageConfig())


@pytest.fixture
def answering(monkeypatch):
    """Every generation answers citing document 1, without a model."""
    def generate(self, p):
        return BiasRecord(key=p.key, item_id=p.item.id, mode=p.mode, labels=list(p.labels),
                          relevant=list(p.item.relevant), n_docs=len(p.item.docs), answers=list(p.item.answers),
                          raw_answer="It was then [1].", answer="It was then.", self_citations=[[1]],
                          mirage_citations=[[1]])

    monkeypatch.setattr(BiasStudy, "generate", generate)


def _studied(out: Path) -> list[str]:
    lines = (out / "generations.jsonl").read_text(encoding="utf-8").splitlines()
    return sorted({json.loads(line)["item_id"] for line in lines})


def test_a_study_of_a_tuned_model_leaves_out_its_training_questions(tmp_path, answering, capsys):
    tuned = _tuned(tmp_path / "tuned", [TRAINED, "A question the data does not ask?"])
    out = tmp_path / "study"
    result = run_bias_study(str(ROWS), mirage=_model(tuned), cfg=CFG, output_dir=out)  # its loaded name says
    assert "1 of 3 questions ask a question" in capsys.readouterr().err
    assert _studied(out) == ["xor_bias_rows-3", "xor_bias_rows-4"] and result.n_items == 2
    saved = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert saved["trained_questions_left_out"] == 1 and saved["trained_questions_kept"] is None
    assert "1 more questions of the data are left out" in (out / "tables.md").read_text(encoding="utf-8")
    assert summarize_run(out).trained_questions_left_out == 1  # summarized again, the count stays


def _older(out: Path) -> None:
    """Make a run's results as a study wrote them before it left out a tuned model's training questions: no count."""
    path = out / "results.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    for key in ("trained_questions_left_out", "trained_questions_kept"):
        saved.pop(key, None)
    saved["config"].pop("keep_trained_questions", None)
    path.write_text(json.dumps(saved), encoding="utf-8")


def test_an_older_result_summarized_again_leaves_out_the_training_questions(tmp_path, answering, capsys):
    """A result written before the study left out a tuned model's training questions (it studied every question and
    records no count), summarized again, ends as running the study again would: the trained question's
    generations and items gone, the others summarized, the count recorded and said."""
    tuned = _tuned(tmp_path / "tuned", [TRAINED])
    out = tmp_path / "study"
    cfg = BiasConfig(k=3, baseline_draws=20, keep_trained_questions=True)  # what an older study did
    run_bias_study(str(ROWS), mirage=_model(tuned), cfg=cfg, output_dir=out)
    _older(out)
    assert len(_studied(out)) == 3
    again = tmp_path / "again"
    run_bias_study(str(ROWS), mirage=_model(tuned), cfg=CFG, output_dir=again)  # the study today
    capsys.readouterr()
    result = summarize_run(out)
    assert "1 of 3 questions ask a question" in capsys.readouterr().err
    assert (result.trained_questions_left_out, result.trained_questions_kept) == (1, None)
    assert _studied(out) == ["xor_bias_rows-3", "xor_bias_rows-4"] and result.n_items == 2
    assert [json.loads(line)["id"] for line in (out / "items.jsonl").read_text(encoding="utf-8").splitlines()] == \
        ["xor_bias_rows-3", "xor_bias_rows-4"]
    assert "1 more questions of the data are left out" in (out / "tables.md").read_text(encoding="utf-8")
    rerun = BiasStudyResult.load(again / "results.json")
    assert json.loads(result.to_json())["sources"] == json.loads(rerun.to_json())["sources"]
    assert summarize_run(out).trained_questions_left_out == 1  # summarized once more, the count stays
    assert summarize_run(out, leave_out_trained=False).n_items == 2


def test_an_older_result_of_nothing_but_training_questions_is_refused_unchanged(tmp_path, answering):
    tuned = _tuned(tmp_path / "tuned", [TRAINED, *OTHERS])
    out = tmp_path / "study"
    run_bias_study(str(ROWS), mirage=_model(tuned), cfg=BiasConfig(k=3, baseline_draws=20,
                                                                   keep_trained_questions=True), output_dir=out)
    _older(out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(InputError, match="every one of its 3 questions is one .* was trained on") as err:
        summarize_run(out)
    assert str(out) in str(err.value) and "\n" not in str(err.value)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert summarize_run(out, leave_out_trained=False).n_items == 3


def test_a_protocol_folder_summarized_again_withdraws_a_study_of_training_questions_only(tmp_path, answering):
    """summarize_protocol: each older study of a tuned model loses its training questions; one that had nothing else
    is withdrawn (withdrawn.json), left out of the overview and named there with the reason."""
    from mirage.bias.full_protocol import summarize_protocol, withdrawn

    tuned = _tuned(tmp_path / "tuned", [TRAINED])
    everything = _tuned(tmp_path / "everything", [TRAINED, *OTHERS])
    root = tmp_path / "protocol"
    older = BiasConfig(k=3, baseline_draws=20, keep_trained_questions=True)
    for name, model in (("hai", tuned), ("retrievers/bm25", everything)):
        run_bias_study(str(ROWS), mirage=_model(model), cfg=older, output_dir=root / name)
        _older(root / name)
    rows, gone = summarize_protocol(root, ["hai", "retrievers"])
    assert [(r.study, r.n_items) for r in rows] == [("hai", 2)]
    assert [(w.study, w.n_items) for w in gone] == [("retrievers/bm25", 3)] and withdrawn(root) == gone
    overview = (root / "protocol.md").read_text(encoding="utf-8")
    assert "1 finished result " in overview and "| retrievers/bm25 |" not in overview
    assert ("`retrievers/bm25` (3 questions, " in overview
            and "every question is one the model was trained on" in overview)
    assert [r["study"] for r in json.loads((root / "protocol.json").read_text(encoding="utf-8"))] == ["hai"]


def test_keep_trained_questions_keeps_them_and_says_so(tmp_path, answering, capsys):
    tuned = _tuned(tmp_path / "tuned", [TRAINED])
    out = tmp_path / "study"
    cfg = BiasConfig(k=3, baseline_draws=20, keep_trained_questions=True)
    # an adapter folder loaded onto its base has the base's name: ``tuned`` names the folder
    result = run_bias_study(str(ROWS), mirage=_model("smollm2-135m-instruct+tuned"), cfg=cfg, output_dir=out,
                            tuned=tuned)
    assert "1 of 3 questions ask a question" in capsys.readouterr().err
    assert _studied(out) == ["xor_bias_rows-1", "xor_bias_rows-3", "xor_bias_rows-4"]
    assert (result.trained_questions_kept, result.trained_questions_left_out) == (1, None)
    assert "kept by `--keep-trained-questions`" in (out / "tables.md").read_text(encoding="utf-8")


def test_a_base_model_keeps_every_question(tmp_path, answering):
    out = tmp_path / "study"
    result = run_bias_study(str(ROWS), mirage=_model("smollm2-135m-instruct"), cfg=CFG, output_dir=out)
    assert len(_studied(out)) == 3
    assert (result.trained_questions_left_out, result.trained_questions_kept) == (None, None)
    assert "trained on" not in (out / "tables.md").read_text(encoding="utf-8")


def test_a_study_of_nothing_but_training_questions_is_refused_before_the_model_loads(tmp_path):
    others = ["How many sub-divisions are there in North Twenty Four Parganas district of West Bengal?",
              "What is the population of Korpilahti?"]  # the questions of xor_bias_rows-3 and -4
    tuned = _tuned(tmp_path / "tuned", [TRAINED, *others])

    def load():
        raise AssertionError("the model was loaded")

    with pytest.raises(InputError, match="every one of the 3 questions asks a question .* was trained on"):
        run_bias_study(str(ROWS), mirage=load, cfg=CFG, output_dir=tmp_path / "study", tuned=tuned)
    assert not (tmp_path / "study" / "generations.jsonl").exists()


def test_the_commands_pass_the_model_and_the_flag(tmp_path, monkeypatch):
    """``mirage bias`` gives the study the model as named (``--model``, or ``--adapter``) and
    ``--keep-trained-questions`` as the config's ``keep_trained_questions``; ``mirage bias-protocol`` passes the flag
    on to every study."""
    from mirage.bias import full_protocol, study

    seen = {}
    monkeypatch.setattr(study, "run_bias_study", lambda data, **kwargs: seen.update(kwargs))  # returns None: a rank
    tuned = _tuned(tmp_path / "tuned", [TRAINED])
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "a"), "--model", tuned, "--quiet"]) == 0
    assert seen["tuned"] == tuned and seen["cfg"].keep_trained_questions is False
    assert main(["bias", str(ROWS), "-o", str(tmp_path / "b"), "--model", tuned, "--keep-trained-questions"]) == 0
    assert seen["cfg"].keep_trained_questions is True
    monkeypatch.setattr(full_protocol, "run_protocol", lambda *args, extra, **kwargs: seen.update(extra=extra) or {})
    assert main(["bias-protocol", "-o", str(tmp_path / "p"), "--keep-trained-questions"]) == 0
    assert "--keep-trained-questions" in seen["extra"]
    # the run's page gives the flag back in its command
    result = BiasStudyResult.from_dict(json.loads((Path(__file__).parents[1] / "data" / "bias_run_small" /
                                                   "results.json").read_text(encoding="utf-8")))
    result.config["keep_trained_questions"] = True
    folder = tmp_path / "page"
    folder.mkdir()
    result.save(folder / "results.json")
    assert main(["report", str(folder)]) == 0
    assert "--keep-trained-questions" in (folder / "README.md").read_text(encoding="utf-8")
