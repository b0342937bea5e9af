"""What every results page shares: the page's mark, markdown tables, the run's provenance (the command and the data's
checksums, ``provenance.json``, written by the run) and the common sections (settings, data, plots, folders,
versions, command). Everything here reads files and returns strings; nothing prints."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirage.attribution.serialization import JSONRecord
from mirage.data.inputs import InputError
from mirage.runs.store import write_atomic

#: The first line of every page ``mirage report`` writes; a README.md without it is the user's and is never rewritten.
MARK = "<!-- Written by `mirage report` from this folder's results; edit the results, not this page. -->"
PAGE = "README.md"
PROVENANCE = "provenance.json"
PROVENANCE_FORMAT = 1


# -- formatting --------------------------------------------------------------------------------------------------------


def cell(value: Any, digits: int = 1) -> str:
    """A table cell: ``–`` for None, floats to ``digits`` decimals, lists joined, ``|`` escaped."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v, digits) for v in value) or "–"
    return str(value).replace("|", "\\|").replace("\n", " ")


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A markdown table (cells through :func:`cell` unless already strings)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        lines.append("| " + " | ".join(c if isinstance(c, str) else cell(c) for c in row) + " |")
    return "\n".join(lines)


def gib(mib: float | None) -> str:
    """Memory recorded in MiB (2^20 bytes, as every mirage record keeps it) in GiB (2^30 bytes), two decimals."""
    return "–" if mib is None else f"{mib / 1024:.2f} GiB"


def fenced(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```"


def flatten(data: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted.key, value)`` for every leaf of nested dicts (lists are leaves)."""
    out: list[tuple[str, Any]] = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out += flatten(value, f"{name}.")
        else:
            out.append((name, value))
    return out


def read_json(path: Path) -> Any:
    """A results file's JSON; an InputError names a file that is not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise InputError(f"{path} is not valid JSON ({err}); its page is written from the file as the run wrote "
                         "it.") from None


# -- provenance: what the run knew about its command and data ----------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file; of a folder, SHA-256 over its files' relative names and SHA-256s (sorted)."""
    path = Path(path)
    if path.is_dir():
        digest = hashlib.sha256()
        for sub in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(f"{sub.relative_to(path).as_posix()}\0{file_sha256(sub)}\n".encode())
        return digest.hexdigest()
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()




@dataclass
class Provenance(JSONRecord):
    """What a run records beside its results for its page: the command that reproduces it (no machine paths) and
    each data file it read, as given (path or dataset name), with its SHA-256 (None where it is no local file)."""

    command: str | None
    data: list[dict[str, Any]] = field(default_factory=list)
    format: int = PROVENANCE_FORMAT


def pinned_sha256(given: str) -> str | None:
    """The SHA-256 the data registry (:mod:`mirage.data`) pins for a dataset name that stands for one file
    (``xor-attriqa-match:fi``); None for a path, a name of several files or a file without a pinned checksum."""
    try:
        from mirage.data.registry import is_spec, parse_spec
    except ImportError:  # the data registry is not part of this checkout
        return None
    if Path(given).exists() or not is_spec(given):
        return None
    try:
        spec = parse_spec(given)
    except InputError:
        return None
    if spec.dataset.as_folder or len(spec.parts) != 1:  # a folder: its files' checksums are `mirage data list`'s
        return None
    return spec.dataset.parts[spec.parts[0]][0].sha256


def data_entries(given: Iterable[str]) -> list[dict[str, Any]]:
    """One entry per data path or name: ``{"given": …, "sha256": …}``: a local file's (or folder's) SHA-256, a
    dataset name's pinned one, else None (duplicates once)."""
    out, seen = [], set()
    for item in given:
        if item is None or item in seen:
            continue
        seen.add(item)
        path = Path(item)
        out.append({"given": str(item), "sha256": file_sha256(path) if path.exists() else pinned_sha256(str(item))})
    return out


def write_provenance(run_dir: str | Path, prov: Provenance) -> Path:
    path = Path(run_dir) / PROVENANCE
    write_atomic(path, json.dumps(prov.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return path


def find_provenance(run_dir: Path, levels: int = 3) -> tuple[Provenance | None, Path | None]:
    """The folder's ``provenance.json``, or else the nearest one of up to ``levels`` parent folders (a sweep point or
    a protocol's study written by the run of the folder above), with the folder it is in."""
    for k, folder in enumerate([run_dir, *run_dir.parents]):
        if k > levels:
            break
        path = folder / PROVENANCE
        if path.is_file():
            return Provenance.from_dict(read_json(path)), folder
    return None, None


# -- sections ----------------------------------------------------------------------------------------------------------


def settings_section(settings: Mapping[str, Any], title: str = "Settings") -> str:
    rows = [(f"`{k}`", cell(repr(v) if isinstance(v, float) else v)) for k, v in flatten(settings)]
    return f"## {title}\n\n" + (md_table(["setting", "value"], rows) if rows else "none recorded")


def data_section(run_dir: Path, given: Sequence[str]) -> str:
    """The data the results name, with the SHA-256 the run recorded for each (``provenance.json``)."""
    prov, _ = find_provenance(run_dir)
    known = {d["given"]: d.get("sha256") for d in (prov.data if prov else [])}
    names = list(dict.fromkeys([*given, *known]))
    if not names:
        return "## Data\n\nnone recorded"
    def checksum(name: str) -> str:
        if known.get(name):
            return f"`{known[name]}`"
        pinned = pinned_sha256(name)
        return f"`{pinned}` (pinned by `mirage data`)" if pinned else "not recorded by the run"

    rows = [(f"`{n}`", checksum(n)) for n in names]
    return "## Data\n\n" + md_table(["data (as given to the run)", "SHA-256"], rows)


def plots_section(run_dir: Path) -> str | None:
    pngs = sorted(p.name for p in run_dir.glob("*.png"))
    return "## Plots\n\n" + "\n\n".join(f"![{n}]({n})" for n in pngs) if pngs else None


def folders_section(run_dir: Path, has_page: Any) -> str | None:
    """Links to the folders below ``run_dir`` (any depth, the nearest ones) that have a page of their own."""
    found: list[Path] = []

    def walk(folder: Path) -> None:
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            if has_page(sub):
                found.append(sub)
            else:
                walk(sub)

    walk(run_dir)
    if not found:
        return None
    return "## Run folders here\n\n" + "\n".join(
        f"- [`{p.relative_to(run_dir).as_posix()}/`]({p.relative_to(run_dir).as_posix()}/{PAGE})" for p in found)


def files_section(run_dir: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir() if p.name != PAGE)
    return "## Files\n\n" + "\n".join(f"- [`{n}`]({n})" for n in names)


def versions_section(versions: Mapping[str, Any] | None) -> str:
    if not versions:
        return "## Versions\n\nnot recorded"
    return "## Versions\n\n" + md_table(["library", "version"], [(k, str(v)) for k, v in versions.items()])


def command_section(run_dir: Path, reconstructed: str | None = None,
                    changed: Callable[[str], Sequence[str]] | None = None) -> str:
    """The command the run recorded (``provenance.json``, here or in the folder of the run that wrote this one), or
    else ``reconstructed`` from the settings, said to be so. ``changed(command)``: the flags that command needs
    today to reproduce the run, where a default it ran with has changed since
    (:func:`mirage.config.flags_for_changed_defaults`)."""
    prov, where = find_provenance(run_dir)
    if prov and prov.command:
        note = "" if where == run_dir else (
            f"This folder was written by the run of `{os.path.relpath(where, run_dir)}/`:\n\n")
        flags = list(changed(prov.command)) if changed else []
        if flags:
            return ("## Command\n\n" + note + fenced(prov.command, "bash") + "\n\nA default this run used has "
                    f"changed since (`{' '.join(flags)}` was the default then); with today's mirage the same run "
                    "is:\n\n" + fenced(f"{prov.command} {' '.join(flags)}", "bash"))
        return "## Command\n\n" + note + fenced(prov.command, "bash")
    if reconstructed:
        return ("## Command\n\nThis run predates recorded commands; rebuilt from its recorded settings (options the "
                "results do not record, such as a pipeline YAML or an adapter, are not in it):\n\n"
                + fenced(reconstructed, "bash"))
    return "## Command\n\nnot recorded by this run."


def page(title: str, intro: str | None, sections: Sequence[str | None]) -> str:
    """The page: the mark, the title, an intro line and the sections that are not None."""
    parts = [MARK, f"# {title}"]
    if intro:
        parts.append(intro)
    parts += [s for s in sections if s]
    return "\n\n".join(p.rstrip() for p in parts) + "\n"


def demote(markdown: str, levels: int = 1) -> str:
    """Markdown headings one level lower, so a table writer's ``#`` title sits under the page's own."""
    return "\n".join("#" * levels + line if line.startswith("#") else line for line in markdown.split("\n"))
