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
from collections.abc import Sequence
from pathlib import Path

from ..experiment import ExperimentConfig
from ..inputs import InputError
from ..lazy import MirageSource, resolve_mirage
from ..models import LoadedModel
from ..progress import Progress
from ..runs import ResumableJSONL
from ..sharding import in_shards
from .items import (
    BiasItem,
    beir_items,
    detect_format,
    load_beir_hub,
    load_msmarco,
    load_nq_answers,
    load_xor_rows,
    msmarco_items,
    read_answers,
    read_beir,
    read_items,
    read_run,
    write_items,
    xor_distractor_pool,
    xor_items,
)
from .protocol import BiasConfig, load_metadata
from .rage import Embedder, MiniLMEmbedder, rage_items
from .results import BiasStudyResult, summarize
from .rewrite import rewrite_items
from .runner import BiasStudy
from .tables import plot_cab, render_markdown

#: RAGE candidates drawn from a BEIR corpus (embedding millions of documents is not what a bias study needs).
RAGE_POOL_SIZE = 20000


def build_items(data: str, cfg: BiasConfig, *, limit: int | None = None, split: str = "test",
                embed: Embedder | None = None) -> list[BiasItem]:
    """Items from DATA: an XOR-AttriQA-match file or folder, a BEIR folder (optionally with ``answers.jsonl``
    {"_id", "answers"} and a TREC run ``run.trec`` giving the non-relevant documents), a JSONL of prepared items,
    or ``nq`` / ``msmarco`` from the hub. With ``cfg.docs == "rage"`` the non-relevant documents become the RAGE
    mixture (``embed`` defaults to all-MiniLM-L6-v2). XOR-AttriQA rows that cannot be used are skipped, each printed
    to stderr as ``skipped FILE:LINE: reason`` (before any model is loaded)."""
    kind = detect_format(data)
    pool = None
    if kind == "xor":
        rows, bad = load_xor_rows(data)
        for row in bad:
            print(f"skipped {row}", file=sys.stderr)
        items = xor_items(rows, k=cfg.k, seed=cfg.seed, max_doc_words=cfg.max_doc_words)
        if cfg.docs == "rage":
            pool = xor_distractor_pool(rows, cfg.max_doc_words)
    elif kind in ("beir", "nq"):
        if kind == "beir":
            beir = read_beir(data, split=split)
            folder = Path(data)
            answers = read_answers(folder / "answers.jsonl") if (folder / "answers.jsonl").exists() else None
            run = read_run(folder / "run.trec") if (folder / "run.trec").exists() else None
        else:  # pragma: no cover - needs the model hub
            beir, answers, run = load_beir_hub("nq", split=split), load_nq_answers(), None
        items = beir_items(beir, k=cfg.k, seed=cfg.seed, answers=answers, run=run, max_doc_words=cfg.max_doc_words,
                           source=kind)
        if cfg.docs == "rage":
            ids = sorted(beir.corpus)
            ids = random.Random(f"{cfg.seed}:rage-pool").sample(ids, min(RAGE_POOL_SIZE, len(ids)))
            positives = {d for q in beir.qrels.values() for d, s in q.items() if s > 0}
            pool = [beir.corpus[d] for d in ids if d not in positives]
    elif kind == "msmarco":  # pragma: no cover - needs the model hub
        items = msmarco_items(load_msmarco("validation"), k=cfg.k, seed=cfg.seed, max_doc_words=cfg.max_doc_words)
    else:
        items = read_items(data)
        if cfg.docs == "rage":
            raise InputError("--docs rage needs the source data (XOR-AttriQA or BEIR), not prepared items.")
    if not items:
        raise InputError(f"{data}: no question with exactly one relevant document.")
    if limit is not None:
        items = items[:limit]
    if pool is not None:
        items = rage_items(items, pool, k=cfg.k, n_similar=cfg.rage_similar, seed=cfg.seed,
                           embed=embed or MiniLMEmbedder())
    return items


def run_bias_study(data: str, *, mirage: MirageSource, cfg: BiasConfig, output_dir: str | Path, limit: int | None = None,
                   split: str = "test", rewriter: LoadedModel | None = None, progress: Progress | None = None,
                   compare: Sequence[BiasStudyResult] = (), embed: Embedder | None = None) -> BiasStudyResult | None:
    """Build the items, run every (item, mode) not yet in ``DIR/generations.jsonl``, and write the results, tables
    and CAB figure. ``rewriter`` rewrites documents when ``cfg.rewrite`` asks (default: the studied model).
    Under a launcher each rank generates its shard (:mod:`mirage.sharding`); rank 0 returns the result, other
    ranks None. Document rewriting is not sharded: every rank rewrites (the same, greedy) documents."""
    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    items = build_items(data, cfg, limit=limit, split=split, embed=embed)  # bad data fails before the model loads
    mirage = resolve_mirage(mirage)
    if cfg.rewrite != "none":
        from .prompts import load_prompts

        items = rewrite_items(rewriter or mirage.lm, items, cfg.rewrite, prompt=load_prompts(cfg).rewrite,
                              cache=ResumableJSONL(out_dir / "rewrites.jsonl"), seed=cfg.seed)
    write_items(items, out_dir / "items.jsonl")
    study = BiasStudy(mirage, cfg, template_dir=out_dir / "prompts")
    # what the generations depend on, as every run command's resume check compares it: a re-run with another model
    # or pipeline configuration is refused, not mixed into the same file
    settings = ExperimentConfig("bias", model=mirage.lm.name, pipeline=study.mirage_config).fingerprint()
    records = in_shards(lambda store_for: study.run(
        items, out=store_for(out_dir / "generations.jsonl", settings=settings), progress=progress))
    if records is None:  # one rank of several: rank 0 summarizes
        return None
    result = summarize(records, cfg=cfg, metadata=load_metadata(cfg), model=mirage.lm.name, data=str(data),
                       mirage_config=study.mirage_config.to_dict())
    write_outputs(result, out_dir, compare=compare)
    return result


def write_outputs(result: BiasStudyResult, out_dir: str | Path, *, compare: Sequence[BiasStudyResult] = ()) -> None:
    """``results.json``, ``tables.md`` and ``cab.png`` in ``out_dir``."""
    out_dir = Path(out_dir)
    result.save(out_dir / "results.json")
    (out_dir / "tables.md").write_text(render_markdown(result), encoding="utf-8")
    fig = plot_cab([result, *compare])
    fig.savefig(out_dir / "cab.png", dpi=120)
