"""``mirage tune data`` as a library runner (mirage.tune.training_set): called from Python, it builds what the command
writes and reports the counts the command prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from mirage.config import ConfigError
from mirage.tune.data import read_examples
from mirage.tune.options import TrainingSetOptions
from mirage.tune.training_set import build_training_set

ROOT = Path(__file__).resolve().parents[2]
VAL = ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"


def test_the_runner_builds_the_gold_set_the_command_writes_with_its_counts(tmp_path, capsys):
    """Gold rows of the val slice with --yes-no and --spread-positions 3: two supported rows (two left out as
    unsupported), no yes/no question (one answer is already yes, the other has no second answer to be asked "No"
    with), each example presented 3 times: 6 examples, as `mirage tune data` prints them."""
    from mirage.cli import main

    out = tmp_path / "gold.jsonl"
    options = TrainingSetOptions(mode="gold", xor=(str(VAL),), yes_no=True, spread_positions=3, output=str(out))
    result = build_training_set(options)
    assert result.report.counts == {"xor-attriqa": 2, "eli5-demo": 0, "xor-attriqa yes/no": 0}
    assert result.report.left_out == {"unsupported": 2, "duplicate": 0} and result.report.bad_rows == []
    assert len(result.examples) == 6 and {ex.supporting[0] for ex in result.examples} == {1, 2, 3}
    assert result.messages == [] and not out.exists()  # the runner writes nothing; the command writes the file
    summary = ("2 examples from xor-attriqa\n0 examples from eli5-demo\n0 examples from xor-attriqa yes/no\n"
               "left out (unsupported): 2")
    assert result.summary() == summary

    capsys.readouterr()
    assert main(["tune", "data", "gold", "--xor", str(VAL), "--yes-no", "--spread-positions", "3", "-o", str(out)]) == 0
    assert capsys.readouterr().err == f"{summary}\nwrote 6 examples to {out}\n"
    assert read_examples(out) == (result.examples, [])

    # option combinations are refused before any file is read
    with pytest.raises(ConfigError, match=r"^--copies goes with --spread-positions K\.$"):
        build_training_set(TrainingSetOptions(mode="gold", xor=(str(tmp_path / "missing.jsonl"),), copies=2,
                                              output=str(out)))
