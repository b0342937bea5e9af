"""Starting fast and saying what happens: ``import mirage``, ``mirage --help`` and argument errors import no torch;
one progress bar per run (transformers' own load bars silenced, and restored); a first-time conversion is announced."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from mirage.cli import build_parser, commands

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "numpy", "scipy", "matplotlib", "datasets", "pandas", "sklearn", "tqdm")

#: Runs in a fresh interpreter: what a user's first lines and the CLI's parsing do, then which heavy libraries and
#: which mirage modules got imported.
_LIGHT = """
import json, sys
import mirage
from mirage import CCIConfig, CTIConfig, MirageConfig
CCIConfig(top_k=3); CTIConfig(threshold=1.0, metric="js"); MirageConfig().replace(cci={"top_k": 3})
from mirage.cli import build_parser, main
for argv in (["--help"], ["attribute", "--help"], ["attribute"], ["attribute", "in.json", "-o", "x.jsonl",
             "--cti-std", "2", "--cti-threshold", "1"], ["-v", "view", "--help"], ["score", "--help"],
             ["score", "xor-attriqa", "--help"], ["score", "eli5", "--help"], ["bias", "--help"]):
    try:
        main(argv)
    except SystemExit:
        pass
build_parser(["attribute", "in.json", "-o", "x.jsonl"]).parse_args(["attribute", "in.json", "-o", "x.jsonl"])
heavy = sorted({name.split(".")[0] for name in sys.modules} & set(json.loads(sys.argv[1])))
print(json.dumps({"heavy": heavy, "mirage": sorted(n for n in sys.modules if n.startswith("mirage"))}))
"""


def test_import_mirage_and_parsing_arguments_import_no_torch():
    run = subprocess.run([sys.executable, "-c", _LIGHT, json.dumps(HEAVY)], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["heavy"] == []
    # the score and bias commands' parsers come from their packages' cli modules only (not the scorers themselves)
    assert not [m for m in found["mirage"] if m.startswith(("mirage.scoring.", "mirage.bias.", "mirage.pipeline"))
                and m not in ("mirage.scoring.cli", "mirage.bias.cli", "mirage.bias.protocol")]
    assert "argument --cti-threshold: not allowed with argument --cti-std" in run.stderr


def test_from_mirage_import_mirage_still_works_lazily():
    run = subprocess.run([sys.executable, "-c", ("import sys, mirage; assert 'torch' not in sys.modules; "
                          "from mirage import Mirage, attribute_dataset; "
                          "print(Mirage.__module__, 'torch' in sys.modules)")],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.split() == ["mirage.pipeline", "True"]
    run = subprocess.run([sys.executable, "-c", ("from mirage.scoring import run_xor_attriqa, evaluate; "
                          "from mirage.bias import BiasConfig, run_bias_study; import mirage.bias as b; "
                          "print(run_xor_attriqa.__module__, run_bias_study.__module__, 'cas' in dir(b))")],
                         capture_output=True, text=True, cwd=ROOT, check=True)
    assert run.stdout.split() == ["mirage.scoring.benchmarks", "mirage.bias.study", "True"]
    with pytest.raises(AttributeError, match="no attribute 'Mirrage'"):
        import mirage

        mirage.Mirrage  # noqa: B018


def test_the_command_table_lists_each_command_with_its_own_help():
    """``mirage --help`` shows the table's help lines; building a command in full gives the same ones."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert {a.dest: a.help for a in sub._choices_actions} == {c.name: c.help for c in commands()}
    assert list(sub.choices) == [c.name for c in commands()]


def test_each_command_parses_in_its_lazily_built_parser():
    argv = ["score", "eli5", "data.json", "-o", "out"]
    assert build_parser(argv).parse_args(argv).benchmark == "eli5"
    with pytest.raises(SystemExit):
        build_parser(["nope"]).parse_args(["nope"])


def test_terminal_progress_is_a_plain_bar_without_ipywidgets(monkeypatch):
    import importlib.util

    from mirage.runs import progress

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ipywidgets" else real(name, *a))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm's "IProgress not found" would be a TqdmWarning
        bar = progress.terminal_progress(range(3), 3, "attribute")
        assert type(bar).__module__ == "tqdm.std" and list(bar) == [0, 1, 2]


def test_quiet_loading_silences_transformers_bars_and_restores_them():
    import importlib

    from transformers.utils import logging as hf_logging

    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")

    from mirage.attribution.models import quiet_transformers_loading

    saved = dict(hub_tqdm.progress_bar_states)
    hub_tqdm.disable_progress_bars("some_group")  # a user's own setting for one group of hub bars
    hub_before = dict(hub_tqdm.progress_bar_states)
    try:
        assert hf_logging.is_progress_bar_enabled()
        with quiet_transformers_loading():
            assert not hf_logging.is_progress_bar_enabled()
            assert hub_tqdm.progress_bar_states == hub_before  # download bars as they were
        assert hf_logging.is_progress_bar_enabled() and hub_tqdm.progress_bar_states == hub_before
        hf_logging.disable_progress_bar()
        with quiet_transformers_loading():
            pass
        assert not hf_logging.is_progress_bar_enabled()  # a user who turned them off keeps them off
    finally:
        hf_logging.enable_progress_bar()
        hub_tqdm.progress_bar_states.clear()
        hub_tqdm.progress_bar_states.update(saved)


def test_a_cached_load_draws_no_bar(capfd):
    from mirage.attribution.models import load_model

    load_model("smollm2-135m-instruct")
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "%|" not in err


def test_a_first_time_conversion_is_announced_before_it_starts(tmp_path, monkeypatch, caplog):
    import transformers

    from mirage.attribution import models

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", stop)  # the conversion's first slow step
    with caplog.at_level(logging.WARNING, logger="mirage.attribution.models"), pytest.raises(Stop):
        models.embedded_checkpoint("smollm2-135m-instruct")
    (record,) = [r for r in caplog.records if r.name == "mirage.attribution.models"]
    assert record.levelno == logging.WARNING
    assert "converting the embedded model smollm2-135m-instruct from GGUF" in record.getMessage()
    assert "about 20-60 s" in record.getMessage() and str(tmp_path) in record.getMessage()
