"""The whole attribution-bias protocol in one command: the studies of a protocol file, each into its own folder, in an
order that lets every study take the generations it shares with the ones before (``--reuse``), then one overview
table of every study's headline figures.

A protocol file (``configs/bias/protocol.yaml``) lists the studies::

    studies:
      - name: hai                          # the folder DIR/hai/
        config: studies/hai.yaml           # a mirage bias experiment file, relative to the protocol file
      - name: race
        config: studies/gender_race.yaml
        args: [--metadata, race]           # flags for this study (they win over its config file)

Each study is ``mirage bias --config CONFIG -o DIR/NAME ARGS… --reuse <the generations of the studies before>``;
every study is resumable, so re-running the protocol after a stop continues where it stopped and generates nothing
twice. A study that mirage refuses (bad options, a missing file) is reported and the others still run.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import ConfigError, read_config_file
from ..runs import write_atomic
from .results import BiasStudyResult, SourceSummary

#: Flags a protocol sets itself for each study: a study's ``args`` may not give them.
MANAGED_FLAGS = ("-o", "--output", "--config", "--reuse")
#: Flags of a bias study that cannot take generations from other runs.
NO_REUSE_OPTIONS = ("retriever", "answers", "write_requests")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class ProtocolStudy:
    """One study of a protocol: its folder name, its experiment file and the flags given to it."""

    name: str
    config: Path
    args: tuple[str, ...] = ()

    @property
    def reuses(self) -> bool:
        """Whether the study can take other runs' generations (not per retriever, not for external answers)."""
        section = read_config_file(self.config).get("bias") or {}
        flags = {a.lstrip("-").replace("-", "_") for a in self.args if a.startswith("--")}
        return not any(opt in section or opt in flags for opt in NO_REUSE_OPTIONS)


def load_protocol(path: str | Path) -> list[ProtocolStudy]:
    """The studies of a protocol file, checked: unique folder names, existing experiment files, flags as a list of
    strings that leave the output folder, config and reuse to the protocol. ConfigError naming the field otherwise."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: protocol file not found; give a file that lists studies, such as "
                          "configs/bias/protocol.yaml.")
    raw = read_config_file(path)
    studies = raw.get("studies")
    where = f"{path}: 'studies'"
    if not isinstance(studies, list) or not studies:
        raise ConfigError(f"{where} must be a list of studies, each {{name: NAME, config: FILE[, args: [FLAGS]]}}.")
    out: list[ProtocolStudy] = []
    for i, entry in enumerate(studies, 1):
        at = f"{where}, entry {i}"
        if not isinstance(entry, dict) or set(entry) - {"name", "config", "args"}:
            raise ConfigError(f"{at} must be a mapping with keys name, config and optionally args; got {entry!r}.")
        name, config, args = entry.get("name"), entry.get("config"), entry.get("args", [])
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ConfigError(f"{at}: name must be a folder name (letters, digits, '_', '-', '.'); got {name!r}.")
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
        managed = [a for a in args if a.split("=")[0] in MANAGED_FLAGS]
        if managed:
            raise ConfigError(f"{at} ({name}): args may not give {', '.join(managed)}; the protocol sets the output "
                              "folder, the experiment file and --reuse itself.")
        out.append(ProtocolStudy(name=name, config=file, args=tuple(args)))
    return out


def generation_files(run_dir: str | Path) -> list[Path]:
    """The finished-generation files of a study folder: its own, or its sweep points' and retrievers' (sub-folders),
    never a sharded run's per-rank files."""
    root = Path(run_dir)
    return sorted(p for p in root.rglob("generations.jsonl") if p.is_file())


def study_argv(study: ProtocolStudy, out_dir: Path, reuse: Sequence[Path], extra: Sequence[str]) -> list[str]:
    """The ``mirage`` arguments that run one study of the protocol."""
    argv = ["bias", "--config", str(study.config), "-o", str(out_dir / study.name), *study.args, *extra]
    if reuse and study.reuses:
        argv += ["--reuse", *map(str, reuse)]
    return argv


def run_protocol(path: str | Path, out_dir: str | Path, *, run: Callable[[list[str]], int], only: Sequence[str] = (),
                 extra: Sequence[str] = ()) -> dict[str, int]:
    """Run the protocol's studies (``only``: these, by name) into ``out_dir/NAME``, each by ``run`` (the ``mirage``
    command's entry point, given its arguments); each study takes the generations of every study folder already in
    ``out_dir`` (``--reuse``). Returns each study's exit status; then writes the overview (:func:`write_overview`)."""
    studies = load_protocol(path)
    unknown = sorted(set(only) - {s.name for s in studies})
    if unknown:
        raise ConfigError(f"--only {' '.join(unknown)}: not in {path} (its studies: "
                          f"{', '.join(s.name for s in studies)}).")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    status: dict[str, int] = {}
    try:
        for study in studies:
            if only and study.name not in only:
                continue
            reuse = [f for other in studies if other.name != study.name for f in generation_files(out / other.name)]
            print(f"== {study.name}: mirage {' '.join(study_argv(study, out, [], extra))}"
                  + (f" (+ --reuse of {len(reuse)} generation files)" if reuse and study.reuses else ""),
                  file=sys.stderr)
            status[study.name] = run(study_argv(study, out, reuse, extra))  # a refused study: the others still run
    finally:  # also after a stop: the overview of what is finished
        write_overview(out, [s.name for s in studies])
    return status


# -- the overview ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OverviewRow:
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
        return {"study": self.study, "model": self.model, "metadata": self.metadata, "k": self.k,
                "n_items": self.n_items, "modes": list(self.modes), "figures": self.figures}


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
    if source.grid is not None:
        same = source.grid.effects.get("same label (mixed CAB)")
        out["mixed_cab_precision"] = pct(same.precision.value) if same else None
        out["mixed_cab_precision_p"] = same.precision.p_value if same else None
    return out


def _study_order(root: Path, order: Sequence[str]):
    def key(path: Path) -> tuple[int, int, str]:
        parts = path.parent.relative_to(root).parts
        top = order.index(parts[0]) if parts and parts[0] in order else len(order)
        point = re.search(r"\d+$", parts[1]) if len(parts) > 1 else None  # sweep points by value: k2 < k10
        return top, int(point.group()) if point else -1, path.parent.relative_to(root).as_posix()
    return key


def overview_rows(out_dir: str | Path, order: Sequence[str] = ()) -> list[OverviewRow]:
    """A row per ``results.json`` under ``out_dir`` (studies, sweep points, retrievers): the studies named in
    ``order`` first, in that order (a protocol's), then the others by folder name; sweep points by value."""
    root = Path(out_dir)
    rows = []
    for path in sorted(root.rglob("results.json"), key=_study_order(root, order)):
        try:
            result = BiasStudyResult.load(path)
        except (KeyError, TypeError, ValueError):
            continue  # not a bias study's result (a sweep's or another command's file)
        rel = path.parent.relative_to(root).as_posix() or "."
        rows.append(OverviewRow(study=rel, model=result.model, metadata=str(result.metadata.get("type", "")),
                                k=int(result.config.get("k", 0)), n_items=result.n_items,
                                modes=tuple(result.mirage.modes), figures={
                                    name: _figures(source) for name, source in result.sources.items()}))
    return rows


def _num(x: float | None, p: float | None = None, digits: int = 1) -> str:
    if x is None:
        return "–"
    stars = "" if p is None else "**" if p < 0.01 else "*" if p < 0.05 else ""
    return f"{x:.{digits}f}{stars}"


def overview_table(rows: Sequence[OverviewRow]) -> str:
    """The overview as markdown: per study and citation source, vanilla precision / recall and citations per answer,
    CAS of precision (informed, counterfactual), CAB of precision and recall, and the mixed grid's CAB where run
    (* p < 0.05, ** p < 0.01 by each study's own tests)."""
    head = ("| study | metadata | k | questions | citations | P / R vanilla | citations per answer | "
            "CAS P informed | CAS P counterfactual | CAB P | CAB R | mixed CAB P |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in rows:
        for source, f in row.figures.items():
            lines.append(
                f"| {row.study} | {row.metadata} | {row.k} | {row.n_items} | {source} | "
                f"{_num(f['precision_vanilla'])} / {_num(f['recall_vanilla'])} | {_num(f['citations_vanilla'], digits=2)} | "
                f"{_num(f['cas_precision_informed'], f['cas_precision_informed_p'], 2)} | "
                f"{_num(f['cas_precision_counterfactual'], f['cas_precision_counterfactual_p'], 2)} | "
                f"{_num(f['cab_precision'], f['cab_precision_p'], 2)} | {_num(f['cab_recall'], f['cab_recall_p'], 2)} | "
                f"{_num(f.get('mixed_cab_precision'), f.get('mixed_cab_precision_p'), 2)} |")
    return "\n".join(lines)


def write_overview(out_dir: str | Path, order: Sequence[str] = ()) -> list[OverviewRow]:
    """Write ``out_dir/protocol.md`` and ``protocol.json`` from the finished studies under ``out_dir`` (``order``:
    the protocol's study names, the order of the rows)."""
    rows = overview_rows(out_dir, order)
    out = Path(out_dir)
    models = sorted({r.model for r in rows})
    text = ("# Attribution-bias protocol: overview\n\n"
            f"{len(rows)} finished studies under this folder (model: {', '.join(models) or '–'}). Percentages; CAS = "
            "mean |change| of precision against vanilla, CAB = ω · mean (informed − counterfactual); * p < 0.05, "
            "** p < 0.01 by each study's tests; each study's `tables.md` has the full tables.\n\n"
            + overview_table(rows) + "\n")
    write_atomic(out / "protocol.md", text)
    write_atomic(out / "protocol.json", json.dumps([r.to_dict() for r in rows], indent=2) + "\n")
    return rows
