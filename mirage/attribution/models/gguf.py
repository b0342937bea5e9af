"""An embedded model's GGUF file (located in its carrier package, or assembled) converted once to a safetensors
checkpoint in mirage's cache (:func:`embedded_checkpoint`, stamped with :data:`CACHE_FORMAT`), written aside in a
temporary folder named for its process, so that what a stopped conversion leaves is removed on the next start
(:func:`remove_stale_temporaries`)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import json
import logging
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

from mirage.attribution.models.checkpoints import quiet_transformers_loading
from mirage.attribution.models.embedded import EmbeddedModelSpec, cache_dir, embedded_models
from mirage.attribution.models.loaded import ModelLoadError

logger = logging.getLogger(__package__)  # the package's logger, "mirage.attribution.models", as before the split

__all__ = ["CACHE_FORMAT", "TEMPORARY_NAME", "embedded_checkpoint", "gguf_path", "remove_stale_temporaries",
           "temporary_folder"]


#: The format of a converted model folder's ``mirage-cache.json`` stamp (a folder of another format is converted again).
CACHE_FORMAT = 1


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
