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
