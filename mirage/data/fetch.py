"""Getting datasets into the cache and finding them there.

    get("xor-attriqa-match:fi")                        # download (pooch: pinned checksums, a progress bar)
    get("xor-attriqa-match:fi", source="~/MIRAGE-reproduce")   # or import from a local copy, checked the same way
    resolve("xor-attriqa-match:fi")                    # -> <cache>/data/xor_attriqa_match/fi.jsonl
    resolve("runs/my_items.jsonl")                     # a path that is not a dataset name comes back as it is

The cache is ``$MIRAGE_DATA_DIR``, else ``<cache>/data/`` (``<cache>``: ``$MIRAGE_CACHE_DIR`` or ``~/.cache/mirage``, as
for models), laid out as the project's data folder: ``xor_attriqa_match/fi.jsonl``, ``eli5_alce/eli5_alce_prompt.json``,
…; downloaded upstream files are kept under its ``_sources/``. A local copy (``source``) can be a clone of a source
repository, a folder of its files, or a folder laid out as the cache: every file is found by its name and accepted
only with its pinned checksum. A cached file is read only with its pinned checksum too: one truncated or edited is
refused (``mirage data get NAME`` fetches it again).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from mirage.data.build import build_output
from mirage.data.registry import DATASETS, SOURCES, DataError, DataSpec, Output, Upstream, is_spec, parse_spec

__all__ = ["WALK_DEPTH", "WALK_ENTRIES", "data_label", "data_root", "dataset_table", "get", "is_cached", "resolve",
           "resolve_all", "resolve_files", "sha256_of", "spec_path"]

#: Bounds of the walk of a ``--from`` folder: how deeply nested its folders and how many files and folders in all.
WALK_DEPTH, WALK_ENTRIES = 16, 200_000


def data_root() -> Path:
    """Where datasets land: ``$MIRAGE_DATA_DIR``, else ``<cache>/data`` (``<cache>``: ``$MIRAGE_CACHE_DIR`` or
    ``~/.cache/mirage``, where models are cached too)."""
    from mirage.attribution.models import cache_dir

    root = os.environ.get("MIRAGE_DATA_DIR")
    return Path(root) if root else cache_dir() / "data"


_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def sha256_of(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file, computed once per process for each version of it (its real path, inode, size and mtime)."""
    path = Path(path)
    st = path.stat()
    key = (os.path.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _git_blob(path: Path) -> str:
    """git's blob id of a file: SHA-1 of ``blob <size>\\0`` followed by the content."""
    data = path.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _matches_pin(path: Path, file: Upstream | Output) -> bool:
    if file.sha256:
        return sha256_of(path) == file.sha256
    if isinstance(file, Upstream) and file.git_blob:
        return _git_blob(path) == file.git_blob
    return False


def _pinned(file: Upstream | Output) -> bool:
    return bool(file.sha256 or (isinstance(file, Upstream) and file.git_blob))


def _mismatch(path: Path, file: Upstream | Output) -> str:
    """How ``path`` differs from ``file``'s pinned checksum (``file`` has one)."""
    if file.sha256:
        return f"its SHA-256 is {sha256_of(path)[:12]}… where {file.sha256[:12]}… is pinned"
    blob = file.git_blob if isinstance(file, Upstream) else None
    return f"its git blob id is {_git_blob(path)[:12]}… where {(blob or '')[:12]}… is pinned"


def spec_path(spec: DataSpec) -> Path:
    """The path a dataset name stands for, present or not: a part's first file, a folder of several parts' files
    (``_views/NAME=PART,…``), or the dataset's folder."""
    root = data_root()
    if spec.dataset.as_folder or (spec.whole and len(spec.dataset.parts) > 1):
        return root / spec.dataset.folder
    if len(spec.parts) == 1:
        return root / spec.dataset.parts[spec.parts[0]][0].path
    return root / "_views" / f"{spec.dataset.name}={','.join(spec.parts)}"


def _differs(output: Output) -> bool:
    """Whether ``output`` is in the cache with a SHA-256 other than its pinned one (truncated, edited)."""
    path = data_root() / output.path
    return output.sha256 is not None and path.is_file() and sha256_of(path) != output.sha256


def _cached_parts(spec: DataSpec) -> list[str]:
    """The parts of ``spec`` whose files are all in the cache, each with its pinned SHA-256."""
    return [p for p in spec.parts
            if all((data_root() / o.path).is_file() and not _differs(o) for o in spec.dataset.parts[p])]


def is_cached(spec: DataSpec) -> bool:
    """Whether every file of ``spec`` is in the cache with its pinned SHA-256 (where one is pinned)."""
    return len(_cached_parts(spec)) == len(spec.parts)


def _not_cached(spec: DataSpec) -> DataError:
    """Why ``spec`` cannot be read from the cache, and what to run."""
    for part in spec.parts:
        for output in spec.dataset.parts[part]:
            if _differs(output):
                path, name = data_root() / output.path, spec if len(spec.parts) == 1 else f"{spec.dataset.name}:{part}"
                return DataError(f"{path}: the cached file of {name} is not the pinned file "
                                 f"({_mismatch(path, output)}; truncated or edited?); run `mirage data get {name}` to "
                                 "fetch it again, or remove it.")
    cached = _cached_parts(spec)
    some = (f"its cached parts are read as `{spec.dataset.name}:{','.join(cached)}`, or "
            if cached and len(spec.parts) > 1 else "")
    return DataError(f"dataset {spec} is not in the cache ({data_root()}); {some}run `mirage data get {spec}` (or "
                     f"`mirage data get {spec} --from PATH` offline).")


def _view(spec: DataSpec) -> Path:
    """A folder holding (links to) the files of several parts, so that a folder reader sees only those parts."""
    folder = spec_path(spec)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = {Path(o.path).name: data_root() / o.path for o in spec.dataset.outputs(spec.parts)}
    for old in folder.iterdir():
        if old.name not in wanted:
            old.unlink()
    for name, target in wanted.items():
        link = folder / name
        if not (link.is_symlink() and link.resolve() == target.resolve()):
            link.unlink(missing_ok=True)
            try:
                link.symlink_to(target)
            except OSError:  # no symlinks here (some file systems): a copy
                link.write_bytes(target.read_bytes())
    return folder


def resolve(name_or_path: str | os.PathLike[str]) -> Path:
    """The file or folder a command reads: a dataset name (``xor-attriqa-match:fi``, ``eli5-alce``; see
    ``mirage data list``) becomes its path in the cache (DataError naming ``mirage data get NAME`` when it is not
    there); anything else is a path and comes back as it is."""
    text = os.fspath(name_or_path)
    if not is_spec(text) or Path(text).exists():
        return Path(text)
    spec = parse_spec(text)
    if not is_cached(spec):
        raise _not_cached(spec)
    if not spec.whole and not spec.dataset.as_folder and len(spec.parts) > 1:  # a folder of only those parts
        return _view(spec)
    return spec_path(spec)


def resolve_all(names_or_paths: Iterable[str | os.PathLike[str]] | None) -> list[str]:
    """:func:`resolve` each, as strings (for argument lists)."""
    return [str(resolve(x)) for x in names_or_paths or ()]


def resolve_files(names_or_paths: Iterable[str | os.PathLike[str]] | None, *, pattern: str = "*.jsonl") -> list[str]:
    """:func:`resolve_all` for commands that read data files one at a time: a dataset name of several parts
    (``xor-attriqa-match:train,val``) becomes each part's file, in the dataset's order, and a folder its ``pattern``
    files in name order."""
    files: list[str] = []
    for name_or_path in names_or_paths or ():
        text = os.fspath(name_or_path)
        if is_spec(text) and not Path(text).exists():
            spec = parse_spec(text)
            if not spec.whole and not spec.dataset.as_folder and len(spec.parts) > 1:
                files += [str(resolve(f"{spec.dataset.name}:{part}")) for part in spec.parts]
                continue
        path = resolve(text)
        files += [str(p) for p in sorted(path.glob(pattern))] if path.is_dir() else [str(path)]
    return files


def data_label(path: str | os.PathLike[str]) -> str:
    """How a run records the data it read, without this machine's folders: the dataset name of a path in the data
    cache (``xor-attriqa-match:fi``), else the path relative to the working directory when it lies under it, else
    the path as given."""
    text = os.fspath(path)
    if is_spec(text) and not Path(text).exists():
        return text
    target = Path(text).absolute()
    root = data_root().absolute()
    if target.parent == root / "_views":
        return target.name.replace("=", ":", 1)
    for ds in DATASETS.values():
        if target == root / ds.folder and (ds.as_folder or len(ds.parts) > 1):
            return ds.name
        for part, outputs in ds.parts.items():
            if any(target == root / o.path for o in outputs[:1 if not ds.as_folder else None]):
                return ds.name if len(ds.parts) == 1 else f"{ds.name}:{part}"
    try:
        return target.relative_to(Path.cwd().absolute()).as_posix() if Path(text).is_absolute() else text
    except ValueError:
        return text


# -- getting files ----------------------------------------------------------------------------------------------------


class _LocalCopy:
    """The files under a local folder, by name (``.git`` skipped), each hashed at most once. The walk follows links to
    folders but reads each real folder once, and stops in one line past ``WALK_DEPTH`` levels or ``WALK_ENTRIES``
    files and folders."""

    def __init__(self, root: Path) -> None:
        if not root.is_dir():
            raise DataError(f"--from {root}: not a folder; give a clone of the source repository, a folder of its "
                            "files or a folder laid out as the data cache.")
        self.root = root
        self.by_name: dict[str, list[Path]] = {}
        seen, entries = {os.path.realpath(root)}, 0
        itself = "give the folder of the copy itself (a clone of the source repository, a folder of its files or a " \
                 "folder laid out as the data cache), not a folder above it"
        for folder, dirs, files in os.walk(root, followlinks=True):
            entries += len(dirs) + len(files)
            if entries > WALK_ENTRIES:
                raise DataError(f"--from {root}: more than {WALK_ENTRIES} files and folders; {itself}.")
            kept = []
            for name in sorted(dirs):
                real = os.path.realpath(os.path.join(folder, name))
                if name != ".git" and real not in seen:
                    seen.add(real)
                    kept.append(name)
            dirs[:] = kept
            if dirs and len(Path(folder).relative_to(root).parts) >= WALK_DEPTH:
                raise DataError(f"--from {root}: folders nested deeper than {WALK_DEPTH} levels (at {folder}); "
                                f"{itself}.")
            for name in files:
                if (Path(folder) / name).is_file():  # not a FIFO, a dangling link or a link loop
                    self.by_name.setdefault(name, []).append(Path(folder) / name)

    def find(self, file: Upstream | Output) -> Path | None:
        """The file of this copy that is ``file`` (its name, and its pinned checksum), trying first the paths that
        end as ``file``'s own."""
        want = file.path

        def closeness(path: Path) -> int:
            rel, parts = path.relative_to(self.root).as_posix().split("/"), want.split("/")
            return -sum(1 for a, b in zip(reversed(rel), reversed(parts)) if a == b)

        for path in sorted(self.by_name.get(file.name, []), key=closeness):
            if _matches_pin(path, file):
                return path
        return None

    def not_found(self, item: Upstream, output: Output) -> DataError:
        """Neither ``item`` nor the ``output`` built from it is in this copy with its pinned checksum: which files of
        their names are there, how the first differs, and what to give."""
        give = f"a clone of {SOURCES[item.source].repo} or a folder of its files"
        seen = [(p, f) for f in (output, item) if _pinned(f) for p in self.by_name.get(f.name, [])]
        if not seen:
            return DataError(f"--from {self.root}: {item.path} (or {output.path}) not found (no file of that name); "
                             f"give {give}.")
        first, file = seen[0]
        return DataError(f"--from {self.root}: {item.path} (or {output.path}) not found (the file of that name is "
                         f"there but {_mismatch(first, file)}: {', '.join(str(p) for p, _ in seen[:3])} differ from "
                         f"the pinned file); replace it with the pinned file (from {give}) or remove it.")


def _download(up: Upstream, *, progress: bool) -> Path:
    """``up`` from its source (pooch: cached under ``_sources/``, checked against the pinned SHA-256, with a
    progress bar); DataError with one line naming ``--from`` when it cannot be downloaded."""
    import pooch
    import requests

    source = SOURCES[up.source]
    url = source.base_url + up.path
    folder = data_root() / "_sources" / source.name / Path(up.path).parent
    logger = pooch.get_logger()
    level = logger.level
    logger.setLevel(logging.WARNING)  # pooch's "Downloading …" line: the progress bar says it
    try:
        path = Path(pooch.retrieve(url, known_hash=f"sha256:{up.sha256}" if up.sha256 else None, fname=up.name,
                                   path=folder, progressbar=progress,
                                   downloader=pooch.HTTPDownloader(progressbar=progress, timeout=60)))
    except requests.exceptions.RequestException as err:
        raise _Offline(f"cannot download {url} ({type(err).__name__})") from None
    except ValueError as err:  # pooch: the downloaded file's hash is not the pinned one
        raise DataError(f"{url}: {str(err).splitlines()[0]}") from None
    finally:
        logger.setLevel(level)
    if not up.sha256 and not _matches_pin(path, up):
        path.unlink()
        raise DataError(f"{url}: the download is not the pinned file (git blob {up.git_blob}).")
    return path


class _Offline(DataError):
    pass


def _store(output: Output, data: bytes) -> Path:
    from mirage.runs.store import write_atomic

    if output.sha256 and hashlib.sha256(data).hexdigest() != output.sha256:
        raise DataError(f"built {output.path} does not have its pinned SHA-256 {output.sha256[:12]}…; the inputs "
                        "differ from the pinned release.")
    return write_atomic(data_root() / output.path, data)


def _obtain(output: Output, *, local: _LocalCopy | None, progress: bool, done: set[str]) -> Path:
    """``output`` in the cache: kept when it is there with its checksum, else copied from ``local`` (when it holds the
    built file), else built from its inputs (found in ``local`` or downloaded)."""
    target = data_root() / output.path
    if output.path in done:
        return target
    if target.is_file() and (output.sha256 is None or sha256_of(target) == output.sha256):
        done.add(output.path)
        return target
    found = local.find(output) if local is not None and output.sha256 else None
    if found is not None:
        _store(output, found.read_bytes())
        done.add(output.path)
        return target
    inputs: list[Path] = []
    for item in output.inputs:
        if isinstance(item, str):  # a file of another dataset
            dep = parse_spec(item)
            inputs.append(_obtain(dep.dataset.parts[dep.parts[0]][0], local=local, progress=progress, done=done))
        elif local is not None:
            path = local.find(item)
            if path is None:
                raise local.not_found(item, output)
            inputs.append(path)
        else:
            inputs.append(_download(item, progress=progress))
    _store(output, build_output(output.build, inputs, output.name))
    done.add(output.path)
    return target


def get(name: str, *, source: str | os.PathLike[str] | None = None, progress: bool = True,
        report: Callable[[str], None] | None = None) -> Path:
    """Put dataset ``name`` (``NAME`` or ``NAME:PART,…``) in the cache, downloading its source files or importing
    them from ``source`` (a local copy), every file checked against its pinned checksum; returns what ``name``
    resolves to. ``report`` is told each file as it is ready. Offline, DataError names ``--from``; from a copy that
    holds only some of several parts, those are got and the DataError names them."""
    spec = parse_spec(name)
    local = _LocalCopy(Path(source).expanduser()) if source is not None else None
    done: set[str] = set()
    missing: dict[str, DataError] = {}
    try:
        for part in spec.parts:
            try:
                for output in spec.dataset.parts[part]:
                    path = _obtain(output, local=local, progress=progress, done=done)
                    if report is not None:
                        report(str(path))
            except _Offline:
                raise
            except DataError as err:
                if local is None or len(spec.parts) == 1:
                    raise
                missing[part] = err
    except _Offline as err:
        repos = sorted({SOURCES[u.source].repo for o in spec.dataset.outputs(spec.parts) for u in _upstream(o)})
        raise DataError(f"{err}; offline? copy {' and '.join(repos)} here and run "
                        f"`mirage data get {spec} --from PATH`.") from None
    if missing:
        got = [p for p in spec.parts if p not in missing]
        others = (f"; the others are now in the cache: read them as `{spec.dataset.name}:{','.join(got)}`" if got
                  else "")
        first = str(next(iter(missing.values()))).rstrip(".")
        raise DataError(f"{first}; parts {', '.join(missing)} are not in that copy{others}.")
    return resolve(str(spec))


def _upstream(output: Output) -> list[Upstream]:
    out: list[Upstream] = []
    for item in output.inputs:
        if isinstance(item, str):
            dep = parse_spec(item)
            out.extend(u for o in dep.dataset.parts[dep.parts[0]][:1] for u in _upstream(o))
        else:
            out.append(item)
    return out


def dataset_table() -> list[dict[str, str]]:
    """One row per dataset: name, parts, whether each part is cached, source repositories, description."""
    rows = []
    for ds in DATASETS.values():
        spec = parse_spec(ds.name)
        cached = _cached_parts(spec)
        said = ",".join(cached) if len(ds.parts) > 1 else ("yes" if cached else "no")
        differ = [p for p in ds.parts if any(_differs(o) for o in ds.parts[p])]
        if differ:  # in the cache, but not the pinned file: not "cached"
            which = "" if len(ds.parts) == 1 else ",".join(differ) + " "
            name = str(spec) if len(ds.parts) == 1 else f"{ds.name}:{','.join(differ)}"
            said += f" ({which}differs from its pinned SHA-256; `mirage data get {name}` fetches it again)"
        repos = sorted({SOURCES[u.source].repo for o in ds.outputs() for u in _upstream(o)})
        rows.append({"name": ds.name, "parts": ",".join(ds.parts) if len(ds.parts) > 1 else "-", "cached": said,
                     "source": " + ".join(repos), "description": ds.description})
    return rows
