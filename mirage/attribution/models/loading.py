"""Loading a model: :func:`load_model` (an embedded name, a shipped adapter, a local folder or a Hugging Face id,
placed and checked as :mod:`~mirage.attribution.models.placement` says), :func:`load_adapter` (a LoRA adapter merged
into its base model) and :func:`wrap_model` (a model and tokenizer the user already loaded)."""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models.adapters import (
    TIED_EMBEDDINGS_WARNING,
    adapter_base_model,
    adapter_fits,
    architecture,
    check_adapter_folder,
    describe,
    is_adapter_folder,
)
from mirage.attribution.models.checkpoints import checked_load, locate_model, quiet_transformers_loading
from mirage.attribution.models.embedded import embedded_adapters, embedded_models
from mirage.attribution.models.gguf import embedded_checkpoint
from mirage.attribution.models.kernels import without_cudnn_attention
from mirage.attribution.models.loaded import LoadedModel, ModelLoadError, execution_device
from mirage.attribution.models.placement import (
    quantization_config,
    rank_device_group,
    resolve_device,
    resolve_dtype,
    resolve_placement,
)

if TYPE_CHECKING:  # torch is imported when a model is loaded or a device checked, so importing mirage stays light
    import torch

__all__ = ["load_adapter", "load_model", "wrap_model"]


def load_model(
    name_or_path: str,
    *,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = None,
    trust_remote_code: bool = False,
    use_chat_template: bool | None = None,
    device_map: str | dict[str, int | str] | None = None,
    max_memory: str | int | dict[Any, Any] | None = None,
    quantization: str | None = None,
    memory_budget: str | int | None = None,
    adapter: str | os.PathLike | None = None,
) -> LoadedModel:
    """Load an embedded model name, a Hugging Face id or a local path (causal or encoder-decoder); with ``adapter``,
    a LoRA adapter folder merged into it (:func:`load_adapter`; ``name_or_path`` None: the base the adapter names).

    Placement, as Hugging Face's ``from_pretrained`` takes it (through accelerate): ``device_map`` (``"auto"``,
    ``"balanced"``, ``"sequential"`` or module → device; see :func:`parse_device_map`) instead of ``device``, with
    ``max_memory`` per device; ``quantization`` ``"8bit"``/``"4bit"`` (bitsandbytes, CUDA only). ``max_memory`` given
    as one size, or ``memory_budget``, is mirage's memory budget for its passes (:attr:`LoadedModel.memory_budget`;
    see :func:`parse_max_memory`). A peft adapter folder is not a model: load it with ``adapter=``
    (:meth:`mirage.Mirage.from_pretrained`, ``--adapter``).
    """
    if adapter is not None:
        return load_adapter(adapter, base=name_or_path, device=device, dtype=dtype,
                            trust_remote_code=trust_remote_code, use_chat_template=use_chat_template,
                            device_map=device_map, max_memory=max_memory, quantization=quantization,
                            memory_budget=memory_budget)
    dev = resolve_device(device)  # checked before transformers is even imported
    torch_dtype = resolve_dtype(dtype, dev)
    placement = resolve_placement(device, device_map, max_memory, memory_budget)
    group = os.environ.get("MIRAGE_GPUS_PER_MODEL", "").strip()
    if group and isinstance(placement.device_map, str) and placement.max_memory is None:
        if not group.isdigit():
            raise ModelLoadError(f"MIRAGE_GPUS_PER_MODEL={group!r}: give the number of GPUs each process's model "
                                 "is split over (an integer >= 1).")
        # one model per group of GPUs under a launcher: this process's LOCAL_RANK picks its group (docs/scaling.md)
        placement = replace(placement, max_memory=rank_device_group(int(group)))
    qconfig = quantization_config(quantization, torch_dtype)
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

    if not isinstance(name_or_path, (str, os.PathLike)) or not str(name_or_path).strip():
        raise ModelLoadError(f"model={name_or_path!r} is not a model name; give an embedded name, a local checkpoint "
                             "folder or a Hugging Face id.")
    name = str(name_or_path)
    if is_adapter_folder(name):
        base = adapter_base_model(name)
        raise ModelLoadError(f"model {name!r} is a LoRA adapter folder (adapter_config.json), not a model; give it "
                             f"as the adapter: --adapter {name} (Mirage.from_pretrained(adapter=...)), with its base "
                             f"model {f'({base!r}) ' if base else ''}as --model.")
    shipped = embedded_adapters().get(name)
    if shipped is not None:  # a shipped LoRA adapter: its embedded base model with the adapter merged in
        try:
            from peft import PeftModel
        except ImportError:
            raise ModelLoadError(f"model {name!r} is a LoRA adapter on {shipped.base!r} and needs peft: "
                                 "pip install 'mirage-rag[embedded]' (or pip install peft).") from None
        lm = load_model(shipped.base, device=device, dtype=torch_dtype, use_chat_template=use_chat_template,
                        device_map=device_map, max_memory=max_memory, quantization=quantization,
                        memory_budget=memory_budget)
        # mirage.tune.adapters.apply_adapter also checks an adapter's base model; a shipped one is tested against
        # its base (tests/tune/test_tune.py), and the registry names that base
        with warnings.catch_warnings():  # merged at once: an embedding LoRA then changes tied embeddings both ways
            warnings.filterwarnings("ignore", message=TIED_EMBEDDINGS_WARNING)
            lm.model = PeftModel.from_pretrained(lm.model, str(shipped.path)).merge_and_unload().eval()
        if lm.device.type == "cuda":
            without_cudnn_attention(lm.model)
        lm.name = name
        return lm
    spec = embedded_models().get(name)
    offline: str | None = None
    if spec:
        source: str | Path = embedded_checkpoint(name)
    else:
        source, offline = locate_model(name)
    # Offline (hub unreachable or HF_HUB_OFFLINE): only the local Hugging Face cache, for every file.
    hub: dict[str, Any] = {"local_files_only": True} if offline else {}
    remote = {"trust_remote_code": trust_remote_code, **hub}
    config = checked_load("config", name, source, offline,
                              lambda: AutoConfig.from_pretrained(source, **remote))
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    auto = AutoModelForSeq2SeqLM if is_enc_dec else AutoModelForCausalLM
    tokenizer = checked_load("tokenizer", name, source, offline,
                                 lambda: AutoTokenizer.from_pretrained(source, **remote))
    # transformers' Auto classes look for a PEFT adapter config when peft is installed, and that lookup does not
    # inherit local_files_only: offline, it would ask the unreachable hub (and wait out its retries).
    peft_lookup: dict[str, Any] = {"adapter_kwargs": {"local_files_only": True}} if offline else {}
    placed = placement.load_kwargs(name, dev, quantized=qconfig is not None)
    if qconfig is not None:
        placed["quantization_config"] = qconfig
    with quiet_transformers_loading():
        model = checked_load("weights", name, source, offline,
                             lambda: auto.from_pretrained(source, dtype=torch_dtype, **remote, **peft_lookup,
                                                          **placed))
    if "device_map" not in placed:
        model.to(dev)
    model.eval()
    if execution_device(model).type == "cuda":
        without_cudnn_attention(model)
    if use_chat_template is None:
        use_chat_template = spec.chat_template if spec else bool(getattr(tokenizer, "chat_template", None))
    window = spec.context_window if spec else _context_window(config, tokenizer)
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        is_encoder_decoder=is_enc_dec,
        use_chat_template=use_chat_template and not is_enc_dec,
        context_window=window,
        memory_budget=placement.budget,
        passes={"attention": str(getattr(model.config, "_attn_implementation", None) or "eager")},
    )


def _context_window(config: Any, tokenizer: Any) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 10**7 else None


def wrap_model(model: Any, tokenizer: Any, *, name: str | None = None,
               use_chat_template: bool | None = None) -> LoadedModel:
    """Wrap a model and tokenizer the user already loaded (on a GPU, its attention then avoids cuDNN's backend:
    :func:`without_cudnn_attention`)."""
    config = model.config
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    if use_chat_template is None:
        use_chat_template = bool(getattr(tokenizer, "chat_template", None))
    lm = LoadedModel(
        model=model.eval(),
        tokenizer=tokenizer,
        name=name or getattr(config, "_name_or_path", None) or model.__class__.__name__,
        is_encoder_decoder=is_enc_dec,
        use_chat_template=use_chat_template and not is_enc_dec,
        context_window=_context_window(config, tokenizer),
        passes={"attention": str(getattr(config, "_attn_implementation", None) or "eager")},
    )
    if lm.device.type == "cuda":
        without_cudnn_attention(lm.model)
    return lm


def load_adapter(adapter: str | os.PathLike, *, base: str | None = None, **load: Any) -> LoadedModel:
    """A LoRA adapter folder (``adapter_config.json``; mirage's ``mirage tune`` writes ``mirage-adapter.json``
    beside it) merged into its base model: ``base``, or the model the folder records, loaded by :func:`load_model`
    with ``load`` (device, dtype, device_map, …; the chat-template choice the adapter was trained with unless
    ``use_chat_template`` says). A mirage adapter on a base model with other weights is refused (:func:`adapter_fits`).
    Every failure is a one-line ModelLoadError."""
    path = check_adapter_folder(adapter)
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelLoadError(f"adapter {str(adapter)!r} needs peft: pip install peft (or pip install "
                             "'mirage-rag[tune]').") from None
    try:
        info = json.loads((path / "mirage-adapter.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        info = {}
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"{path / 'mirage-adapter.json'} cannot be read ({err}); "
                             "save the adapter again.") from None
    if not isinstance(info, dict):
        raise ModelLoadError(f"{path / 'mirage-adapter.json'} is not a JSON object; save the adapter again.")
    recorded = info.get("base_model") or adapter_base_model(path)
    name = base or recorded
    if not name:
        raise ModelLoadError(f"adapter {str(adapter)!r} names no base model; give it (--model, or "
                             "Mirage.from_pretrained(model, adapter=...)).")
    if load.get("use_chat_template") is None:
        load["use_chat_template"] = (info.get("prompt") or {}).get("chat_template")
    lm = load_model(name, **load)
    if info and not adapter_fits(info, lm.model, lm.name):
        arch = architecture(lm.model)
        why = (f"its architecture differs ({describe(arch)} against {describe(info.get('architecture') or {})})"
               if arch != info.get("architecture") else "its weights differ")
        raise ModelLoadError(f"the adapter {path} was trained on the base model {recorded!r}, and the model "
                             f"{lm.name!r} is another one ({why}); load the adapter onto {recorded!r} (leave out "
                             "--model).")
    lm.model = PeftModel.from_pretrained(lm.model, str(path)).merge_and_unload().eval()
    lm.name = f"{recorded or name}+{path.name}"
    if lm.device.type == "cuda":
        without_cudnn_attention(lm.model)
    return lm
