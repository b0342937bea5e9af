"""XOR-AttriQA's model stage: each answer scored by mirage and stored per item (:func:`score_items`), the
pipeline the command runs (:func:`xor_attriqa_pipeline`), and the model's own match subset (:func:`match_items`).
The data it scores is :mod:`mirage.scoring.xor_data`'s.

    data = load_xor_attriqa("fi.jsonl", text="en")  # mirage.scoring.xor_data
    scores, failed = score_items(Mirage.from_pretrained("smollm2-135m-instruct"), data.items,
                                 config=xor_attriqa_pipeline())   # the command's pipeline (its prompt)
    report = evaluate(data.items, scores)          # mirage.scoring.xor_eval, no model run

Each match row is one query with its answer and passages (:func:`mirage.scoring.xor_data.parse_xor_row`). The
answer is force-decoded over the concatenated passages; the model stage (:func:`score_item`) stores, per answer
token, its CTI score and the CCI saliency of every context token, so that every setting (example-level or
calibrated CTI threshold, top-3 or top-% CCI selection, the top-% sweep) is derived afterwards by the core's pure
selectors (see :mod:`mirage.scoring.xor_eval`).

The per-passage ("full") release has one passage per row; with a single passage the CCI selection always keeps
it, so the prediction is whether any answer token is context-sensitive.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mirage.attribution.aggregation import content_mask
from mirage.attribution.citations import parse_answer
from mirage.attribution.serialization import JSONRecord
from mirage.attribution.tokenization import tokenize_answer
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.runs.lazy import resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.sharding import owns
from mirage.scoring.rows import BadRow
from mirage.scoring.xor_data import XorItem

__all__ = [
    "MATCH_MAX_NEW_TOKENS",
    "SIGNALS",
    "ItemScores",
    "MatchRecord",
    "Needs",
    "ex_config",
    "generate_own_answer",
    "match_counts",
    "match_generation_config",
    "match_items",
    "method_rows",
    "prepare_item",
    "row_key",
    "row_record",
    "run_lengths",
    "same_answer",
    "score_item",
    "score_item_batch",
    "score_items",
    "scores_from_records",
    "self_matched",
    "signals_record",
    "xor_attriqa_pipeline",
]


@dataclass
class ItemScores(JSONRecord):
    """The model's view of one item, enough to derive every setting.

    ``cti[t]``: CTI score of answer token t; ``cci[t]``: saliency of every context token for answer token t, for the
    tokens whose CCI was computed (a mapping; a run stores the tokens some setting selects, see
    :func:`needed_tokens`; empty when there is a single passage, which is then always kept); ``context_docs``:
    run-length ``[[doc, count], …]`` of the 0-based passage of each context token; ``signals``: the
    leave-one-passage-out and attention signals (:class:`mirage.likelihood.signals.PassageSignals` as a dict), when
    computed. Stores written before per-token rows read back with every token's row.
    """

    key: str
    tokens: list[str]
    cti: list[float]
    cci: dict[int, list[float]]
    context_docs: list[list[int]]
    n_docs: int
    truncated_docs: list[int] = field(default_factory=list)
    signals: dict[str, Any] | None = None
    #: Run-length ``[[flag, count], …]``: 1 for a context token of passage text, 0 for the template's scaffolding
    #: (``Document [1]:``, newlines); empty in stores written before it was recorded.
    context_content: list[list[int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        rows = self.cci or {}
        # a list (stores written before per-token rows) holds every token's row
        self.cci = ({t: list(r) for t, r in enumerate(rows)} if isinstance(rows, list)
                    else {int(t): list(r) for t, r in rows.items()})

    def to_record(self) -> dict[str, Any]:
        """The item's record without its CCI rows (they are stored one record per token, see :func:`row_record`)."""
        out = self.to_dict()
        out["cci"] = {}
        return out

    def docs_per_context_token(self) -> list[int]:
        return [doc for doc, count in self.context_docs for _ in range(count)]

    def content_per_context_token(self) -> list[bool] | None:
        """Whether each context token is passage text (None when not recorded)."""
        if not self.context_content:
            return None
        return [bool(flag) for flag, count in self.context_content for _ in range(count)]

    def lacks_signals(self) -> bool:
        """Whether the item's passage signals are absent or older than the single-passage ones (one passage: none
        needed)."""
        return self.n_docs > 1 and (self.signals is None or not self.signals.get("only_logprob"))

    def missing(self, tokens: Iterable[int]) -> list[int]:
        """Of ``tokens``, those whose CCI row is not there (none when a single passage needs no CCI)."""
        if self.n_docs == 1:
            return []
        return sorted(t for t in set(tokens) if t not in self.cci)


def row_key(item_key: str, token: int) -> str:
    return f"{item_key}#{token}"


def row_record(item_key: str, token: int, row: Sequence[float]) -> dict[str, Any]:
    """The stored record of one answer token's CCI row."""
    return {"key": row_key(item_key, token), "item": item_key, "token": token, "cci": [float(f"{v:.6g}") for v in row]}


def signals_record(item_key: str, signals: dict[str, Any]) -> dict[str, Any]:
    """The stored record of an item's passage signals."""
    # keyed apart from the signals records of earlier versions (without the single-passage ones), which it replaces
    return {"key": f"{item_key}#passage-signals", "item": item_key, "signals": signals}


def run_lengths(values: Sequence[int]) -> list[list[int]]:
    """``[[value, count], …]`` of the runs of equal consecutive values (how :class:`ItemScores` stores
    ``context_docs``)."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([int(v), 1])
    return out


def prepare_item(mirage: Any, item: XorItem, *, config: MirageConfig | None = None) -> tuple[str, Any]:
    """The item's citation-free answer text and its prepared prompt (documents shortened, if needed, to leave room
    for that answer), as :func:`score_item` attributes them."""
    text = parse_answer(item.answer, len(item.passages)).text.strip()
    if not text:
        raise InputError("is empty once citation marks are removed; nothing to attribute.", field="answer")
    reserve = len(tokenize_answer(mirage.lm.tokenizer, text).ids) + 1
    return text, mirage.prepare(item.rag_item(), config=config or mirage.config, reserve_tokens=reserve)


def scores_from_records(records: Iterable[Any]) -> dict[str, ItemScores]:
    """Stored :class:`ItemScores` by key, from the records of a run's ``scores.jsonl``: item records, their
    per-token CCI rows and their signals merged (other records ignored)."""
    records = [rec for rec in records if isinstance(rec, dict)]
    out = {rec["key"]: ItemScores.from_dict(rec) for rec in records if "cti" in rec}
    for rec in records:
        owner = out.get(rec.get("item"))  # type: ignore[arg-type]
        if owner is None:
            continue
        if "token" in rec and "cci" in rec:
            owner.cci[int(rec["token"])] = rec["cci"]
        elif "signals" in rec and (owner.signals is None or not owner.signals.get("only_logprob")):
            owner.signals = rec["signals"]
    return out


def xor_attriqa_pipeline() -> MirageConfig:
    """The pipeline ``mirage score xor-attriqa`` runs when no file or flag changes it: the default one with the
    scorer's own prompt (the benchmark's ``default_prompt`` in :mod:`mirage.runs.benchmark_options`: ``standard``,
    since these answers cite nothing). Give it to the functions here (or to the Mirage) to score as the command
    does."""
    from mirage.runs.experiment import ExperimentConfig

    return ExperimentConfig.from_dict({}, command="xor-attriqa").pipeline


def ex_config(cfg: MirageConfig) -> MirageConfig:
    """The run's config with the example-level CTI selector (MIRAGE-EX: mean + k·std of the answer's scores)."""
    from mirage.config import CTIConfig

    return replace(cfg, cti=CTIConfig(metric=cfg.cti.metric, selector="std", std_k=cfg.cti.std_k,
                                      std_kind=cfg.cti.std_kind, threshold_floor=cfg.cti.threshold_floor))


#: The passage signals the scorer computes: what the learned classifier's features need (the single-passage and
#: no-passage log-probabilities), not the leave-one-out passes or the attention weights.
SIGNALS: dict[str, Any] = {"leave_one_out": False, "attention": False}


#: What a run needs CCI rows for, given an item and its CTI scores: answer indices.
Needs = Callable[[XorItem, Sequence[float]], Iterable[int]]


def _prepared(mirage: Any, item: XorItem, cfg: MirageConfig) -> tuple[str, Any, Any]:
    """The answer text, the prepared prompt and the answer's tokens; InputError for an answer with no tokens."""
    text, prep = prepare_item(mirage, item, config=cfg)
    answer = tokenize_answer(mirage.lm.tokenizer, text)
    if not answer.ids:
        raise InputError("has no tokens.", field="answer")
    return text, prep, answer


def _item_scores(mirage: Any, item: XorItem, text: str, prep: Any, answer: Any, scores: Any, *, signals: bool,
                 cfg: MirageConfig, leave_one_out: bool = False) -> ItemScores:
    """The stored form of one item's token scores (and, with ``signals``, its passage signals, reusing the CTI
    passes' log-probabilities; with ``leave_one_out`` too, the leave-one-passage-out passes as well)."""
    n_docs = len(item.passages)
    rows = {int(t): [float(f"{v:.6g}") for v in row] for t, row in zip(scores.cci.selected, scores.cci.scores)}
    tokens = [text[a:b] or mirage.lm.tokenizer.decode([t]) for (a, b), t in zip(answer.offsets, answer.ids)]
    sig = None
    if signals and n_docs > 1:
        from mirage.likelihood.signals import passage_signals

        sig = passage_signals(mirage.lm, prep, answer.ids, prepare=functools.partial(mirage.prepare, config=cfg),
                              logprob=scores.cti.logprobs or None,
                              none_logprob=scores.cti.contextless_logprobs or None,
                              **{**SIGNALS, "leave_one_out": leave_one_out}).to_dict()
    content = content_mask(prep.tokens, prep.prompt.user_spans)
    return ItemScores(key=item.key, tokens=tokens, cti=[float(s) for s in scores.cti.scores], cci=rows,
                      context_docs=run_lengths(prep.tokens.context_docs), n_docs=n_docs,
                      truncated_docs=list(prep.prompt.truncated_docs), signals=sig,
                      context_content=run_lengths([int(c) for c in content]))


def score_item(mirage: Any, item: XorItem, *, config: MirageConfig | None = None,
               targets: str | Sequence[int] | Callable[[Any], Iterable[int]] = "selected",
               signals: bool = False, leave_one_out: bool = False) -> ItemScores:
    """Force-decode the item's answer: CTI for every answer token and CCI for ``targets`` (``"selected"``: the tokens
    MIRAGE-EX selects; ``"all"``; answer indices; or a function of the CTI scores giving them), none with a single
    passage; with ``signals``, the passage signals too (those of :data:`SIGNALS`, plus the leave-one-passage-out
    passes with ``leave_one_out``: the ``loo_*`` features). Raises InputError for items the pipeline rejects."""
    cfg = ex_config(config or mirage.config)
    text, prep, answer = _prepared(mirage, item, cfg)
    scores = mirage.score_tokens(prep, answer, targets=targets if len(item.passages) > 1 else "none", config=cfg)
    return _item_scores(mirage, item, text, prep, answer, scores, signals=signals, cfg=cfg,
                        leave_one_out=leave_one_out)


def score_item_batch(mirage: Any, items: Sequence[XorItem], *, config: MirageConfig | None = None,
                     targets: Sequence[str | Sequence[int] | Callable[[Any], Iterable[int]]],
                     signals: bool = False) -> list[ItemScores | InputError]:
    """:func:`score_item` of several items, their CTI and CCI passes batched
    (:meth:`mirage.pipeline.Mirage.score_batch`); an item the pipeline rejects comes back as its InputError, in its
    place."""
    cfg = ex_config(config or mirage.config)
    out: list[ItemScores | InputError | None] = [None] * len(items)
    ready = []
    for k, item in enumerate(items):
        try:
            ready.append((k, *_prepared(mirage, item, cfg)))
        except InputError as err:
            out[k] = err
    if ready:
        batch = mirage.score_batch([prep for _k, _t, prep, _a in ready], [a for _k, _t, _p, a in ready], config=cfg,
                                   item_targets=[targets[k] if len(items[k].passages) > 1 else "none"
                                                 for k, _t, _p, _a in ready])
        for (k, text, prep, answer), scores in zip(ready, batch):
            out[k] = _item_scores(mirage, items[k], text, prep, answer, scores, signals=signals, cfg=cfg)
    return out  # type: ignore[return-value]


def _write(store: Any, scores: ItemScores, rows: Iterable[int], *, item: bool = False, signals: bool = False) -> None:
    if store is None:
        return
    if item:
        store.write(scores.to_record())
    for t in sorted(rows):
        store.write(row_record(scores.key, t, scores.cci[t]))
    if signals and scores.signals is not None:
        store.write(signals_record(scores.key, scores.signals))


def _wanted(item: XorItem, cti: Sequence[float], config: MirageConfig | None, needs: Needs | None,
            ex_rows: bool = True) -> set[int]:
    """The answer tokens whose CCI rows a run keeps: MIRAGE-EX's (with ``ex_rows``), and those ``needs`` names."""
    from mirage.attribution.cti import select_tokens

    wanted = set(select_tokens(cti, ex_config(config or MirageConfig()).cti)[0]) if ex_rows else set()
    return wanted | (set(needs(item, cti)) if needs is not None else set())


def _update(mirage: Any, item: XorItem, sc: ItemScores, *, config: MirageConfig | None, needs: Needs | None,
            signals: bool, store: Any, ex_rows: bool = True) -> None:
    """Add to an already scored item the CCI rows it lacks and, with ``signals``, its passage signals."""
    missing = sc.missing(_wanted(item, sc.cti, config, needs, ex_rows))
    want_signals = signals and sc.lacks_signals()
    if missing:  # one preparation and one pair of CTI passes serve both the rows and the signals
        new = score_item(mirage, item, config=config, targets=missing, signals=want_signals)
        sc.cci.update(new.cci)
        _write(store, sc, new.cci)
        if want_signals:
            sc.signals = new.signals
            _write(store, sc, (), signals=True)
    elif want_signals:
        from mirage.likelihood.signals import passage_signals

        cfg = ex_config(config or mirage.config)
        _text, prep, answer = _prepared(mirage, item, cfg)
        sc.signals = passage_signals(mirage.lm, prep, answer.ids, **SIGNALS,
                                     prepare=functools.partial(mirage.prepare, config=cfg)).to_dict()
        _write(store, sc, (), signals=True)


def score_items(
    model: Any | Callable[[], Any],
    items: Sequence[XorItem],
    *,
    config: MirageConfig | None = None,
    store: Any = None,
    progress: Progress | None = None,
    needs: Needs | None = None,
    signals: bool = False,
    ex_rows: bool = True,
    stage: str = "xor-attriqa",
    batch_items: int | None = None,
) -> tuple[dict[str, ItemScores], list[BadRow]]:
    """Scores of every item, running the model only for what ``store`` (a ResumableJSONL, appended as each item
    finishes) lacks. An item not scored yet gets, in one pass, CTI, the CCI rows of its MIRAGE-EX tokens (with
    ``ex_rows``) and of ``needs(item, cti)``, and with ``signals`` its passage signals; an item scored before gets only
    the rows and signals it lacks. ``model`` is a Mirage, or a function returning one, called only if something needs to
    run. ``batch_items`` > 1 batches the CTI and CCI passes of that many new items (:func:`score_item_batch`); None: 8
    on a GPU, 1 on a CPU.
    Items the pipeline rejects come back as BadRow."""
    scores = scores_from_records(store.records()) if store is not None else {}
    todo: dict[str, XorItem] = {}
    for item in items:
        sc = scores.get(item.key)
        if owns(store, item.key) and (
                sc is None or sc.missing(_wanted(item, sc.cti, config, needs, ex_rows))
                or (signals and sc.lacks_signals())):
            todo.setdefault(item.key, item)
    failed: list[BadRow] = []
    if not todo:
        return scores, failed
    mirage = resolve_mirage(model)

    def targets_of(item: XorItem) -> str | Callable[[Any], set[int]]:
        if not ex_rows and needs is None:  # no CCI row wanted: the with-documents pass needs no gradient graph
            return "none"
        return lambda cti: _wanted(item, cti.scores, config, needs, ex_rows)

    def keep(item: XorItem, sc: ItemScores | InputError) -> None:
        """Store a new item's scores, or report the item the pipeline rejected."""
        if isinstance(sc, InputError):
            failed.append(BadRow(file=item.file, line=item.line, error=f"rejected by the pipeline: {sc}"))
        else:
            scores[item.key] = sc
            _write(store, sc, sc.cci, item=True, signals=True)

    def run() -> Iterator[XorItem]:
        size = max(1, batch_items if batch_items is not None
                   else 8 if getattr(mirage.lm.device, "type", "cpu") == "cuda" else 1)
        new = [item for item in todo.values() if item.key not in scores] if size > 1 else []
        batched = {item.key for item in new}
        for start in range(0, len(new), size):  # new items, their passes batched
            chunk = new[start: start + size]
            done = score_item_batch(mirage, chunk, config=config, targets=[targets_of(i) for i in chunk],
                                    signals=signals)
            for item, result in zip(chunk, done):
                keep(item, result)
                yield item
        for item in todo.values():
            if item.key in batched:
                continue
            sc = scores.get(item.key)
            try:
                if sc is None:
                    keep(item, score_item(mirage, item, config=config, targets=targets_of(item), signals=signals))
                else:
                    _update(mirage, item, sc, config=config, needs=needs, signals=signals, store=store,
                            ex_rows=ex_rows)
            except InputError as err:
                keep(item, err)
            yield item

    iterable: Iterable = run()
    if progress is not None:
        iterable = progress(iterable, len(todo), stage)
    for _item in iterable:
        pass
    return scores, failed


#: New tokens generated per answer when matching: the authors generated with ``max_length=20`` (CORA mGEN, beam 4).
MATCH_MAX_NEW_TOKENS = 20


def same_answer(generated: str, annotated: str) -> bool:
    """Whether the model's generation is the annotated answer, by the authors' test (MIRAGE-reproduce,
    ``sec4_alignment/data/check_same_prediction.py``: ``answers[0] == item['prediction']``, the generation decoded with
    ``skip_special_tokens=True``): the two strings equal, here after stripping surrounding whitespace (mirage's rows
    are stripped when read). No case folding, no punctuation or article removal: ``"Yes"`` is not ``"yes"``."""
    return generated.strip() == annotated.strip()


@dataclass
class MatchRecord(JSONRecord):
    """One row's match check: the annotated answer, the scoring model's own generation (same prompt as scoring) and
    whether it reproduced the annotation (:func:`same_answer`). ``file``: the row's file name without its folder
    (a run folder records no path of the machine it ran on), ``line`` its line there."""

    key: str
    file: str
    line: int
    lang: str
    annotated: str
    generated: str
    kept: bool


def match_generation_config(cfg: MirageConfig) -> MirageConfig:
    """The pipeline a match check generates with: greedy, :data:`MATCH_MAX_NEW_TOKENS` new tokens (the authors: beam
    search with 4 beams; mirage decodes greedily)."""
    return cfg.replace(generation={"do_sample": False, "max_new_tokens": MATCH_MAX_NEW_TOKENS})


def generate_own_answer(mirage: Any, item: XorItem, *, config: MirageConfig | None = None) -> str:
    """The scoring model's own answer to the item: its question and passages in the scoring prompt, generated as
    :func:`match_generation_config` says, decoded without special tokens."""
    from mirage.attribution.generation import generate_answer

    cfg = match_generation_config(config or mirage.config)
    prep = mirage.prepare({"question": item.question, "docs": item.rag_item()["docs"]}, config=cfg)
    return generate_answer(mirage.lm, prep.tokens.ids, cfg=cfg.generation).text


def match_items(model: Any | Callable[[], Any], items: Sequence[XorItem], *, config: MirageConfig | None = None,
                store: Any = None, progress: Progress | None = None) -> list[MatchRecord]:
    """The match check of every item (:class:`MatchRecord`, in item order), generating only for items ``store`` (a
    ResumableJSONL) lacks and appending each as it finishes. ``model``: a Mirage or a function returning one, called
    only if some item needs generating."""
    done = {rec["key"]: MatchRecord.from_dict(rec) for rec in (store.records() if store is not None else [])
            if isinstance(rec, dict) and "generated" in rec}
    todo = list({item.key: item for item in items if item.key not in done}.values())
    if todo:
        mirage = resolve_mirage(model)
        iterable: Iterable[XorItem] = todo if progress is None else progress(todo, len(todo), "self-match")
        for item in iterable:
            generated = generate_own_answer(mirage, item, config=config)
            rec = MatchRecord(key=item.key, file=Path(item.file).name, line=item.line, lang=item.lang,
                              annotated=item.answer, generated=generated.strip(),
                              kept=same_answer(generated, item.answer))
            done[item.key] = rec
            if store is not None:
                store.write(rec.to_dict())
    return [done[item.key] for item in items]


def self_matched(items: Sequence[XorItem], records: Sequence[MatchRecord]) -> list[XorItem]:
    """The items whose generation matched, each with the model's own generation as its answer (what is attributed)."""
    return [replace(item, answer=rec.generated) for item, rec in zip(items, records) if rec.kept]


def match_counts(records: Sequence[MatchRecord]) -> dict[str, dict[str, int]]:
    """Rows checked and kept per language and over all (``{"fi": {"rows": 57, "kept": 3}, …, "all": …}``)."""
    out: dict[str, dict[str, int]] = {}
    for rec in records:
        for lang in (rec.lang, "all"):
            counts = out.setdefault(lang, {"rows": 0, "kept": 0})
            counts["rows"] += 1
            counts["kept"] += int(rec.kept)
    if "all" in out:
        out["all"] = out.pop("all")
    return out


def method_rows(items: Sequence[XorItem], path: str | Path, *, model: str, text: str, config: MirageConfig,
                method: str, ig_steps: int, mirage: Any = None, progress: Progress | None = None) -> dict[str, dict]:
    """Per item key: the CCI rows of the tokens MIRAGE-EX selects, under CCI ``method`` (``{"rows": {token: row},
    "seconds": s, "n_rows": n}``), to compare CCI methods on the same tokens (``benchmarks/cci_methods.py``).
    Computed with ``config`` (the scored store's pipeline, :func:`mirage.scoring.benchmarks.stored_xor_pipeline`)
    and that method into ``PATH.METHOD.jsonl`` beside ``path`` for the items it lacks: resumable, one store per
    method and settings. ``mirage``: the loaded Mirage, else ``model`` is loaded only if something is missing."""
    import dataclasses
    import time

    from mirage.runs.store import ResumableJSONL

    settings: dict[str, Any] = {"model": model, "text": text, "method": method, "stage": "ex-rows",
                                "prompt": dataclasses.asdict(config.prompt), "cti_metric": config.cti.metric}
    if method == "integrated_gradients":
        settings["ig_steps"] = ig_steps
    path = Path(path)
    name = path.with_name(f"{path.stem}.{method}{path.suffix}")
    with ResumableJSONL(name, settings=settings) as store:
        todo = [item for item in items if item.key not in store.done]
        if todo:
            if mirage is None:
                from mirage.pipeline import Mirage

                mirage = Mirage.from_pretrained(model, config=config)
            cfg = config.replace(cci={"method": method, "ig_steps": ig_steps})
            for item in progress(todo, len(todo), method) if progress else todo:
                start = time.perf_counter()
                sc = score_item(mirage, item, config=cfg, targets="selected")
                seconds = time.perf_counter() - start
                for t in sorted(sc.cci):
                    store.write(row_record(sc.key, t, sc.cci[t]))
                store.write({"key": sc.key, "seconds": seconds, "n_rows": len(sc.cci)})  # last: the item is done
        out: dict[str, dict] = {}
        for rec in store.records():
            if "token" in rec:
                out.setdefault(rec["item"], {"rows": {}})["rows"][int(rec["token"])] = rec["cci"]
            elif "seconds" in rec:
                out.setdefault(rec["key"], {"rows": {}}).update(seconds=rec["seconds"], n_rows=rec["n_rows"])
        return {k: v for k, v in out.items() if "seconds" in v}
