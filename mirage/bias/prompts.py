"""The studies' prompts (``configs/bias/*.yaml``): the vanilla template, the metadata-informed variant with its
consideration line, the explainer question and the rewrite instruction.

A mode's prompt is written out as an ordinary mirage template file (``prompt.path``), so that mirage builds, tokenizes
and maps it exactly as any other prompt. A document's label goes into its text (``metadata_format``), inside the
document's rendered entry, so the document spans stay whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mirage.bias.protocol import BIAS_CONFIG_DIR, BiasConfig, Metadata
from mirage.config import ConfigError, read_yaml
from mirage.data.inputs import Document

__all__ = ["BiasPrompts", "labelled_docs", "load_prompts", "mode_template", "resolve_sentence_mark", "write_template"]

_TEMPLATE_KEYS = ("name", "instruction", "template", "contextless_template", "doc_template")
#: Template keys a prompt file may add (:class:`mirage.attribution.prompts.PromptTemplate`'s optional fields).
_OPTIONAL_KEYS = ("untitled_doc_template", "sentence_mark")


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
    data = read_yaml(path) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with {', '.join(needed)}.")
    missing = [k for k in needed if k not in data]
    if missing:
        raise ConfigError(f"{path} lacks {missing}.")
    return data


def trained_sentence_mark(model: str | None) -> str | None:
    """The sentence mark of the prompt a model mirage tuned was trained in
    (:func:`mirage.attribution.models.trained_prompt_name`), or None: another model, or a prompt without marks."""
    from mirage.attribution.models import trained_prompt_name
    from mirage.attribution.prompts import available_prompts, load_template
    from mirage.config import PromptConfig

    name = trained_prompt_name(model) if model else None
    if name is None or name not in available_prompts():
        return None
    return load_template(PromptConfig(name=name)).sentence_mark


def resolve_sentence_mark(cfg: BiasConfig, model: str | None) -> BiasConfig:
    """``cfg`` with ``sentence_mark: trained`` replaced by the mark ``model`` was tuned with (so that the results
    record the mark itself); unchanged otherwise. A model tuned without one is a one-line error."""
    if cfg.sentence_mark != "trained":
        return cfg
    mark = trained_sentence_mark(model)
    if mark is None:
        raise ConfigError(f"bias.sentence_mark='trained': {model or 'no model'} was not tuned by mirage in a prompt "
                          "with sentence marks; give the mark itself (--sentence-mark ' [{ID}]') or leave it out.")
    return dataclasses.replace(cfg, sentence_mark=mark)


def load_prompts(cfg: BiasConfig) -> BiasPrompts:
    """The prompt files in ``cfg.prompts_dir`` (default ``configs/bias``), with ``cfg.sentence_mark`` (resolved by
    :func:`resolve_sentence_mark`) in the vanilla and informed templates, over a mark of the files' own."""
    if cfg.sentence_mark == "trained":
        raise ConfigError("bias.sentence_mark='trained' names no mark until the model is known; resolve it with "
                          "mirage.bias.prompts.resolve_sentence_mark(cfg, model).")
    folder = Path(cfg.prompts_dir or BIAS_CONFIG_DIR)
    informed = _read(folder, "informed", _TEMPLATE_KEYS)
    if "{CONSIDERATION}" not in informed["instruction"]:
        raise ConfigError(f"{folder / 'informed.yaml'}: the instruction must contain {{CONSIDERATION}}.")
    if "{AUTHOR}" not in informed.get("metadata_format", "{AUTHOR}") or "{P}" not in informed.get(
            "metadata_format", "{P}"):
        raise ConfigError(f"{folder / 'informed.yaml'}: metadata_format must contain {{P}} and {{AUTHOR}}.")
    vanilla = _read(folder, "vanilla", _TEMPLATE_KEYS)
    if cfg.sentence_mark is not None:
        vanilla, informed = ({**t, "sentence_mark": cfg.sentence_mark} for t in (vanilla, informed))
    return BiasPrompts(
        vanilla=vanilla,
        informed=informed,
        explainer=_read(folder, "explainer", ("question",)),
        rewrite=_read(folder, "rewrite", ("instruction", "template")),
    )


def mode_template(prompts: BiasPrompts, mode: str, metadata: Metadata) -> dict[str, str]:
    """The mirage template (name, instruction, template, contextless_template, doc_template, and the optional keys
    the prompt file or the study set: untitled_doc_template, sentence_mark) of ``mode``."""
    source = prompts.vanilla if mode == "vanilla" else prompts.informed
    out = {k: str(source[k]) for k in _TEMPLATE_KEYS}
    out.update({k: str(source[k]) for k in _OPTIONAL_KEYS if source.get(k) is not None})
    if mode == "vanilla":
        return out
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
