"""Where and how a model is placed, each setting checked before anything slow happens: the device and dtype
(:func:`resolve_device`, :func:`resolve_dtype`), sizes (:func:`parse_size`), accelerate's device maps and per-device
memory caps and mirage's memory budget (:func:`resolve_placement`, :class:`Placement`), a launcher rank's group of
GPUs (:func:`rank_device_group`) and 4-/8-bit weights (:func:`quantization_config`)."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.models.embedded import cache_dir
from mirage.attribution.models.loaded import ModelLoadError

if TYPE_CHECKING:  # torch is imported when a model is loaded or a device checked, so importing mirage stays light
    import torch

__all__ = ["DEVICE_MAP_STRATEGIES", "QUANTIZATIONS", "Placement", "cpu_flags", "default_device", "default_dtype",
           "dtype_name", "format_size", "parse_device_map", "parse_max_memory", "parse_size", "quantization_config",
           "rank_device_group", "resolve_device", "resolve_dtype", "resolve_placement"]


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


def dtype_name(dtype: torch.dtype) -> str:
    """A dtype's name as configs and run fingerprints write it: ``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(dtype).removeprefix("torch.")


@cache
def cpu_flags() -> frozenset[str]:
    """This CPU's feature flags (the ``flags`` line of Linux ``/proc/cpuinfo``); empty where they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    return frozenset(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
                          []))


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
    or one size (``"3GB"``: mirage's memory budget, see :func:`mirage.attribution.planner.plan_graph`). Returns
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


def rank_device_group(gpus_per_model: int, *, local_rank: int | None = None, gpu_count: int | None = None,
                      per_gpu: str | int = "auto") -> dict[int | str, int]:
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
    out: dict[int | str, int] = {}
    for index in range(first, first + gpus_per_model):
        if per_gpu == "auto":
            import torch

            out[index] = int(torch.cuda.get_device_properties(index).total_memory * 0.9)
        else:
            out[index] = parse_size(per_gpu, what="per_gpu")
    return out


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
