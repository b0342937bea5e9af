"""The commands results pages rebuild for runs that predate recorded commands (``mirage score xor-attriqa``,
``mirage score eli5``, ``mirage bias``) take their flags from the options classes the commands' parsers are made from:
every flag a rebuilt command names is one of its parser's, the command parses back to the recorded settings, and a
flag renamed in its options class is renamed on the pages too (the committed pages themselves are checked by
test_results_pages.py)."""

from __future__ import annotations

import argparse
import json
import shlex
import types

import pytest

from mirage import cli
from mirage.bias.cli import BiasRunOptions, bias_config_from_args
from mirage.bias.protocol import MODES, BiasConfig
from mirage.config import CCIConfig, GenerationConfig
from mirage.options import given_options, option_flag, options_argv
from mirage.runs.benchmark_options import ELI5Options, XorAttriQAOptions
from mirage.runs.experiment import ExperimentConfig, pipeline_changes
from mirage.views.pages import bias as bias_pages
from mirage.views.pages import scoring as scoring_pages

#: Settings as results record them, every field a rebuilder covers set to a value that is not its default.
XOR_SETTINGS = {
    "model": "m", "text": "native", "data": ["xor-attriqa-match:fi", "xor-attriqa-match:ru"],
    "calibrate_on": ["xor-attriqa-match:val"], "calibrate_by": "language", "skip": 3, "limit": 7,
    "groups": ["ex", "cal"], "all_tokens": True, "group_passages": True, "methods": ["at2", "rollout"],
    "classifier_methods": ["at2+rollout"], "reuse_from": "runs/earlier", "trained_questions_kept": 0,
    "config": {"cti": {"std_kind": "population"}, "cci": {"target": "logprob", "method": "input_x_gradient"},
               "aggregation": {"keep_saliency": True}, "generation": {"seed": 7}}}
ELI5_SETTINGS = {
    "model": "m", "data": "eli5.json", "seeds": [1, 2], "ndocs": 3, "at_most_citations": 2, "skip": 2, "limit": 5,
    "trained_questions_kept": 1,
    "config": {"prompt": {"name": "standard"}, "generation": {"seed": 9, "max_new_tokens": 50, "do_sample": True}}}
BIAS_CONFIG = {
    "metadata": "custom", "labels": [["Human", "Person"], ["AI", "Machine"]], "modes": ["vanilla", "informed"], "k": 4,
    "seed": 1, "relevant_side": "second", "mixed": ["second", "first"], "docs": "rage", "rage_similar": 1,
    "max_doc_words": 50, "rewrite": "relevant", "explain": True, "prompts_dir": "prompts", "baseline_draws": 10,
    "n_relevant": 2, "rage_embedder": "multilingual-e5-small", "sentence_mark": " [{ID}]",
    "keep_trained_questions": True}

#: A flag renamed in its options class, for each rebuilder (and the pipeline flags they share).
RENAMED = [(ExperimentConfig, "limit", "--first"), (XorAttriQAOptions, "calibrate_by", "--calibrate-per"),
           (ELI5Options, "at_most", "--cite-at-most"), (BiasConfig, "rage_similar", "--rage-near"),
           (BiasRunOptions, "top_k", "--retrieve-k"), (CCIConfig, "target", "--cci-quantity"),
           (GenerationConfig, "max_new_tokens", "--new-tokens")]


def _command_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser of the command ``argv`` names (``score xor-attriqa``), built by mirage's own parser."""
    parser = cli.build_parser(argv)
    for word in argv:
        sub = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
        if sub is None or word not in sub.choices:
            break
        parser = sub.choices[word]
    return parser


def _parsed(command: str) -> tuple[list[str], argparse.Namespace]:
    """A rebuilt command's words and what mirage's parser makes of them; each flag among them is one of the
    parser's own."""
    argv = shlex.split(command)
    assert argv[0] == "mirage"
    flags = set(_command_parser(argv[1:])._option_string_actions)
    assert [w for w in argv[1:] if w.startswith("-") and w not in flags] == [], command
    return argv[1:], cli.build_parser(argv[1:]).parse_args(argv[1:])


@pytest.fixture(params=[False, True], ids=["flags", "renamed"])
def renamed(request, monkeypatch) -> list[str]:
    """Run once with the flags as they are and once with :data:`RENAMED`'s renamed in their options classes (the
    parser built from them then takes only the new names); the new names."""
    if not request.param:
        return []
    for cls, name, flag in RENAMED:
        f = cls.__dataclass_fields__[name]
        monkeypatch.setattr(f, "metadata", types.MappingProxyType({**f.metadata, "flag": flag}))
    return [flag for _cls, _name, flag in RENAMED]


def test_the_xor_attriqa_command_parses_back_to_its_settings(renamed):
    argv, args = _parsed(scoring_pages.xor_attriqa_command(XOR_SETTINGS))
    s = XOR_SETTINGS
    assert given_options(ExperimentConfig, args, ["data", "model", "text", "calibrate_on", "skip", "limit"]) == {
        "data": tuple(s["data"]), "model": "m", "text": "native", "calibrate_on": tuple(s["calibrate_on"]),
        "skip": 3, "limit": 7}
    assert given_options(XorAttriQAOptions, args) == {
        "output": "DIR", "calibrate_by": "language", "groups": ("ex", "cal"), "all_tokens": True,
        "group_passages": True, "methods": ("at2", "rollout"), "classifier_methods": ("at2+rollout",),
        "reuse_from": "runs/earlier", "keep_trained_questions": True}
    # the command sets the generation itself: no --seed
    assert pipeline_changes(args) == {key: value for key, value in s["config"].items() if key != "generation"}
    assert {"--first", "--calibrate-per", "--cci-quantity"} <= set(argv) if renamed else "--calibrate-by" in argv


def test_the_eli5_command_parses_back_to_its_settings(renamed):
    argv, args = _parsed(scoring_pages.eli5_command(ELI5_SETTINGS))
    assert given_options(ExperimentConfig, args, ["data", "model", "seeds", "skip", "limit"]) == {
        "data": "eli5.json", "model": "m", "seeds": (1, 2), "skip": 2, "limit": 5}
    assert given_options(ELI5Options, args) == {"output": "DIR", "ndocs": 3, "at_most": 2,
                                                "keep_trained_questions": True}
    # its --seeds give the generation seeds: no --seed
    assert pipeline_changes(args) == {"prompt": {"name": "standard"},
                                      "generation": {"max_new_tokens": 50, "do_sample": True}}
    assert {"--first", "--cite-at-most", "--new-tokens"} <= set(argv) if renamed else "--at-most-citations" in argv


def test_the_bias_command_parses_back_to_its_settings(renamed, tmp_path):
    run_dir = tmp_path / "bm25"  # a study of mirage bias --retriever bm25 --top-k 50
    run_dir.mkdir()
    (tmp_path / "retrievers.json").write_text(json.dumps(
        {"top_k": 50, "runs": {"bm25": {"run": "bm25/run.trec", "retriever": "bm25"}}}), encoding="utf-8")
    res = {"data": "items.jsonl", "model": "m", "n_items": 3, "config": BIAS_CONFIG,
           "mirage_config": {"generation": {"seed": 1, "temperature": 0.7}, "cci": {"method": "input_x_gradient"}}}
    command, missing = bias_pages.bias_study_command(run_dir, res)
    assert missing == ["--first" if renamed else "--limit"]  # its data is not here to tell
    argv, args = _parsed(command)
    assert given_options(ExperimentConfig, args, ["data", "model", "limit"]) == {"data": "items.jsonl", "model": "m"}
    assert given_options(BiasRunOptions, args, ["output", "retriever", "top_k"]) == {
        "output": "DIR", "retriever": ("bm25",), "top_k": 50}
    assert json.loads(json.dumps(bias_config_from_args(args).to_dict())) == BIAS_CONFIG
    assert pipeline_changes(args) == res["mirage_config"]  # --seed seeds the study and generation
    assert {"--retrieve-k", "--rage-near"} <= set(argv) if renamed else "--rage-similar" in argv


def test_recorded_settings_give_the_flags_of_the_values_that_are_not_defaults():
    """What the rebuilders use: :func:`options_argv` reads settings as results record them (by field name, lists for
    tuples) and, with ``changed``, gives only the values that are not the defaults; :func:`option_flag` names a
    field's flag."""
    recorded = {"mixed": ["first", "first"], "k": 4, "modes": list(MODES), "labels": None, "gone": 1}
    assert options_argv(BiasConfig, recorded, ["mixed", "k", "modes", "labels"], changed=True) == ["--ndocs", "4"]
    assert options_argv(BiasConfig, recorded, ["mixed", "k"]) == ["--mixed", "first", "first", "--ndocs", "4"]
    assert options_argv(GenerationConfig, {"seed": 42}, ["seed"], changed=True, defaults={"seed": 1}) == [
        "--seed", "42"]
    assert option_flag(GenerationConfig, "do_sample") == "--sample"
    with pytest.raises(TypeError, match="declares no flag"):
        option_flag(BiasConfig, "seed")  # mirage bias --seed is the pipeline's
