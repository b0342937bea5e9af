"""LoRA adapters with the base model they belong to: saved beside a metadata file, refused on another base model.

    info = save_adapter(peft_model, "out/adapter", base_name="smollm2-135m-instruct", prompt=cfg.prompt)
    lm = load_tuned("out/adapter")                 # the base model (by its name) with the adapter merged in
    lm = apply_adapter(load_model("smollm2-135m-instruct"), "out/adapter")   # onto a model already loaded

The adapter folder is peft's (``adapter_config.json``, ``adapter_model.safetensors``) plus ``mirage-adapter.json``
(:class:`AdapterInfo`): the base model's name, a fingerprint of its architecture and weights, the prompt the
adapter was trained with, and the training settings. Applying it to a model whose fingerprint differs raises
:class:`AdapterError` naming both models.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

# the base-model fingerprint is the core's: load_model(adapter=...) checks it too
from mirage.attribution.models import (
    TIED_EMBEDDINGS_WARNING,
    LoadedModel,
    ModelLoadError,
    adapter_fits,
    architecture,
    check_adapter_folder,
    describe,
    load_model,
    tuned_record,
    weight_digest,
    weight_fingerprint,
)
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.config import PromptConfig
from mirage.data.readers import parse_json, read_text
from mirage.runs.store import write_atomic

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel

__all__ = ["ADAPTER_INFO", "AdapterError", "AdapterInfo", "adapter_from_model", "apply_adapter", "base_record",
           "check_base", "export_adapter", "load_tuned", "lora_from_change", "read_adapter_info", "save_adapter",
           "save_tuned_model", "trained_prompt", "training_record"]

ADAPTER_INFO = "mirage-adapter.json"
ADAPTER_FORMAT = 1


class AdapterError(ModelLoadError):
    """An adapter folder that cannot be used: missing, unreadable, or trained on another base model."""


@dataclass
class AdapterInfo(JSONRecord):
    """What an adapter was trained on: ``base_model`` (the name it was loaded by), ``architecture`` (model type and
    sizes), ``digest`` (a hash of some input-embedding rows rounded to bf16: the same for the same weights loaded in
    fp32 or bf16, different for a fine-tuned variant) and ``weights`` (those rows' sums, then their absolute sums:
    the same within :data:`~mirage.attribution.models.FINGERPRINT_RTOL` in any dtype), ``prompt`` (the
    :class:`~mirage.config.PromptConfig` of its training prompts), ``stage`` (``sft``, ``reward`` or ``dpo``) and
    ``training`` (the :class:`~mirage.tune.config.TuneConfig` as a dict, with the data it saw)."""

    base_model: str
    architecture: dict[str, Any]
    digest: str
    weights: list[float]
    prompt: dict[str, Any] = field(default_factory=dict)
    stage: str = "sft"
    training: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    format: int = ADAPTER_FORMAT


def save_adapter(model: Any, directory: str | Path, *, base_name: str, prompt: PromptConfig | None = None,
                 stage: str = "sft", training: dict[str, Any] | None = None) -> AdapterInfo:
    """Save a peft model's adapter to ``directory`` with its :class:`AdapterInfo` (``base_name``: the name the base
    model loads by, which :func:`load_tuned` uses)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    adapters = list(getattr(model, "peft_config", {}) or {})
    # the trained adapter only: a reward stage also holds a frozen "ref" copy (trl's KL reference)
    # and never the base model's embedding matrix (peft saves it when an embedding LoRA is targeted): the adapter is
    # applied onto the base model its fingerprint names, which has it
    model.save_pretrained(str(directory), selected_adapters=["default"] if "default" in adapters else None,
                          save_embedding_layers=False)
    return _write_info(directory, base_record(model.get_base_model(), base_name), prompt, stage, training)


def _write_info(directory: Path, base: AdapterInfo, prompt: PromptConfig | None, stage: str,
                training: dict[str, Any] | None) -> AdapterInfo:
    """``base`` completed with the prompt, stage, training settings and library versions, written to
    ``directory``'s ``mirage-adapter.json``."""
    info = dataclasses.replace(base, prompt=dataclasses.asdict(prompt or PromptConfig()), stage=stage,
                               training=training or {}, versions=library_versions("trl", "peft"))
    write_atomic(directory / ADAPTER_INFO, json.dumps(info.to_dict(), indent=1, ensure_ascii=False) + "\n")
    return info


def save_tuned_model(lm: LoadedModel, directory: str | Path, *, base: AdapterInfo, prompt: PromptConfig | None = None,
                     stage: str = "sft", training: dict[str, Any] | None = None) -> Path:
    """Save a fully fine-tuned model (``lm``, every weight trained) as a model folder ``load_model`` takes by path
    (weights, config and tokenizer), with the same ``mirage-adapter.json`` record an adapter has: ``base`` is the
    base model's record taken before training (its name and fingerprint), completed here with the prompt, stage
    and training settings (the questions it saw among them, :func:`training_record`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    lm.model.save_pretrained(str(directory))
    lm.tokenizer.save_pretrained(str(directory))
    _write_info(directory, base, prompt, stage, training)
    return directory


def base_record(model: torch.nn.Module, name: str) -> AdapterInfo:
    """The record of ``model`` (loaded by ``name``) as the base of a fine-tuning run: its name, architecture and
    weight fingerprint (a full fine-tuning run takes it before training changes the weights)."""
    return AdapterInfo(base_model=name, architecture=architecture(model), digest=weight_digest(model),
                       weights=weight_fingerprint(model))


def training_record(folder: str | Path) -> dict[str, Any] | None:
    """The ``training`` settings mirage recorded with a tuned model: an adapter folder's (or a shipped adapter's, by
    name), or a fully fine-tuned model folder's (``mirage tune sft`` with ``train.method: full``); None for a folder
    without a record (a model mirage did not tune, or another name)."""
    record = tuned_record(folder, error=AdapterError)
    return None if record is None else dict(record.get("training") or {})


def trained_prompt(folder: str | Path) -> PromptConfig | None:
    """The prompt a tuned model (adapter folder, shipped adapter name, or fully fine-tuned model folder) was trained
    with, as mirage recorded it; None for a folder without a record, or another name."""
    record = tuned_record(folder, error=AdapterError)
    return None if record is None or not isinstance(record.get("prompt"), dict) else PromptConfig(**record["prompt"])


def export_adapter(directory: str | Path, dest: str | Path, *, dtype: str = "float16") -> Path:
    """Copy the adapter folder ``directory`` to ``dest`` with its LoRA weights stored in ``dtype`` (fp16 halves an
    fp32 adapter; they are cast back to the model's dtype when applied), for shipping; returns ``dest``."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    info = read_adapter_info(directory)  # a mirage adapter folder, or AdapterError
    target = getattr(torch, dtype, None)
    if not isinstance(target, torch.dtype) or not target.is_floating_point:
        raise AdapterError(f"dtype={dtype!r} is not a floating-point torch dtype; use float16, bfloat16 or float32.")
    src, dest = Path(directory), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for path in src.iterdir():
        if path.name == "adapter_model.safetensors":
            tensors = {k: v.to(target).contiguous() for k, v in load_file(str(path)).items()}
            save_file(tensors, str(dest / path.name), metadata={"format": "pt"})
        elif path.name == "adapter_config.json":  # the base model by its mirage name, not a local cache path
            config = parse_json(read_text(path))
            config["base_model_name_or_path"] = info.base_model
            (dest / path.name).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        elif path.name == "README.md":  # peft's empty model card: a short one of ours instead
            steps = info.training.get("steps", "?")
            (dest / path.name).write_text(
                f"# LoRA adapter for {info.base_model} ({info.stage}, {steps} steps)\n\nSaved by mirage "
                f"(`mirage tune {info.stage}`), weights in {dtype}; `mirage-adapter.json` holds the base model's "
                "fingerprint, the prompt and the training config. Load it with "
                f"`mirage.tune.adapters.load_tuned(folder)`.\n", encoding="utf-8")
        elif path.is_file():
            shutil.copy2(path, dest / path.name)
    return dest


def lora_from_change(base: PreTrainedModel, tuned: dict[str, torch.Tensor], rank: int, *, embed_rank: int = 0,
                     norms: bool = False) -> tuple[Any, float]:
    """``base`` wrapped as a peft LoRA model of ``rank`` on every linear layer, each adapter set to the best
    rank-``rank`` approximation of that layer's change (``tuned[name + ".weight"]`` minus the base weight), and the
    share of the linear layers' change kept (squared singular values kept over all). ``embed_rank`` > 0 carries the
    input embeddings' change the same way (an embedding LoRA; with tied input and output embeddings the merged model
    changes both, as full fine-tuning did); ``norms`` carries the norm layers' tuned weights whole (peft's
    ``modules_to_save``: a few thousand numbers). ``base``'s own weights are not changed. How a fully fine-tuned model
    is shipped as an adapter (:func:`adapter_from_model`, ``mirage tune export DIR/model --rank R``)."""
    import torch
    from peft import LoraConfig, get_peft_model

    embed = next(n for n, m in base.named_modules() if m is base.get_input_embeddings()).rsplit(".", 1)[-1]
    targets: Any = "all-linear"
    if embed_rank:
        targets = sorted({n.rsplit(".", 1)[-1] for n, m in base.named_modules()
                          if isinstance(m, torch.nn.Linear) and n != "lm_head"} | {embed})
    norm_names = sorted({n.rsplit(".", 1)[-1] for n, m in base.named_modules()
                         if type(m).__name__.endswith(("RMSNorm", "LayerNorm"))}) if norms else None
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, lora_dropout=0.0, modules_to_save=norm_names,
                        rank_pattern={embed: embed_rank} if embed_rank else {},
                        alpha_pattern={embed: embed_rank} if embed_rank else {})
    with warnings.catch_warnings():  # the adapter is meant to be merged (apply_adapter), which keeps the tie
        warnings.filterwarnings("ignore", message=TIED_EMBEDDINGS_WARNING)
        model = get_peft_model(base, config)
    kept = total = 0.0
    for name, module in model.named_modules():
        key = name.removeprefix("base_model.model.")
        if "default" in getattr(module, "lora_embedding_A", {}):   # weight (vocab x dim) += (B @ A).T
            weight = module.base_layer.weight
            left, right, _, _ = _low_rank(tuned[key + ".weight"] - weight.detach().float(), embed_rank)
            module.lora_embedding_A["default"].data = left.T.to(weight.dtype).contiguous()
            module.lora_embedding_B["default"].data = right.T.to(weight.dtype).contiguous()
        elif "default" in getattr(module, "lora_A", {}):           # weight (out x in) += B @ A
            weight = module.base_layer.weight
            left, right, part, whole = _low_rank(tuned[key + ".weight"] - weight.detach().float(), rank)
            module.lora_A["default"].weight.data = right.to(weight.dtype).contiguous()
            module.lora_B["default"].weight.data = left.to(weight.dtype).contiguous()
            kept, total = kept + part, total + whole
        elif name.endswith("modules_to_save.default"):
            owner = key.removesuffix(".modules_to_save.default")
            for pname, param in module.named_parameters():
                param.data = tuned[f"{owner}.{pname}"].to(param.dtype).clone()
    return model, kept / total if total else 1.0


def _low_rank(change: torch.Tensor, rank: int) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    """The best rank-``rank`` factors of ``change`` (left @ right, by truncated SVD, the singular values split evenly
    between them), and the squared singular values kept and in all."""
    import torch

    u, s, vh = torch.linalg.svd(change.float(), full_matrices=False)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, root[:, None] * vh[:rank], float((s[:rank] ** 2).sum()), float((s ** 2).sum())


def tuning_chain(folder: str | Path) -> list[str]:
    """The models a fully fine-tuned model folder descends from, nearest first, as mirage recorded them: each
    folder's base model, back to the first one that is not a fully fine-tuned folder mirage saved (an embedded name,
    a hub id, or a folder that is gone)."""
    chain: list[str] = []
    current = str(folder)
    while True:
        record = tuned_record(current, error=AdapterError) if Path(current).is_dir() else None
        base = record.get("base_model") if record else None
        if not base or base in chain or not (Path(current) / "model.safetensors").is_file():
            return chain
        chain.append(str(base))
        current = str(base)


def adapter_from_model(folder: str | Path, dest: str | Path, *, rank: int, embed_rank: int = 0, norms: bool = False,
                       base: str | None = None) -> tuple[Path, float]:
    """Write to ``dest`` a LoRA adapter taken from a fully fine-tuned model folder (``mirage tune sft`` with
    ``train.method: full``: ``DIR/model``) by :func:`lora_from_change`, on ``base`` (default: the root of its
    :func:`tuning_chain`, the model its first stage was tuned from), with the folder's prompt and training record
    and how it was taken (``training.extracted``); returns ``dest`` and the share of the linear layers' change kept.
    AdapterError when the folder is not a fully fine-tuned model mirage saved."""
    from safetensors.torch import load_file

    folder = Path(folder)
    record = tuned_record(folder, error=AdapterError)
    if record is None or not (folder / "model.safetensors").is_file():
        raise AdapterError(f"{folder} is not a fully fine-tuned model folder mirage saved (model.safetensors and "
                           f"{ADAPTER_INFO}); give DIR/model of a `mirage tune sft` run with train.method: full.")
    chain = tuning_chain(folder)
    base_name = base or chain[-1]
    lm = load_model(base_name, dtype="float32")
    if base is None and not (len(chain) > 1 or is_base_of(AdapterInfo.from_dict(record), lm)):
        raise AdapterError(f"{folder} records the base model {base_name!r}, and the model loaded by that name is "
                           "another one (its fingerprint differs); give the base it was tuned from as --base.")
    model, kept = lora_from_change(lm.model, load_file(str(folder / "model.safetensors")), rank,
                                   embed_rank=embed_rank, norms=norms)
    training = {**dict(record.get("training") or {}),
                "extracted": {"from": folder.as_posix(), "chain": chain, "rank": rank, "embed_rank": embed_rank,
                              "norms": norms, "linear_change_kept": round(kept, 4)}}
    save_adapter(model, dest, base_name=base_name, prompt=trained_prompt(folder), stage=str(record.get("stage", "sft")),
                 training=training)
    return Path(dest), kept


def read_adapter_info(directory: str | Path) -> AdapterInfo:
    """The :class:`AdapterInfo` of an adapter folder; AdapterError when it is not a mirage adapter folder or its
    weights cannot be read (:func:`~mirage.attribution.models.check_adapter_folder`)."""
    directory = check_adapter_folder(directory, error=AdapterError)  # its config and weights read, before any load
    meta = directory / ADAPTER_INFO
    if not meta.is_file():
        raise AdapterError(f"{directory} has no {ADAPTER_INFO}, so its base model is unknown; mirage loads only "
                           "adapters it saved (mirage.tune.adapters.save_adapter), which name their base model.")
    try:
        data = parse_json(read_text(meta))
        info = AdapterInfo.from_dict(data)
    except (ValueError, TypeError) as err:
        raise AdapterError(f"{meta} cannot be read ({err}); save the adapter again.") from err
    if info.format != ADAPTER_FORMAT:
        raise AdapterError(f"{meta} has format {info.format}; this mirage reads format {ADAPTER_FORMAT}.")
    return info


def is_base_of(info: AdapterInfo, lm: LoadedModel) -> bool:
    """Whether ``lm`` holds the weights the adapter was trained on: the same architecture and :func:`weight_digest`
    (fp32 or bf16), or, under the name the adapter records (loaded in another dtype, fp16), the same
    :func:`weight_fingerprint` within its tolerance."""
    return adapter_fits(dataclasses.asdict(info), lm.model, lm.name)


def check_base(info: AdapterInfo, lm: LoadedModel, directory: str | Path) -> None:
    """AdapterError unless ``lm`` is the base model the adapter was trained on (:func:`is_base_of`)."""
    arch = architecture(lm.model)
    if not is_base_of(info, lm):
        why = (f"its architecture differs ({describe(arch)} against {describe(info.architecture)})"
               if arch != info.architecture else "its weights differ")
        raise AdapterError(f"the adapter {directory} was trained on the base model {info.base_model!r}, and the "
                           f"model {lm.name!r} is another one ({why}); load the adapter onto {info.base_model!r} "
                           f"(mirage.tune.adapters.load_tuned({str(directory)!r})).")


def apply_adapter(lm: LoadedModel, directory: str | Path, *, merge: bool = True) -> LoadedModel:
    """``lm`` with the adapter of ``directory``: merged into its weights (``merge``, a plain model again, which
    every mirage stage takes), or as a peft model. The base model's modules are changed in place. AdapterError when
    the adapter belongs to another base model (:func:`check_base`)."""
    from peft import PeftModel

    info = read_adapter_info(directory)
    check_base(info, lm, directory)
    with warnings.catch_warnings():
        if merge:  # merged, an embedding LoRA changes the tied output embeddings too: peft's warning does not apply
            warnings.filterwarnings("ignore", message=TIED_EMBEDDINGS_WARNING)
        tuned = PeftModel.from_pretrained(lm.model, str(directory))
        model = tuned.merge_and_unload() if merge else tuned
    model.eval()
    # the same loaded model otherwise (its memory budget and placement facts kept)
    return dataclasses.replace(lm, model=model, name=f"{info.base_model}+{Path(directory).name}",
                               batched_backward=None, passes=dict(lm.passes))


def load_tuned(directory: str | Path, *, device: str | torch.device | None = None,
               dtype: str | torch.dtype | None = None, merge: bool = True, base: str | None = None,
               use_chat_template: bool | None = None, **placement: Any) -> LoadedModel:
    """The adapter's base model (``base``, or the name the adapter records;
    :func:`mirage.attribution.models.load_model`, with ``placement``: ``device_map``, ``max_memory``, ``quantization``,
    ``memory_budget``, ``trust_remote_code``) with the adapter applied (:func:`apply_adapter`: refused on another base
    model), and the chat-template choice it was trained with unless ``use_chat_template`` says."""
    info = read_adapter_info(directory)
    chat = info.prompt.get("chat_template") if use_chat_template is None else use_chat_template
    lm = load_model(base or info.base_model, device=device, dtype=dtype, use_chat_template=chat, **placement)
    return apply_adapter(lm, directory, merge=merge)
