"""Model loading fails early and clearly: bad devices and dtypes, folders without weights, an unreachable hub."""

import importlib
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch

from mirage.attribution import models
from mirage.attribution.models import (
    ModelLoadError,
    checkpoints,
    default_device,
    hub_reachable,
    load_model,
    loading,
    resolve_device,
    resolve_dtype,
)
from mirage.cli import main

ROOT = Path(__file__).resolve().parents[2]
UNROUTABLE = "https://192.0.2.1"  # TEST-NET-1 (RFC 5737): never answers
#: Seconds a load may take when the hub is unreachable: the 3 s probe plus a look in the local cache. Without the
#: probe, transformers retries the hub for 20 to 90 s first.
FAST = 10


@pytest.fixture
def timer():
    """Time a call, with transformers' model classes imported beforehand so import time is not counted."""
    import transformers

    transformers.AutoConfig, transformers.AutoModelForCausalLM, transformers.AutoTokenizer  # noqa: B018
    return time.monotonic


@pytest.fixture(autouse=True)
def online_by_default(monkeypatch):
    """No proxy or offline setting from the environment leaks into these tests."""
    for key in list(os.environ):
        if key.lower().endswith("_proxy") or key in {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_ENDPOINT"}:
            monkeypatch.delenv(key)
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def _no_probe(*_args, **_kwargs):
    raise AssertionError("the hub must not be probed here")


def _tiny_config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                       num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64)


def _write_tokenizer(folder):
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "the", "capital", "of", "france", "is", "paris"]
    backend = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.save_pretrained(folder)


def write_checkpoint(folder, *, weights=True, tokenizer=True):
    from transformers import LlamaForCausalLM

    folder.mkdir(parents=True, exist_ok=True)
    cfg = _tiny_config()
    if weights:
        torch.manual_seed(0)
        LlamaForCausalLM(cfg).save_pretrained(folder)
    else:
        cfg.save_pretrained(folder)
    if tokenizer:
        _write_tokenizer(folder)
    return folder


# --- devices and dtypes ---------------------------------------------------------------------------------------------


def test_bogus_device_is_a_model_load_error():
    with pytest.raises(ModelLoadError) as err:
        resolve_device("bogus")
    assert str(err.value) == "device='bogus' is not a torch device; use cpu, cuda, cuda:0 or mps."


def test_bogus_device_fails_before_anything_is_loaded(monkeypatch):
    monkeypatch.setattr(loading, "embedded_checkpoint", _no_probe)
    with pytest.raises(ModelLoadError, match="device='bogus' is not a torch device"):
        load_model("smollm2-135m-instruct", device="bogus")


@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda"), 0])
def test_cuda_without_cuda_is_a_model_load_error(monkeypatch, device):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelLoadError, match="CUDA is not available"):
        resolve_device(device)


def test_cuda_without_cuda_fails_in_load_model(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelLoadError, match="CUDA is not available"):
        load_model(str(tmp_path / "never-read"), device="cuda")


def test_cuda_index_past_the_visible_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ModelLoadError, match=r"only 1 CUDA device\(s\) are visible"):
        resolve_device("cuda:3")
    assert resolve_device("cuda:0") == torch.device("cuda", 0)


@pytest.mark.parametrize("device", ["meta", 1.5, True, -1, "cuda:-1"])
def test_devices_a_model_cannot_run_on(device):
    with pytest.raises(ModelLoadError, match="use cpu, cuda, cuda:0 or mps"):
        resolve_device(device)


def test_good_devices():
    assert resolve_device(None) == default_device()
    assert resolve_device("auto") == default_device()
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device(" cpu ") == torch.device("cpu")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


@pytest.mark.parametrize(
    "dtype, expected",
    [("bf16", torch.bfloat16), ("float16", torch.float16), ("FP32", torch.float32), ("torch.bfloat16", torch.bfloat16),
     (torch.float16, torch.float16), (None, torch.float32), ("auto", torch.float32)],
)
def test_resolve_dtype(dtype, expected):
    assert resolve_dtype(dtype, torch.device("cpu")) == expected


@pytest.mark.parametrize("dtype", ["float8", "int4", 16, ["bf16"]])
def test_bad_dtype_is_a_model_load_error(dtype):
    with pytest.raises(ModelLoadError, match=r"is not supported; use one of .*'bf16'"):
        resolve_dtype(dtype, torch.device("cpu"))


def test_bad_dtype_fails_before_anything_is_loaded(monkeypatch):
    monkeypatch.setattr(loading, "embedded_checkpoint", _no_probe)
    with pytest.raises(ModelLoadError, match="dtype='float8'"):
        load_model("smollm2-135m-instruct", device="cpu", dtype="float8")


# --- local folders --------------------------------------------------------------------------------------------------


def test_a_complete_local_folder_loads(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "hub_reachable", _no_probe)
    folder = write_checkpoint(tmp_path / "tiny")
    lm = load_model(folder, device="cpu")  # a pathlib.Path works too
    assert lm.name == str(folder) and lm.device == torch.device("cpu") and lm.dtype == torch.float32
    assert lm.context_window == 64 and not lm.is_encoder_decoder
    assert lm.tokenizer("the capital of france")["input_ids"][-1] == 6


def test_a_folder_without_weights_names_the_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoints, "hub_reachable", _no_probe)
    folder = write_checkpoint(tmp_path / "no-weights", weights=False)
    assert (folder / "config.json").exists()
    with pytest.raises(ModelLoadError) as err:
        load_model(str(folder), device="cpu")
    message = str(err.value)
    assert message.startswith(f"Cannot load model '{folder}': the folder {folder} has config.json but its weights")
    assert "weights are missing" in message
    assert "*.safetensors" in message and "pytorch_model*.bin" in message
    assert err.value.__cause__ is None  # found before transformers was asked


def test_a_folder_with_only_a_gguf_file_says_so(tmp_path):
    folder = write_checkpoint(tmp_path / "gguf-only", weights=False, tokenizer=False)
    (folder / "model.Q4.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelLoadError, match=r"weights are missing.*holds only model\.Q4\.gguf"):
        load_model(str(folder), device="cpu")


def test_a_folder_without_config_json(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(ModelLoadError, match="has no config.json"):
        load_model(str(tmp_path), device="cpu")


def test_a_file_instead_of_a_folder(tmp_path):
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    with pytest.raises(ModelLoadError, match="is a file, not a checkpoint folder"):
        load_model(str(file), device="cpu")


@pytest.mark.parametrize("weights_file", ["model.safetensors", "pytorch_model.bin"])
def test_corrupt_weights_are_a_model_load_error(tmp_path, weights_file):
    folder = write_checkpoint(tmp_path / "corrupt", weights=False)
    (folder / weights_file).write_bytes(b"not a weights file" * 8)
    with pytest.raises(ModelLoadError, match=r"Cannot load model '.*corrupt' \(weights\): ") as err:
        load_model(str(folder), device="cpu")
    assert len(str(err.value).splitlines()) == 1


def test_a_folder_without_tokenizer_files(tmp_path):
    folder = write_checkpoint(tmp_path / "no-tokenizer", tokenizer=False)
    with pytest.raises(ModelLoadError, match=r"Cannot load model '.*no-tokenizer' \(tokenizer\): "):
        load_model(str(folder), device="cpu")


def test_a_missing_path_fails_at_once_without_probing_the_hub(monkeypatch):
    monkeypatch.setattr(checkpoints, "hub_reachable", _no_probe)
    with pytest.raises(ModelLoadError, match="^Cannot load model '/nonexistent/model-folder': it is not an embedded "
                                             "model .*no folder /nonexistent/mod"):
        load_model("/nonexistent/model-folder", device="cpu")


# --- the Hugging Face hub -------------------------------------------------------------------------------------------


def test_unknown_name_with_an_unreachable_hub_fails_fast(monkeypatch, timer):
    monkeypatch.setattr(checkpoints, "hub_reachable", lambda *a, **k: False)
    start = timer()
    with pytest.raises(ModelLoadError) as err:
        load_model("nobody-x/not-a-model-y", device="cpu")
    assert timer() - start < FAST
    assert str(err.value).startswith(
        "model 'nobody-x/not-a-model-y' is not an embedded model (smollm2-135m-instruct, gemma3-270m, "
        "smollm2-135m-cite, smollm2-135m-cite-follow), not a local "
        "folder, and the Hugging Face hub is unreachable from here; give a local checkpoint folder or an embedded name"
    )


def test_real_probe_of_an_unreachable_endpoint_fails_fast(monkeypatch, timer):
    """No stub: the probe really connects (and times out) before the load gives up on the hub."""
    monkeypatch.setenv("HF_ENDPOINT", UNROUTABLE)
    start = timer()
    with pytest.raises(ModelLoadError, match="the Hugging Face hub is unreachable from here"):
        load_model("nobody-x/not-a-model-y", device="cpu")
    assert timer() - start < FAST


def test_offline_mode_skips_the_probe(monkeypatch, timer):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(checkpoints, "hub_reachable", _no_probe)
    start = timer()
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache .*HF_HUB_OFFLINE"):
        load_model("nobody-x/not-a-model-y", device="cpu")
    assert timer() - start < FAST


def _fake_hub_cache(root, repo_id, **kwargs):
    """A Hugging Face cache holding ``repo_id`` at one snapshot, as ``hf_hub_download`` lays it out."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    write_checkpoint(repo / "snapshots" / commit, **kwargs)
    return root


def test_a_cached_model_still_loads_when_the_hub_is_unreachable(monkeypatch, tmp_path, timer):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(_fake_hub_cache(tmp_path / "hub", "tiny-org/tiny-model")))
    monkeypatch.setattr(checkpoints, "hub_reachable", lambda *a, **k: False)
    start = timer()
    lm = load_model("tiny-org/tiny-model", device="cpu")
    assert timer() - start < FAST  # from the cache at once, never asking the hub
    assert lm.name == "tiny-org/tiny-model" and lm.context_window == 64


def test_a_partly_cached_model_says_only_the_cache_was_searched(monkeypatch, tmp_path, timer):
    from huggingface_hub import constants

    cache = _fake_hub_cache(tmp_path / "hub", "tiny-org/no-weights", weights=False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(checkpoints, "hub_reachable", lambda *a, **k: False)
    start = timer()
    with pytest.raises(ModelLoadError, match=r"model 'tiny-org/no-weights' \(weights\): .*only the local Hugging Face"):
        load_model("tiny-org/no-weights", device="cpu")
    assert timer() - start < FAST


@pytest.fixture
def listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    yield server.getsockname()[1]
    server.close()


def test_probe_reachable_endpoint(listening_port):
    assert hub_reachable(f"http://127.0.0.1:{listening_port}", timeout=3)


def test_probe_closed_port_and_unroutable_host():
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert not hub_reachable(f"http://127.0.0.1:{port}", timeout=3)
    start = time.monotonic()
    assert not hub_reachable(UNROUTABLE, timeout=0.5)
    assert time.monotonic() - start < 5
    assert not hub_reachable("https://", timeout=0.5)


def test_probe_goes_through_the_https_proxy(monkeypatch, listening_port):
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{listening_port}")
    assert hub_reachable(UNROUTABLE, timeout=3)
    monkeypatch.setenv("NO_PROXY", "192.0.2.1")
    assert not hub_reachable(UNROUTABLE, timeout=0.5)


def test_probe_uses_hf_endpoint(monkeypatch, listening_port):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listening_port}")
    assert hub_reachable(timeout=3)


# --- the embedded models' cache -------------------------------------------------------------------------------------


def test_what_a_killed_conversion_left_in_the_cache_is_removed_on_the_next_start(tmp_path, monkeypatch):
    """A first-use conversion killed midway (SIGKILL: no ``finally`` runs) leaves its temporary folder, a model's
    worth of weights: the next load removes those of processes that are gone, and of the older, unnamed kind once
    stale, and nothing else (a live conversion's, a finished model, anything not mirage's)."""
    import subprocess
    import sys

    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path))
    cache = tmp_path / "models"
    (cache / "smollm2-135m-instruct").mkdir(parents=True)  # a converted model: no conversion this time
    (cache / "smollm2-135m-instruct" / "mirage-cache.json").write_text(json.dumps({"format": models.CACHE_FORMAT}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    live = cache / f".smollm2-135m-instruct.{os.getpid()}.x1y2z3w4.tmp"  # this process's: it is alive
    dead = cache / f".smollm2-135m-instruct.{gone}.abcdefgh.tmp"
    old = cache / ".smollm2-135m-instruct-k2x_9qab"  # from before names carried the process id
    recent_old = cache / ".gemma3-270m-abcdefgh"
    others = [cache / ".notes", cache / ".unrelated.12.abc.tmp.bak", cache / ".other-model-abcdefgh",
              cache / f".not-a-model.{gone}.abcdefgh.tmp"]
    for folder in (live, dead, old, recent_old, *others):
        folder.mkdir()
    for folder in (live, dead, old):
        (folder / "model.safetensors").write_bytes(b"\0" * 64)
    hours_ago = time.time() - 2 * 3600
    for folder in (old, others[2]):
        os.utime(folder, (hours_ago, hours_ago))
    gguf = tmp_path / "gguf"
    gguf.mkdir()
    dead_gguf = gguf / f".gemma-3-270m-q4_k_m.gguf.{gone}.abcdefgh.tmp"
    dead_gguf.mkdir()
    assert models.embedded_checkpoint("smollm2-135m-instruct") == cache / "smollm2-135m-instruct"
    assert not dead.exists() and not old.exists() and not dead_gguf.exists()
    assert live.is_dir() and recent_old.is_dir() and all(folder.is_dir() for folder in others)
    assert (cache / "smollm2-135m-instruct" / "mirage-cache.json").is_file()


def test_a_conversion_writes_aside_and_renames(tmp_path, monkeypatch):
    """An assembled GGUF file is written aside and renamed, so a file cut short never stays under the real name (one
    left by an earlier stopped run is assembled again); the conversion's temporary folder is named for its process,
    as the clean-up above recognises it."""
    monkeypatch.setenv("MIRAGE_CACHE_DIR", str(tmp_path))
    seen = []

    def assemble(path):  # as the package's: a file already there is checked, and refused when it is not whole
        path = Path(path)
        seen.append(path)
        if path.exists() and path.read_bytes() != b"GGUF":
            raise FileExistsError(f"{path} already exists with an unexpected sha256")
        path.write_bytes(b"GGUF")
        return path

    spec = models.embedded_models()["gemma3-270m"]
    module, name = spec.assemble.split(":")
    monkeypatch.setattr(importlib.import_module(module), name, assemble)
    target = tmp_path / "gguf" / spec.gguf_file
    target.parent.mkdir()
    target.write_bytes(b"cut sh")  # left by a run stopped while assembling
    assert models.gguf_path(spec) == target and target.read_bytes() == b"GGUF"
    assert seen[-1].parent != target.parent and seen[-1].parent.parent == target.parent
    assert [p.name for p in target.parent.iterdir()] == [spec.gguf_file]
    folder = models.temporary_folder(tmp_path, "gemma3-270m")
    match = models.TEMPORARY_NAME.fullmatch(folder.name)
    assert match and match["name"] == "gemma3-270m" and int(match["pid"]) == os.getpid()


def test_a_mistyped_model_name_names_the_nearest_embedded_one(capsys, tmp_path):
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"question": "Who?", "docs": [{"text": "Ann did."}]}]), encoding="utf-8")
    assert main(["attribute", str(items), "-o", str(tmp_path / "o.jsonl"), "--model", "smollm2-135"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("mirage: error: ") and "did you mean 'smollm2-135m-" in err[-1]
    assert not any("Traceback" in line for line in err)


def test_a_checkpoint_whose_weights_do_not_fit_its_config_is_a_one_line_error(tmp_path):
    """Run as a user runs it, in a fresh process (transformers prints its load report first; then one line)."""
    import subprocess
    import sys

    folder = write_checkpoint(tmp_path / "ckpt")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["intermediate_size"] = 48  # the safetensors hold 32
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    items = tmp_path / "items.json"
    items.write_text(json.dumps([{"question": "the capital of france", "docs": [{"text": "paris"}]}]),
                     encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "mirage", "attribute", str(items), "-o", str(tmp_path / "o.jsonl"),
                          "--model", str(folder)], check=False, capture_output=True, text=True, cwd=ROOT,
                         timeout=600)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("mirage: error: ") and str(folder) in last
    assert "the weights' shapes do not match its config.json" in last
