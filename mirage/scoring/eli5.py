"""ELI5 (ALCE format): generate answers, keep the model's self-citations, attribute the same text with MIRAGE, and
compare the two citation sets: how often sentences and answers go uncited (the paper's Table 1), ALCE citation
recall/precision with an NLI judge (Table 3), quality by sentence length (Figure 6), and their mutual agreement.

    data = load_alce("eli5_eval_bm25_top100.json", limit=10)
    results = attribute_items(mirage, data.items, seeds=[1], ndocs=5)
    report = evaluate_eli5(data.items, results, seeds=[1], ndocs=5, judge=None)
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mirage.attribution.citations import CITATION_SOURCES
from mirage.attribution.results import AttributionResult
from mirage.attribution.serialization import JSONRecord
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.runs.lazy import resolve_mirage
from mirage.runs.progress import Progress
from mirage.runs.sharding import owns
from mirage.runs.store import ResumableJSONL, content_key
from mirage.scoring import metrics as M
from mirage.scoring.rows import BadRow, RawRow, RowError, parse_rows, read_rows, require

__all__ = ["ALCEData", "ALCEItem", "ELI5Report", "attribute_items", "evaluate_eli5", "load_alce", "load_judgments",
           "parse_alce_row"]

#: Sentence-length bins (words) of the paper's Figure 6: (low, high) inclusive, high None = no bound.
LENGTH_BINS: tuple[tuple[int, int | None], ...] = ((1, 10), (11, 20), (21, 30), (31, 40), (41, None))
ELI5_REPORT_FORMAT = 1
#: ``hf:`` sources name a file of the ALCE data on the hub: ``hf:princeton-nlp/ALCE-data/eli5_eval_bm25_top100.json``.
HUB_PREFIX = "hf:"


# -- data -------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ALCEItem:
    """One ALCE question with its retrieved documents (title, text) and, where given, the reference answer/claims."""

    file: str
    line: int
    question: str
    docs: tuple[tuple[str, str], ...]
    answer: str | None = None
    claims: tuple[str, ...] = ()

    def docs_dicts(self, ndocs: int | None = None) -> list[dict[str, str]]:
        return [{"title": t, "text": x} for t, x in self.docs[:ndocs]]

    def key(self, *, seed: int, ndocs: int | None) -> str:
        return content_key({"question": self.question, "docs": self.docs_dicts(ndocs), "seed": seed})


@dataclass(frozen=True)
class ALCEData:
    items: tuple[ALCEItem, ...]
    bad_rows: tuple[BadRow, ...]


def parse_alce_row(raw: RawRow, *, file: str) -> ALCEItem:
    """Validate one ALCE row: ``question`` and ``docs`` (``title``, ``text``) required; ``answer``, ``claims`` kept."""
    row = raw.data
    question = require(row, "question", str)
    docs_raw = require(row, "docs", list)
    docs = []
    for i, d in enumerate(docs_raw):
        if not isinstance(d, dict):
            raise RowError(f"docs[{i}] must be an object with 'title' and 'text'")
        text = d.get("text")
        if not isinstance(text, str) or not text.strip():
            raise RowError(f"docs[{i}].text is missing or empty")
        title = d.get("title") or ""
        if not isinstance(title, str):
            raise RowError(f"docs[{i}].title must be a string")
        docs.append((title.strip(), text.strip()))
    answer = row.get("answer")
    claims = row.get("claims") or ()
    if isinstance(claims, str):
        claims = (claims,)
    return ALCEItem(file=file, line=raw.line, question=question.strip(), docs=tuple(docs),
                    answer=answer if isinstance(answer, str) else None, claims=tuple(str(c) for c in claims))


def _hub_rows(source: str) -> list[Any]:
    """Rows of an ALCE file on the hub through ``datasets`` (needs network access and the package)."""
    spec = source[len(HUB_PREFIX):]
    repo, _, filename = spec.rpartition("/") if spec.count("/") >= 2 else (spec, "", "")
    if not filename:
        raise InputError(f"{source}: give hf:OWNER/REPO/FILE, "
                         "e.g. hf:princeton-nlp/ALCE-data/eli5_eval_bm25_top100.json")
    try:
        from datasets import load_dataset
    except ImportError as err:
        raise InputError(f"{source}: reading ALCE from the hub needs the 'datasets' package "
                         "(pip install 'mirage-rag[datasets]'), or download the file and give its path.") from err
    try:
        ds = load_dataset(repo, data_files=filename, split="train")
    except Exception as err:  # the hub or the file cannot be reached: tell the user, do not crash with a trace
        raise InputError(f"{source}: could not load from the hub ({type(err).__name__}: {err}); "
                         "download the file and give its path.") from err
    return [dict(r) for r in ds]


def load_alce(source: str | Path, *, limit: int | None = None, skip: int = 0) -> ALCEData:
    """Read ALCE-format items from a local JSON list / JSONL file, or ``hf:OWNER/REPO/FILE`` through ``datasets``.

    Bad rows are returned with their line number (row number for hub data), not raised. ``limit``: first N rows (after
    the first ``skip``).
    """
    source_str = str(source)
    if source_str.startswith(HUB_PREFIX):
        rows: Iterable[RawRow | BadRow] = (RawRow(index=i, line=i + 1, data=r)
                                           for i, r in enumerate(_hub_rows(source_str)))
    else:
        path = Path(source)
        if not path.exists():
            raise InputError(f"{path} does not exist; give an ALCE-format JSON file (or hf:OWNER/REPO/FILE).")
        rows = read_rows(path)
    items, bad = parse_rows(rows, lambda raw: parse_alce_row(raw, file=source_str), file=source_str, limit=limit,
                            skip=skip)
    return ALCEData(items=tuple(items), bad_rows=tuple(bad))


# -- model stage ------------------------------------------------------------------------------------------------------


def attribute_items(
    model: Any | Callable[[], Any],
    items: Sequence[ALCEItem],
    *,
    seeds: Sequence[int],
    ndocs: int | None,
    config: MirageConfig | None = None,
    store: Any = None,
    progress: Progress | None = None,
) -> tuple[dict[str, AttributionResult], list[BadRow]]:
    """Generate and attribute every (item, seed), skipping keys already in ``store`` (a ResumableJSONL, appended item
    by item). The answer is generated with the config's prompt; its self-citations are kept in the result's
    sentences and MIRAGE attributes the same text with the citations stripped. ``model``: a Mirage or a function
    returning one, called only if something needs to run. Rejected items (e.g. an empty answer) come back as BadRow.
    """
    results: dict[str, AttributionResult] = {}
    if store is not None:
        for rec in store.records():
            if isinstance(rec, dict) and "result" in rec:
                results[rec["key"]] = AttributionResult.from_dict(rec["result"])
    todo = [(item, seed) for seed in seeds for item in items
            if item.key(seed=seed, ndocs=ndocs) not in results and owns(store, item.key(seed=seed, ndocs=ndocs))]
    failed: list[BadRow] = []
    if not todo:
        return results, failed
    mirage = resolve_mirage(model)
    base = config or mirage.config
    iterable: Iterable = todo
    if progress is not None:
        iterable = progress(todo, len(todo), "eli5")
    for item, seed in iterable:
        cfg = base.replace(generation={"seed": seed})
        key = item.key(seed=seed, ndocs=ndocs)
        try:
            res = mirage.attribute_item({"question": item.question, "docs": item.docs_dicts(ndocs)}, config=cfg)
        except InputError as err:
            failed.append(BadRow(file=item.file, line=item.line, error=f"seed {seed}: {err}"))
            continue
        results[key] = res
        if store is not None:
            store.write({"key": key, "seed": seed, "line": item.line, "result": res.to_dict()})
    return results, failed


# -- evaluation -------------------------------------------------------------------------------------------------------


def _bin_label(low: int, high: int | None) -> str:
    return f"{low}-{high}" if high is not None else f">{low - 1}"


def _bin_of(n_words: int, bins: Sequence[tuple[int, int | None]]) -> str | None:
    for low, high in bins:
        if n_words >= low and (high is None or n_words <= high):
            return _bin_label(low, high)
    return None


def _citations(res: AttributionResult, source: str) -> list[list[int]]:
    return res.self_citations if source == "self" else res.mirage_citations


def source_summary(results: Sequence[AttributionResult], source: str, judge: M.NLIJudge | None, *,
                   at_most: int = 3) -> tuple[dict[str, Any], list[list[M.SentenceCitationScore]]]:
    """Citation counts (and, with a judge, ALCE quality) of one citation source over the answers."""
    sentences = [c for res in results for c in _citations(res, source)]
    uncited_answers = sum(1 for res in results if not any(_citations(res, source)))
    summary: dict[str, Any] = {
        "answers": len(results),
        "sentences": len(sentences),
        "no_citation_sentences_pct": M.percent(sum(1 for c in sentences if not c), len(sentences)),
        "no_citation_answers_pct": M.percent(uncited_answers, len(results)),
        "citations_per_sentence": (sum(len(c) for c in sentences) / len(sentences)) if sentences else None,
    }
    per_answer: list[list[M.SentenceCitationScore]] = []
    if judge is not None:
        for res in results:
            per_answer.append([M.score_sentence(s.text, cites, res.docs, judge, at_most=at_most)
                               for s, cites in zip(res.sentences, _citations(res, source))])
        q = M.citation_quality(per_answer)
        summary.update(citation_recall=q.recall, citation_precision=q.precision, citation_f1=q.f1)
    return summary, per_answer


def length_bins(results: Sequence[AttributionResult], per_source: dict[str, list[list[M.SentenceCitationScore]]],
                bins: Sequence[tuple[int, int | None]] = LENGTH_BINS) -> dict[str, Any]:
    """Per sentence-length bin: sentence count, % cited per source and, with judgments, recall and precision (%)."""
    out: dict[str, Any] = {"bins": [_bin_label(lo, hi) for lo, hi in bins], "sentences": {}}
    for source in CITATION_SOURCES:
        cited: dict[str, list[int]] = {}
        rec: dict[str, list[int]] = {}
        prec: dict[str, list[int]] = {}
        for a, res in enumerate(results):
            for s, (sent, cites) in enumerate(zip(res.sentences, _citations(res, source))):
                label = _bin_of(len(sent.text.split()), bins)
                if label is None:
                    continue
                c = cited.setdefault(label, [0, 0])
                c[0] += bool(cites)
                c[1] += 1
                if per_source.get(source):
                    score = per_source[source][a][s]
                    r = rec.setdefault(label, [0, 0])
                    r[0] += score.supported
                    r[1] += 1
                    p = prec.setdefault(label, [0, 0])
                    p[0] += score.n_precise
                    p[1] += score.n_citations
        labels = out["bins"]
        out["sentences"] = [cited.get(lb, [0, 0])[1] for lb in labels]
        out.setdefault("cited_pct", {})[source] = [M.percent(*cited.get(lb, [0, 0])) for lb in labels]
        if per_source.get(source):
            out.setdefault("citation_recall", {})[source] = [M.percent(*rec.get(lb, [0, 0])) for lb in labels]
            out.setdefault("citation_precision", {})[source] = [M.percent(*prec.get(lb, [0, 0])) for lb in labels]
    return out


def evaluate_seed(results: Sequence[AttributionResult], judge: M.NLIJudge | None, *, at_most: int = 3,
                  bins: Sequence[tuple[int, int | None]] = LENGTH_BINS) -> dict[str, Any]:
    """Both sources' summaries, their agreement and the length bins for the answers of one seed."""
    out: dict[str, Any] = {}
    per_source: dict[str, list[list[M.SentenceCitationScore]]] = {}
    for source in CITATION_SOURCES:
        out[source], per_source[source] = source_summary(results, source, judge, at_most=at_most)
    a = [c for res in results for c in res.self_citations]
    b = [c for res in results for c in res.mirage_citations]
    n = [len(res.docs) for res in results for _ in res.sentences]
    out["agreement"] = asdict(M.citation_set_agreement(a, b, n))
    out["length_bins"] = length_bins(results, per_source, bins)
    return out


@dataclass
class ELI5Report(JSONRecord):
    """Self-citation beside MIRAGE: per seed, and mean / standard deviation over seeds of every number; the
    sentence-length bins pool the answers of all seeds."""

    mean: dict[str, Any]
    std: dict[str, Any]
    per_seed: dict[str, Any]
    length_bins: dict[str, Any]
    judge: str | None
    bad_rows: dict[str, Any]
    settings: dict[str, Any]
    versions: dict[str, str] = field(default_factory=dict)
    #: With ``--faithfulness``: mean drop/keep per citation method
    #: (:class:`mirage.scoring.faithfulness.FaithfulnessSummary`).
    faithfulness: dict[str, Any] | None = None
    format: int = ELI5_REPORT_FORMAT



def _over_seeds(per_seed: Sequence[dict[str, Any]], fn: Callable[[list[float]], float]) -> dict[str, Any]:
    """Combine the flat numbers of each seed's ``self``/``mirage``/``agreement`` blocks."""
    out: dict[str, Any] = {}
    for block in (*CITATION_SOURCES, "agreement"):
        out[block] = {}
        for name in per_seed[0][block] if per_seed else ():
            values = [s[block][name] for s in per_seed if isinstance(s[block].get(name), (int, float))]
            out[block][name] = fn(values) if values else None
    return out


def evaluate_eli5(
    items: Sequence[ALCEItem],
    results: dict[str, AttributionResult],
    *,
    seeds: Sequence[int],
    ndocs: int | None,
    judge: M.NLIJudge | None = None,
    at_most: int = 3,
    bad_rows: Sequence[BadRow] = (),
    settings: dict[str, Any] | None = None,
) -> ELI5Report:
    """The report over the items' results for each seed (items without a result are left out)."""
    if judge is not None and not isinstance(judge, M.CachedJudge):
        judge = M.CachedJudge(judge)
    per_seed = {}
    pooled: list[AttributionResult] = []
    for seed in seeds:
        got = [results[k] for k in (item.key(seed=seed, ndocs=ndocs) for item in items) if k in results]
        pooled += got
        per_seed[str(seed)] = evaluate_seed(got, judge, at_most=at_most)
    seeds_list = list(per_seed.values())
    mean = _over_seeds(seeds_list, statistics.fmean)
    std = _over_seeds(seeds_list, lambda v: statistics.pstdev(v) if len(v) > 1 else 0.0)
    bad = [{"file": b.file, "line": b.line, "error": b.error} for b in bad_rows]
    bins = evaluate_seed(pooled, judge, at_most=at_most)["length_bins"]  # judge decisions are cached: no new calls
    return ELI5Report(mean=mean, std=std, per_seed=per_seed, length_bins=bins, judge=getattr(judge, "name", None),
                      bad_rows={"count": len(bad), "rows": bad}, settings=dict(settings or {}))


def load_judgments(store: ResumableJSONL) -> dict[tuple[str, str], bool]:
    """Cached judge decisions from a judgments store of ``{"key", "premise", "hypothesis", "entails"}`` records."""
    out: dict[tuple[str, str], bool] = {}
    for rec in store.records():
        if isinstance(rec.get("premise"), str) and isinstance(rec.get("hypothesis"), str):
            out[(rec["premise"], rec["hypothesis"])] = bool(rec.get("entails"))
    return out
