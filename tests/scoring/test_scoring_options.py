"""The benchmark runners' options: plain frozen dataclasses that round-trip through JSON and are checked on
construction; a runner refuses an experiment of another command before it reads or writes anything (no model)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from mirage.config import ConfigError
from mirage.runs.experiment import ExperimentConfig
from mirage.scoring.benchmarks import ELI5Options, XorAttriQAOptions, run_eli5, run_xor_attriqa


@pytest.mark.parametrize("options", [
    XorAttriQAOptions(output="out"),
    XorAttriQAOptions(output="out", calibrate_by="language", nli_dir="nli", faithfulness=True, all_tokens=True,
                      signals=False, groups=["likelihood"], batch_items=8, group_passages=True, self_match=True),
    ELI5Options(output="out"),
    ELI5Options(output="out", ndocs=None, at_most=2, faithfulness=True),
])
def test_options_round_trip_through_json(options):
    data = json.loads(json.dumps(dataclasses.asdict(options)))
    assert type(options)(**data) == options
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.output = "elsewhere"


def test_options_are_checked_on_construction(tmp_path):
    assert XorAttriQAOptions(output=tmp_path).output == str(tmp_path)  # a path becomes its string
    assert XorAttriQAOptions(output="o", groups="ex").groups == ("ex",)
    for bad, field in (({"output": ""}, "output"), ({"output": "o", "calibrate_by": "lang"}, "calibrate_by"),
                       ({"output": "o", "batch_items": 0}, "batch_items"), ({"output": "o", "groups": [1]}, "groups"),
                       ({"output": "o", "nli_dir": 3}, "nli_dir")):
        with pytest.raises(ConfigError, match=field):
            XorAttriQAOptions(**bad)
    with pytest.raises(ConfigError, match="at_most"):
        ELI5Options(output="o", at_most=0)


def test_a_runner_refuses_another_commands_experiment(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match="xor-attriqa"):
        run_xor_attriqa(ExperimentConfig("eli5", data=("x.json",)), XorAttriQAOptions(output=str(out)))
    with pytest.raises(ConfigError, match="experiment.data"):
        run_eli5(ExperimentConfig("eli5"), ELI5Options(output=str(out)))
    assert not out.exists()


def test_a_runner_leaves_out_the_questions_the_model_was_trained_on(tmp_path, capsys):
    """A model mirage tuned records the questions it was trained on (``training.questions`` of its
    ``mirage-adapter.json``): the runners leave them out of what they score, and refuse in one line, before any
    model loads, when nothing is left."""
    from pathlib import Path

    from mirage.data.inputs import InputError
    from mirage.runs.experiment import question_digest
    from mirage.scoring.eli5 import load_alce
    from mirage.scoring.xor_data import load_xor_attriqa

    data = Path(__file__).parents[1] / "data"
    xor, eli5 = data / "xor_attriqa_match" / "val.jsonl", data / "eli5_alce" / "eli5_eval_sample.json"
    questions = [i.question for i in load_xor_attriqa(xor, limit=2).items]
    questions += [i.question for i in load_alce(eli5, limit=2).items]
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tuned / "mirage-adapter.json").write_text(json.dumps({"training": {"questions": [question_digest(q) for q in
                                                                                      questions]}}))

    def load():
        raise AssertionError("the model was loaded")

    out = tmp_path / "xor"
    with pytest.raises(InputError, match="every one of the 2 test rows asks a question .* was trained on"):
        run_xor_attriqa(ExperimentConfig("xor-attriqa", model=str(tuned), data=(str(xor),), limit=2),
                        XorAttriQAOptions(output=str(out)), mirage=load)
    assert not out.exists()
    with pytest.raises(InputError, match="every one of the 2 questions asks a question .* was trained on"):
        run_eli5(ExperimentConfig("eli5", model=str(tuned), data=(str(eli5),), limit=2),
                 ELI5Options(output=str(tmp_path / "eli5")), mirage=load)
    err = capsys.readouterr().err
    assert "2 of 2 test rows ask a question" in err and "2 of 2 questions ask a question" in err


def test_the_commands_take_keep_trained_questions(monkeypatch):
    from mirage.cli import main
    from mirage.scoring import benchmarks

    seen = {}

    def fake_run(experiment, options, **kwargs):
        seen["options"] = options
        raise SystemExit(0)

    monkeypatch.setattr(benchmarks, "run_xor_attriqa", fake_run)
    monkeypatch.setattr(benchmarks, "run_eli5", fake_run)
    for command in (["xor-attriqa", "x.jsonl"], ["eli5", "x.json"]):
        with pytest.raises(SystemExit):
            main(["score", *command, "-o", "unused"])
        assert seen.pop("options").keep_trained_questions is False
        with pytest.raises(SystemExit):
            main(["score", *command, "--keep-trained-questions", "-o", "unused"])
        assert seen.pop("options").keep_trained_questions is True


def test_every_benchmark_command_is_a_run_command_named_in_the_score_help():
    """Each benchmark ``mirage score`` has (a subcommand that :func:`mirage.scoring.cli.register` adds) is a
    registered benchmark (:data:`mirage.registry.BENCHMARKS`), so that its runner's experiment
    (``ExperimentConfig(command=NAME)``) exists and has a fingerprint, and ``mirage score``'s help line names it."""
    import argparse

    from mirage.cli import build_parser
    from mirage.registry import BENCHMARKS

    def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
        return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))

    top = subcommands(build_parser())
    help_line = next(a.help for a in top._choices_actions if a.dest == "score")
    names = list(subcommands(top.choices["score"]).choices)
    assert {"xor-attriqa", "eli5"} <= set(names)
    for name in names:
        assert name in BENCHMARKS, f"register {name!r} with mirage.runs.benchmark_options.register_benchmark"
        assert name in help_line, f"name {name!r} in the help of `mirage score` (mirage.scoring.cli.register)"
        assert ExperimentConfig.from_dict({"data": ["x.jsonl"]}, command=name).fingerprint()["model"]
