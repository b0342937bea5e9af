"""Where a model's checkpoint comes from and how transformers reads it: a local folder (checked to hold config.json
and PyTorch weights), the Hugging Face hub (its endpoint, a bounded socket check that it answers, offline mode) or
only its local cache (:func:`locate_model`); each ``from_pretrained`` failure as a one-line ModelLoadError
(:func:`checked_load`); loading without transformers' per-load progress bars (:func:`quiet_transformers_loading`)."""

from __future__ import annotations

import importlib
import os
import pickle
import socket
import sys
import threading
import urllib.parse
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mirage.attribution.models.embedded import embedded_names
from mirage.attribution.models.loaded import ModelLoadError

__all__ = ["checked_load", "hub_endpoint", "hub_reachable", "locate_model", "quiet_transformers_loading"]


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


def locate_model(name: str) -> tuple[str, str | None]:
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


def checked_load(what: str, name: str, source: str | Path, offline: str | None, load: Any) -> Any:
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


@contextmanager
def quiet_transformers_loading() -> Iterator[None]:
    """Within: no per-load tqdm bars from ``transformers`` ("Loading weights", "Writing model shards", the GGUF
    de-quantization), so that a run shows one progress bar, its own. Hugging Face hub download bars stay as they
    were; every switch is restored on exit."""
    from transformers.utils import logging as hf_logging

    bars_on = hf_logging.is_progress_bar_enabled()
    # transformers' switch also flips the hub's (download) bars: keep the hub's settings, per group, as they were.
    # the module (the package exports a class so named)
    hub_tqdm = importlib.import_module("huggingface_hub.utils.tqdm")
    hub_states = getattr(hub_tqdm, "progress_bar_states", None)
    hub_saved = dict(hub_states) if isinstance(hub_states, dict) else None

    def restore_hub() -> None:
        if hub_saved is not None and isinstance(hub_states, dict):
            hub_states.clear()
            hub_states.update(hub_saved)

    # The GGUF reader uses tqdm directly; point it at transformers' switchable tqdm while we load.
    gguf_module: Any = sys.modules.get("transformers.modeling_gguf_pytorch_utils")
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
