"""One call per benchmark: load the data, run the model item by item into a resumable file, evaluate, and write
``results.json`` and the plot into an output directory.

    report = run_xor_attriqa(lambda: Mirage.from_pretrained("smollm2-135m-instruct"), ["fi.jsonl"], out_dir="out",
                             model_name="smollm2-135m-instruct", calibrate_on="val.jsonl")

Files in the output directory: ``run.json`` (what the stored model outputs depend on; a later run with other
settings is refused rather than mixed in), ``scores.jsonl`` / ``answers.jsonl`` (one line per finished item, so a
killed run resumes where it stopped), ``results.json`` and the figure.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..config import MirageConfig
from ..experiment import ExperimentConfig
from ..inputs import InputError
from ..lazy import resolve_mirage
from ..progress import Progress
from ..results import AttributionResult
from ..runs import ResumableJSONL, content_key
from ..serialization import library_versions
from ..sharding import Shard, StoreFor, in_shards, owns
from . import metrics as M
from .eli5 import ELI5Report, attribute_items, evaluate_eli5, load_alce, load_judgments
from .xor_attriqa import concat_data, load_xor_attriqa, score_items
from .xor_eval import CalibrateBy, XorAttriQAReport, evaluate


def check_run(out_dir: Path, fingerprint: dict[str, Any]) -> None:
    """Record what stored model outputs depend on (:meth:`ExperimentConfig.fingerprint`) in ``run.json``; refuse a
    directory holding outputs of different settings."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "run.json"
    expected = json.loads(json.dumps(fingerprint))
    if path.exists():
        stored = json.loads(path.read_text(encoding="utf-8"))
        diff = sorted(k for k in set(stored) | set(expected) if stored.get(k) != expected.get(k))
        if diff:
            details = "; ".join(f"{k}: {stored.get(k)!r} there, {expected.get(k)!r} now" for k in diff)
            raise InputError(f"{out_dir} holds model outputs of another run ({details}); use another -o directory "
                             "or delete that one.")
        return
    path.write_text(json.dumps(expected, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _save(out_dir: Path, report: Any, figure: Any, figure_name: str) -> None:
    (out_dir / "results.json").write_text(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
    figure.savefig(out_dir / figure_name, dpi=130)


def _model_stages(model: Any, out: Path, outputs_for: Callable[[StoreFor], tuple[dict, list]],
                  faith_keys: Callable[[dict], list[str]], result_for: Callable[[Any, str, dict], AttributionResult],
                  *, faithfulness: bool, progress: Progress | None, shard: Shard | None) -> tuple | None:
    """A benchmark's model work, sharded (:mod:`mirage.sharding`): ``outputs_for(store_for)`` gives the per-item
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


def run_xor_attriqa(
    model: Any,
    data: Sequence[str | Path],
    *,
    out_dir: str | Path,
    model_name: str,
    config: MirageConfig | None = None,
    text: str = "en",
    calibrate_on: str | Path | None = None,
    calibrate_by: CalibrateBy = "global",
    nli_dir: str | Path | None = None,
    limit: int | None = None,
    faithfulness: bool = False,
    progress: Progress | None = None,
    shard: Shard | None = None,
) -> XorAttriQAReport | None:
    """Score XOR-AttriQA files (and the calibration file) and write ``results.json`` and ``sweep.png``.

    ``model``: a Mirage, or a function returning one (called only if some item still needs the model).
    ``limit`` keeps the first N rows of each file, the calibration file included. With ``faithfulness``, each test
    answer is attributed as a whole (sentence citations by the config's CCI selector) and checked; results are kept
    in ``faithfulness.jsonl``. Under a launcher (``torchrun``, ``accelerate launch``; see :mod:`mirage.sharding`)
    each rank scores its shard; rank 0 returns the report of all of them, other ranks None.
    """
    cfg = config or MirageConfig()
    out = Path(out_dir)
    check_run(out, ExperimentConfig("xor-attriqa", model=model_name, pipeline=cfg).fingerprint())
    test = concat_data(load_xor_attriqa(p, text=text, nli_dir=nli_dir, limit=limit) for p in data)  # type: ignore[arg-type]
    cal = load_xor_attriqa(calibrate_on, text=text, nli_dir=nli_dir, limit=limit) if calibrate_on else None
    items = list(test.items) + (list(cal.items) if cal else [])
    by_key = {item.key: item for item in test.items}

    done = _model_stages(
        model, out, lambda store_for: score_items(model, items, config=cfg, store=store_for(out / "scores.jsonl"),
                                                  progress=progress),
        lambda _scores: list(by_key), lambda m, key, _scores: m.attribute_item(by_key[key].rag_item(), config=cfg),
        faithfulness=faithfulness, progress=progress, shard=shard)
    if done is None:
        return None
    scores, failed, faith = done
    bad = list(test.bad_rows) + (list(cal.bad_rows) if cal else []) + failed
    settings = {"model": model_name, "text": text, "data": [str(p) for p in data],
                "calibrate_on": str(calibrate_on) if calibrate_on else None, "calibrate_by": calibrate_by,
                "limit": limit, "config": cfg.to_dict()}
    report = evaluate(test.items, scores, config=cfg, calibration_items=cal.items if cal else None,
                      calibrate_by=calibrate_by, bad_rows=bad, settings=settings)
    report.versions = library_versions()
    report.faithfulness = faith
    from .plots import sweep_figure

    _save(out, report, sweep_figure(report.sweep), "sweep.png")
    return report


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "judge"


def run_eli5(
    model: Any,
    source: str | Path,
    *,
    out_dir: str | Path,
    model_name: str,
    config: MirageConfig | None = None,
    seeds: Sequence[int] = (42,),
    ndocs: int | None = 5,
    judge: M.NLIJudge | None = None,
    at_most: int = 3,
    limit: int | None = None,
    faithfulness: bool = False,
    progress: Progress | None = None,
    shard: Shard | None = None,
) -> ELI5Report | None:
    """Generate, self-cite and attribute ALCE-format items for each seed; write ``results.json`` and
    ``length_bins.png``. The judge's decisions are kept in ``judgments-<judge>.jsonl`` and reused; with
    ``faithfulness``, each answer's faithfulness check is kept in ``faithfulness.jsonl`` and summarized. Sharded
    like :func:`run_xor_attriqa` (rank 0 returns the report, other ranks None)."""
    cfg = config or MirageConfig()
    out = Path(out_dir)
    check_run(out, ExperimentConfig("eli5", model=model_name, pipeline=cfg).fingerprint())
    data = load_alce(source, limit=limit)

    order = [item.key(seed=seed, ndocs=ndocs) for seed in seeds for item in data.items]
    done = _model_stages(
        model, out, lambda store_for: attribute_items(model, data.items, seeds=seeds, ndocs=ndocs, config=cfg,
                                                      store=store_for(out / "answers.jsonl"), progress=progress),
        lambda results: [k for k in order if k in results],  # data order, however the records were stored
        lambda _m, key, results: results[key], faithfulness=faithfulness, progress=progress, shard=shard)
    if done is None:
        return None
    results, failed, faith = done
    cached = None
    if judge is not None:
        path = out / f"judgments-{_slug(judge.name)}.jsonl"
        store = ResumableJSONL(path, settings={"judge": judge.name})

        def remember(premise: str, hypothesis: str, decision: bool) -> None:
            store.write({"key": content_key([premise, hypothesis]), "premise": premise, "hypothesis": hypothesis,
                         "entails": decision})

        cached = M.CachedJudge(judge, load_judgments(store), on_new=remember)
    settings = {"model": model_name, "data": str(source), "seeds": list(seeds), "ndocs": ndocs, "limit": limit,
                "at_most_citations": at_most, "config": cfg.to_dict()}
    if len(set(seeds)) > 1 and not cfg.generation.do_sample:
        settings["note"] = "greedy decoding: the seeds give the same answers; sample to vary them"
    report = evaluate_eli5(data.items, results, seeds=seeds, ndocs=ndocs, judge=cached, at_most=at_most,
                           bad_rows=list(data.bad_rows) + failed, settings=settings)
    report.versions = library_versions()
    report.faithfulness = faith
    from .plots import length_figure

    _save(out, report, length_figure(report.length_bins), "length_bins.png")
    return report


def score_faithfulness(model: Any, keys: Sequence[str], result_for: Callable[[Any, str], AttributionResult],
                       store: ResumableJSONL, *, progress: Progress | None = None) -> dict[str, Any]:
    """Run the faithfulness check on the attributed answer of every key (``result_for(mirage, key)``), resumable
    through ``store``, and summarize it per citation method. ``model``: a Mirage, or a function returning one (called
    only if some answer is not done)."""
    from ..faithfulness import FaithfulnessResult, faithfulness, summarize

    done = {r["key"]: FaithfulnessResult.from_dict(r["faithfulness"]) for r in store.records()}
    todo = [key for key in keys if key not in done and owns(store, key)]
    if todo:
        mirage = resolve_mirage(model)
        for key in progress(todo, len(todo), "faithfulness") if progress else todo:
            done[key] = faithfulness(mirage, result_for(mirage, key))
            store.write({"key": key, "faithfulness": done[key].to_dict()})
    return summarize(done[key] for key in keys if key in done).to_dict()  # all keys, unless this is one shard
