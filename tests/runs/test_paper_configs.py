"""The paper's tables as configs (configs/paper/): each recipe runs end to end here on STAND-INS, so that it is known
to work; the real runs (CORA mGEN, Zephyr-7B-β, LLaMA-2-7B-chat, the 11B TRUE judge, the full data) are the users'.

Stand-ins: tiny random models built in memory from small configs around the embedded model's tokenizer and saved to
a temporary folder (an encoder-decoder for CORA mGEN, a causal Llama for the chat models), the tiny random TRUE-style
T5 judge of ``tiny_judges``, and the data slices of tests/data given as DATA in place of the configs' dataset names.
What they check is the recipe (settings, data flow, files written), not any number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mirage import cli
from mirage.runs.experiment import ExperimentConfig

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "configs" / "paper"
DATA = Path(__file__).parents[1] / "data"
XOR_VAL = DATA / "xor_attriqa_match" / "val.jsonl"
ELI5 = DATA / "eli5_alce" / "eli5_eval_sample.json"


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory, real_tokenizer):
    """A tiny random T5 (for CORA mGEN) and a tiny random Llama (for the chat models), saved as checkpoints."""
    from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

    root = tmp_path_factory.mktemp("stand_ins")
    torch.manual_seed(0)
    models = {
        "seq2seq": T5ForConditionalGeneration(T5Config(
            vocab_size=len(real_tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
            num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=real_tokenizer.eos_token_id)),
        "causal": LlamaForCausalLM(LlamaConfig(
            vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)),
    }
    for name, model in models.items():
        model.save_pretrained(root / name)
        real_tokenizer.save_pretrained(root / name)
    return {name: root / name for name in models}


def test_the_configs_name_the_papers_settings():
    table2 = ExperimentConfig.from_yaml(PAPER / "table2_xor_attriqa.yaml", command="xor-attriqa")
    assert table2.model == "gsarti/cora_mgen" and table2.text == "native"
    assert [d.split(":")[1] for d in table2.data] == ["bn", "fi", "ja", "ru", "te"]
    assert table2.calibrate_on == ("xor-attriqa-match:val",)
    assert table2.pipeline.preset == "authors" and table2.pipeline.prompt.name == "cora_mgen"
    for name, model, temperature in (("zephyr", "HuggingFaceH4/zephyr-7b-beta", 0.7),
                                     ("llama2", "meta-llama/Llama-2-7b-chat-hf", 1.0)):
        exp = ExperimentConfig.from_yaml(PAPER / f"table3_eli5_{name}.yaml", command="eli5")
        assert exp.model == model and exp.seeds == (42, 43, 44) and exp.nli == "google/t5_xxl_true_nli_mixture"
        assert exp.pipeline.preset == "authors" and exp.pipeline.aggregation.ranking == "saliency"
        assert exp.pipeline.generation.do_sample and exp.pipeline.generation.temperature == temperature


def test_table2_recipe_runs_on_a_stand_in_encoder_decoder(stand_ins, tmp_path):
    out = tmp_path / "table2"
    assert cli.main(["score", "xor-attriqa", "--config", str(PAPER / "table2_xor_attriqa.yaml"), str(XOR_VAL),
                     "--calibrate-on", str(XOR_VAL), "--model", str(stand_ins["seq2seq"]), "--limit", "3",
                     "--settings", "ex", "cal", "-o", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    for setting in ("ex_top3", "ex_top5pct", "cal_top3", "cal_top5pct", "nli_mt", "nli_orig"):
        assert setting in res["agreement"], setting
    assert res["settings"]["calibrate_by"] == "language" and res["calibration"]["by_language"]
    config = res["settings"]["config"]
    assert config["preset"] == "authors" and config["cci"]["target"] == "prob"
    assert config["aggregation"]["context"] == "content" and config["prompt"]["name"] == "cora_mgen"
    assert res["settings"]["text"] == "native" and (out / "pairs.jsonl").exists()


@pytest.mark.parametrize("table", ["table3_eli5_zephyr", "table3_eli5_llama2"])
def test_table3_recipe_runs_on_a_stand_in_chat_model_and_judge(table, stand_ins, tiny_judges, tmp_path):
    out = tmp_path / table
    assert cli.main(["score", "eli5", "--config", str(PAPER / f"{table}.yaml"), str(ELI5),
                     "--model", str(stand_ins["causal"]), "--nli", str(tiny_judges["t5"]), "--seeds", "42",
                     "--limit", "1", "--ndocs", "2", "--max-new-tokens", "12", "-o", str(out), "--quiet"]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["judge"] == str(tiny_judges["t5"])
    for source in ("self", "mirage"):
        assert 0 <= res["mean"][source]["citation_recall"] <= 100
    config = res["settings"]["config"]
    assert config["preset"] == "authors" and config["aggregation"]["ranking"] == "saliency"
    assert config["cti"]["std_kind"] == "population" and config["generation"]["do_sample"] is True
