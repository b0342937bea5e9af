"""One config-checking toolkit (mirage.checks): the same value gets the same verdict, and an error of the same shape,
in every config class (the pipeline's sections, ExperimentConfig, TuneConfig's sections, BiasConfig) and from the
flags made from their fields."""

import argparse
import math
import re

import pytest

from mirage.bias.protocol import BiasConfig
from mirage.checks import integer, non_negative_int, number, registered, seed
from mirage.config import CCIConfig, ConfigError, GenerationConfig
from mirage.data.inputs import short_repr
from mirage.runs.experiment import ExperimentConfig, add_experiment_args
from mirage.tune.config import LoraSettings, RewardSettings, TrainSettings

EDGES = [3, 3.0, 3.5, "3", True, -1, math.nan]
#: 3.0 is what YAML gives for ``3.0``: an integer field stores it as 3; the rest are refused.
INT_VERDICTS = [3, 3, None, None, None, None, None]
#: A number field (bounded below by 0) stores floats; a string, a bool, a negative and NaN are refused.
FLOAT_VERDICTS = [3.0, 3.0, 3.5, None, None, None, None]

#: (where, build) of an integer field >= 0 or >= 1 in each config class.
INT_FIELDS = [
    ("cci.ig_steps", lambda v: CCIConfig(ig_steps=v).ig_steps),
    ("generation.max_new_tokens", lambda v: GenerationConfig(max_new_tokens=v).max_new_tokens),
    ("experiment.limit", lambda v: ExperimentConfig("attribute", limit=v).limit),
    ("train.batch_size", lambda v: TrainSettings(batch_size=v).batch_size),
    ("lora.r", lambda v: LoraSettings(r=v).r),
    ("bias.k", lambda v: BiasConfig(k=v).k),
    ("bias.baseline_draws", lambda v: BiasConfig(baseline_draws=v).baseline_draws),
]
#: A number field > 0 or >= 0 in each config class that has one (ExperimentConfig and BiasConfig have none).
FLOAT_FIELDS = [
    ("generation.temperature", lambda v: GenerationConfig(temperature=v).temperature),
    ("cci.top_percent", lambda v: CCIConfig(top_percent=v).top_percent),
    ("train.learning_rate", lambda v: TrainSettings(learning_rate=v).learning_rate),
    ("reward.beta", lambda v: RewardSettings(beta=v).beta),
]


def _verdict(where, build, value):
    try:
        return build(value)
    except ConfigError as err:
        message = str(err)
    shown = re.escape(short_repr(value))
    assert re.fullmatch(rf"{re.escape(where)} must be (an integer|a number|a finite number).*?, got {shown}"
                        r"(; [^;]+)?\.", message), message
    return None


@pytest.mark.parametrize("where, build", INT_FIELDS, ids=[w for w, _ in INT_FIELDS])
def test_integer_fields_give_one_verdict(where, build):
    got = [_verdict(where, build, v) for v in EDGES]
    assert got == INT_VERDICTS and all(type(v) is int for v in got if v is not None)


@pytest.mark.parametrize("where, build", FLOAT_FIELDS, ids=[w for w, _ in FLOAT_FIELDS])
def test_number_fields_give_one_verdict(where, build):
    got = [_verdict(where, build, v) for v in EDGES]
    assert got == pytest.approx(FLOAT_VERDICTS, nan_ok=True) and all(type(v) is float for v in got if v is not None)


def test_seeds_are_one_rule_everywhere():
    for value, ok in ((0, True), (3.0, True), (2**63 - 1, True), (-1, False), (2**63, False), ("1", False)):
        builds = [lambda v: GenerationConfig(seed=v).seed, lambda v: ExperimentConfig("eli5", seeds=[v]).seeds[0],
                  lambda v: TrainSettings(seed=v).seed, lambda v: BiasConfig(seed=v).seed]
        for build in builds:
            if ok:
                assert build(value) == int(value)
            else:
                with pytest.raises(ConfigError, match=r"\.seeds? must be an integer in \[0, 2\*\*63\), got "):
                    build(value)


def test_flags_read_numbers_as_the_fields_do():
    parser = argparse.ArgumentParser(exit_on_error=False)
    parser.add_argument("data", nargs="*")
    add_experiment_args(parser)
    for text, expected in (("3", 3), ("3.0", 3)):
        args = parser.parse_args(["--max-new-tokens", text, "--temperature", text])
        exp = ExperimentConfig.from_args(args, command="attribute")
        assert exp.pipeline.generation.max_new_tokens == expected and exp.pipeline.generation.temperature == 3.0
        assert type(exp.pipeline.generation.max_new_tokens) is int
    for flag, text in (("--max-new-tokens", "3.5"), ("--max-new-tokens", "true"), ("--temperature", "nan"),
                       ("--temperature", "x")):
        with pytest.raises(argparse.ArgumentError, match=r"must be (an integer|a finite number), got '"):
            parser.parse_args([flag, text])
    # a range is the field's: the flag reads the number, the config refuses it in the same words as from YAML
    with pytest.raises(ConfigError, match=r"^generation\.max_new_tokens must be an integer >= 1, got -1\.$"):
        ExperimentConfig.from_args(parser.parse_args(["--max-new-tokens", "-1"]), command="attribute")
    assert non_negative_int("3.0") == 3
    with pytest.raises(argparse.ArgumentTypeError, match=r"^must be an integer >= 0, got '-1'\.$"):
        non_negative_int("-1")


def test_the_checks_themselves():
    assert integer("a.b", 2.0, minimum=1) == 2 and integer("a.b", None, optional=True) is None
    assert number("a.b", 1) == 1.0 and seed("a.b", 7.0) == 7
    with pytest.raises(ConfigError, match=r"^a\.b must be a number in \(0, 1\], got 0\.$"):
        number("a.b", 0, above=0, maximum=1)
    with pytest.raises(ConfigError, match=r"^a\.b='x' is not valid; choose one of 'one', 'two' \(or register one "
                                          r"with f\)\.$"):
        registered("a.b", "x", {"two": 2}, builtin=("one",), how="f")
    assert registered("a.b", "one", lambda: pytest.fail("a built-in name is checked without the registry"),
                      builtin=("one",)) == "one"
