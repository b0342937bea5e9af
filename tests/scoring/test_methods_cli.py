"""``mirage methods list`` and ``mirage methods train-at2`` on the embedded smollm2 model and the val slice of
tests/data (see tests/data/README.md): every registered method listed, head weights trained, written where ``at2``
finds them, and a file the command did not write never overwritten."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage import cli
from mirage.attribution.methods import HeadWeights
from mirage.registry import DOCUMENT_METHODS

pytestmark = pytest.mark.slow

XOR_VAL = Path(__file__).parents[1] / "data" / "xor_attriqa_match" / "val.jsonl"


def test_the_list_names_every_registered_method_with_its_settings(capsys):
    assert cli.main(["methods", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == sorted(DOCUMENT_METHODS)
    assert all("Settings: " in line for line in lines)


def test_train_at2_writes_weights_that_at2_finds_by_the_models_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path / "cache"))
    args = ["methods", "train-at2", str(XOR_VAL), "--limit", "4", "--masks", "4", "--iterations", "5"]
    assert cli.main(args) == 0
    err = capsys.readouterr().err
    written = tmp_path / "cache" / "at2" / "smollm2-135m-instruct.json"
    weights = HeadWeights.read(written)
    assert f"wrote {written}" in err and weights.model == "smollm2-135m-instruct"
    t = weights.training
    assert t["masks"] == 4 and t["iterations"] == 5 and t["answers"] + t["left_out"] + t["single_passage_left_out"] == 4
    assert t["command"].startswith("mirage methods train-at2 ") and "--masks 4" in t["command"]
    assert (weights.n_layers, weights.n_heads) == (30, 9)
    # a second run writes over its own file; a file it did not write is refused in one line
    foreign = tmp_path / "notes.json"
    foreign.write_text(json.dumps({"mine": True}))
    assert cli.main([*args, "-o", str(foreign)]) != 0
    err = capsys.readouterr().err
    assert "is not a head weights file" in err and json.loads(foreign.read_text()) == {"mine": True}
