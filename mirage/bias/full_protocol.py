"""The whole attribution-bias protocol in one command: the studies of a protocol file, each into its own folder, each
taking the generations it shares with the protocol's other studies (``--reuse-from``), then one overview table of every
study's headline figures.

A protocol file (``configs/bias/protocol.yaml``) lists the studies::

    studies:
      - name: hai                          # the folder DIR/hai/
        config: studies/hai.yaml           # a mirage bias experiment file, relative to the protocol file
      - name: race
        config: studies/gender_race.yaml
        args: [--metadata, race]           # flags for this study (they win over its config file)

Each study is ``mirage bias --config CONFIG -o DIR/NAME ARGS… --reuse-from <the generations in the other studies'
folders>`` (a study run per retriever or on answers from elsewhere takes none). Every study's flags are checked
before the first one runs (the caller's ``check``). Every study is resumable, so re-running the protocol after a
stop continues where it stopped and generates nothing twice; a study that mirage refuses while running (its data
missing, …) is reported and the others still run. The protocol runs in one process: launch a study, not the
protocol, with ``torchrun``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.attribution.serialization import JSONRecord
from mirage.bias.results import BiasStudyResult, SourceSummary
from mirage.config import ConfigError, read_config_file
from mirage.data.inputs import short_repr
from mirage.runs.files import RESULTS_FILE
from mirage.runs.store import write_atomic
from mirage.views.markdown import code, md_table, stars, text

__all__ = ["MAX_WALK_FOLDERS", "OverviewRow", "ProtocolStudy", "StudyPlan", "finished_results", "generation_files",
           "load_protocol", "overview_rows", "overview_table", "run_protocol", "study_argv", "summarize_protocol",
           "withdrawn", "withdrawn_text", "write_overview"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ProtocolStudy:
    """One study of a protocol: its folder name, its experiment file and the flags given to it."""

    name: str
    config: Path
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class StudyPlan:
    """What checking a study's flags found: whether it can take other runs' generations (not per retriever, not for
    answers from elsewhere), and the runs its own config file names to reuse (kept beside the protocol's)."""

    reuses: bool
    own_reuse: tuple[str, ...] = ()


def load_protocol(path: str | Path) -> list[ProtocolStudy]:
    """The studies of a protocol file, checked: unique folder names, existing experiment files, flags as a list of
    strings (what they say is checked by :func:`run_protocol`'s ``check``). ConfigError naming the field otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: protocol file not found; give a file that lists studies, such as "
                          "configs/bias/protocol.yaml.")
    raw = read_config_file(path, expected="a protocol file: a mapping whose 'studies' lists the studies, each "
                           "{name: NAME, config: FILE[, args: [FLAGS]]} (see configs/bias/protocol.yaml)")
    studies = raw.get("studies")
    where = f"{path}: 'studies'"
    if not isinstance(studies, list) or not studies:
        raise ConfigError(f"{where} must be a list of studies, each {{name: NAME, config: FILE[, args: [FLAGS]]}}.")
    out: list[ProtocolStudy] = []
    for i, entry in enumerate(studies, 1):
        at = f"{where}, entry {i}"
        if not isinstance(entry, dict) or set(entry) - {"name", "config", "args"}:
            raise ConfigError(f"{at} must be a mapping with keys name, config and optionally args; "
                              f"got {short_repr(entry)}.")
        name, config, args = entry.get("name"), entry.get("config"), entry.get("args", [])
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{at}: name must be a folder name (letters, digits, '_', '-', '.'); "
                              f"got {short_repr(name)}.")
        if name in {s.name for s in out}:
            raise ConfigError(f"{at}: the name {name!r} is used twice; each study needs its own folder.")
        if not isinstance(config, str):
            raise ConfigError(f"{at} ({name}): config must be the path of a mirage bias experiment file.")
        file = (path.parent / config) if not Path(config).is_absolute() else Path(config)
        if not file.is_file():
            raise ConfigError(f"{at} ({name}): config {config} not found (looked for {file}); paths are relative "
                              "to the protocol file.")
        if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
            raise ConfigError(f"{at} ({name}): args must be a list of flags and values, e.g. [--metadata, race].")
        args = [str(a) for a in args]
        out.append(ProtocolStudy(name=name, config=file, args=tuple(args)))
    return out


#: The most folders :func:`_walk` reads below a protocol's output folder (a protocol writes a few dozen).
MAX_WALK_FOLDERS = 10_000


def _walk(root: Path, filename: str) -> list[Path]:
    """Every ``filename`` under ``root``, symlinked folders followed (each real folder once); InputError past
    :data:`MAX_WALK_FOLDERS` folders."""
    from mirage.data.inputs import InputError

    found, seen = [], set()
    for folder, dirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        if len(seen) > MAX_WALK_FOLDERS:
            raise InputError(f"more than {MAX_WALK_FOLDERS} folders below {root}; give the output folder of a bias "
                             "protocol or study.")
        dirs.sort()
        if filename in files:
            found.append(Path(folder) / filename)
    return found


def generation_files(run_dir: str | Path) -> list[Path]:
    """The finished-generation files of a study folder: its own, or its sweep points' and retrievers' (sub-folders),
    never a sharded run's per-rank files."""
    return sorted(_walk(Path(run_dir), "generations.jsonl"))


def study_argv(study: ProtocolStudy, out_dir: Path, extra: Sequence[str], reuse: Sequence[str | Path] = ()
               ) -> list[str]:
    """The ``mirage`` arguments that run one study of the protocol (``reuse``: runs it takes generations from)."""
    argv = ["bias", "--config", str(study.config), "-o", str(out_dir / study.name), *study.args, *extra]
    return [*argv, "--reuse-from", *map(str, reuse)] if reuse else argv


def run_protocol(path: str | Path, out_dir: str | Path, *, run: Callable[[list[str]], int],
                 check: Callable[[ProtocolStudy, list[str]], StudyPlan], only: Sequence[str] = (),
                 extra: Sequence[str] = ()) -> dict[str, int]:
    """Run the protocol's studies (``only``: these, by name) into ``out_dir/NAME``, each by ``run`` (the ``mirage``
    command's entry point, given its arguments), after ``check`` has passed every study's arguments (ConfigError
    naming the study otherwise). Each study that can takes the generations of the protocol's other studies' folders
    (``--reuse-from``). Returns each study's exit status; then writes the overview (:func:`write_overview`)."""
    if os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1"):
        raise ConfigError("mirage bias-protocol runs in one process (its studies reuse each other's generations, "
                          "which ranks would not see in time); launch one study with torchrun instead: mirage bias "
                          "--config STUDY.yaml -o DIR/NAME.")
    studies = load_protocol(path)
    unknown = sorted(set(only) - {s.name for s in studies})
    if unknown:
        raise ConfigError(f"--only {' '.join(unknown)}: not in {path} (its studies: "
                          f"{', '.join(s.name for s in studies)}).")
    chosen = [s for s in studies if not only or s.name in only]
    plans = {s.name: check(s, study_argv(s, Path(out_dir), extra)) for s in chosen}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    status: dict[str, int] = {}
    try:
        for study in chosen:
            plan = plans[study.name]
            reuse: list[str | Path] = []
            if plan.reuses:
                reuse = [*plan.own_reuse, *(f for other in studies if other.name != study.name
                                            for f in generation_files(out / other.name))]
            print(f"== {study.name}: mirage {' '.join(study_argv(study, out, extra))}"
                  + (f" (+ --reuse-from of {len(reuse)} runs)" if reuse else ""), file=sys.stderr)
            status[study.name] = run(study_argv(study, out, extra, reuse))  # refused: the others still run
            if status[study.name] == 0:  # finished again: what it withdrew stands again
                _reinstate(out, study.name)
    finally:  # also after a stop: the overview of what is finished
        write_overview(out, [s.name for s in studies])
    return status


# -- the overview ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverviewRow(JSONRecord):
    """One finished study (or sweep point, or retriever) of a protocol folder: where it is, what it varied and its
    headline figures per citation source (percentages; p-values as given by the study's tests)."""

    study: str
    model: str
    metadata: str
    k: int
    n_items: int
    modes: tuple[str, ...]
    figures: dict[str, dict[str, float | None]]

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "modes": list(self.modes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OverviewRow:
        data = cls.known_fields(data)
        return cls(**{**data, "modes": tuple(data.get("modes", ()))})


def _figures(source: SourceSummary) -> dict[str, float | None]:
    def pct(x: float | None) -> float | None:
        return None if x is None else 100 * x

    vanilla = source.modes.get("vanilla")
    out: dict[str, float | None] = {
        "precision_vanilla": pct(vanilla.precision) if vanilla else None,
        "recall_vanilla": pct(vanilla.recall) if vanilla else None,
        "citations_vanilla": vanilla.n_citations if vanilla else None,
    }
    for mode in ("informed", "counterfactual"):
        effect = source.cas.get(mode)
        out[f"cas_precision_{mode}"] = pct(effect.precision.value) if effect else None
        out[f"cas_precision_{mode}_p"] = effect.precision.p_value if effect else None
    cab = source.cab
    for metric in ("precision", "recall"):
        out[f"cab_{metric}"] = pct(cab.stat(metric).value) if cab else None
        out[f"cab_{metric}_p"] = cab.stat(metric).p_value if cab else None
    same = source.grid.effects.get("same label (mixed CAB)") if source.grid is not None else None
    out["mixed_cab_precision"] = pct(same.precision.value) if same else None
    out["mixed_cab_precision_p"] = same.precision.p_value if same else None
    return out


def _study_order(root: Path, order: Sequence[str]):
    def key(path: Path) -> tuple[int, str, int, str]:
        parts = path.parent.relative_to(root).parts
        top = order.index(parts[0]) if parts and parts[0] in order else len(order)
        point = re.fullmatch(r"([a-z_]+?)(\d+)", parts[1]) if len(parts) == 2 else None
        if point is None or not (root / parts[0] / "sweep.json").is_file():  # sweep points by value: k2 < k10
            return top, parts[0] if parts else "", -1, "/".join(parts[1:])
        return top, parts[0], int(point.group(2)), point.group(1)
    return key


def overview_rows(out_dir: str | Path, order: Sequence[str] = ()) -> list[OverviewRow]:
    """A row per bias study's ``results.json`` under ``out_dir`` (studies, sweep points, retrievers): the studies
    named in ``order`` first, in that order (a protocol's), then the others by folder name; sweep points by value.
    Files that are not a bias study's result (another command's, unreadable) are left out, and so are the studies
    withdrawn from the folder (:func:`withdrawn`)."""
    root = Path(out_dir)
    gone = {w.study for w in withdrawn(root)}
    rows = []
    for path in sorted(_walk(root, RESULTS_FILE), key=_study_order(root, order)):
        rel = path.parent.relative_to(root).as_posix() or "."
        if rel in gone:
            continue
        try:
            result = BiasStudyResult.load(path)
            modes = tuple(dict.fromkeys(m for source in result.sources.values() for m in source.modes))
            rows.append(OverviewRow(study=rel, model=result.model, metadata=str(result.metadata.get("type", "")),
                                    k=int(result.config.get("k", 0)), n_items=result.n_items, modes=modes,
                                    figures={name: _figures(source) for name, source in result.sources.items()}))
        except (KeyError, TypeError, ValueError, AttributeError, OSError):
            continue
    return rows


def _num(x: float | None, p: float | None = None, digits: int = 1) -> str:
    if x is None:
        return "–"
    return f"{x:.{digits}f}{stars(p)}"


def overview_table(rows: Sequence[OverviewRow]) -> str:
    """The overview as markdown, a row per study and citation source: vanilla precision / recall and citations per
    answer, CAS of precision (informed, counterfactual), CAB of precision and recall, and the mixed grid's CAB where run
    (* p < 0.05, ** p < 0.01 by each study's own tests)."""
    head = ["study", "metadata", "k", "questions", "source", "P / R vanilla", "citations per answer", "CAS P informed",
            "CAS P counterfactual", "CAB P", "CAB R", "mixed CAB P"]
    cells = [[str(row.study), str(row.metadata), str(row.k), str(row.n_items), str(source),
              f"{_num(f['precision_vanilla'])} / {_num(f['recall_vanilla'])}", _num(f["citations_vanilla"], digits=2),
              _num(f["cas_precision_informed"], f["cas_precision_informed_p"], 2),
              _num(f["cas_precision_counterfactual"], f["cas_precision_counterfactual_p"], 2),
              _num(f["cab_precision"], f["cab_precision_p"], 2), _num(f["cab_recall"], f["cab_recall_p"], 2),
              _num(f.get("mixed_cab_precision"), f.get("mixed_cab_precision_p"), 2)]
             for row in rows for source, f in row.figures.items()]
    return md_table(head, cells)


def finished_results(n: int) -> str:
    """``"1 finished result"``, ``"3 finished results"``: how the overview and the command count a folder's rows."""
    return f"{n} finished result{'' if n == 1 else 's'}"


def write_overview(out_dir: str | Path, order: Sequence[str] = ()) -> list[OverviewRow]:
    """Write ``out_dir/protocol.md`` and ``protocol.json`` from the finished studies under ``out_dir`` (``order``:
    the protocol's study names, the order of the rows); ``protocol.md`` ends with the studies withdrawn and why
    (:func:`withdrawn_text`)."""
    rows = overview_rows(out_dir, order)
    out = Path(out_dir)
    models = sorted({r.model for r in rows})
    text = ("# Attribution-bias protocol: overview\n\n"
            f"{finished_results(len(rows))} under this folder (studies, sweep points, retrievers; model: "
            f"{', '.join(models) or '–'}), a row per citation source. Percentages; CAS = "
            "mean |change| of precision against vanilla, CAB = ω · mean (informed − counterfactual); * p < 0.05, "
            "** p < 0.01 by each study's tests; each study's `tables.md` has the full tables.\n\n"
            + overview_table(rows) + "\n")
    note = withdrawn_text(out)
    text += f"\n{note}\n" if note else ""
    write_atomic(out / "protocol.md", text)
    write_atomic(out / "protocol.json", json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
    return rows


# -- studies withdrawn, and the folder summarized again ------------------------------------------------------------

#: The file of a protocol folder that lists the studies withdrawn from its results (:func:`withdraw`).
WITHDRAWN = "withdrawn.json"


@dataclass(frozen=True)
class Withdrawal(JSONRecord):
    """A study (or sweep point, or retriever) withdrawn from a protocol folder's results: its folder (relative to
    the protocol's), its model, the questions it had and why it cannot stand."""

    study: str
    model: str
    n_items: int
    reason: str


def withdrawn(out_dir: str | Path) -> list[Withdrawal]:
    """The studies withdrawn from a protocol folder (its ``withdrawn.json``; none without one)."""
    from mirage.runs.files import read_json

    path = Path(out_dir) / WITHDRAWN
    return [Withdrawal.from_dict(w) for w in read_json(path)] if path.is_file() else []


def _write_withdrawn(out_dir: Path, entries: Sequence[Withdrawal]) -> None:
    path = out_dir / WITHDRAWN
    if entries:
        write_atomic(path, json.dumps([w.to_dict() for w in entries], indent=2) + "\n")
    elif path.is_file():
        path.unlink()


def withdraw(out_dir: str | Path, withdrawal: Withdrawal) -> list[Withdrawal]:
    """Record in ``out_dir/withdrawn.json`` that a study is withdrawn (replacing what it said of that study before):
    the overview leaves it out and says why. Its folder is not touched (the caller removes it from what it
    publishes). Returns every withdrawal."""
    out = Path(out_dir)
    entries = [w for w in withdrawn(out) if w.study != withdrawal.study] + [withdrawal]
    _write_withdrawn(out, entries)
    return entries


def _reinstate(out_dir: Path, study: str) -> None:
    """A study run again: it and the sweep points or retrievers below it are no longer withdrawn."""
    entries = withdrawn(out_dir)
    kept = [w for w in entries if w.study != study and not w.study.startswith(f"{study}/")]
    if len(kept) != len(entries):
        _write_withdrawn(out_dir, kept)


def withdrawn_text(out_dir: str | Path) -> str | None:
    """A paragraph naming the studies withdrawn from a protocol folder and why (None when none is)."""
    entries = withdrawn(out_dir)
    if not entries:
        return None
    said = "; ".join(f"{code(w.study)} ({w.n_items} questions, {text(w.model)}): {text(w.reason)}" for w in entries)
    return (f"Withdrawn from this folder's results, and so not in the table: {said}. A withdrawn study that "
            "`mirage bias-protocol` runs again to the end stands again.")


def summarize_protocol(out_dir: str | Path, order: Sequence[str] = ()) -> tuple[list[OverviewRow], list[Withdrawal]]:
    """Summarize a protocol folder again from its generations, generating nothing: every study, sweep point and
    retriever by :func:`~mirage.bias.study.summarize_run` (so an older result of a tuned model has its training
    questions left out), one whose every question is one its model was trained on withdrawn (:func:`withdraw`; its
    folder is the caller's to remove), then each sweep's ``sweep.json`` and each retriever comparison's
    ``retrievers.json`` from the results as they are now, less the withdrawn ones, and the overview
    (:func:`write_overview`). Returns the overview's rows and every withdrawal."""
    from mirage.bias.study import EveryQuestionTrained, summarize_run
    from mirage.bias.sweep import summarize_sweep_dir
    from mirage.runs.files import run_file

    root = Path(out_dir)
    gone = {w.study for w in withdrawn(root)}
    for path in _walk(root, RESULTS_FILE):
        folder = path.parent
        rel = folder.relative_to(root).as_posix()
        if rel in gone or run_file(folder, "generations.jsonl") is None:  # withdrawn, or no bias study's folder
            continue
        try:
            summarize_run(folder)
        except EveryQuestionTrained as err:
            print(f"{err}", file=sys.stderr)
            withdraw(root, Withdrawal(study=rel, model=err.model, n_items=err.n_items,
                                      reason="every question is one the model was trained on"))
            gone.add(rel)
    for path in _walk(root, "sweep.json"):
        rel = path.parent.relative_to(root).as_posix()
        summarize_sweep_dir(path.parent, without=[g.removeprefix(f"{rel}/") for g in gone if g.startswith(f"{rel}/")])
    for path in _walk(root, "retrievers.json"):
        _summarize_retrievers(path.parent, {g.removeprefix(f"{path.parent.relative_to(root).as_posix()}/")
                                            for g in gone})
    return write_overview(root, order), withdrawn(root)


def _summarize_retrievers(folder: Path, gone: set[str]) -> None:
    """A retriever comparison's ``retrievers.json`` and ``retrievers.md`` from its runs' results as they are now,
    less the withdrawn ones (``gone``: their folder names); left as it is when every run is withdrawn."""
    from dataclasses import replace

    from mirage.bias.retrievers_study import RetrieverComparison, render_retrievers

    comparison = RetrieverComparison.load(folder / "retrievers.json")
    runs = {name: replace(run, result=BiasStudyResult.load(folder / name / RESULTS_FILE))
            for name, run in comparison.runs.items() if name not in gone}
    if not runs:
        return
    comparison = replace(comparison, runs=runs)
    comparison.save(folder / "retrievers.json")
    write_atomic(folder / "retrievers.md", render_retrievers(comparison))
