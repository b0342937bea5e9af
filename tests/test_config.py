"""The config tree: validation on construction, YAML round trip, CLI flags mapped onto it."""

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from mirage.cli import build_parser
from mirage.config import (
    AggregationConfig,
    CCIConfig,
    CCIMethod,
    CitationRule,
    ConfigError,
    CTIConfig,
    CTIMetric,
    CTISelector,
    GenerationConfig,
    MirageConfig,
    PromptConfig,
)
from mirage.runs.experiment import ExperimentConfig, pipeline_flags


def config_from_args(args) -> MirageConfig:
    return ExperimentConfig.from_args(args, command="attribute").pipeline


def test_the_built_in_names_are_those_the_stages_register():
    """The config accepts a built-in CTI metric, CTI selector, CCI method or citation rule before the stage that
    registers it is imported (the stages bring torch; the config imports none): by the Literal of built-in names
    (``CTIMetric``, ``CTISelector``, ``CCIMethod``, ``CitationRule``). Each names exactly what mirage's own modules
    register (read in a fresh interpreter, so that nothing a test registers counts), so that a built-in added to a
    registry is added there too: else ``--cci-method NAME`` (any config naming it) refuses it."""
    code = ("import json, mirage.pipeline, mirage.attribution.methods; from mirage import registry; "
            "print(json.dumps({k: sorted(getattr(registry, k)) for k in "
            "('CTI_METRICS', 'CTI_SELECTORS', 'CCI_METHODS', 'CITATION_RULES')}))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    registered = json.loads(run.stdout)
    for registry, literal in (("CTI_METRICS", CTIMetric), ("CTI_SELECTORS", CTISelector),
                              ("CCI_METHODS", CCIMethod), ("CITATION_RULES", CitationRule)):
        missing = sorted(set(registered[registry]) - set(get_args(literal)))
        gone = sorted(set(get_args(literal)) - set(registered[registry]))
        assert not missing and not gone, (f"mirage.config's Literal of the built-in {registry} differs from what the "
                                          f"stages register: add {missing}, remove {gone}")


def test_defaults_are_the_reference_settings():
    cfg = MirageConfig()
    assert cfg.cti.metric == "kl_noctx_ctx" and cfg.cti.std_k == 1.0
    assert cfg.cci.method == "saliency" and cfg.cci.top_percent == 5.0 and cfg.cci.percent_rule == "range"
    assert cfg.aggregation.max_citations == 3


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: CTIConfig(metric="kl"), "cti.metric"),
        (lambda: CTIConfig(selector="threshold"), "cti.threshold"),
        (lambda: CCIConfig(top_k=3, top_percent=5), "top_k and top_percent"),
        (lambda: CCIConfig(method="lime"), "cci.method"),
        (lambda: CCIConfig(top_k=None, top_percent=150), "cci.top_percent"),
    ],
)
def test_invalid_values_name_the_field(make, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make()


def test_yaml_round_trip(tmp_path):
    import yaml

    cfg = MirageConfig().replace(cti={"std_k": 0.5}, cci={"top_k": 3, "top_percent": None})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg.to_dict()))
    assert MirageConfig.from_yaml(path) == cfg


def test_unknown_keys_are_rejected(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cti:\n  std: 2\n")
    with pytest.raises(ConfigError, match="std"):
        MirageConfig.from_yaml(path)


def test_cli_flags_override_the_config_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cci:\n  top_percent: 10\n")
    args = build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", "--config", str(path),
                                      "--cci-top-k", "3", "--cti-std", "0"])
    cfg = config_from_args(args)
    assert cfg.cci.top_k == 3 and cfg.cci.top_percent is None and cfg.cti.std_k == 0
    args = build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", "--cti-threshold", "0.2"])
    assert config_from_args(args).cti.selector == "threshold"
    args = build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", "--config", str(path), "--cti-std", "2"])
    assert config_from_args(args).cti == CTIConfig(std_k=2)


@pytest.mark.parametrize("flags", [["--cci-top-k", "3", "--cci-top-percent", "5"],
                                   ["--cti-std", "2", "--cti-threshold", "0.5"]])
def test_flags_that_select_the_same_thing_exclude_each_other(flags, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl", *flags])
    assert f"argument {flags[2]}: not allowed with argument {flags[0]}" in capsys.readouterr().err


def test_setting_one_selector_clears_the_other():
    """The issue's traps: top_k beside the default top_percent, a threshold beside the std selector."""
    assert (CCIConfig(top_k=3).top_k, CCIConfig(top_k=3).top_percent) == (3, None)
    assert CCIConfig().top_percent == 5.0 and CCIConfig(top_k=None, top_percent=None) == CCIConfig()
    assert CCIConfig(top_percent=10).top_k is None
    cfg = MirageConfig().replace(cci={"top_k": 3})
    assert (cfg.cci.top_k, cfg.cci.top_percent) == (3, None)
    assert MirageConfig().replace(cci={"top_k": 3}).replace(cci={"top_percent": 10}).cci == CCIConfig(top_percent=10)
    assert MirageConfig().replace(cci={"top_k": 3}).replace(cci={"top_k": None}).cci == CCIConfig()
    assert CTIConfig(threshold=1.0).selector == "threshold" and CTIConfig().selector == "std"
    assert CTIConfig(selector="std", threshold=1.0).selector == "std"  # said explicitly: kept
    cfg = MirageConfig().replace(cti={"threshold": 0.5})
    assert (cfg.cti.selector, cfg.cti.threshold) == ("threshold", 0.5)
    assert cfg.replace(cti={"std_k": 2}).cti.selector == "std"  # back to the std selector
    with pytest.raises(ConfigError, match=r"cti\.threshold and cti\.std_k are both set"):
        MirageConfig().replace(cti={"threshold": 0.5, "std_k": 2})
    with pytest.raises(ConfigError, match="set one of top_k and top_percent, not both"):
        MirageConfig().replace(cci={"top_k": 3, "top_percent": 5})
    path_cfg = MirageConfig.from_dict({"cci": {"top_k": 3}, "cti": {"threshold": 0.2}})
    assert (path_cfg.cci.top_percent, path_cfg.cti.selector) == (None, "threshold")


#: Every pipeline flag with its config field and help text, as the commands have always offered them.
PIPELINE_FLAGS = {
    "--prompt": ("prompt", "name", ("prompt template: selfcitation (ALCE, asks for [n] citations), standard, short "
                                    "(a one-line instruction), selfcitation_marked (selfcitation, each document "
                                    "sentence ending with its number), or cora_mgen (CORA mGEN's input format, for "
                                    "encoder-decoders)")),
    "--max-new-tokens": ("generation", "max_new_tokens", "tokens to generate when an item has no output"),
    "--sample": ("generation", "do_sample", "sample answers (seeds then differ) instead of greedy"),
    "--temperature": ("generation", "temperature", "sampling temperature"),
    "--top-p": ("generation", "top_p", "nucleus sampling p"),
    "--seed": ("generation", "seed", "generation seed"),
    "--cti-metric": ("cti", "metric", "kl_noctx_ctx (reference, default), kl_ctx_noctx (paper), js, prob_diff"),
    "--cti-std": ("cti", "std_k", "CTI: keep tokens with score >= mean + K*std (MIRAGE-EX); default 1"),
    "--cti-threshold": ("cti", "threshold", "CTI: calibrated fixed threshold (MIRAGE-CAL)"),
    "--cti-std-kind": ("cti", "std_kind", ("the std of mean + K*std: sample (inseq, default) or population "
                                           "(the authors' scripts; a two-token answer then cites its larger token)")),
    "--cti-threshold-floor": ("cti", "threshold_floor", ("none (default) or mean: never select a token below its "
                                                         "answer's mean score, whatever the threshold (the authors' "
                                                         "scripts; matters for calibrated thresholds)")),
    "--cci-method": ("cci", "method", ("saliency (default), input_x_gradient, integrated_gradients (gradients of "
                                       "the contrastive target), or a document method that scores every context "
                                       "token: attention_last, attention_all, rollout, attnlrp (its rows of the "
                                       "selected tokens)")),
    "--cci-top-k": ("cci", "top_k", "CCI: keep the N most salient context tokens"),
    "--cci-top-percent": ("cci", "top_percent", "CCI: keep the top P%% of context tokens (default 5)"),
    "--cci-percent-rule": ("cci", "percent_rule", "range (max - p(max-min), reference code) or percentile"),
    "--cci-batch-size": ("cci", "batch_size", ("selected tokens per backward pass (default: as many as fit the "
                                               "budget or free memory; one on a CPU without checkpointing)")),
    "--cci-precision": ("cci", "precision", ("model (default: the model's dtype), bfloat16 or float16: CCI's passes "
                                             "under autocast, faster on GPUs and CPUs with AMX/AVX512-BF16; CTI and "
                                             "the selected tokens stay exact, saliency is approximate")),
    "--cci-target": ("cci", "target", ("attributed quantity: logprob (log p(y) - log p(y_nc); inseq, the authors' "
                                       "ELI5 script; the default) or prob (p(y) - p(y_nc); the paper's Eq. 2, "
                                       "the authors' XOR-AttriQA script; the default of mirage score "
                                       "xor-attriqa)")),
    "--max-citations": ("aggregation", "max_citations", "at most N documents cited per sentence (default 3)"),
    "--context": ("aggregation", "context", ("context tokens to attribute to: all (reference, default) or content "
                                             "(document titles and texts, not the prompt's scaffolding)")),
    "--keep-saliency": ("aggregation", "keep_saliency",
                        "keep the whole saliency matrix (selected tokens x context tokens)"),
    "--citation-rule": ("aggregation", "rule", ("reference (default: the documents behind the context-sensitive "
                                                "tokens) or likelihood (the passage-likelihood classifier: passage "
                                                "likelihoods and the largest |CTI|, no CCI; 'learned' is its old "
                                                "name) or selfcite (SelfCite's reward: per sentence the best of "
                                                "every 1- or 2-document set, by its likelihood with only them minus "
                                                "without them) or selfcite_answer (the same reward over the whole "
                                                "answer: one set for the answer, cited by the sentences it makes "
                                                "likelier)")),
    "--learned-model": ("aggregation", "learned_model", ("classifier file for --citation-rule likelihood, or "
                                                         "shipped:MODEL (default: the one shipped for the embedded "
                                                         "model)")),
    "--doc-ranking": ("aggregation", "ranking", ("order of a sentence's cited documents: shares (summed per-token "
                                                 "shares, default) or saliency (summed raw saliency, the authors' "
                                                 "ELI5 script)")),
}


def test_pipeline_flags_come_from_the_config_fields(capsys, monkeypatch):
    found = {f.metadata["flag"]: (section, f.name, f.metadata["help"]) for section, f, _kind in pipeline_flags()}
    assert found == PIPELINE_FLAGS
    kinds = {f.metadata["flag"]: kind for _section, f, kind in pipeline_flags()}
    assert kinds["--cti-std"] is float and kinds["--cci-top-k"] is int and kinds["--sample"] is bool
    assert kinds["--cti-metric"] is str and kinds["--cci-percent-rule"] is str
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option: no help text wrapped
    with pytest.raises(SystemExit):
        build_parser().parse_args(["attribute", "--help"])
    shown = capsys.readouterr().out
    for flag, (_section, _field, help_text) in PIPELINE_FLAGS.items():
        assert flag in shown and help_text.replace("%%", "%") in shown


def test_every_flag_parses_into_its_field():
    argv = ["attribute", "in.json", "-o", "o.jsonl", "--prompt", "standard", "--max-new-tokens", "7", "--sample",
            "--temperature", "0.5", "--top-p", "0.9", "--seed", "3", "--cti-metric", "js", "--cti-std", "2",
            "--cci-method", "input_x_gradient", "--cci-top-percent", "10", "--cci-percent-rule", "percentile",
            "--cci-batch-size", "4", "--max-citations", "2"]
    cfg = config_from_args(build_parser().parse_args(argv))
    assert cfg.prompt.name == "standard" and cfg.generation == GenerationConfig(7, True, 0.5, 0.9, 3)
    assert (cfg.cti.metric, cfg.cti.std_k) == ("js", 2.0)
    assert (cfg.cci.method, cfg.cci.top_percent, cfg.cci.top_k, cfg.cci.percent_rule, cfg.cci.batch_size) == (
        "input_x_gradient", 10.0, None, "percentile", 4)
    assert cfg.aggregation.max_citations == 2
    assert config_from_args(build_parser().parse_args(["attribute", "in.json", "-o", "o.jsonl"])) == MirageConfig()


# --- types and finiteness -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: CTIConfig(std_k="one"), "cti.std_k must be a finite number, got 'one'."),
        (lambda: CTIConfig(std_k=float("nan")), "cti.std_k must be a finite number, got nan."),
        (lambda: CTIConfig(std_k=float("inf")), "cti.std_k must be a finite number, got inf."),
        (lambda: CTIConfig(std_k=-math.inf), "cti.std_k must be a finite number, got -inf."),
        (lambda: CTIConfig(std_k=True), "cti.std_k must be a finite number, got True."),
        (lambda: CTIConfig(selector="threshold", threshold=math.nan), "cti.threshold must be a finite number, got nan"),
        (lambda: CTIConfig(selector="threshold", threshold="0.2"), "cti.threshold must be a finite number, got '0.2'"),
        (lambda: CTIConfig(metric=["js"]), "cti.metric=['js'] is not valid"),
        (lambda: CCIConfig(top_k=3.7, top_percent=None), "cci.top_k must be an integer >= 1, got 3.7."),
        (lambda: CCIConfig(top_k=0, top_percent=None), "cci.top_k must be an integer >= 1, got 0."),
        (lambda: CCIConfig(top_k=True, top_percent=None), "cci.top_k must be an integer >= 1, got True."),
        (lambda: CCIConfig(top_k="3", top_percent=None), "cci.top_k must be an integer >= 1, got '3'."),
        (lambda: CCIConfig(top_percent=math.nan), "cci.top_percent must be a number in (0, 100], got nan."),
        (lambda: CCIConfig(top_percent="5"), "cci.top_percent must be a number in (0, 100], got '5'."),
        (lambda: CCIConfig(batch_size=0), "cci.batch_size must be an integer >= 1, got 0; null adapts it to free"),
        (lambda: CCIConfig(batch_size=2.5), "cci.batch_size must be an integer >= 1, got 2.5"),
        (lambda: CCIConfig(ig_steps=math.inf), "cci.ig_steps must be an integer >= 1, got inf."),
        (lambda: GenerationConfig(max_new_tokens="abc"),
         "generation.max_new_tokens must be an integer >= 1, got 'abc'."),
        (lambda: GenerationConfig(max_new_tokens=True), "generation.max_new_tokens must be an integer >= 1, got True."),
        (lambda: GenerationConfig(max_new_tokens=0), "generation.max_new_tokens must be an integer >= 1, got 0."),
        (lambda: GenerationConfig(temperature=0), "generation.temperature must be a finite number > 0, got 0; use do_"),
        (lambda: GenerationConfig(temperature=math.nan), "generation.temperature must be a finite number > 0, got nan"),
        (lambda: GenerationConfig(top_p=1.5), "generation.top_p must be a number in (0, 1], got 1.5."),
        (lambda: GenerationConfig(do_sample="false"), "generation.do_sample must be true or false, got 'false'."),
        (lambda: GenerationConfig(do_sample=1), "generation.do_sample must be true or false, got 1."),
        (lambda: GenerationConfig(seed=-1), "generation.seed must be an integer in [0, 2**63), got -1."),
        (lambda: GenerationConfig(seed=2**64), "generation.seed must be an integer in [0, 2**63)"),
        (lambda: AggregationConfig(max_citations=2.5), "aggregation.max_citations must be an integer >= 1, got 2.5."),
        (lambda: AggregationConfig(max_citations=False),
         "aggregation.max_citations must be an integer >= 1, got False"),
        (lambda: AggregationConfig(top_context_tokens=-1), "aggregation.top_context_tokens must be an integer >= 0"),
        (lambda: PromptConfig(name=3), "prompt.name must be a string, got 3."),
        (lambda: PromptConfig(path=["a.yaml"]), "prompt.path must be a string, got ['a.yaml']; or null."),
        (lambda: PromptConfig(chat_template="yes"), "prompt.chat_template must be true or false, got 'yes'"),
        (lambda: PromptConfig(system=1), "prompt.system must be a string, got 1"),
    ],
)
def test_wrong_types_and_non_finite_values_are_config_errors(make, message):
    with pytest.raises(ConfigError) as err:
        make()
    assert str(err.value).startswith(message)


def test_long_values_are_shortened_in_messages():
    with pytest.raises(ConfigError) as err:
        CTIConfig(std_k="x" * 1000)
    assert len(str(err.value)) < 120


def test_numbers_are_normalised():
    """Int-valued floats (YAML ``3.0``) become ints; ints and numpy scalars in float fields become floats."""
    np = pytest.importorskip("numpy")
    cci = CCIConfig(top_k=3.0, top_percent=None, batch_size=np.int64(4))
    assert cci.top_k == 3 and type(cci.top_k) is int and type(cci.batch_size) is int
    cti = CTIConfig(std_k=2, threshold=np.float32(0.5))
    assert type(cti.std_k) is float and type(cti.threshold) is float and cti.threshold == 0.5
    assert GenerationConfig(max_new_tokens=8.0, temperature=1).max_new_tokens == 8
    assert CTIConfig(std_k=-0.5).std_k == -0.5 and CTIConfig(selector="threshold", threshold=0).threshold == 0.0
    assert PromptConfig(path=__import__("pathlib").Path("p.yaml")).path == "p.yaml"
    assert PromptConfig(chat_template=None, system=None).chat_template is None


def test_valid_values_round_trip_through_json():
    import json

    cfg = MirageConfig().replace(cti={"std_k": 0}, cci={"top_k": 2.0, "top_percent": None})
    assert json.loads(json.dumps(cfg.to_dict(), allow_nan=False)) == cfg.to_dict()
    assert MirageConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "text, message",
    [
        ("cti: 5\n", "config section 'cti' must be a mapping of fields, got int."),
        ("cci: [1, 2]\n", "config section 'cci' must be a mapping of fields, got list."),
        ("generation: abc\n", "config section 'generation' must be a mapping of fields, got str."),
        ("cti:\n  std_k: one\n", "cti.std_k must be a finite number, got 'one'."),
        ("cti:\n  std_k: .nan\n", "cti.std_k must be a finite number, got nan."),
        ("cti:\n  std_k: .inf\n", "cti.std_k must be a finite number, got inf."),
        ("cci:\n  top_k: 3.7\n  top_percent: null\n", "cci.top_k must be an integer >= 1, got 3.7."),
        ("generation:\n  max_new_tokens: abc\n", "generation.max_new_tokens must be an integer >= 1, got 'abc'."),
        ("generation:\n  max_new_tokens: true\n", "generation.max_new_tokens must be an integer >= 1, got True."),
        ("aggregation:\n  max_citations: 2.5\n", "aggregation.max_citations must be an integer >= 1, got 2.5."),
        ("cti:\n  1: 2\n", "Unknown key(s) ['1'] in config section 'cti'"),
        ("bogus: {}\n", "Unknown config section 'bogus'"),
    ],
)
def test_bad_yaml_values_are_config_errors_naming_the_file(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        MirageConfig.from_yaml(path)
    assert str(err.value) == f"{path}: {message}" or str(err.value).startswith(f"{path}: {message}")


def test_yaml_int_valued_floats_are_accepted(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cci:\n  top_k: 3.0\n  top_percent: null\ngeneration:\n  max_new_tokens: 64.0\ncti:\n  std_k: 0\n")
    cfg = MirageConfig.from_yaml(path)
    assert cfg.cci.top_k == 3 and cfg.generation.max_new_tokens == 64 and cfg.cti.std_k == 0.0


def test_empty_sections_and_files_mean_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("cti:\n")
    assert MirageConfig.from_yaml(path) == MirageConfig()
    path.write_text("")
    assert MirageConfig.from_yaml(path) == MirageConfig()
    assert MirageConfig.from_dict(None) == MirageConfig()


@pytest.mark.parametrize("data", [[1, 2], "cti", 5])
def test_from_dict_needs_a_mapping(data):
    with pytest.raises(ConfigError, match="a config must be a mapping of sections"):
        MirageConfig.from_dict(data)


def test_replace_checks_sections_and_keys():
    cfg = MirageConfig()
    with pytest.raises(ConfigError, match=r"Unknown key\(s\) \['std'\] in config section 'cti'"):
        cfg.replace(cti={"std": 1})
    with pytest.raises(ConfigError, match="Unknown config section 'ctx'"):
        cfg.replace(ctx={"std_k": 1})
    with pytest.raises(ConfigError, match="config section 'cti' must be a mapping of fields, got int"):
        cfg.replace(cti=5)
    with pytest.raises(ConfigError, match="cti.std_k must be a finite number, got nan"):
        cfg.replace(cti={"std_k": float("nan")})
    assert cfg.replace(cti={}) == cfg


def test_sections_must_be_section_objects():
    with pytest.raises(ConfigError, match="MirageConfig.cti must be a CTIConfig, got dict"):
        MirageConfig(cti={"std_k": 2})


def test_missing_config_file(tmp_path):
    path = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError, match=rf"^{path}: config file not found; give the path of a YAML config file"):
        MirageConfig.from_yaml(path)


def test_directory_instead_of_a_config_file(tmp_path):
    with pytest.raises(ConfigError, match=rf"^{tmp_path}: is a directory, not a config file; give the path"):
        MirageConfig.from_yaml(tmp_path)


def test_binary_config_file(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x01" * 4)
    with pytest.raises(ConfigError, match=rf"^{path}: not a UTF-8 text file .*give the path of a YAML config file"):
        MirageConfig.from_yaml(path)


def test_unreadable_config_file(tmp_path):
    import os

    path = tmp_path / "c.yaml"
    path.write_text("cti: {}\n")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            # Running as root, permissions are not enforced: a file whose read fails for root too stands in
            # (reading /proc/self/mem from offset 0 is an I/O error on Linux).
            path.chmod(0o600)
            path.unlink()
            path.symlink_to("/proc/self/mem")
        with pytest.raises(ConfigError, match=rf"^{path}: cannot read the config file"):
            MirageConfig.from_yaml(path)
    finally:
        if path.exists() and not path.is_symlink():
            path.chmod(0o600)


@pytest.mark.parametrize("text", ["cti: [1, 2\n", "cti:\n  std_k: 1\n bad indent: 2\n", "a: b: c\n", "\tcti: {}\n"])
def test_invalid_yaml_names_the_file_and_line(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{path}: not valid YAML at line \d+, column \d+ \(.+\); fix the syntax"):
        MirageConfig.from_yaml(path)
