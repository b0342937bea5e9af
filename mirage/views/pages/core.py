"""What every results page shares: the page's mark, markdown tables, the run's provenance (the command and the data's
checksums, ``provenance.json``, written by the run) and the common sections (settings, data, plots, folders,
versions, command). Everything here reads files and returns strings; nothing prints."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from mirage.attribution.serialization import JSONRecord
from mirage.data.inputs import InputError
from mirage.runs.files import read_json
from mirage.runs.store import write_atomic
from mirage.views.markdown import LINE_BREAK, cell, code, fenced, md_table, text

__all__ = ["DATA_NAMES", "MARK", "MAX_FOLDERS", "MAX_HASHED_FILES", "PAGE", "PROVENANCE", "Provenance", "cell", "code",
           "command_section", "data_entries", "data_names", "data_section", "fenced", "file_sha256", "files_section",
           "folders_section", "gib", "link", "md_table", "named_data", "no_raw_html", "page", "pinned_sha256",
           "plots_section", "read_json", "read_provenance", "registered_name", "settings_section", "subfolders", "text",
           "versions_section", "write_provenance"]

#: The first line of every page ``mirage report`` writes; a README.md without it is the user's and is never rewritten.
MARK = "<!-- Written by `mirage report` from this folder's results; edit the results, not this page. -->"
PAGE = "README.md"
PROVENANCE = "provenance.json"
PROVENANCE_FORMAT = 1
#: A run folder's record, written after the run, of the dataset names of data it read as local files
#: (:func:`data_names`).
DATA_NAMES = "data_names.json"


# -- formatting --------------------------------------------------------------------------------------------------------


#: Where raw HTML (a tag, a comment, an autolink) would start.
RAW_HTML = re.compile(r"<(?=[A-Za-z/!?])")
#: A link to another scheme than http(s) (``javascript:``): its ``(``.
OTHER_SCHEME = re.compile(r"\]\((?=\s*<?(?!https?:)[A-Za-z][A-Za-z0-9+.-]*:)")
#: A markdown fence line (a code block's first or last).
FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def link(label: str, target: str) -> str:
    """A link (``label``: markdown) to a file or folder of the run: ``target`` percent-encoded, so no character of a
    file name ends it or makes it another scheme."""
    return f"[{label}]({quote(target)})"




def gib(mib: float | None) -> str:
    """Memory recorded in MiB (2^20 bytes, as every mirage record keeps it) in GiB (2^30 bytes), two decimals."""
    return "–" if mib is None else f"{mib / 1024:.2f} GiB"


def _outside_code_spans(line: str, change: Callable[[str], str]) -> str:
    """``line`` with ``change`` applied to what is not in a code span (a backtick run up to the next run as long)."""
    parts, out, i = re.split("(`+)", line), [], 0
    while i < len(parts):
        if i % 2 == 0:
            out.append(change(parts[i]))
            i += 1
            continue
        close = next((j for j in range(i + 2, len(parts), 2) if parts[j] == parts[i]), i)  # none: a literal run
        out.append("".join(parts[i:close + 1]))
        i = close + 1
    return "".join(out)


def no_raw_html(markdown: str) -> str:
    """``markdown`` with nothing a renderer takes as HTML (a tag, a comment, an autolink: its ``<`` as ``&lt;``) or as
    a link to another scheme than http(s), outside code blocks and code spans (where it is text already): what
    every page's table writers put on it stays text, whatever a run's values held."""
    out, fence = [], None
    for line in markdown.split("\n"):
        m = FENCE.match(line)
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line[m.end():].strip():
                fence = None
        elif m and not (m.group(1)[0] == "`" and "`" in line[m.end():]):
            fence = m.group(1)
        else:
            line = _outside_code_spans(line, lambda t: OTHER_SCHEME.sub("]\\(", RAW_HTML.sub("&lt;", t)))
        out.append(line)
    return "\n".join(out)


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


# -- provenance: what the run knew about its command and data ----------------------------------------------------------


#: The most files :func:`file_sha256` hashes in one data folder.
MAX_HASHED_FILES = 100_000


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a file (hashed once per process, :func:`mirage.data.fetch.sha256_of`); of a folder, SHA-256 over
    its files' relative names and SHA-256s (sorted)."""
    from mirage.data.fetch import sha256_of

    path = Path(path)
    if path.is_dir():
        digest = hashlib.sha256()
        files = []
        for sub in path.rglob("*"):  # folder links are not followed (no loop); the count is capped
            if sub.is_file():
                files.append(sub)
                if len(files) > MAX_HASHED_FILES:
                    raise InputError(f"{path} holds more than {MAX_HASHED_FILES} files; give the data file or the "
                                     "dataset's own folder.")
        for sub in sorted(files):
            digest.update(f"{sub.relative_to(path).as_posix()}\0{file_sha256(sub)}\n".encode())
        return digest.hexdigest()
    return sha256_of(path)




@dataclass
class Provenance(JSONRecord):
    """What a run records beside its results for its page: the command that reproduces it (no machine paths) and
    each data file it read, as given (path or dataset name), with its SHA-256 (None where it is no local file)."""

    command: str | None
    data: list[dict[str, Any]] = field(default_factory=list)
    format: int = PROVENANCE_FORMAT
    #: The run folders below this one the run wrote (relative, ``/``-separated: a sweep's points, a protocol's
    #: studies): their pages show this command and these checksums, unless they hold a provenance of their own.
    folders: list[str] = field(default_factory=list)


def read_provenance(path: Path) -> Provenance:
    """A ``provenance.json``; an InputError names it where it is not one mirage writes."""
    raw = read_json(path)
    data, folders = (raw.get("data", []), raw.get("folders", [])) if isinstance(raw, dict) else ([], [])
    if not isinstance(raw, dict):
        wrong = f"a JSON {type(raw).__name__}, not an object"
    elif not isinstance(raw.get("command"), (str, type(None))):
        wrong = '"command" is not text'
    elif not isinstance(data, list) or not all(
            isinstance(d, dict) and isinstance(d.get("given"), str) and isinstance(d.get("sha256"), (str, type(None)))
            for d in data):
        wrong = '"data" is not a list of {"given": …, "sha256": …} objects'
    elif not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        wrong = '"folders" is not a list of folder names'
    else:
        return Provenance.from_dict(raw)
    raise InputError(f"{path} is not the provenance a run writes ({wrong}); move it away (the page then says the "
                     "command was not recorded) or run the run again.")


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


def registered_name(given: str) -> str:
    """``given`` as the dataset name it is a copy of, else as it is: a local file that is the first file of a part
    of a dataset in the data registry (:mod:`mirage.data`), with its pinned SHA-256 and its part's other files beside
    it with theirs (``xor-attriqa-match:fi``), or a local folder whose files are exactly the files of some parts of
    one dataset, each with its pinned SHA-256 (``xor-attriqa-match:train,val,fi,ru``; the whole dataset's name where
    they are all its parts). A command printed with the name reads the same bytes from the data cache."""
    from mirage.data.fetch import sha256_of
    from mirage.data.registry import DATASETS, DataSpec, is_spec

    path = Path(given)
    if (is_spec(given) and not path.exists()) or not (path.is_file() or path.is_dir()):
        return given
    folder = path.parent if path.is_file() else path
    here = {p.name: p for p in folder.iterdir() if p.is_file()}

    def pinned_here(outputs: Iterable[Any]) -> bool:
        return all(o.sha256 and o.name in here and sha256_of(here[o.name]) == o.sha256 for o in outputs)

    for ds in DATASETS.values():
        if ds.as_folder:
            continue
        if path.is_file():
            part = next((p for p, outs in ds.parts.items() if outs[0].name == path.name and pinned_here(outs)), None)
            if part is not None:
                return str(DataSpec(ds, (part,), whole=len(ds.parts) == 1))
            continue
        parts = tuple(p for p, outs in ds.parts.items() if all(o.name in here for o in outs))
        names = {o.name for p in parts for o in ds.parts[p]}
        if parts and names == set(here) and pinned_here(ds.outputs(parts)):
            return str(DataSpec(ds, parts, whole=len(parts) == len(ds.parts)))
    return given


def data_entries(given: Iterable[str]) -> list[dict[str, Any]]:
    """One entry per data path or name: ``{"given": …, "sha256": …}``: the SHA-256 of a local file (or folder), or
    of the file (or folder) a dataset name stands for in the data cache (the bytes the run read, not the pinned
    ones), else None (duplicates once)."""
    from mirage.data.fetch import spec_path
    from mirage.data.registry import is_spec, parse_spec

    out, seen = [], set()
    for item in given:
        if item is None or item in seen:
            continue
        seen.add(item)
        path = Path(item)
        if not path.exists() and is_spec(str(item)):
            try:
                path = spec_path(parse_spec(str(item)))
            except InputError:
                pass
        out.append({"given": str(item), "sha256": file_sha256(path) if path.exists() else None})
    return out


def write_provenance(run_dir: str | Path, prov: Provenance) -> Path:
    path = Path(run_dir) / PROVENANCE
    write_atomic(path, json.dumps(prov.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return path


def find_provenance(run_dir: Path, levels: int = 3) -> tuple[Provenance | None, Path | None]:
    """The folder's ``provenance.json``, or else that of the nearest of up to ``levels`` parent folders whose run
    wrote this one (a sweep point, a protocol's study): its ``folders`` name this folder and it has this folder's
    owner. Any other parent's file (``/tmp/provenance.json``) is not this run's. With the folder it is in."""
    for k, folder in enumerate([run_dir, *run_dir.parents][:levels + 1]):
        path = folder / PROVENANCE
        if not path.is_file():
            continue
        prov = read_provenance(path)
        if k == 0 or (run_dir.relative_to(folder).as_posix() in prov.folders
                      and path.stat().st_uid == run_dir.stat().st_uid):
            return prov, folder
    return None, None


#: The most folders a walk below a run folder visits.
MAX_FOLDERS = 10_000


def subfolders(root: Path, stop: Callable[[Path], bool] | None = None) -> list[Path]:
    """The folders below ``root``, depth first and by name, not through symbolic links (a link can make a loop) and
    not below a folder ``stop`` accepts; InputError past :data:`MAX_FOLDERS`."""
    found: list[Path] = []
    todo = [root]
    while todo:
        folder = todo.pop()
        if folder != root:
            found.append(folder)
            if len(found) > MAX_FOLDERS:
                raise InputError(f"more than {MAX_FOLDERS} folders below {root}; give a run's output folder (or "
                                 "a folder of run folders).")
            if stop is not None and stop(folder):
                continue
        todo += sorted((p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()), reverse=True)
    return found


# -- sections ----------------------------------------------------------------------------------------------------------


def settings_section(settings: Mapping[str, Any], title: str = "Settings") -> str:
    rows = [(code(k), cell(repr(v) if isinstance(v, float) else v)) for k, v in flatten(settings)]
    return f"## {title}\n\n" + (md_table(["setting", "value"], rows) if rows else "none recorded")


def data_names(run_dir: Path) -> dict[str, str]:
    """``{path as given to the run: dataset name}`` from the folder's ``data_names.json`` (``{"format": 1, "names":
    {...}, "why": "..."}``): data a run read as a local file that is, byte for byte, a dataset of the data registry,
    recorded after the run so that its page's command names the data as a user gets it (``mirage data get NAME``).
    Empty without the file; InputError naming the file where it is not that or a name is not a dataset's."""
    from mirage.data.registry import is_spec

    path = run_dir / DATA_NAMES
    if not path.is_file():
        return {}
    record = read_json(path)
    names = record.get("names") if isinstance(record, dict) else None
    if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str) and is_spec(v)
                                              for k, v in names.items()):
        raise InputError(f"{path}: 'names' must map each path as given to the run to a dataset name of `mirage data "
                         "list`; fix the file or remove it.")
    return dict(names)


def named_data(run_dir: Path, given: str) -> str:
    """``given`` as the dataset name the folder's :func:`data_names` records for it, else as
    :func:`registered_name` gives it."""
    return data_names(run_dir).get(given) or registered_name(given)


def data_section(run_dir: Path, given: Sequence[str]) -> str:
    """The data the results name, with the SHA-256 the run recorded for each (``provenance.json``)."""
    prov, _ = find_provenance(run_dir)
    known = {d["given"]: d.get("sha256") for d in (prov.data if prov else [])}
    names = list(dict.fromkeys([*given, *known]))
    if not names:
        return "## Data\n\nnone recorded"
    def checksum(name: str) -> str:
        if known.get(name):
            return code(known[name])
        pinned = pinned_sha256(name)
        return f"{code(pinned)} (pinned by `mirage data`)" if pinned else "not recorded by the run"

    rows = [(code(n), checksum(n)) for n in names]
    named = data_names(run_dir)
    notes = [f"{code(n)} is {code(named[n])} by name (`mirage data get {named[n]}`): the same rows, recorded after the "
             f"run in {code(DATA_NAMES)}." for n in names if n in named]
    return "## Data\n\n" + md_table(["data (as given to the run)", "SHA-256"], rows) + "".join(
        "\n\n" + note for note in notes)


def plots_section(run_dir: Path) -> str | None:
    pngs = sorted(p.name for p in run_dir.glob("*.png"))
    return "## Plots\n\n" + "\n\n".join(f"!{link(text(n), n)}" for n in pngs) if pngs else None


def folders_section(run_dir: Path, has_page: Callable[[Path], bool]) -> str | None:
    """Links to the folders below ``run_dir`` (any depth, the nearest ones) that have a page of their own."""
    found: list[str] = []

    def page_here(folder: Path) -> bool:  # the walk goes no deeper
        here = has_page(folder)
        if here:
            found.append(folder.relative_to(run_dir).as_posix())
        return here

    subfolders(run_dir, stop=page_here)
    if not found:
        return None
    return "## Run folders here\n\n" + "\n".join(f"- {link(code(f'{p}/'), f'{p}/{PAGE}')}" for p in found)


def files_section(run_dir: Path) -> str:
    names = sorted(p.name + ("/" if p.is_dir() else "") for p in run_dir.iterdir() if p.name != PAGE)
    return "## Files\n\n" + "\n".join(f"- {link(code(n), n)}" for n in names)


def versions_section(versions: Mapping[str, Any] | None) -> str:
    if not versions:
        return "## Versions\n\nnot recorded"
    return "## Versions\n\n" + md_table(["library", "version"], [(cell(k), cell(str(v))) for k, v in versions.items()])


def command_section(run_dir: Path, reconstructed: str | None = None,
                    changed: Callable[[str], Sequence[str]] | None = None, missing: Sequence[str] = ()) -> str:
    """The command the run recorded (``provenance.json``, here or in the folder of the run that wrote this one), or
    else ``reconstructed`` from the settings, said to be so; where the results do not record (and do not show) the
    value of an option the command needs (``missing``: ``--limit``), no command is rebuilt and the page says which.
    ``changed(command)``: the flags that command needs today to reproduce the run, where a default it ran with has
    changed since (:func:`mirage.config.flags_for_changed_defaults`)."""
    prov, where = find_provenance(run_dir)
    if prov and prov.command and where is not None:
        note = "" if where == run_dir else (
            f"This folder was written by the run of {code(os.path.relpath(where, run_dir) + '/')}:\n\n")
        flags = list(changed(prov.command)) if changed else []
        section = "## Command\n\n" + note + fenced(prov.command, "bash")
        today = prov.command
        if flags:
            today = f"{prov.command} {' '.join(flags)}"
            section += ("\n\nA default this run used has changed since "
                        f"({code(' '.join(flags))} was the default then); with today's mirage the same run is:\n\n"
                        + fenced(today, "bash"))
        named = _with_data_names(today, data_names(run_dir))
        if named != today:
            section += ("\n\nWith its data by name (as the Data section says), the same run is:\n\n"
                        + fenced(named, "bash"))
        return section
    if reconstructed and missing:
        return ("## Command\n\nThis run predates recorded commands, and its results do not record all that its "
                f"command needs (not recorded: {', '.join(map(code, missing))}), so the command cannot be rebuilt "
                "fully; its recorded settings are above.")
    if reconstructed:
        return ("## Command\n\nThis run predates recorded commands; rebuilt from its recorded settings (options the "
                "results do not record, such as a pipeline YAML or an adapter, are not in it):\n\n"
                + fenced(reconstructed, "bash"))
    return "## Command\n\nnot recorded by this run."


def _with_data_names(command: str, names: Mapping[str, str]) -> str:
    """``command`` with each argument that is a path of ``names`` replaced by its dataset name."""
    import shlex

    if not names:
        return command
    argv = shlex.split(command)
    return shlex.join(names.get(arg, arg) for arg in argv) if any(arg in names for arg in argv) else command


def page(title: str, intro: str | None, sections: Sequence[str | None]) -> str:
    """The page: the mark, the title (on one line; the values in it as :func:`text` or :func:`code`), an intro line
    and the sections that are not None, with no raw HTML (:func:`no_raw_html`)."""
    parts = [f"# {LINE_BREAK.sub(' ', title)}"]
    if intro:
        parts.append(intro)
    parts += [s for s in sections if s]
    return MARK + "\n\n" + no_raw_html("\n\n".join(p.rstrip() for p in parts)) + "\n"


def demote(markdown: str, levels: int = 1) -> str:
    """Markdown headings one level lower, so a table writer's ``#`` title sits under the page's own."""
    return "\n".join("#" * levels + line if line.startswith("#") else line for line in markdown.split("\n"))
