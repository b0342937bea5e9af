"""The models and adapters mirage ships in packages: their registries (``mirage/embedded_models.yaml``,
``mirage/embedded_adapters.yaml``), the names that load offline, and mirage's cache folder (``$MIRAGE_CACHE_DIR``)
where their converted checkpoints live."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

__all__ = ["EmbeddedAdapterSpec", "EmbeddedModelSpec", "cache_dir", "embedded_adapters", "embedded_models",
           "embedded_names"]


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


@cache
def embedded_models() -> dict[str, EmbeddedModelSpec]:
    """The embedded model registry (``mirage/embedded_models.yaml``)."""
    raw = yaml.safe_load((Path(__file__).parents[2] / "embedded_models.yaml").read_text())
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
        return Path(__file__).parents[2] / self.adapter


@cache
def embedded_adapters() -> dict[str, EmbeddedAdapterSpec]:
    """The shipped adapters by their embedded name (``mirage/embedded_adapters.yaml``)."""
    raw = yaml.safe_load((Path(__file__).parents[2] / "embedded_adapters.yaml").read_text()) or {}
    return {name: EmbeddedAdapterSpec(name=name, **entry) for name, entry in raw.items()}


def embedded_names() -> list[str]:
    """Every name that loads offline: the embedded models and the shipped adapters."""
    return [*embedded_models(), *embedded_adapters()]


def cache_dir() -> Path:
    """Root of mirage's cache: ``$MIRAGE_CACHE_DIR`` or ``~/.cache/mirage``."""
    root = os.environ.get("MIRAGE_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "mirage"
