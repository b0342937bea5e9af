"""A whole study from a DATA argument to its output folder:

    DIR/items.jsonl        the items as built (documents, relevant ids, gold answers)
    DIR/prompts/*.yaml     each mode's prompt file, as mirage read it
    DIR/generations.jsonl  one record per item and mode, written as it finishes (a re-run skips finished ones)
    DIR/rewrites.jsonl     cached LLM rewrites (with --rewrite)
    DIR/results.json       the BiasStudyResult
    DIR/tables.md          the markdown tables
    DIR/cab.png            CAB per model and metadata type (this run and any compared results)
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mirage.attribution.models import LoadedModel
from mirage.bias.items import (
    BiasItem,
    beir_items,
    beir_relevant_counts,
    detect_format,
    load_beir_hub,
    load_msmarco,
    load_nq_answers,
    load_xor_rows,
    msmarco_items,
    read_answers,
    read_beir,
    read_bias_items,
    read_run,
    relevant_counts_note,
    write_items,
    xor_distractor_pool,
    xor_items,
    xor_relevant_counts,
)
from mirage.bias.prompts import resolve_sentence_mark
from mirage.bias.protocol import BiasConfig, load_metadata
from mirage.bias.rage import Embedder, load_embedder, rage_items
from mirage.bias.results import BiasStudyResult, summarize
from mirage.bias.rewrite import rewrite_items
from mirage.bias.runner import BiasStudy, reusable_records
from mirage.bias.tables import plot_cab, render_markdown
from mirage.data import data_label
from mirage.data.inputs import InputError
from mirage.runs.experiment import TRAINED_KEPT, TRAINED_LEFT_OUT, ExperimentConfig, leave_out_trained
from mirage.runs.files import RESULTS_FILE
from mirage.runs.lazy import MirageSource, resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.sharding import in_shards
from mirage.runs.store import ResumableJSONL, write_atomic

__all__ = ["EveryQuestionTrained", "build_items", "run_bias_study", "summarize_run", "write_outputs"]

#: RAGE candidates drawn from a BEIR corpus (embedding millions of documents is not what a bias study needs).
RAGE_POOL_SIZE = 20000


def build_items(data: str, cfg: BiasConfig, *, limit: int | None = None, split: str = "test",
                embed: Embedder | None = None, run: Mapping[str, Sequence[str]] | str | Path | None = None,
                ) -> list[BiasItem]:
    """Items from DATA: an XOR-AttriQA-match file or folder, a BEIR folder (optionally with ``answers.jsonl``
    {"_id", "answers"} and a TREC run ``run.trec`` giving the non-relevant documents), a JSONL of prepared items,
    or ``nq`` / ``msmarco`` from the hub. ``run`` (a TREC run file, or query id → doc ids best first, as
    :mod:`~mirage.bias.retrieval` writes them) replaces a BEIR folder's ``run.trec``; InputError for other data.
    Only the questions with exactly ``cfg.n_relevant`` relevant documents become items (prepared items are kept as
    they are). With ``cfg.docs == "rage"``
    the non-relevant documents become the RAGE mixture (``embed`` defaults to the embedder ``cfg.rage_embedder``
    names, :func:`~mirage.bias.rage.load_embedder`). XOR-AttriQA rows that cannot be used are skipped, each printed
    to stderr as ``skipped FILE:LINE: reason`` (before any model is loaded)."""
    kind = detect_format(data)
    if run is not None and kind not in ("beir", "nq"):
        raise InputError(f"{data}: a retriever's run gives the documents of BEIR data (a BEIR folder or nq), not of "
                         f"{'prepared items' if kind == 'items' else kind} data.")
    pool = None
    counts: list[int] = []  # relevant documents per question, for the message when none has cfg.n_relevant
    if kind == "xor":
        rows, bad = load_xor_rows(data)
        for row in bad:
            print(f"skipped {row}", file=sys.stderr)
        items = xor_items(rows, k=cfg.k, seed=cfg.seed, max_doc_words=cfg.max_doc_words, n_relevant=cfg.n_relevant)
        counts = xor_relevant_counts(rows)
        if cfg.docs == "rage":
            pool = xor_distractor_pool(rows, cfg.max_doc_words)
    elif kind in ("beir", "nq"):
        if kind == "beir":
            beir = read_beir(data, split=split)
            folder = Path(data)
            answers = read_answers(folder / "answers.jsonl") if (folder / "answers.jsonl").exists() else None
            if run is None and (folder / "run.trec").exists():
                run = folder / "run.trec"
        else:  # pragma: no cover - needs the model hub
            beir, answers = load_beir_hub("nq", split=split), load_nq_answers()
        if isinstance(run, (str, Path)):
            run = read_run(run)
        items = beir_items(beir, k=cfg.k, seed=cfg.seed, answers=answers, run=run, max_doc_words=cfg.max_doc_words,
                           source=kind, n_relevant=cfg.n_relevant)
        counts = beir_relevant_counts(beir)
        if cfg.docs == "rage":
            ids = sorted(beir.corpus)
            ids = random.Random(f"{cfg.seed}:rage-pool").sample(ids, min(RAGE_POOL_SIZE, len(ids)))
            positives = {d for q in beir.qrels.values() for d, s in q.items() if s > 0}
            pool = [beir.corpus[d] for d in ids if d not in positives]
    elif kind == "msmarco":  # pragma: no cover - needs the model hub
        items = msmarco_items(load_msmarco("validation"), k=cfg.k, seed=cfg.seed, max_doc_words=cfg.max_doc_words,
                              n_relevant=cfg.n_relevant)
    else:
        items = read_bias_items(data)
        if cfg.docs == "rage":
            raise InputError("--docs rage needs the source data (XOR-AttriQA or BEIR), not prepared items.")
    if items and counts and cfg.n_relevant > 1:  # the default (one) leaves the others out silently, as it always did
        print(f"{relevant_counts_note(counts, cfg.n_relevant)}; the others are left out.", file=sys.stderr)
    if not items:
        note = f" ({relevant_counts_note(counts, cfg.n_relevant)}); choose another --n-relevant" if counts else ""
        raise InputError(f"{data}: no question with exactly {cfg.n_relevant} relevant document(s){note}.")
    most = max(len(item.docs) for item in items)
    if most < cfg.k:  # the tables report the documents the questions have (BiasStudyResult.documents), not k
        print(f"bias.k={cfg.k}: the questions of {data} have at most {most} documents; the study uses those.",
              file=sys.stderr)
    if limit is not None:
        items = items[:limit]
    if pool is not None:
        items = rage_items(items, pool, k=cfg.k, n_similar=cfg.rage_similar, seed=cfg.seed,
                           embed=embed or load_embedder(cfg.rage_embedder))
    return items


def run_bias_study(data: str, *, mirage: MirageSource, cfg: BiasConfig, output_dir: str | Path,
                   limit: int | None = None, split: str = "test", rewriter: LoadedModel | None = None,
                   progress: Progress | None = None, compare: Sequence[BiasStudyResult] = (),
                   embed: Embedder | None = None, run: Mapping[str, Sequence[str]] | str | Path | None = None,
                   reuse: Sequence[str | Path] = (), tuned: str | None = None) -> BiasStudyResult | None:
    """Build the items (``run``: a retriever's ranking for BEIR data, see :func:`build_items`), run every
    (item, mode) not yet in ``DIR/generations.jsonl``, and write the results, tables and CAB figure.
    ``rewriter`` rewrites documents when ``cfg.rewrite`` asks (default: the studied model).
    Under a launcher each rank generates its shard (:mod:`mirage.runs.sharding`); rank 0 returns the result, other
    ranks None. Document rewriting is not sharded: every rank rewrites (the same, greedy) documents.
    ``reuse``: other runs' folders; the generations they finished with this model and configuration that this
    study plans too are copied, not run again (:func:`~mirage.bias.runner.reusable_records`).
    Of the items built (the first ``limit``), those asking a question the model records it was trained on are left
    out unless ``cfg.keep_trained_questions`` (:func:`~mirage.runs.experiment.leave_out_trained`; the results say
    how many): the record of ``tuned``, the name or folder the model was loaded by (default: its loaded name, which
    for an adapter folder loaded onto its base is not the folder's; with it, nothing loads before the data is
    checked)."""
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    items = build_items(data, cfg, limit=limit, split=split, embed=embed, run=run)  # bad data fails before the model
    if tuned is None:
        mirage = resolve_mirage(mirage)
        tuned = mirage.lm.name
    items, trained = leave_out_trained(items, tuned, question=lambda item: item.question,
                                       keep=cfg.keep_trained_questions, noun="questions")
    mirage = resolve_mirage(mirage)
    cfg = resolve_sentence_mark(cfg, mirage.lm.name)
    if cfg.rewrite != "none":
        from mirage.bias.prompts import load_prompts

        items = rewrite_items(rewriter or mirage.lm, items, cfg.rewrite, prompt=load_prompts(cfg).rewrite,
                              cache=ResumableJSONL(out_dir / "rewrites.jsonl"), seed=cfg.seed)
    write_items(items, out_dir / "items.jsonl")
    study = BiasStudy(mirage, cfg, template_dir=out_dir / "prompts")
    # what the generations depend on, as every run command's resume check compares it: a re-run with another model
    # or pipeline configuration is refused, not mixed into the same file
    settings = ExperimentConfig("bias", model=mirage.lm.name, pipeline=study.mirage_config,
                                dtype=str(mirage.lm.dtype)).fingerprint()
    shared = reusable_records(reuse, settings) if reuse else None
    records = in_shards(lambda store_for: study.run(
        items, out=store_for(out_dir / "generations.jsonl", settings=settings), progress=progress, reuse=shared))
    if records is None:  # one rank of several: rank 0 summarizes
        return None
    result = replace(summarize(records, cfg=cfg, metadata=load_metadata(cfg), model=mirage.lm.name,
                               data=data_label(data), mirage_config=study.mirage_config.to_dict()),
                     trained_questions_left_out=trained.get(TRAINED_LEFT_OUT),
                     trained_questions_kept=trained.get(TRAINED_KEPT))
    write_outputs(result, out_dir, compare=compare)
    return result


def write_outputs(result: BiasStudyResult, out_dir: str | Path, *, compare: Sequence[BiasStudyResult] = ()) -> None:
    """``results.json``, ``tables.md`` and ``cab.png`` in ``out_dir`` (no ``cab.png`` when no study has a CAB:
    :func:`~mirage.bias.tables.plot_cab`)."""
    out_dir = Path(out_dir)
    result.save(out_dir / RESULTS_FILE)
    write_atomic(out_dir / "tables.md", render_markdown(result))
    fig = plot_cab([result, *compare])
    if fig is not None:
        fig.savefig(out_dir / "cab.png", dpi=120)


class EveryQuestionTrained(InputError):
    """A run of a tuned model whose every question is one the model records it was trained on: none is left to
    evaluate it on (:func:`summarize_run`). ``run_dir``, ``model`` and ``n_items`` say which run."""

    def __init__(self, run_dir: Path, model: str, n_items: int) -> None:
        super().__init__(f"{run_dir}: every one of its {n_items} questions is one {model} was trained on, so none is "
                         "left to evaluate it on; withdraw the run, or summarize it with leave_out_trained=False to "
                         "keep them.")
        self.run_dir, self.model, self.n_items = run_dir, model, n_items


def _trained_ids(run_dir: Path, old: BiasStudyResult, cfg: BiasConfig, records: Sequence[Any], *, data: str | None,
                 tuned: str | None) -> tuple[set[str], int] | None:
    """The ids of the run's items that ask a question its model records it was trained on, and how many: the items
    rebuilt as the study built them (the first ``n_items`` of its data; RAGE's documents are not rebuilt: they
    replace the non-relevant ones after the limit, keeping the ids and questions), then
    :func:`~mirage.runs.experiment.leave_out_trained`. None for a model without that record."""
    import contextlib
    import io

    from mirage.data import resolve
    from mirage.runs import experiment

    model = tuned or old.model
    if experiment.trained_question_keys(model, noun="questions") is None:
        return None
    given = data or old.data
    run = run_dir / "run.trec" if (run_dir / "run.trec").is_file() else None  # a retriever's run (retrievers study)
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # its notes on the data are the run's, said when it ran
            items = build_items(str(resolve(given)), replace(cfg, docs="retrieved"), limit=old.n_items, run=run)
    except InputError as err:
        raise InputError(f"{run_dir}: its questions cannot be rebuilt from {given} to leave out those {model} was "
                         f"trained on ({str(err).rstrip('.')}); give the data it ran on (data=PATH), or "
                         "leave_out_trained=False.") from None
    built = {item.id: item for item in items}
    stray = sorted({r.item_id for r in records  # the same item: its id and its gold answers
                    if r.item_id not in built or list(r.answers) != list(built[r.item_id].answers)})
    if stray:
        raise InputError(f"{run_dir}: its generations answer items ({', '.join(stray[:3])}) that are not among the "
                         f"{len(items)} rebuilt from {given}; give the data it ran on (data=PATH).")
    try:
        kept, said = experiment.leave_out_trained(items, model, question=lambda item: item.question, noun="questions")
    except InputError:
        raise EveryQuestionTrained(run_dir, str(model), len(items)) from None
    ids = {item.id for item in kept}
    return {item.id for item in items if item.id not in ids}, said[experiment.TRAINED_LEFT_OUT]


def _drop_lines(path: Path, field: str, ids: set[str]) -> None:
    """Rewrite the JSONL file ``path`` (plain or gzipped) without the lines whose object's ``field`` is in ``ids``;
    the other lines stay as they were."""
    import gzip
    import json

    from mirage.data.readers import read_text

    def kept(line: str) -> bool:
        try:
            value = json.loads(line)
        except ValueError:
            return True
        return not (isinstance(value, dict) and value.get(field) in ids)

    text = "".join(line for line in read_text(path).splitlines(keepends=True) if kept(line))
    write_atomic(path, gzip.compress(text.encode("utf-8"), mtime=0) if path.suffix == ".gz" else text)


def summarize_run(run_dir: str | Path, *, compare: Sequence[BiasStudyResult] = (), leave_out_trained: bool = True,
                  data: str | None = None, tuned: str | None = None) -> BiasStudyResult:
    """Summarize a run folder again from its generations, generating nothing (after the summary's code changed, or
    to summarize a stopped run): its ``results.json`` says the study's settings; ``results.json``, ``tables.md``
    and ``cab.png`` are rewritten.

    A result that records neither ``trained_questions_left_out`` nor ``trained_questions_kept`` (written before
    studies left out a tuned model's training questions) has them left out as :func:`run_bias_study` does, unless
    ``leave_out_trained`` is False or its config keeps them: its items are rebuilt from its data (``data``: where that
    is now, default the data the results name; a retriever's ``run.trec`` beside them), those asking a question the
    model (``tuned``: the name or folder it was loaded by, default the results' model) records it was trained on are
    left out, their records are removed from ``generations.jsonl`` and ``items.jsonl``, and the results record how
    many: what running the study again gives, every item's generations depending on that item alone.
    :class:`EveryQuestionTrained` (an InputError) when every question is one, before any file changes."""
    from mirage.bias.records import read_generations
    from mirage.runs.files import read_json, run_file

    run_dir = Path(run_dir)
    path = run_file(run_dir, RESULTS_FILE)
    if path is None:
        raise InputError(f"{run_dir} has no results.json to take the study's settings from; run `mirage bias` there.")
    old = BiasStudyResult.from_dict(read_json(path))
    cfg = BiasConfig.from_dict(old.config)
    records = read_generations(run_dir)
    counts = {"trained_questions_left_out": old.trained_questions_left_out,
              "trained_questions_kept": old.trained_questions_kept}
    left_out: set[str] = set()
    if leave_out_trained and counts == dict.fromkeys(counts) and not cfg.keep_trained_questions:
        found = _trained_ids(run_dir, old, cfg, records, data=data, tuned=tuned)
        if found is not None:
            left_out, counts["trained_questions_left_out"] = found
            records = [r for r in records if r.item_id not in left_out]
    sources = tuple(old.sources)
    result = summarize(records, cfg=cfg, metadata=load_metadata(cfg), model=old.model, data=old.data,
                       mirage_config=old.mirage_config, sources=sources)  # type: ignore[arg-type]
    result = replace(result, trained_questions_left_out=counts["trained_questions_left_out"],
                     trained_questions_kept=counts["trained_questions_kept"])
    if left_out:
        for name, key in (("generations.jsonl", "item_id"), ("items.jsonl", "id")):
            file = run_file(run_dir, name)
            if file is not None:
                _drop_lines(file, key, left_out)
    write_outputs(result, run_dir, compare=compare)
    return result
