"""The studies' prompts (``configs/bias/*.yaml``): the vanilla template, the metadata-informed variant with its
consideration line, the explainer question and the rewrite instruction.

A mode's prompt is written out as an ordinary mirage template file (``prompt.path``), so that mirage builds, tokenizes
and maps it exactly as any other prompt. A document's label goes into its text (``metadata_format``), inside the
document's rendered entry, so the document spans stay whole.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mirage.bias.protocol import BIAS_CONFIG_DIR, BiasConfig, Metadata
from mirage.config import ConfigError, load_yaml
from mirage.data.inputs import Document

_TEMPLATE_KEYS = ("name", "instruction", "template", "contextless_template", "doc_template")


@dataclass(frozen=True)
class BiasPrompts:
    """The prompt files of a study, loaded."""

    vanilla: dict[str, Any]
    informed: dict[str, Any]
    explainer: dict[str, Any]
    rewrite: dict[str, Any]

    @property
    def metadata_format(self) -> str:
        return str(self.informed.get("metadata_format", "{P} (written by {AUTHOR})"))


def _read(folder: Path, name: str, needed: tuple[str, ...]) -> dict[str, Any]:
    path = folder / f"{name}.yaml"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; copy configs/bias/{name}.yaml there.")
    try:
        data = load_yaml(path.read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        reason = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigError(f"{path}: cannot be read as YAML ({reason[:200]}).") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with {', '.join(needed)}.")
    missing = [k for k in needed if k not in data]
    if missing:
        raise ConfigError(f"{path} lacks {missing}.")
    return data


def load_prompts(cfg: BiasConfig) -> BiasPrompts:
    """The prompt files in ``cfg.prompts_dir`` (default ``configs/bias``)."""
    folder = Path(cfg.prompts_dir or BIAS_CONFIG_DIR)
    informed = _read(folder, "informed", _TEMPLATE_KEYS)
    if "{CONSIDERATION}" not in informed["instruction"]:
        raise ConfigError(f"{folder / 'informed.yaml'}: the instruction must contain {{CONSIDERATION}}.")
    if "{AUTHOR}" not in informed.get("metadata_format", "{AUTHOR}") or "{P}" not in informed.get(
            "metadata_format", "{P}"):
        raise ConfigError(f"{folder / 'informed.yaml'}: metadata_format must contain {{P}} and {{AUTHOR}}.")
    return BiasPrompts(
        vanilla=_read(folder, "vanilla", _TEMPLATE_KEYS),
        informed=informed,
        explainer=_read(folder, "explainer", ("question",)),
        rewrite=_read(folder, "rewrite", ("instruction", "template")),
    )


def mode_template(prompts: BiasPrompts, mode: str, metadata: Metadata) -> dict[str, str]:
    """The mirage template (name, instruction, template, contextless_template, doc_template) of ``mode``."""
    if mode == "vanilla":
        return {k: str(prompts.vanilla[k]) for k in _TEMPLATE_KEYS}
    out = {k: str(prompts.informed[k]) for k in _TEMPLATE_KEYS}
    out["instruction"] = out["instruction"].replace("{CONSIDERATION}", metadata.consideration)
    out["name"] = f"{out['name']}-{metadata.type}"
    return out


def write_template(template: dict[str, str], folder: str | Path) -> Path:
    """Write a template file named by its content hash (mirage caches templates by path) and return its path."""
    text = yaml.safe_dump(template, sort_keys=False, allow_unicode=True, width=1000)
    digest = hashlib.sha1(text.encode()).hexdigest()[:10]
    path = Path(folder) / f"{template['name']}-{digest}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        path.write_text(text, encoding="utf-8")
    return path


def labelled_docs(docs: tuple[Document, ...], labels: list[str | None], metadata_format: str) -> list[dict[str, str]]:
    """The documents with each label written into the text (``metadata_format``); unlabelled ones unchanged."""
    out = []
    for doc, label in zip(docs, labels):
        text = doc.text if label is None else metadata_format.replace("{AUTHOR}", label).replace("{P}", doc.text)
        out.append({"title": doc.title, "text": text})
    return out
