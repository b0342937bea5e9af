"""One call per benchmark: load the data, run the model item by item into a resumable file, evaluate, and write
``results.json`` and the plot into an output directory.

    experiment = ExperimentConfig.from_dict({"model": "smollm2-135m-instruct",
                                             "data": {"eval": ["fi.jsonl"], "calibrate_on": "val.jsonl"}},
                                            command="xor-attriqa")
    report = run_xor_attriqa(experiment, XorAttriQAOptions(output="out"))

A runner takes the :class:`~mirage.runs.experiment.ExperimentConfig` (the model, data, text view, row limit,
pipeline and dtype: what ``mirage score`` reads from ``--config`` and the flags) and a small frozen options class of
the benchmark's own choices (:class:`XorAttriQAOptions`, :class:`ELI5Options`); ``mirage=`` gives an already loaded
Mirage (or a function returning one), else the experiment's model is loaded when some item first needs it. What a
runner does around its own model work (the run folder's checks, the lazy model, sharding, the faithfulness check,
writing the results) is :mod:`mirage.scoring.runner`'s, shared by every runner.

Files in the output directory: ``run.json`` (what the stored model outputs depend on; a later run with other
settings is refused rather than mixed in), ``scores.jsonl`` / ``answers.jsonl`` (one line per finished item, so a
killed run resumes where it stopped), ``results.json`` and the figure.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mirage.attribution.serialization import library_versions
from mirage.config import ConfigError, MirageConfig
from mirage.data import data_label, resolve, resolve_files
from mirage.data.inputs import InputError, NothingToScore
from mirage.runs.benchmark_options import ELI5Options, XorAttriQAOptions, setting_groups
from mirage.runs.experiment import ExperimentConfig, leave_out_trained
from mirage.runs.files import read_json
from mirage.runs.lazy import MirageSource
from mirage.runs.progress import Progress
from mirage.runs.sharding import Shard, StoreFor, owns
from mirage.runs.store import ResumableJSONL, content_key, write_atomic
from mirage.scoring import metrics as M
from mirage.scoring.eli5 import ELI5Report, attribute_items, evaluate_eli5, load_alce, load_judgments
from mirage.scoring.runner import (
    check_command,
    check_run,
    fingerprint_differences,
    mirage_source,
    model_stages,
    require_scored,
    reuse_store,
    run_dtype,
    save_results,
)
from mirage.scoring.xor_attriqa import score_items, xor_attriqa_pipeline
from mirage.scoring.xor_data import XorData, XorItem, concat_data, load_xor_attriqa
from mirage.scoring.xor_eval import (
    RowsNeeded,
    build_views,
    calibrated_floor,
    calibration_rows,
    calibration_selections,
    evaluate,
)
from mirage.scoring.xor_methods import METHODS_FILE, document_method_rows, resolve_methods, score_methods
from mirage.scoring.xor_report import XorAttriQAReport

__all__ = ["MIN_CALIBRATION", "SELF_MATCH_FILE", "ELI5Options", "XorAttriQAOptions", "run_eli5", "run_xor_attriqa",
           "stored_xor_pipeline"]


def stored_xor_pipeline(store: str | Path, model: str) -> MirageConfig:
    """The pipeline a ``mirage score xor-attriqa`` store (``scores.jsonl``, or a ``.gz`` of it) was computed with, so
    that rows added to it are computed as its own were: the prompt, CTI metric and CCI method of the ``run.json``
    beside it (:func:`xor_attriqa_pipeline` where there is none). ConfigError if that run was of another model or
    its prompt template's text has changed since."""
    from mirage.config import ConfigError

    path = Path(store).parent / "run.json"
    if not path.is_file():
        return xor_attriqa_pipeline()
    stored = read_json(path)
    try:
        cfg = xor_attriqa_pipeline().replace(
            prompt=stored["prompt"], cti={"metric": stored["cti_metric"]},
            cci={"method": stored["cci_method"], "ig_steps": stored["ig_steps"],
                 "precision": stored.get("cci_precision", "model"), "target": stored.get("cci_target", "logprob")})
    except (KeyError, TypeError) as err:
        raise ConfigError(f"{path} is not the run.json of a mirage score xor-attriqa run ({err}).") from err
    details = fingerprint_differences(stored, ExperimentConfig("xor-attriqa", model=model, pipeline=cfg).fingerprint())
    if details:
        raise ConfigError(f"{store} was computed with other settings than --model {model} and today's prompt "
                          f"template give ({details}); name that run's model, or recompute the store.")
    return cfg


def _check_classifier_methods(sets: Sequence[str], methods: Sequence[Any], groups: Sequence[str], *,
                              calibrated: bool) -> None:
    """ConfigError, naming the field and the fix, for a ``classifier_methods`` set naming a method the run does not
    score, or given without the classifier (its setting group, its calibration files)."""
    if not sets:
        return
    if "likelihood" not in groups or not calibrated:
        raise ConfigError("classifier_methods: the classifier is the likelihood setting's, fitted on the "
                          "--calibrate-on files; give both (--settings likelihood, --calibrate-on FILE) or leave out "
                          "--classifier-methods.")
    scored = {m.name for m in methods}
    for feature_set in sets:
        for name in feature_set.split("+"):
            if name not in scored:
                raise ConfigError(f"classifier_methods: {name!r} (in {feature_set!r}) is not among the --methods this "
                                  f"run scores ({', '.join(sorted(scored)) or 'none'}); add it to --methods.")


def run_xor_attriqa(
    experiment: ExperimentConfig,
    options: XorAttriQAOptions,
    *,
    mirage: MirageSource | None = None,
    progress: Progress | None = None,
    shard: Shard | None = None,
) -> XorAttriQAReport | None:
    """Score the experiment's XOR-AttriQA files (``data``, and the ``calibrate_on`` files) and write, into
    ``options.output``, ``results.json``, ``pairs.jsonl`` (one line per (item, passage): every setting's score and
    citation, :func:`mirage.scoring.xor_eval.pair_records`) and ``sweep.png``.

    Only what the settings need is computed, item by item into ``scores.jsonl``: CTI of every answer token, the passage
    signals (leave-one-out, attention) and the CCI rows of the tokens MIRAGE-EX selects for every item; for calibration
    items, the rows the exact calibration search reaches (it goes down from the highest CTI threshold and stops when no
    lower one can win; see :func:`mirage.scoring.xor_eval.calibrate_threshold`); then, for test items, the rows of the
    tokens some calibrated threshold selects. ``all_tokens`` computes every row of every item (what the threshold-free
    ``mirage_raw`` ROC-AUC needs); without ``signals``, no passage signals, and so no ``learned`` or ``passage_score``
    setting; without calibration files, neither (their classifier is fitted on them). ``groups``
    (:data:`~mirage.runs.benchmark_options.SETTING_GROUPS`) limits the settings, and so the work, to those asked for:
    ``learned`` alone computes no CCI row at all. A row already stored is never computed again. The options below are
    fields of :class:`XorAttriQAOptions`.

    ``experiment``: the model (its name is recorded), the data files or dataset names, the text view, the row limit
    and the pipeline (``ExperimentConfig.from_dict({...}, command="xor-attriqa")`` gives the one the command runs,
    :func:`xor_attriqa_pipeline`); its fingerprint guards the stored outputs. ``mirage``: a Mirage, or a function
    returning one (called only if some item still needs the model; default: the experiment's model); its own config
    is not used. ``calibrate_on``: one file or several (their items are pooled to calibrate the CTI thresholds and
    fit the learned classifier). ``limit`` keeps the first N rows of each file, the calibration files included. With
    ``faithfulness``, each test answer is attributed as a whole (sentence citations by the config's CCI selector)
    and checked; results are kept in ``faithfulness.jsonl``. Under a launcher (``torchrun``, ``accelerate launch``;
    see :mod:`mirage.runs.sharding`) each rank scores its shard; rank 0 returns the report of all of them, other ranks
    None. ``batch_items``: new items whose CTI and CCI passes run in padded batches (default: 8 on a GPU, 1 on a CPU,
    where one sequence already keeps the cores busy; see :func:`mirage.scoring.xor_attriqa.score_items`).
    ``group_passages``: rows of the per-passage release that answer the same question with the same answer become
    one item with all their passages, as a match row (:func:`mirage.scoring.xor_data.group_by_answer`). On the
    calibration splits this gives 342 answers instead of the match release's 139, but the extra ones are answers the
    RAG system did not reproduce, with far fewer supporting passages: measured, they make the learned setting worse
    on held-out match answers (``benchmarks/calibration_data.py``). The experiment's ``dtype``: the dtype a lazily
    loaded model will run in (default: a loaded Mirage's, else the device's default), which the run's fingerprint
    names unless float32 (as it names an adapter and a quantization). ``self_match``: a one-pass self-match check (the
    paper's Algorithm 1 without its beam search and its reshuffled passage orders): the scoring model first generates
    each answer once, greedily, in the file's passage order (test and calibration rows) with the scoring prompt, into
    ``matches.jsonl``; only the rows where it reproduces the annotated answer
    (:func:`mirage.scoring.xor_attriqa.same_answer`) are kept, and its own generation is attributed; results.json's
    ``settings.self_match`` has the rows checked and kept per language (an InputError when none is kept).
    ``reuse_from``: while this run's stores are empty, they start from that run's stored model outputs (its
    ``scores.jsonl`` and, with ``methods``, its methods' ``methods.jsonl``; :func:`reuse_store`, the same
    ``run.json``), so that only the rows this run's settings add are computed.
    """
    check_command(experiment, "xor-attriqa")
    model = mirage_source(experiment, mirage)
    cfg, model_name, text, limit = experiment.pipeline, experiment.model, experiment.text, experiment.limit
    skip = experiment.skip or 0
    calibrate_by, all_tokens, batch_items = options.calibrate_by, options.all_tokens, options.batch_items
    group_passages = options.group_passages
    # a dataset name of several parts (xor-attriqa-match:fi,ru) reads each part's file
    data, cal_files = resolve_files(experiment.data), resolve_files(experiment.calibrate_on)
    out = Path(options.output)
    methods = resolve_methods(options.methods) if options.methods else ()  # a bad name leaves no run folder

    def load(path: str | Path, skip: int = 0) -> XorData:
        return load_xor_attriqa(path, text=text, nli_dir=options.nli_dir, limit=limit, group=group_passages,
                                skip=skip)

    test = concat_data(load(p, skip) for p in data)  # read before the run folder is claimed: bad data leaves nothing
    kept, trained = leave_out_trained(test.items, experiment.adapter or experiment.model,
                                      question=lambda item: item.question, keep=options.keep_trained_questions,
                                      noun="test rows")
    test = replace(test, items=tuple(kept))
    cal = concat_data(load(p) for p in cal_files) if cal_files else None
    if cal is not None:
        _note_calibration_size(cal, limit)
    fingerprint = replace(experiment, dtype=run_dtype(model, experiment.dtype)).fingerprint()
    check_run(out, fingerprint)
    if options.reuse_from is not None:
        for name in ("scores.jsonl", *((METHODS_FILE,) if methods else ())):  # the methods' scores: the same model
            reuse_store(out / name, Path(options.reuse_from), fingerprint, shard or Shard.from_env())
    labels: dict[str, Any] = {"text": text, "data": [data_label(p) for p in data],
                              "calibrate_on": [data_label(p) for p in cal_files] or None}
    match = None
    if options.self_match:
        test, cal, match = _self_match(model, test, cal, out=out, model_name=model_name, cfg=cfg, labels=labels,
                                       progress=progress)
    by_key = {item.key: item for item in test.items}
    if not by_key:  # before any model is loaded
        require_scored(out, data, 0, test.bad_rows)

    try:
        groups = setting_groups(options.groups)
    except ValueError as err:
        raise InputError(str(err)) from None
    _check_classifier_methods(options.classifier_methods, methods, groups, calibrated=bool(cal_files))
    ex_rows = "ex" in groups
    # the likelihood settings' classifier is fitted on the calibration files: without them, as MIRAGE-CAL, they are
    # not run, and the default computes no passage signal that no row would use
    use_signals = options.signals and "likelihood" in groups and bool(cal_files)
    method_scores: dict[str, Any] = {}

    def calibration_scores(store: Any, cal: XorData) -> tuple[dict, list]:
        """Calibration items: MIRAGE-EX rows and signals, then, round by round, the rows the calibration search
        reaches (:func:`calibration_rows`) until it can run."""
        scores, failed = score_items(model, cal.items, config=cfg, store=store, progress=progress,
                                     signals=use_signals, ex_rows=ex_rows, stage="calibration",
                                     batch_items=batch_items)
        if "cal" not in groups:
            return scores, failed
        names = calibration_selections(cfg)
        asked: dict = {}
        while True:
            need = calibration_rows(build_views(cal.items, scores, names, context=cfg.aggregation.context,
                                                cti_floor=cfg.cti.threshold_floor), names, by=calibrate_by)
            need = {key: rows for key, rows in need.items() if owns(store, key) and rows - asked.get(key, set())}
            if not need:  # done (or, on one rank of several, what is left belongs to other ranks)
                return scores, failed
            for key, rows in need.items():
                asked.setdefault(key, set()).update(rows)

            def needs(item: XorItem, _cti: Sequence[float], need: dict[str, set[int]] = need) -> Iterable[int]:
                return need.get(item.key, ())

            scores, more = score_items(model, cal.items, config=cfg, store=store, progress=progress, needs=needs,
                                       signals=use_signals, ex_rows=ex_rows, stage="calibration rows",
                                       batch_items=batch_items)
            failed += [f for f in more if f not in failed]

    def outputs(store_for: StoreFor) -> tuple[dict, list]:
        store = store_for(out / "scores.jsonl")
        scores, failed = calibration_scores(store, cal) if cal is not None else ({}, [])
        floor = None
        if cal is not None and not all_tokens and "cal" in groups:
            try:
                floor = calibrated_floor(cal.items, scores, config=cfg, calibrate_by=calibrate_by)
            except RowsNeeded:  # a rank of several: rank 0 completes the calibration rows and these test rows
                floor = None

        def needed(_item: Any, cti: Sequence[float]) -> list[int]:
            if all_tokens:
                return list(range(len(cti)))
            return [] if floor is None else [t for t, c in enumerate(cti) if abs(c) >= floor]

        test_scores, test_failed = score_items(model, test.items, config=cfg, store=store, progress=progress,
                                               needs=needed if all_tokens or floor is not None else None,
                                               signals=use_signals, ex_rows=ex_rows,
                                               stage="xor-attriqa", batch_items=batch_items)
        if methods:  # the document methods on the same answers, calibration ones first
            found, _rejected = score_methods(model, [*(cal.items if cal else ()), *test.items], methods, config=cfg,
                                             store=store_for(out / METHODS_FILE), progress=progress)
            method_scores.update(found)
        return {**scores, **test_scores}, failed + [f for f in test_failed if f not in failed]

    done = model_stages(
        model, out, outputs, lambda _scores: list(by_key),
        lambda m, key, _scores: m.attribute_item(by_key[key].rag_item(), config=cfg),
        faithfulness=options.faithfulness, progress=progress, shard=shard)
    if done is None:
        return None
    scores, failed, faith = done
    bad = list(test.bad_rows) + (list(cal.bad_rows) if cal else []) + failed
    require_scored(out, data, sum(key in scores for key in by_key), list(test.bad_rows) + failed)
    if cal is not None:
        labels["calibration_size"] = calibration_size(cal)
    settings = {"model": model_name, **labels, "calibrate_by": calibrate_by,
                "limit": limit, **({"skip": skip} if skip else {}), "group_passages": group_passages,
                "all_tokens": all_tokens, "signals": use_signals,
                "groups": list(groups), **trained, "config": cfg.to_dict()}
    if methods:
        settings["methods"] = list(options.methods)
    if options.classifier_methods:
        settings["classifier_methods"] = list(options.classifier_methods)
    if match is not None:
        settings["self_match"] = match
    if options.reuse_from is not None:
        settings["reuse_from"] = str(options.reuse_from)
    pairs: list[dict[str, Any]] = []
    scored = [item for item in test.items if item.key in scores]
    extra, method_summary = (document_method_rows(scored, cal.items if cal else None, method_scores, methods)
                             if methods else ({}, None))
    report = evaluate(test.items, scores, config=cfg, calibration_items=cal.items if cal else None,
                      calibrate_by=calibrate_by, bad_rows=bad, settings=settings, learned=use_signals, groups=groups,
                      pairs=pairs, extra_rows=extra, classifier_methods=options.classifier_methods,
                      method_scores={name: {key: r.doc for key, r in found.items()}
                                     for name, found in method_scores.items()})
    report.methods = method_summary
    # one line per (item, passage), every setting's score and citation: derived from the store, rewritten each run
    write_atomic(out / "pairs.jsonl", "".join(json.dumps(p, ensure_ascii=False) + "\n" for p in pairs))
    report.versions = library_versions()
    report.faithfulness = faith
    if report.features and report.features.get("learned"):  # for `mirage attribute --citation-rule learned`
        write_atomic(out / "learned.json", json.dumps(report.features["learned"], indent=2) + "\n")
    from mirage.scoring.plots import sweep_figure

    save_results(out, report, sweep_figure(report.sweep) if report.sweep else None, "sweep.png")
    return report


#: Fewer calibration answers, or supporting / unsupported passages among them, than this calibrate nothing worth
#: reporting: the run says so (a CTI threshold or a classifier fitted on a handful of rows is noise).
MIN_CALIBRATION = 20


def calibration_size(cal: XorData) -> dict[str, int]:
    """What a calibration set holds: its answers, their passages, and how many of those support the answer."""
    labels = [label for item in cal.items for label in item.labels]
    return {"answers": len(cal.items), "passages": len(labels), "supporting": sum(labels)}


def _note_calibration_size(cal: XorData, limit: int | None) -> None:
    """Say on stderr what the run calibrates on when ``--limit`` cut the calibration files too, and warn when the
    set is too small to mean anything (:data:`MIN_CALIBRATION`)."""
    size = calibration_size(cal)
    unsupported = size["passages"] - size["supporting"]
    held = (f"{size['answers']} answers, {size['passages']} passages of which {size['supporting']} support their "
            "answer")
    if min(size["answers"], size["supporting"], unsupported) < MIN_CALIBRATION:
        print(f"mirage: warning: calibrating on {held}: fewer than {MIN_CALIBRATION} of each, too few for the "
              "calibrated thresholds and the passage-likelihood classifier to mean much"
              + ("; --limit cuts each calibration file too, so give a larger --limit or none" if limit else
                 "; give a larger calibration split") + ".", file=sys.stderr)
    elif limit is not None:
        print(f"mirage: note: --limit {limit} cuts each calibration file too: calibrating on {held}.",
              file=sys.stderr)


#: The rows each split's self-match check kept, per language (written before scoring, also when none is kept).
SELF_MATCH_FILE = "self_match.json"


def _self_match(model: Any, test: XorData, cal: XorData | None, *, out: Path, model_name: str, cfg: MirageConfig,
                labels: dict[str, Any], progress: Progress | None) -> tuple[XorData, XorData | None, dict[str, Any]]:
    """The test and calibration data cut to the rows the model reproduces (their answers its own generations), and
    the counts per split (also into ``out/self_match.json``, with the data ``labels``, before any scoring); the
    generations go to (and resume from) ``out/matches.jsonl``."""
    import dataclasses

    from mirage.scoring.xor_attriqa import match_counts, match_generation_config, match_items, self_matched

    gen_cfg = match_generation_config(cfg)
    settings = {"model": model_name, "prompt": dataclasses.asdict(cfg.prompt),
                "generation": {k: v for k, v in dataclasses.asdict(gen_cfg.generation).items() if k != "seed"}}
    cal_items = list(cal.items) if cal is not None else []
    with ResumableJSONL(out / "matches.jsonl", settings=settings) as store:
        records = match_items(model, [*test.items, *cal_items], config=cfg, store=store, progress=progress)
    n = len(test.items)
    test_counts = match_counts(records[:n])
    counts = {"test": test_counts, "calibration": match_counts(records[n:]) if cal is not None else None}
    write_atomic(out / SELF_MATCH_FILE, json.dumps({**settings, **labels, **counts}, indent=2, ensure_ascii=False)
                 + "\n")
    kept = test_counts.get("all", {}).get("kept", 0)
    if not kept:
        rows = test_counts.get("all", {}).get("rows", 0)
        raise NothingToScore(f"self-match kept 0 of the {rows} test row(s): the model reproduced no annotated "
                             f"answer (the counts are in {out / SELF_MATCH_FILE}, each generation in "
                             f"{out / 'matches.jsonl'}); nothing to score.")
    test = XorData(items=tuple(self_matched(test.items, records[:n])), bad_rows=test.bad_rows)
    if cal is not None:
        cal = XorData(items=tuple(self_matched(cal.items, records[n:])), bad_rows=cal.bad_rows)
    return test, cal, counts


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "judge"


def run_eli5(
    experiment: ExperimentConfig,
    options: ELI5Options,
    *,
    mirage: MirageSource | None = None,
    judge: M.NLIJudge | None = None,
    progress: Progress | None = None,
    shard: Shard | None = None,
) -> ELI5Report | None:
    """Generate, self-cite and attribute the ALCE-format items of the experiment's first ``data`` file (its first
    ``limit`` rows) for each of its :attr:`~mirage.runs.experiment.ExperimentConfig.generation_seeds`, with its
    pipeline; write ``results.json`` and ``length_bins.png`` into ``options.output``. The ``judge``'s decisions
    (ALCE citation quality; None: not judged) are kept in ``judgments-<judge>.jsonl`` and reused; with
    ``options.faithfulness``, each answer's faithfulness check is kept in ``faithfulness.jsonl`` and summarized.
    ``mirage`` and sharding as in :func:`run_xor_attriqa` (rank 0 returns the report, other ranks None; the dtype
    as there)."""
    check_command(experiment, "eli5")
    model = mirage_source(experiment, mirage)
    cfg, model_name, limit = experiment.pipeline, experiment.model, experiment.limit
    seeds, ndocs, at_most = list(experiment.generation_seeds), options.ndocs, options.at_most
    source = str(resolve(experiment.data[0]))
    out = Path(options.output)
    check_run(out, replace(experiment, dtype=run_dtype(model, experiment.dtype)).fingerprint())
    data = load_alce(source, limit=limit, skip=experiment.skip or 0)
    kept, trained = leave_out_trained(data.items, experiment.adapter or experiment.model,
                                      question=lambda item: item.question, keep=options.keep_trained_questions,
                                      noun="questions")
    data = replace(data, items=tuple(kept))
    if not data.items:  # before any model is loaded
        require_scored(out, source, 0, data.bad_rows)

    order = [item.key(seed=seed, ndocs=ndocs) for seed in seeds for item in data.items]
    done = model_stages(
        model, out, lambda store_for: attribute_items(model, data.items, seeds=seeds, ndocs=ndocs, config=cfg,
                                                      store=store_for(out / "answers.jsonl"), progress=progress),
        lambda results: [k for k in order if k in results],  # data order, however the records were stored
        lambda _m, key, results: results[key], faithfulness=options.faithfulness, progress=progress, shard=shard)
    if done is None:
        return None
    results, failed, faith = done
    require_scored(out, source, sum(key in results for key in order), list(data.bad_rows) + failed)
    cached = None
    if judge is not None:
        path = out / f"judgments-{_slug(judge.name)}.jsonl"
        store = ResumableJSONL(path, settings={"judge": judge.name})

        def remember(premise: str, hypothesis: str, decision: bool) -> None:
            store.write({"key": content_key([premise, hypothesis]), "premise": premise, "hypothesis": hypothesis,
                         "entails": decision})

        cached = M.CachedJudge(judge, load_judgments(store), on_new=remember)
    settings = {"model": model_name, "data": data_label(source), "seeds": list(seeds), "ndocs": ndocs, "limit": limit,
                **({"skip": experiment.skip} if experiment.skip else {}),
                "at_most_citations": at_most, **trained, "config": cfg.to_dict()}
    if len(set(seeds)) > 1 and not cfg.generation.do_sample:
        settings["note"] = "greedy decoding: the seeds give the same answers; sample to vary them"
    report = evaluate_eli5(data.items, results, seeds=seeds, ndocs=ndocs, judge=cached, at_most=at_most,
                           bad_rows=list(data.bad_rows) + failed, settings=settings)
    report.versions = library_versions()
    report.faithfulness = faith
    from mirage.scoring.plots import length_figure

    save_results(out, report, length_figure(report.length_bins), "length_bins.png")
    return report
