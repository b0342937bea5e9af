"""Loading the models people use (#42, #39): adapters by ``--adapter`` or as ``--model``, a model split over devices
by accelerate's ``device_map`` (gradients through its hooks, the same scores), 4-/8-bit weights refused in one line
where bitsandbytes cannot run, the placement options checked in configs and flags, and ranks of a sharded run each
with its own device map."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mirage import Mirage
from mirage.attribution.models import (
    ModelLoadError,
    embedded_adapters,
    load_model,
    parse_device_map,
    rank_device_group,
    resolve_placement,
)
from mirage.cli import main
from mirage.config import ConfigError
from mirage.runs.experiment import ExperimentConfig

ROOT = Path(__file__).resolve().parents[2]
ADAPTER = embedded_adapters()["smollm2-135m-cite"].path  # the adapter mirage ships: a real `mirage tune` output
#: The embedded model's layers split between the CPU and the disk (accelerate offloads the disk half and moves its
#: weights in through hooks at every pass): a model spread over two "devices" on a machine without GPUs.
SPLIT = {"model.embed_tokens": "cpu", **{f"model.layers.{i}": ("cpu" if i < 15 else "disk") for i in range(30)},
         "model.norm": "cpu", "model.rotary_emb": "cpu", "lm_head": "cpu"}


def _logits(lm, ids=(1, 504, 3320, 314, 260, 2858, 30)) -> torch.Tensor:
    with torch.no_grad():
        return lm.model(torch.tensor([list(ids)], device=lm.device)).logits


def test_an_adapter_folder_loads_by_adapter_or_as_the_model_and_not_as_a_bare_model(one_thread):
    shipped = Mirage.from_pretrained("smollm2-135m-cite").lm
    by_flag = Mirage.from_pretrained(adapter=str(ADAPTER)).lm  # its base model: the one the adapter names
    assert by_flag.name == "smollm2-135m-instruct+smollm2-135m-cite"
    assert torch.equal(_logits(by_flag), _logits(shipped))
    as_model = Mirage.from_pretrained(str(ADAPTER)).lm  # `--model DIR/adapter`: the folder is taken as the adapter
    assert torch.equal(_logits(as_model), _logits(shipped))
    with pytest.raises(ModelLoadError) as err:  # the low-level loader names the switch
        load_model(str(ADAPTER))
    assert "\n" not in str(err.value) and "--adapter" in str(err.value) and "smollm2-135m-instruct" in str(err.value)
    with pytest.raises(ModelLoadError) as err:  # onto another base model: refused, naming the right one
        Mirage.from_pretrained("gemma3-270m", adapter=str(ADAPTER))
    assert "trained on the base model 'smollm2-135m-instruct'" in str(err.value) and "architecture differs" in str(
        err.value)


def test_cli_attribute_with_an_adapter_and_its_fingerprint(tmp_path, xor_item, capsys):
    """`mirage attribute --model DIR/adapter` (the command #39 found failing) and `--adapter DIR` attribute with the
    tuned model; its results are not mixed with the base model's."""
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({**xor_item, "id": "x"}) + "\n")
    as_model, by_flag = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert main(["attribute", str(items), "-o", str(as_model), "--model", str(ADAPTER), "--quiet"]) == 0
    assert main(["attribute", str(items), "-o", str(by_flag), "--adapter", str(ADAPTER), "--quiet"]) == 0
    a, b = (json.loads(p.read_text().splitlines()[0]) for p in (as_model, by_flag))
    assert a["answer"] == b["answer"] and a["tokens"] == b["tokens"] and a["sentences"] == b["sentences"]
    capsys.readouterr()
    # the same -o with the base model alone: another model's outputs, refused before anything loads
    assert main(["attribute", str(items), "-o", str(by_flag), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "adapter" in err and err.count("\n") == 1
    with_adapter = ExperimentConfig(command="attribute", adapter=str(ADAPTER)).fingerprint()
    assert with_adapter["adapter"] == ExperimentConfig(command="attribute", model=str(ADAPTER)).fingerprint()["adapter"]
    assert "adapter" not in ExperimentConfig(command="attribute").fingerprint()


def _broken_adapter(folder: Path, case: str) -> str:
    """A copy of the shipped adapter's folder broken as ``case`` says; the file the error must name."""
    folder.mkdir()
    for name in ("adapter_config.json", "mirage-adapter.json"):
        (folder / name).write_bytes((ADAPTER / name).read_bytes())
    weights = (ADAPTER / "adapter_model.safetensors").read_bytes()
    if case == "random bytes":
        (folder / "adapter_model.safetensors").write_bytes(os.urandom(4096))
    elif case == "cut short":
        (folder / "adapter_model.safetensors").write_bytes(weights[: len(weights) // 2])
    elif case == "pickle":
        torch.save({"w": torch.zeros(2)}, folder / "adapter_model.bin")
        return "adapter_model.bin"
    elif case == "bad config":
        (folder / "adapter_model.safetensors").write_bytes(weights)
        (folder / "adapter_config.json").write_text('{"r": 8,')
        return "adapter_config.json"
    return "adapter_model.safetensors"  # "no weights": none written


@pytest.mark.parametrize("case", ["random bytes", "cut short", "pickle", "no weights", "bad config"])
@pytest.mark.parametrize("flag", ["--adapter", "--model"])
def test_a_broken_adapter_folder_is_one_line_before_any_output_or_load(tmp_path, xor_item, capsys, monkeypatch,
                                                                       case, flag):
    """Unreadable weights (random bytes, a file cut short), pickle weights, none at all, or an unreadable config:
    one line naming the folder, the file and the fix, before the model loads and before any output file exists
    (not a traceback after empty output files, nor a word about the hub's disk cache)."""
    import mirage.pipeline

    def refuse(*_args, **_kwargs):
        raise AssertionError("no model may load for a broken adapter folder")

    for name in ("load_model", "load_adapter"):
        monkeypatch.setattr(mirage.pipeline, name, refuse)
    folder = tmp_path / "adapter"
    culprit = _broken_adapter(folder, case)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({**xor_item, "id": "x"}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["attribute", str(items), "-o", str(out), flag, str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mirage: error: ") and "Traceback" not in err
    assert str(folder) in err and culprit in err and "disk cache" not in err
    assert "save" in err or "pickle" in err  # the fix
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapter", "items.jsonl"]


def test_quantization_on_a_cpu_is_refused_in_one_line_before_loading(tmp_path, xor_item, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: bitsandbytes may run")
    with pytest.raises(ModelLoadError) as err:
        load_model("smollm2-135m-instruct", quantization="4bit")
    assert "needs bitsandbytes on a CUDA GPU" in str(err.value) and "float32 or bfloat16" in str(err.value)
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps(xor_item) + "\n")
    assert main(["attribute", str(items), "-o", str(tmp_path / "o.jsonl"), "--quantization", "8bit"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quantization='8bit' needs bitsandbytes on a CUDA GPU" in err
    assert not (tmp_path / "o.jsonl").exists()


def test_a_model_split_by_device_map_gives_the_same_cti_and_cci(smollm2, xor_item, one_thread):
    """Half the embedded model's layers offloaded by accelerate (weights on disk, moved in by hooks at each pass):
    gradients flow through the hooks to the input embeddings, and CTI and CCI equal the plain model's."""
    split = load_model("smollm2-135m-instruct", device_map=SPLIT)
    assert hasattr(split.model.model.layers[20], "_hf_hook") and split.model.hf_device_map["model.layers.20"] == "disk"
    assert split.device == torch.device("cpu") and split.dtype == torch.float32
    plain, spread = Mirage(smollm2), Mirage(split)
    prep = plain.prepare(xor_item)
    a = plain.score_tokens(prep, xor_item["output"], targets="all")
    b = spread.score_tokens(spread.prepare(xor_item), xor_item["output"], targets="all")
    assert b.cti.scores == pytest.approx(a.cti.scores, rel=1e-6, abs=1e-7)
    assert b.cti.selected == a.cti.selected and len(b.cci.scores) == len(a.cci.scores) > 0
    for row_a, row_b in zip(a.cci.scores, b.cci.scores):
        assert row_b == pytest.approx(row_a, rel=1e-5, abs=1e-9)
        assert max(row_b) > 0  # a gradient reached the input embeddings through the hooks


def test_placement_options_are_checked_where_they_are_given():
    assert parse_device_map("auto") == "auto"
    assert parse_device_map("model.layers.0=0,lm_head=cuda:1,model.norm=disk") == {
        "model.layers.0": 0, "lm_head": 1, "model.norm": "disk"}
    assert parse_device_map('{"": "cpu"}') == {"": "cpu"}
    for bad, message in [("model.layers.0", "is not KEY=VALUE"), ("x=gpu", "'gpu' is not a device")]:
        with pytest.raises(ModelLoadError, match=message):
            parse_device_map(bad)
    with pytest.raises(ModelLoadError, match="give one of them"):
        resolve_placement(device="cpu", device_map="auto")
    # an experiment file takes the same keys; a bad one is a ConfigError naming it
    exp = ExperimentConfig.from_dict({"device_map": {"model.embed_tokens": "cpu", "lm_head": "cpu"},
                                      "max_memory": {"cpu": "20GiB"}, "memory_budget": "3GB"}, command="attribute")
    assert exp.loading()["device_map"] == {"model.embed_tokens": "cpu", "lm_head": "cpu"}
    with pytest.raises(ConfigError, match="experiment: device_map"):
        ExperimentConfig.from_dict({"device_map": "everywhere"}, command="attribute")
    with pytest.raises(ConfigError, match="experiment.quantization"):
        ExperimentConfig(command="attribute", quantization="3bit")
    # one model per group of GPUs: local rank r of 2-GPU groups gets GPUs 2r and 2r+1, nothing else
    assert rank_device_group(2, local_rank=1, gpu_count=4, per_gpu="70GiB") == {2: 70 * 2**30, 3: 70 * 2**30}
    with pytest.raises(ModelLoadError, match="at most 2 process"):
        rank_device_group(2, local_rank=2, gpu_count=4, per_gpu="70GiB")


def test_every_model_loading_command_takes_the_loading_flags():
    from mirage.cli import build_parser

    for argv in (["attribute"], ["score", "xor-attriqa"], ["score", "eli5"], ["bias"], ["bias-protocol"],
                 ["tune", "eval"], ["tune", "data"]):
        parser = build_parser(argv)
        text = _help(parser, argv)
        for flag in ("--adapter", "--device-map", "--max-memory", "--memory-budget", "--quantization"):
            assert flag in text, (argv, flag)
    from mirage.runs.experiment import loading_args

    args = build_parser(["tune", "eval"]).parse_args(["tune", "eval", "d.jsonl", "-o", "r.json", "--adapter", "run/a",
                                                      "--device-map", "auto", "--memory-budget", "3GB"])
    # tune eval applies its own --adapter (load_tuned): the loading keywords it passes on leave it out
    assert loading_args(args, adapter=False) == {"device_map": "auto", "memory_budget": "3GB"}
    assert loading_args(args)["adapter"] == "run/a"


def _help(parser, argv) -> str:
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    sub = action.choices[argv[0]]
    for name in argv[1:]:
        sub = next(a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction").choices[name]
    return sub.format_help()


def test_ranks_each_with_a_device_map_share_one_run(tmp_path, example_items):
    """Data parallelism over split models (docs/scaling.md): two ranks started by hand (RANK/WORLD_SIZE,
    MIRAGE_SHARD_NO_SYNC=1), each loading the embedded model split by its own device map, attribute their shares;
    one more run without a launcher merges. Every item is attributed once, with the plain model's citations."""
    from mirage.runs.sharding import Shard
    from mirage.runs.store import item_keys

    xor = next(it for it in example_items if it["id"] == "xor-val-0")
    variants = [{**xor, "id": f"xor-{n}"} for n in range(16)]
    keys = item_keys(variants)
    # one item each rank owns (keys hash to ranks), so that both ranks load a split model and attribute
    items = [next(v for v, k in zip(variants, keys) if Shard(rank, 2).owns(k)) for rank in (0, 1)]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(it) + "\n" for it in items))
    out = tmp_path / "out.jsonl"
    split = ",".join(f"{k}={v}" for k, v in SPLIT.items())
    env = {**os.environ, "WORLD_SIZE": "2", "MIRAGE_SHARD_NO_SYNC": "1", "OMP_NUM_THREADS": "1"}
    for rank in (0, 1):
        proc = subprocess.run([sys.executable, "-m", "mirage", "attribute", str(data), "-o", str(out), "--quiet",
                               "--device-map", split], env={**env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                              capture_output=True, text=True, cwd=ROOT, timeout=900, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
    ranks = sorted(p.name for p in tmp_path.glob("out.rank*"))
    assert ranks == ["out.rank0-of-2.jsonl", "out.rank1-of-2.jsonl"]
    assert main(["attribute", str(data), "-o", str(out), "--quiet", "--device-map", split]) == 0  # merges
    records = [json.loads(x) for x in out.read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(it["id"] for it in items)
    plain = Mirage.from_pretrained()
    for rec in records:
        item = next(it for it in items if it["id"] == rec["id"])
        expected = plain.attribute(item["question"], item["docs"], answer=item["output"])
        assert [s["mirage_citations"] for s in rec["sentences"]] == [s.mirage_citations for s in expected.sentences]


def test_attention_without_cudnn_changes_only_the_attention_backend(real_tokenizer):
    """What mirage applies to a model it runs on a GPU (``models.without_cudnn_attention``; cuDNN's attention builds
    a plan per new sequence length: ``profile_gpu.json``) turns cuDNN's attention off for the model's forward pass
    only, and leaves its logits, gradients, signature and generation as they were. No GPU here: the flag is read
    inside the wrapped pass on this CPU; the speed it buys is the stored GPU profile's."""
    import inspect

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.models import without_cudnn_attention

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(config).eval()
    ids = torch.tensor([real_tokenizer("The Ikhwan were formed in 1913.")["input_ids"]])
    embeds = model.get_input_embeddings()(ids).detach()

    def run() -> tuple[torch.Tensor, torch.Tensor, list[int]]:
        leaf = embeds.clone().requires_grad_(True)
        logits = model(inputs_embeds=leaf).logits
        (grad,) = torch.autograd.grad(logits[0, -1].logsumexp(-1), leaf)
        tokens = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)[0].tolist()
        return logits.detach(), grad, tokens

    before = run()
    original = model.forward
    seen = []
    model.model.layers[0].register_forward_hook(lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    assert without_cudnn_attention(without_cudnn_attention(model)) is model
    assert model.forward.__wrapped__ == original  # wrapped once
    after = run()
    assert seen and not any(seen)
    assert torch.backends.cuda.cudnn_sdp_enabled()  # the setting is the pass's alone
    assert torch.equal(before[0], after[0]) and torch.equal(before[1], after[1]) and before[2] == after[2]
    assert "logits_to_keep" in inspect.signature(model.forward).parameters
