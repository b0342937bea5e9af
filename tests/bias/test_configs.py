"""``mirage bias --config FILE``: the ``bias:`` section of an experiment file, the flags that win over it, and the
shipped study configs of ``configs/bias/studies/`` (one per table family of the papers), each parsed to the study it
promises. No model runs here; the studies themselves are exercised by the other bias tests."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mirage.bias.cli import bias_config_from_args, register, split_run_options
from mirage.bias.protocol import GRID_MODES, BiasConfig
from mirage.cli import main
from mirage.config import ConfigError, read_config_file
from mirage.runs.experiment import ExperimentConfig

STUDIES = Path(__file__).resolve().parents[2] / "configs" / "bias" / "studies"


def _parse(*argv: str) -> tuple[argparse.Namespace, BiasConfig, ExperimentConfig]:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bias", *argv])
    exp = ExperimentConfig.from_args(args, command="bias")
    section = split_run_options(args, read_config_file(args.config).get("bias") if args.config else None)
    return args, bias_config_from_args(args, section), exp


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(text)
    return path


def test_the_bias_section_sets_the_study_and_flags_win(tmp_path):
    path = _write(tmp_path, "model: smollm2-135m-instruct\ndata: some/data\nbias:\n  metadata: gender\n  k: 3\n"
                            "  modes: [vanilla, informed]\n  mixed_grid: true\n  seed: 7\n")
    _, cfg, exp = _parse("-o", "out", "--config", str(path))
    assert (cfg.metadata, cfg.k, cfg.seed) == ("gender", 3, 7)
    assert cfg.modes == ("vanilla", "informed", "counterfactual", "mixed:first-first", "mixed:second-second")
    assert exp.data == ("some/data",)
    _, cfg, _ = _parse("DATA", "-o", "out", "--config", str(path), "--ndocs", "4", "--metadata", "race", "--seed", "1")
    assert (cfg.metadata, cfg.k, cfg.seed) == ("race", 4, 1)
    # without a file, BiasConfig's defaults
    _, cfg, _ = _parse("DATA", "-o", "out")
    assert cfg == BiasConfig(modes=BiasConfig().modes)


def test_run_options_in_the_section_become_flags(tmp_path):
    path = _write(tmp_path, "bias:\n  retriever: [bm25]\n  top_k: 50\n  sweep: {k: [2, 5]}\n")
    args, _, _ = _parse("DATA", "-o", "out", "--config", str(path))
    assert args.retriever == ["bm25"] and args.top_k == 50 and args.sweep == ["k", "2", "5"]
    args, _, _ = _parse("DATA", "-o", "out", "--config", str(path), "--sweep-k", "8")
    assert args.sweep is None and args.sweep_k == [8]  # the command line's sweep wins
    path = _write(tmp_path, "bias:\n  reuse: runs/bias_hai\n")
    assert _parse("DATA", "-o", "out", "--config", str(path))[0].reuse == ["runs/bias_hai"]
    assert _parse("DATA", "-o", "out", "--config", str(path), "--reuse-from", "a", "b")[0].reuse == ["a", "b"]


def test_the_old_spellings_of_renamed_bias_flags_still_parse_and_warn(capsys):
    """``--reuse`` is now ``--reuse-from`` (as in ``mirage score``) and ``--k`` ``--ndocs`` (as everywhere else that
    counts documents per question): the old spellings give the same study, with one warning line each."""
    old = _parse("DATA", "-o", "out", "--reuse", "a", "--k", "3")
    assert capsys.readouterr().err.splitlines() == [
        "mirage: warning: --reuse is now --reuse-from; the old spelling still works but will go",
        "mirage: warning: --k is now --ndocs; the old spelling still works but will go"]
    new = _parse("DATA", "-o", "out", "--reuse-from", "a", "--ndocs", "3")
    assert vars(old[0]) == vars(new[0]) and old[1] == new[1] and old[1].k == 3


def test_bad_sections_are_named(tmp_path):
    for text, message in (("bias:\n  kk: 3\n", "kk"), ("bias: [1]\n", "must be a mapping"),
                          ("bias:\n  sweep: {k: 2}\n", "bias.sweep"), ("bias:\n  modes: [mixd]\n", "mixd")):
        with pytest.raises(ConfigError, match=message):
            _parse("DATA", "-o", "out", "--config", str(_write(tmp_path, text)))
    with pytest.raises(ConfigError, match="'bias' section configures `mirage bias`"):
        ExperimentConfig.from_dict({"bias": {"k": 3}}, command="attribute")
    # no DATA and no data in the file: the command says what to give
    assert main(["bias", "-o", str(tmp_path / "out"), "--quiet"]) != 0


@pytest.mark.parametrize("name", sorted(p.stem for p in STUDIES.glob("*.yaml")))
def test_every_shipped_study_config_parses(name):
    args, cfg, exp = _parse("-o", "out", "--config", str(STUDIES / f"{name}.yaml"))
    assert exp.data and read_config_file(STUDIES / f"{name}.yaml")["description"]
    expected = {
        "hai": lambda: cfg.metadata == "hai" and cfg.modes == ("vanilla", "informed", "counterfactual"),
        "mixed_grid": lambda: cfg.modes == ("vanilla",) + GRID_MODES,
        "gender_race": lambda: cfg.metadata == "gender",
        "names": lambda: cfg.metadata == "hai-names-pool",
        "sweep_k": lambda: args.sweep == ["k", "2", "5", "8", "10"],
        "retrievers": lambda: args.retriever == ["bm25", "dense"] and args.top_k == 100,
        "rage_mixture": lambda: cfg.docs == "rage" and args.sweep[0] == "rage_similar",
        "external_answers": lambda: args.answers_name == "external" and args.model is None,
    }
    assert expected[name](), name
    if name == "hai":  # the published run's settings: its stored generations resume under this file
        assert exp.pipeline.generation.max_new_tokens == 48 and cfg.k == 5


def test_a_trained_sentence_mark_is_the_tuned_models_own(tmp_path):
    """``sentence_mark: trained`` in a config's ``bias:`` section becomes the mark of the prompt the model's record
    names (the follower's ``selfcitation_marked``), for the Python API as for the command; the positional adapter,
    tuned in the plain prompt, has none to give; a mark of one's own is kept as written."""
    from mirage.bias.prompts import load_prompts, mode_template, resolve_sentence_mark
    from mirage.bias.protocol import load_metadata

    config = _write(tmp_path, "model: smollm2-135m-cite-follow\nbias:\n  sentence_mark: trained\n")
    _, cfg, exp = _parse("--config", str(config), "-o", str(tmp_path / "out"))
    assert cfg.sentence_mark == "trained"
    with pytest.raises(ConfigError, match="resolve it"):
        load_prompts(cfg)
    marked = resolve_sentence_mark(cfg, exp.model)
    assert marked.sentence_mark == " [{ID}]"
    prompts = load_prompts(marked)
    for mode in ("vanilla", "informed"):
        assert mode_template(prompts, mode, load_metadata(marked))["sentence_mark"] == " [{ID}]"
    assert "sentence_mark" not in mode_template(load_prompts(BiasConfig()), "vanilla", load_metadata(BiasConfig()))
    with pytest.raises(ConfigError, match="smollm2-135m-cite was not tuned by mirage in a prompt with sentence marks"):
        resolve_sentence_mark(cfg, "smollm2-135m-cite")
    own = BiasConfig(sentence_mark=" <{ID}>")
    assert resolve_sentence_mark(own, "smollm2-135m-instruct") is own
