"""The config tree: validation on construction, YAML round trip, CLI flags mapped onto it."""

import pytest

from mirage.cli import build_parser, config_from_args
from mirage.config import CCIConfig, ConfigError, CTIConfig, MirageConfig


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
        (lambda: CCIConfig(top_k=None, top_percent=None), "top_k and top_percent"),
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
