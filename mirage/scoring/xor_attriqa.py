"""XOR-AttriQA: the data (match and per-passage releases, English or native text) and the model stage.

    data = load_xor_attriqa("fi.jsonl", text="en")
    scores, failed = score_items(Mirage.from_pretrained("smollm2-135m-instruct"), data.items)
    report = evaluate(data.items, scores)          # mirage.scoring.xor_eval, no model run

Each match row is one query with its answer and passages. The answer is force-decoded over the concatenated passages;
the model stage (:func:`score_item`) stores, per answer token, its CTI score and the CCI saliency of every context
token, so that every setting (example-level or calibrated CTI threshold, top-3 or top-% CCI selection, the top-%
sweep) is derived afterwards by the core's pure selectors (see :mod:`mirage.scoring.xor_eval`).

The per-passage ("full") release has one passage per row; the same loader reads it, and with a single passage the
CCI selection always keeps it, so the prediction is whether any answer token is context-sensitive.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..cci import compute_cci, with_documents_logits
from ..citations import parse_answer
from ..config import MirageConfig
from ..cti import compute_cti
from ..forward import answer_logits, model_inputs
from ..inputs import InputError
from ..lazy import resolve_mirage
from ..serialization import JSONRecord
from ..sharding import owns
from ..tokenization import tokenize_answer
from .rows import BadRow, RawRow, RowError, content_key, parse_rows, read_rows, require

TextView = Literal["en", "native"]

#: How the published NLI baselines' prediction files are named next to a split ``<stem>.jsonl``.
NLI_FILES = {"nli_mt": "{stem}.nli-translate-en.json", "nli_orig": "{stem}.nli-in-lang.json"}

_MARKER = re.compile(r"<(\d+)>")
_STRAY_B = re.compile(r"\s*\[b\]\s*$")


# -- data -------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class XorItem:
    """One annotated answer with its passages (in the chosen text view) and per-passage human labels.

    ``idxs[i]`` indexes passage i in the per-passage release and the NLI prediction files; ``nli[name][i]`` is that
    baseline's prediction for passage i (absent when the file is not there).
    """

    file: str
    line: int
    lang: str
    question: str
    passages: tuple[str, ...]
    answer: str
    labels: tuple[bool, ...]
    idxs: tuple[int, ...]
    nli: dict[str, tuple[bool, ...]] = field(default_factory=dict)

    def rag_item(self) -> dict[str, Any]:
        """The item as the pipeline takes it: one document per passage, untitled, the answer force-decoded."""
        return {"question": self.question, "docs": [{"title": "", "text": p} for p in self.passages],
                "output": self.answer}

    @property
    def key(self) -> str:
        """What the model sees, hashed: items with the same inputs share one model run."""
        return content_key({"question": self.question, "passages": list(self.passages), "answer": self.answer})


@dataclass(frozen=True)
class XorData:
    """The valid items of one or more files, and the rows that were skipped."""

    items: tuple[XorItem, ...]
    bad_rows: tuple[BadRow, ...]


def split_marked_passages(text: str, n_expected: int) -> list[str]:
    """Split ``<0> first <1> second …`` into passages; the markers must be exactly 0 … n_expected-1, in order."""
    parts = _MARKER.split(text)
    numbers = [int(n) for n in parts[1::2]]
    if numbers != list(range(n_expected)):
        shown = " ".join(f"<{n}>" for n in numbers[:12]) or "none"
        raise RowError(f"passage markers ({shown}) do not match the {n_expected} 'ais' labels")
    if parts[0].strip():
        raise RowError("'passage_in_language' has text before the first marker <0>")
    passages = [p.strip() for p in parts[2::2]]
    empty = [i for i, p in enumerate(passages) if not p]
    if empty:
        raise RowError(f"passage(s) {empty} of 'passage_in_language' are empty")
    return passages


def _labels(value: Any, name: str) -> tuple[bool, ...]:
    values = value if isinstance(value, list) else [value]
    if not all(isinstance(v, (bool, int)) and v in (0, 1) for v in values):
        raise RowError(f"field {name!r} must hold booleans (or 0/1)")
    return tuple(bool(v) for v in values)


def parse_row(raw: RawRow, *, file: str, split: str, text: TextView) -> XorItem:
    """Validate one row of the match release (``ais`` a list) or of the per-passage release (``ais`` a boolean)."""
    row = raw.data
    if not isinstance(row, dict):
        raise RowError(f"row must be a JSON object, got {type(row).__name__}")
    if "ais" not in row or row["ais"] is None:
        raise RowError("field 'ais' is missing")
    labels = _labels(row["ais"], "ais")
    per_passage = not isinstance(row["ais"], list)
    if not labels:
        raise RowError("field 'ais' is empty")
    if per_passage:
        idxs: tuple[int, ...] = (raw.index,)
        if text == "en":
            question = require(row, "query_translated_en", str)
            passages = [require(row, "passage_en", str).strip()]
            answer = require(row, "prediction_translated_en", str)
        else:
            question = require(row, "query", str)
            passages = [require(row, "passage_in_language", str).strip()]
            answer = require(row, "prediction", str)
    else:
        idxs_raw = require(row, "idxs", list)
        if len(idxs_raw) != len(labels) or not all(isinstance(i, int) and i >= 0 for i in idxs_raw):
            raise RowError(f"field 'idxs' must hold {len(labels)} non-negative integers, one per 'ais' label")
        idxs = tuple(idxs_raw)
        if text == "en":
            question = require(row, "query_en", str)
            passages = require(row, "split_passages_en", list)
            if len(passages) != len(labels):
                raise RowError(f"'split_passages_en' has {len(passages)} passages for {len(labels)} 'ais' labels")
            if not all(isinstance(p, str) and p.strip() for p in passages):
                raise RowError("'split_passages_en' must hold non-empty strings")
            passages = [p.strip() for p in passages]
            answer = require(row, "prediction_en", str)
        else:
            question = require(row, "query", str)
            passages = split_marked_passages(require(row, "passage_in_language", str), len(labels))
            answer = require(row, "prediction", str)
    question = _STRAY_B.sub("", question).strip()
    if not question:
        raise RowError("the query is empty")
    if not answer.strip():
        raise RowError("the answer is empty")
    lang = row.get("query_language") or split
    return XorItem(file=file, line=raw.line, lang=str(lang), question=question, passages=tuple(passages),
                   answer=answer.strip(), labels=labels, idxs=idxs)


def _load_nli(path: Path) -> list[int] | None:
    import json

    if not path.exists():
        return None
    values = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(values, list):
        raise InputError(f"{path}: expected a flat JSON list of 0/1 predictions indexed by the rows' 'idxs'.")
    return values


def load_xor_attriqa(path: str | Path, *, text: TextView = "en", nli_dir: str | Path | None = None,
                     limit: int | None = None) -> XorData:
    """Read an XOR-AttriQA file (match or per-passage release); bad rows are returned, not raised.

    The NLI baselines' predictions are read from ``<stem>.nli-translate-en.json`` and ``<stem>.nli-in-lang.json``
    beside the file (or in ``nli_dir``). ``limit`` keeps the first N rows, bad ones included.
    """
    if text not in ("en", "native"):
        raise InputError(f"text={text!r} is not valid; choose 'en' (English translations) or 'native'.")
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; give an XOR-AttriQA JSONL file.")
    split = path.name.split(".")[0]
    folder = Path(nli_dir) if nli_dir else path.parent
    nli_files = {name: _load_nli(folder / pattern.format(stem=split)) for name, pattern in NLI_FILES.items()}

    def parse(raw: RawRow) -> XorItem:
        item = parse_row(raw, file=str(path), split=split, text=text)
        nli = {}
        for name, values in nli_files.items():
            if values is not None and all(i < len(values) for i in item.idxs):
                nli[name] = tuple(bool(values[i]) for i in item.idxs)
        return XorItem(**{**asdict(item), "nli": nli})

    items, bad = parse_rows(read_rows(path), parse, file=str(path), limit=limit)
    return XorData(items=tuple(items), bad_rows=tuple(bad))


def concat_data(parts: Iterable[XorData]) -> XorData:
    parts = list(parts)
    return XorData(items=tuple(i for p in parts for i in p.items), bad_rows=tuple(b for p in parts for b in p.bad_rows))


# -- model stage ------------------------------------------------------------------------------------------------------


@dataclass
class ItemScores(JSONRecord):
    """The model's view of one item, enough to derive every setting.

    ``cti[t]``: CTI score of answer token t; ``cci[t][j]``: saliency of context token j for answer token t
    (``[n_answer, n_context]``; empty when there is a single passage, which is then always kept);
    ``context_docs``: run-length ``[[doc, count], …]`` of the 0-based passage of each context token.
    """

    key: str
    tokens: list[str]
    cti: list[float]
    cci: list[list[float]]
    context_docs: list[list[int]]
    n_docs: int
    truncated_docs: list[int] = field(default_factory=list)


    def docs_per_context_token(self) -> list[int]:
        return [doc for doc, count in self.context_docs for _ in range(count)]


def _run_length(values: Sequence[int]) -> list[list[int]]:
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
    """Stored :class:`ItemScores` by key, from the records of a run's ``scores.jsonl`` (other records ignored)."""
    return {rec["key"]: ItemScores.from_dict(rec) for rec in records if isinstance(rec, dict) and "cti" in rec}


def score_item(mirage: Any, item: XorItem, *, config: MirageConfig | None = None) -> ItemScores:
    """Force-decode the item's answer and compute CTI for every answer token and CCI of every answer token.

    Uses the core stages (prompt, CTI, CCI) directly, because the settings need CCI scores for all answer tokens,
    not only for those the run's CTI selector keeps. Raises InputError for items the pipeline rejects.
    """
    cfg = config or mirage.config
    lm = mirage.lm
    n_docs = len(item.passages)
    text, prep = prepare_item(mirage, item, config=cfg)
    answer = tokenize_answer(lm.tokenizer, text)
    if not answer.ids:
        raise InputError("has no tokens.", field="answer")
    logits_ctx, graph = with_documents_logits(lm, prep.tokens.ids, answer.ids, cfg.cci, for_cci=n_docs > 1)
    logits_noctx = answer_logits(lm, prep.tokens.contextless_ids, answer.ids)
    cti = compute_cti(logits_ctx, logits_noctx, answer.ids, cfg=cfg.cti)
    cci_rows: list[list[float]] = []
    if n_docs > 1:
        input_ids, positions = model_inputs(lm, prep.tokens.ids, answer.ids)
        everything = tuple(range(len(answer.ids)))
        cci = compute_cci(lm, input_ids, answer.ids, positions, everything, cti.contextless_top,
                          prep.tokens.context_positions, cfg=cfg.cci, graph=graph)
        cci_rows = [[float(f"{v:.6g}") for v in row] for row in cci.scores]
    tokens = [text[a:b] or lm.tokenizer.decode([t]) for (a, b), t in zip(answer.offsets, answer.ids)]
    return ItemScores(key=item.key, tokens=tokens, cti=[float(s) for s in cti.scores], cci=cci_rows,
                      context_docs=_run_length(prep.tokens.context_docs), n_docs=n_docs,
                      truncated_docs=list(prep.prompt.truncated_docs))


def score_items(
    model: Any | Callable[[], Any],
    items: Sequence[XorItem],
    *,
    config: MirageConfig | None = None,
    store: Any = None,
    progress: Callable[[Iterable, int, str], Iterable] | None = None,
) -> tuple[dict[str, ItemScores], list[BadRow]]:
    """Scores of every item, running the model only for keys not already in ``store`` (a ResumableJSONL of
    :class:`ItemScores` records, appended item by item). ``model`` is a Mirage, or a function returning one, called
    only if something needs to run. Items the pipeline rejects come back as BadRow."""
    scores = scores_from_records(store.records()) if store is not None else {}
    todo: dict[str, XorItem] = {}
    for item in items:
        if item.key not in scores and owns(store, item.key):
            todo.setdefault(item.key, item)
    failed: list[BadRow] = []
    if not todo:
        return scores, failed
    mirage = resolve_mirage(model)
    iterable: Iterable = todo.values()
    if progress is not None:
        iterable = progress(iterable, len(todo), "xor-attriqa")
    for item in iterable:
        try:
            res = score_item(mirage, item, config=config)
        except InputError as err:
            failed.append(BadRow(file=item.file, line=item.line, error=f"rejected by the pipeline: {err}"))
            continue
        scores[item.key] = res
        if store is not None:
            store.write(res.to_dict())
    return scores, failed


