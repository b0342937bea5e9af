"""LoRA adapters and tuned models, without loading them: whether a folder is an adapter and holds readable
safetensors weights (:func:`check_adapter_folder`), the base model it names, the record mirage wrote with a tuned
model (:func:`tuned_record`, :func:`trained_prompt_name`), an adapter's digest, and the base model's weight
fingerprint an adapter must fit (:func:`adapter_fits`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models.embedded import embedded_adapters
from mirage.attribution.models.loaded import ModelLoadError

if TYPE_CHECKING:  # torch is imported when a model is loaded or a device checked, so importing mirage stays light
    import torch

__all__ = ["ADAPTER_WEIGHTS", "FINGERPRINT_ROWS", "FINGERPRINT_RTOL", "TIED_EMBEDDINGS_WARNING", "adapter_base_model",
           "adapter_digest", "adapter_fits", "architecture", "check_adapter_folder", "describe", "is_adapter_folder",
           "same_weights", "trained_prompt_name", "tuned_record", "weight_digest", "weight_fingerprint"]


#: peft's warning when an adapter targets tied input/output embeddings: it concerns an adapter left unmerged, where
#: only the input side changes; merged (as mirage applies adapters), the tied matrix changes once, for both.
TIED_EMBEDDINGS_WARNING = r"Model (with|has) `tie_word_embeddings=True`"


def is_adapter_folder(name: Any) -> bool:
    """Whether ``name`` is a local folder holding a peft adapter (``adapter_config.json``) and no model
    (``config.json``)."""
    if not isinstance(name, (str, os.PathLike)) or not str(name).strip():
        return False
    path = Path(name).expanduser()
    return path.is_dir() and (path / "adapter_config.json").is_file() and not (path / "config.json").is_file()


#: The weights file of an adapter folder: safetensors only (peft's ``adapter_model.bin`` is a pickle, which can run
#: code when it is read).
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_adapter_folder(adapter: str | os.PathLike, *, error: type[ModelLoadError] = ModelLoadError) -> Path:
    """The adapter folder ``adapter``, checked without loading it: its ``adapter_config.json`` a JSON object and its
    weights an :data:`ADAPTER_WEIGHTS` file whose header reads (a pickle ``adapter_model.bin`` is refused). ``error``
    (a ModelLoadError, or mirage.tune's AdapterError) names the folder, the file and the fix in one line."""
    path = Path(adapter).expanduser()
    config, weights = path / "adapter_config.json", path / ADAPTER_WEIGHTS
    again = "save the adapter again (`mirage tune sft -o DIR` writes DIR/adapter), or give the folder it was saved to"
    if not config.is_file():
        raise error(f"adapter {str(adapter)!r} is not an adapter folder (no adapter_config.json); give the folder "
                    "`mirage tune sft -o DIR` wrote its adapter to (DIR/adapter).")
    try:
        settings = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise error(f"the adapter folder {path}: adapter_config.json cannot be read ({_first_line(err)}); "
                    f"{again}.") from None
    if not isinstance(settings, dict):
        raise error(f"the adapter folder {path}: adapter_config.json is not a JSON object; {again}.")
    if not weights.is_file():
        pickled = " (only adapter_model.bin, a pickle file, which mirage does not load: reading one can run code)"
        raise error(f"the adapter folder {path} has no {ADAPTER_WEIGHTS}"
                    f"{pickled if (path / 'adapter_model.bin').is_file() else ''}; {again} (peft's save_pretrained "
                    "writes safetensors).")
    try:
        from safetensors import SafetensorError, safe_open

        with safe_open(str(weights), framework="numpy"):  # reads the header and checks it covers the file
            pass
    except (OSError, SafetensorError) as err:
        raise error(f"the adapter folder {path}: {ADAPTER_WEIGHTS} is not a readable safetensors file "
                    f"({_first_line(err)}); {again}.") from None
    return path


def _first_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return lines[0][:200] if lines else type(err).__name__


def adapter_base_model(adapter: str | os.PathLike) -> str | None:
    """The base model an adapter folder names: mirage's ``mirage-adapter.json`` ``base_model``, else peft's
    ``adapter_config.json`` ``base_model_name_or_path``; None where neither says."""
    path = Path(adapter).expanduser()
    for file, key in (("mirage-adapter.json", "base_model"), ("adapter_config.json", "base_model_name_or_path")):
        try:
            value = json.loads((path / file).read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, str) and value.strip():
            return value
    return None


def tuned_record(model: Any, *, error: type[ModelLoadError] = ModelLoadError) -> dict[str, Any] | None:
    """The record mirage wrote with a tuned model (``mirage-adapter.json`` of a shipped adapter, by its name, or of
    an adapter or fully fine-tuned model folder), or None for any other model; ``error`` (a ModelLoadError, or
    mirage.tune's AdapterError) when it cannot be read."""
    if not isinstance(model, (str, os.PathLike)) or not str(model).strip():
        return None
    shipped = embedded_adapters().get(str(model))
    meta = (shipped.path if shipped is not None else Path(model).expanduser()) / "mirage-adapter.json"
    if not meta.is_file():
        return None
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except ValueError as err:
        raise error(f"{meta} cannot be read ({err}); save the model again.") from err
    if not isinstance(data, dict):
        raise error(f"{meta} is not a JSON object; save the model again.")
    return data


def trained_prompt_name(model: Any) -> str | None:
    """The prompt template a tuned model was trained in, as its :func:`tuned_record` names it; None for any other
    model, a record that cannot be read, or one naming a template file (``prompt.path``). Loading such a model
    without a prompt of one's own uses it (:meth:`mirage.Mirage.from_pretrained`, the commands' ``--prompt``)."""
    try:
        record = tuned_record(model)
    except ModelLoadError:
        return None
    prompt = record.get("prompt") if record else None
    if not isinstance(prompt, dict) or prompt.get("path") or not isinstance(prompt.get("name"), str):
        return None
    return prompt["name"]


def adapter_digest(adapter: str | os.PathLike) -> str:
    """A short digest of an adapter folder's configuration and weights (what a run's outputs depend on)."""
    import hashlib

    digest = hashlib.sha256()
    path = Path(adapter).expanduser()
    for file in sorted(path.glob("adapter_*")):
        if file.is_file():
            digest.update(file.name.encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


#: Input-embedding rows, evenly spaced over the vocabulary, that identify a base model's weights.
FINGERPRINT_ROWS = 64


#: Relative tolerance of the weight sums: the same weights in fp32, bf16 or fp16 agree within it; two different
#: models (even two random initialisations of one architecture) do not come near it.
FINGERPRINT_RTOL = 2e-2


def architecture(model: Any) -> dict[str, Any]:
    """The model type and the sizes an adapter's shapes depend on."""
    config = model.config
    keys = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "intermediate_size")
    return {key: getattr(config, key) for key in keys if getattr(config, key, None) is not None}


def _fingerprint_rows(model: Any) -> torch.Tensor:
    """``[n_rows, hidden]``: input-embedding rows evenly spaced over the vocabulary, in fp32 on the CPU."""
    import torch

    weight = model.get_input_embeddings().weight
    index = torch.linspace(0, weight.shape[0] - 1, FINGERPRINT_ROWS).long().unique().to(weight.device)
    with torch.no_grad():
        return weight.index_select(0, index).detach().float().cpu()


def weight_digest(model: Any) -> str:
    """A hash of the fingerprint rows rounded to bf16: the same whether the weights were loaded in fp32 or bf16."""
    import hashlib

    import torch

    rows = _fingerprint_rows(model).to(torch.bfloat16).view(torch.int16).numpy()
    return hashlib.sha256(rows.tobytes()).hexdigest()[:32]


def weight_fingerprint(model: Any) -> list[float]:
    """Sums, then absolute sums, of the fingerprint rows (fp32): equal for the same weights in any dtype, within
    :data:`FINGERPRINT_RTOL`."""
    import torch

    rows = _fingerprint_rows(model)
    return [round(float(v), 6) for v in torch.cat([rows.sum(dim=1), rows.abs().sum(dim=1)])]


def same_weights(a: list[float], b: list[float]) -> bool:
    """Whether two :func:`weight_fingerprint` lists agree within :data:`FINGERPRINT_RTOL`."""
    import math

    if len(a) != len(b):
        return False
    scale = max((abs(v) for v in a + b), default=1.0) or 1.0
    return all(math.isclose(x, y, rel_tol=FINGERPRINT_RTOL, abs_tol=FINGERPRINT_RTOL * scale / 10)
               for x, y in zip(a, b))


def describe(arch: dict[str, Any]) -> str:
    """An :func:`architecture` in one line."""
    return ", ".join(f"{k} {v}" for k, v in arch.items())


def adapter_fits(info: dict[str, Any], model: Any, name: str) -> bool:
    """Whether ``model`` (loaded as ``name``) holds the weights an adapter's ``mirage-adapter.json`` (``info``:
    ``architecture``, ``digest``, ``weights``, ``base_model``) was trained on: the same architecture and
    :func:`weight_digest` (fp32 or bf16), or, under the name the adapter records (another dtype), the same
    :func:`weight_fingerprint` within its tolerance."""
    if architecture(model) != info.get("architecture"):
        return False
    if weight_digest(model) == info.get("digest"):
        return True
    return name == info.get("base_model") and same_weights(weight_fingerprint(model), list(info.get("weights") or []))
