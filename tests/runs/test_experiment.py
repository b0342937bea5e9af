"""One experiment configuration: read from experiment files and flags, validated, and fingerprinted for resume
checks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mirage.cli import build_parser
from mirage.config import DEFAULT_MODEL, EXPERIMENT_KEYS, ConfigError, MirageConfig
from mirage.data.inputs import InputError
from mirage.runs.experiment import ExperimentConfig
from mirage.scoring.runner import check_run

ROOT = Path(__file__).resolve().parents[2]
CORA = ROOT / "configs" / "xor_attriqa_cora_mgen.yaml"
RESULTS = ROOT / "benchmarks" / "results"


def _args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_experiment_file_gives_every_key():
    exp = ExperimentConfig.from_yaml(CORA, command="xor-attriqa")
    assert exp.model == "gsarti/cora_mgen" and exp.text == "native" and exp.dataset == "xor_attriqa_match"
    assert list(exp.data) == ["xor-attriqa-match:fi", "xor-attriqa-match:ru"]  # datasets by name
    assert list(exp.calibrate_on) == ["xor-attriqa-match:val"]
    assert exp.pipeline.prompt.name == "cora_mgen" and exp.pipeline.prompt.chat_template is False
    assert exp.description.startswith("XOR-AttriQA") and exp.limit is None and exp.seeds == ()


def test_every_experiment_key_is_read(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("description: d\ndataset: eli5\nmodel: m\ndata: a.json\ntext: en\nlimit: 3\nseeds: [1, 2]\n"
                    "nli: judge\ncti:\n  std_k: 2\nadapter: run/adapter\ndevice_map: auto\nmax_memory: {cpu: 20GiB}\n"
                    "quantization: 4bit\nmemory_budget: 3GB\n")
    exp = ExperimentConfig.from_yaml(path, command="eli5")
    assert {k for k in EXPERIMENT_KEYS if getattr(exp, k) in (None, ())} == set()
    assert (exp.model, exp.data, exp.limit, exp.seeds, exp.nli) == ("m", ("a.json",), 3, (1, 2), "judge")
    assert exp.pipeline.cti.std_k == 2.0 and exp.generation_seeds == (1, 2)
    assert ExperimentConfig("eli5").generation_seeds == (MirageConfig().generation.seed,)


def test_flags_win_over_the_file():
    args = _args("score", "xor-attriqa", "d.jsonl", "--config", str(CORA), "--model", "m2", "--text", "en",
                 "--limit", "0", "--prompt", "standard", "--cti-std", "2", "-o", "out")
    exp = ExperimentConfig.from_args(args, command="xor-attriqa")
    assert (exp.model, exp.text, exp.limit, exp.data) == ("m2", "en", 0, ("d.jsonl",))
    assert list(exp.calibrate_on) == ["xor-attriqa-match:val"]  # not given on the command line: the file's
    assert exp.pipeline.prompt.name == "standard" and exp.pipeline.cti.std_k == 2.0
    assert exp.pipeline.prompt.chat_template is False  # the file's, under the flag's prompt name


def test_default_prompt_of_a_command_yields_to_the_file_and_the_flag(tmp_path):
    assert ExperimentConfig.from_dict({}, command="xor-attriqa").pipeline.prompt.name == "standard"
    assert ExperimentConfig.from_dict({}, command="eli5").pipeline.prompt.name == "selfcitation"
    named = ExperimentConfig.from_dict({"prompt": {"name": "selfcitation"}}, command="xor-attriqa")
    assert named.pipeline.prompt.name == "selfcitation"
    args = _args("score", "xor-attriqa", "d.jsonl", "--prompt", "selfcitation", "-o", "out")
    assert ExperimentConfig.from_args(args, command="xor-attriqa").pipeline.prompt.name == "selfcitation"
    args = _args("attribute", "in.json", "-o", "o.jsonl")
    exp = ExperimentConfig.from_args(args, command="attribute")
    assert exp.model == DEFAULT_MODEL and exp.pipeline == MirageConfig()


@pytest.mark.parametrize("text, message", [
    ("model: m\nfoo: 1\n", "Unknown config section 'foo'"),
    ("limit: -1\n", "experiment.limit must be an integer >= 0 or null, got -1."),
    ("limit: 2.5\n", "experiment.limit must be an integer >= 0 or null, got 2.5."),
    ("text: fr\n", "experiment.text='fr' is not valid; choose one of 'en', 'native'."),
    ("seeds: [1, x]\n", "experiment.seeds must be an integer in [0, 2**63), got 'x'."),
    ("data: {eval: a.jsonl, test: b.jsonl}\n", "Unknown key(s) ['test'] in 'data'"),
    ("data: 3\n", "experiment.data must be a path or a list of paths, got 3."),
    ("cti:\n  std: 2\n", "Unknown key(s) ['std'] in config section 'cti'"),
    ("- a\n- b\n", "expected a mapping of sections"),
])
def test_bad_experiment_files_are_config_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        ExperimentConfig.from_yaml(path, command="eli5")
    assert str(err.value).startswith(str(path)) and message in str(err.value)


def test_a_missing_file_is_a_config_error():
    with pytest.raises(ConfigError, match="config file not found"):
        ExperimentConfig.from_yaml("/no/such/file.yaml", command="attribute")


def test_fingerprints_match_the_stored_runs():
    """Runs written before the experiment configuration existed still resume: the fingerprints kept their shape. The
    XOR-AttriQA ones were made before its default CCI target became the probability: they resume with the flag their
    pages add (``--cci-target logprob``), and today's default is told apart from them by that key alone."""
    stored = json.loads((RESULTS / "xor_attriqa_smollm2_en" / "run.json").read_text())
    old = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct", "cci": {"target": "logprob"}},
                                     command="xor-attriqa")
    assert json.loads(json.dumps(old.fingerprint())) == stored
    xor = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct"}, command="xor-attriqa")
    assert json.loads(json.dumps(xor.fingerprint())) == {**stored, "cci_target": "prob"}
    eli5 = ExperimentConfig.from_dict({"generation": {"max_new_tokens": 128, "do_sample": True, "temperature": 0.5}},
                                      command="eli5")
    assert json.loads(json.dumps(eli5.fingerprint())) == json.loads(
        (RESULTS / "eli5_smollm2_selfcitation" / "run.json").read_text())


def test_a_fingerprint_holds_what_the_stored_outputs_depend_on():
    base = MirageConfig()
    selectors = base.replace(cti={"std_k": 3}, cci={"top_k": 2, "top_percent": None}, aggregation={"max_citations": 1})

    def fp(command, cfg=base, **kw):
        return ExperimentConfig(command, pipeline=cfg, **kw).fingerprint()

    # XOR-AttriQA stores raw scores of every token: selectors do not matter, the metric and the model do.
    assert fp("xor-attriqa", selectors) == fp("xor-attriqa")
    assert fp("xor-attriqa", base.replace(cti={"metric": "js"})) != fp("xor-attriqa")
    assert fp("xor-attriqa", model="other") != fp("xor-attriqa")
    # ELI5 stores results keyed by seed: the seed does not matter, the selectors do.
    assert fp("eli5", base.replace(generation={"seed": 7})) == fp("eli5")
    assert fp("eli5", selectors) != fp("eli5")
    # attribute stores whole results of one config.
    stored_shape = base.to_dict()
    stored_shape["aggregation"] = {k: v for k, v in stored_shape["aggregation"].items()
                                   if k in ("max_citations", "top_context_tokens")}  # later fields at defaults: absent
    assert fp("attribute") == {"model": DEFAULT_MODEL, "config": stored_shape}
    assert fp("attribute", base.replace(aggregation={"rule": "learned"})) != fp("attribute")
    # How the model is loaded (in float32), the limit and the data are no part of it.
    assert fp("attribute", device="cpu", dtype="float32", limit=3, data=("x",)) == fp("attribute")


def test_check_run_records_the_fingerprint_and_refuses_another(tmp_path):
    first = ExperimentConfig("xor-attriqa").fingerprint()
    check_run(tmp_path, first)
    check_run(tmp_path, first)
    other = ExperimentConfig("xor-attriqa", model="other").fingerprint()
    with pytest.raises(InputError, match="model: 'smollm2-135m-instruct' there, 'other' now"):
        check_run(tmp_path, other)
    assert json.loads((tmp_path / "run.json").read_text()) == json.loads(json.dumps(first))


def test_a_dtype_other_than_float32_is_another_run(tmp_path):
    """A run resumed in another dtype would mix its outputs with the stored ones: the fingerprint names any dtype but
    float32 (given or the device's default), so float32 runs written before keep their fingerprint."""
    for command in ("xor-attriqa", "eli5", "attribute", "bias"):
        plain = ExperimentConfig(command).fingerprint()
        assert "dtype" not in plain and ExperimentConfig(command, dtype="fp32").fingerprint() == plain
        assert ExperimentConfig(command, dtype="bf16").fingerprint() == {**plain, "dtype": "bfloat16"}
        assert ExperimentConfig(command, dtype="torch.float16").dtype_name() == "float16"
    check_run(tmp_path, ExperimentConfig("xor-attriqa").fingerprint())
    with pytest.raises(InputError, match="dtype: None there, 'bfloat16' now"):
        check_run(tmp_path, ExperimentConfig("xor-attriqa", dtype="bfloat16").fingerprint())


@pytest.fixture
def no_model(monkeypatch):
    """Fail if anything loads a model."""
    import mirage.pipeline

    def refuse(*_args, **_kwargs):
        raise AssertionError("the model was loaded although the prompt was never readable")

    for name in ("load_model", "load_adapter"):
        monkeypatch.setattr(mirage.pipeline, name, refuse)


@pytest.mark.parametrize("command", [
    ["attribute", str(ROOT / "examples" / "rag_items.json"), "-o", "{tmp}/out.jsonl"],
    ["score", "eli5", str(ROOT / "tests" / "data" / "eli5_alce" / "eli5_eval_sample.json"), "-o", "{tmp}/run"],
    ["score", "xor-attriqa", str(ROOT / "tests" / "data" / "xor_attriqa_match" / "val.jsonl"), "-o", "{tmp}/run"],
])
@pytest.mark.parametrize("given", ["flag", "name", "path", "bad file"])
def test_an_unknown_or_broken_prompt_is_one_line_before_the_model_loads(tmp_path, capsys, no_model, command, given):
    """``--prompt NAME`` unknown, or the config file's ``prompt.name`` / ``prompt.path`` naming no template (or a
    broken one): one line naming the field and the known prompts, before the model loads and before any output is
    written (not one skip record per item, after the model loaded)."""
    from mirage.cli import main

    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in command] + ["--quiet"]
    config = tmp_path / "exp.yaml"
    bad = tmp_path / "t.yaml"
    bad.write_text("name: t\ninstruction: x\n")  # a template without its templates
    if given == "flag":
        argv += ["--prompt", "selfcitaton"]
    else:
        prompt = {"name": "nope"} if given == "name" else {"path": str(tmp_path / "missing.yaml" if given == "path"
                                                                       else bad)}
        config.write_text(json.dumps({"prompt": prompt}))
        argv += ["--config", str(config)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mirage: error: ")
    field = {"flag": "--prompt", "name": "prompt.name"}.get(given, "prompt.path")
    assert field in err and "selfcitation_marked" in err  # the field and the known names
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.yaml", *([] if given == "flag" else ["exp.yaml"])])
