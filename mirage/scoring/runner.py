"""What every benchmark runner of ``mirage score`` does around its own model work, so that a new benchmark's runner
lives in its own module: check the experiment's command and the output folder's ``run.json``
(:func:`check_command`, :func:`check_run`, :func:`reuse_store`), load the model when some item first needs it
(:func:`mirage_source`), run the model work sharded with the optional faithfulness check (:func:`model_stages`,
:func:`score_faithfulness`), refuse a report of nothing (:func:`require_scored`) and write ``results.json`` and its
figure (:func:`save_results`). The runners of :mod:`mirage.scoring.benchmarks` are built from these.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mirage.attribution.results import AttributionResult
from mirage.config import ConfigError
from mirage.data.inputs import InputError
from mirage.data.readers import BadRow
from mirage.runs.experiment import ExperimentConfig
from mirage.runs.files import RESULTS_FILE, read_json
from mirage.runs.lazy import MirageSource, resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.sharding import Shard, StoreFor, in_shards, owns
from mirage.runs.store import ResumableJSONL, write_atomic

__all__ = ["check_command", "check_run", "fingerprint_differences", "mirage_source", "model_stages", "require_scored",
           "reuse_store", "run_dtype", "save_results", "score_faithfulness"]


def mirage_source(experiment: ExperimentConfig, mirage: MirageSource | None) -> MirageSource:
    """The Mirage (or its loader) a runner was given, else the experiment's model, loaded once when first needed."""
    return mirage if mirage is not None else functools.cache(experiment.load_mirage)


def check_command(experiment: ExperimentConfig, command: str) -> None:
    """ConfigError unless ``experiment`` is one of ``command``'s and names its data."""
    if experiment.command != command:
        raise ConfigError(f"this runner runs `{command}` experiments, got ExperimentConfig(command="
                          f"{experiment.command!r}); build it with command={command!r}.")
    if not experiment.data:
        raise ConfigError(f"experiment.data: give the {command} data file(s).")


def check_run(out_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Record what stored model outputs depend on (:meth:`ExperimentConfig.fingerprint`) in ``run.json``; refuse a
    directory holding outputs of different settings."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "run.json"
    if path.exists():
        stored = read_json(path, fix="use another -o directory or delete that one.")
        details = fingerprint_differences(stored, fingerprint)
        if details:
            raise InputError(f"{out_dir} holds model outputs of another run ({details}); use another -o directory "
                             "or delete that one.")
        return
    write_atomic(path, json.dumps(fingerprint, indent=2, ensure_ascii=False) + "\n")


def reuse_store(store: Path, source: Path, fingerprint: dict[str, Any], shard: Shard) -> bool:
    """Start the empty store ``store`` from the stored model outputs of the run in folder ``source``
    (``scores.jsonl``, or its ``.gz``), whose ``run.json`` must equal ``fingerprint``; True if it did. A store that
    already holds records (a resumed run), or has its own ``.gz`` (a run folder shipped compressed, which the store
    resumes from), is left as it is, and a ``source`` shipped without its store gives nothing (a note says so).
    ConfigError when ``source`` is not such a run, or under a launcher (start from it in one process, then
    shard)."""
    own = [store, store.with_name(store.name + ".gz")]
    if any(p.exists() and p.stat().st_size > 0 for p in own):
        return False
    if shard.world > 1:
        raise ConfigError("--reuse-from runs in one process: start the run without the launcher (or copy the "
                          "store first), then resume it under the launcher.")
    run_file = source / "run.json"
    if not run_file.is_file():
        raise ConfigError(f"--reuse-from {source}: no run.json there; give the folder of a mirage score run.")
    details = fingerprint_differences(read_json(run_file, fix="give the folder of a mirage score run."), fingerprint)
    if details:
        raise ConfigError(f"--reuse-from {source}: its model outputs were computed with other settings ({details}); "
                          "give a run of the same model, prompt and CCI target.")
    found = [p for p in (source / store.name, source / f"{store.name}.gz") if p.is_file()]
    if not found:  # a run folder shared without its store: the same results, every row computed here
        print(f"mirage: note: --reuse-from {source} holds no {store.name} (nor its .gz); this run computes every "
              "row itself.", file=sys.stderr)
        return False
    from mirage.runs.store import read_records

    records = read_records(found[0])
    write_atomic(store, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return True


def fingerprint_differences(stored: dict[str, Any], fingerprint: dict[str, Any]) -> str:
    """``key: stored there, expected now`` for each key where a stored ``run.json`` and a fingerprint differ (compared
    as JSON: tuples are lists); empty when they agree."""
    expected = json.loads(json.dumps(fingerprint))
    diff = sorted(k for k in set(stored) | set(expected) if stored.get(k) != expected.get(k))
    return "; ".join(f"{k}: {stored.get(k)!r} there, {expected.get(k)!r} now" for k in diff)


def run_dtype(model: Any, dtype: str | None) -> str | None:
    """The dtype a run's outputs are computed in, for its fingerprint: ``dtype`` as given, else a loaded model's,
    else None (the device's default, which a lazy loader without a dtype gets)."""
    if dtype is not None:
        return dtype
    lm = getattr(model, "lm", None)
    return str(lm.dtype) if lm is not None else None


def save_results(out_dir: Path, report: Any, figure: Any = None, figure_name: str = "") -> None:
    """Write ``report`` (a :class:`~mirage.attribution.serialization.JSONRecord`) as ``results.json`` into
    ``out_dir``, and ``figure`` (a matplotlib figure, or None for none) as ``figure_name``."""
    write_atomic(out_dir / RESULTS_FILE, json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    if figure is not None:
        figure.savefig(out_dir / figure_name, dpi=130)


def require_scored(out_dir: Path, data: str | Path | Sequence[str | Path], n_scored: int,
                   bad_rows: Sequence[BadRow]) -> None:
    """Nothing to report when no row could be scored: the per-row errors go to ``DIR/errors.jsonl`` (one JSON line
    each: file, line, error) and an InputError says so, instead of a results.json whose every metric is null."""
    if n_scored:
        return
    names = ", ".join(map(str, data)) if isinstance(data, (list, tuple)) else str(data)
    if not bad_rows:
        raise InputError(f"{names}: no row to score (the data has no rows).")
    path = out_dir / "errors.jsonl"
    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(path, "".join(json.dumps({"file": b.file, "line": b.line, "error": b.error}, ensure_ascii=False)
                               + "\n" for b in bad_rows))
    raise InputError(f"{names}: no row could be scored ({len(bad_rows)} bad row(s), e.g. {bad_rows[0]}); the "
                     f"per-row errors are in {path}.")


def model_stages(model: Any, out: Path, outputs_for: Callable[[StoreFor], tuple[dict, list]],
                  faith_keys: Callable[[dict], list[str]], result_for: Callable[[Any, str, dict], AttributionResult],
                  *, faithfulness: bool, progress: Progress | None, shard: Shard | None) -> tuple | None:
    """A benchmark's model work, sharded (:mod:`mirage.runs.sharding`): ``outputs_for(store_for)`` gives the per-item
    outputs and rejected rows, then (with ``faithfulness``) the check of each key of ``faith_keys(outputs)``.
    Returns ``(outputs, rejected, faithfulness summary or None)``, or None on a rank other than 0."""

    def compute(store_for: StoreFor) -> tuple[dict, list, dict[str, Any] | None]:
        outputs, failed = outputs_for(store_for)
        faith = None
        if faithfulness:
            faith = score_faithfulness(model, faith_keys(outputs), lambda m, key: result_for(m, key, outputs),
                                       store_for(out / "faithfulness.jsonl"), progress=progress)
        return outputs, failed, faith

    return in_shards(compute, shard)


def score_faithfulness(model: Any, keys: Sequence[str], result_for: Callable[[Any, str], AttributionResult],
                       store: ResumableJSONL, *, progress: Progress | None = None) -> dict[str, Any]:
    """Run the faithfulness check on the attributed answer of every key (``result_for(mirage, key)``), resumable
    through ``store``, and summarize it per citation method. ``model``: a Mirage, or a function returning one (called
    only if some answer is not done)."""
    from mirage.scoring.faithfulness import FaithfulnessResult, faithfulness, summarize_faithfulness

    done = {r["key"]: FaithfulnessResult.from_dict(r["faithfulness"]) for r in store.records()}
    todo = [key for key in keys if key not in done and owns(store, key)]
    if todo:
        mirage = resolve_mirage(model)
        for key in progress(todo, len(todo), "faithfulness") if progress else todo:
            done[key] = faithfulness(mirage, result_for(mirage, key))
            store.write({"key": key, "faithfulness": done[key].to_dict()})
    # all keys, unless this is one shard
    return summarize_faithfulness(done[key] for key in keys if key in done).to_dict()
