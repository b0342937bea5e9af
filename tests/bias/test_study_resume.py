"""``mirage bias`` resumes only its own generations: ``DIR/generations.jsonl`` is opened with the experiment's
settings (model and pipeline configuration, :meth:`mirage.runs.experiment.ExperimentConfig.fingerprint`), so a re-run
with another model or configuration is refused before anything is generated, and the file is left as it was."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mirage.bias.protocol import BiasConfig
from mirage.bias.study import run_bias_study
from mirage.config import MirageConfig
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.store import StoreError

ROWS = Path(__file__).parents[1] / "data" / "xor_bias_rows.jsonl"


def _model(name: str, config: MirageConfig, dtype: str = "torch.float32") -> SimpleNamespace:
    """Enough of a Mirage for the study to open its store; it cannot generate (nothing may be generated)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a generation was attempted")

    return SimpleNamespace(lm=SimpleNamespace(name=name, dtype=dtype), config=config, generate=refuse,
                           attribute=refuse)


@pytest.mark.parametrize("model, config, dtype, says", [
    ("another-model", MirageConfig(), "torch.float32",
     "model: 'smollm2-135m-instruct' in the file, 'another-model' now"),
    ("smollm2-135m-instruct", MirageConfig().replace(cti={"std_k": 0.5}), "torch.float32",
     "config.cti.std_k: 1.0 in the file, 0.5 now"),
    ("smollm2-135m-instruct", MirageConfig(), "torch.bfloat16", "dtype: None in the file, 'bfloat16' now"),
    ("smollm2-135m-instruct", MirageConfig().replace(cci={"precision": "bfloat16"}), "torch.float32",
     "config.cci.precision: None in the file, 'bfloat16' now"),
])
def test_a_rerun_with_other_settings_is_refused(tmp_path, model, config, dtype, says):
    before = ExperimentConfig("bias", model="smollm2-135m-instruct", pipeline=MirageConfig()).fingerprint()
    generations = tmp_path / "generations.jsonl"
    generations.write_text(json.dumps({"key": "xor_bias_rows-1:vanilla:0", "settings": before}) + "\n")
    content = generations.read_bytes()
    with pytest.raises(StoreError, match="holds results made with other settings") as err:
        run_bias_study(str(ROWS), mirage=_model(model, config, dtype), cfg=BiasConfig(k=3, modes=("vanilla",)),
                       output_dir=tmp_path, limit=1)
    assert says in str(err.value)
    assert generations.read_bytes() == content
