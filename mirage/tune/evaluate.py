"""Does a (tuned) model cite? Generate answers to RAG items and measure their ``[n]`` self-citations.

    report = evaluate_citations(Mirage(load_tuned("out/sft/adapter")), examples, max_new_tokens=48)
    report.answers_cited          # share of answers with at least one citation of an existing document

Per answer: its self-citations per sentence (:func:`mirage.attribution.citations.parse_answer`), their union's precision
and recall against the documents labelled as supporting (where labels exist,
:func:`mirage.bias.metrics.citation_set_prf`) and whether the item's reference answer occurs in it
(:func:`mirage.bias.metrics.exact_match`). Greedy decoding with the inference prompt
(:meth:`mirage.pipeline.Mirage.prepare`).

With a ``judge`` (a :class:`mirage.config.MirageConfig`), mirage also attributes each generated answer on the same
model (what did the model that wrote it use?) and runs the faithfulness check
(:func:`mirage.scoring.faithfulness.faithfulness`) on its self-citations, mirage's citations and random sets of the same
sizes. The report then compares, over (answer, document) pairs, the self-citations and mirage's citations with the human
labels, and with each other (:class:`JudgeSummary`). With a ``store`` (a :class:`mirage.runs.store.ResumableJSONL`),
every finished answer is appended as it is done, keyed by the item's id, question and documents, and a rerun with the
same store and settings reuses it (a changed item is answered again). A store written by an earlier mirage (a
``{"header": …}`` first line) is converted once, its original kept beside it
(:func:`mirage.compat.convert_v0_answer_store`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import parse_answer
from mirage.attribution.generation import generate_answer
from mirage.attribution.serialization import JSONRecord, library_versions
from mirage.bias.metrics import exact_match, mean_citation_set_prf
from mirage.compat import RULE_ALIASES, convert_v0_answer_store
from mirage.config import ConfigError, MirageConfig
from mirage.data.inputs import InputError
from mirage.likelihood.classifier import shipped_model_spec
from mirage.runs.store import ResumableJSONL, content_key
from mirage.scoring import metrics
from mirage.scoring.faithfulness import FaithfulnessResult, FaithfulnessSummary, faithfulness, summarize_faithfulness
from mirage.tune.data import TrainingExample, answer_kind

if TYPE_CHECKING:
    from mirage.pipeline import Mirage
    from mirage.runs.progress import Progress

__all__ = ["CitationEval", "CitationMisses", "JudgeSummary", "citation_misses", "evaluate_citations", "judge_config",
           "judged_base", "passages_holding", "summarize_judge"]


def _pair_scores(counts: metrics.BinaryCounts) -> dict[str, float | None]:
    """Agreement, precision, recall, F1 and balanced accuracy (%) of pair-level counts."""
    return {"agreement": metrics.agreement(counts), "precision": metrics.precision(counts),
            "recall": metrics.recall(counts), "f1": metrics.f1(counts),
            "balanced_accuracy": metrics.balanced_accuracy(counts)}


@dataclass
class JudgeSummary(JSONRecord):
    """Self-citations beside mirage's citations of the same answers (``rule``: mirage's citation rule).

    Over (answer, document) pairs of the ``n_labelled`` answers with human labels, a document counts as cited when
    any sentence cites it: ``self_vs_labels`` and ``mirage_vs_labels`` hold agreement, precision, recall, F1 and
    balanced accuracy (%) against the labels (which judge the reference answer, so for a generated answer they are an
    approximation); ``first_vs_labels``, the same for the positional baseline that cites document 1 of every answer
    (a model that learned only "cite [1]" scores this). ``self_vs_mirage``: over the pairs of every attributed answer,
    ``pair_agreement`` (%) and Cohen's ``kappa`` of the two citation decisions, and ``sentence_jaccard``, the mean
    per-sentence Jaccard index of the two sets (1 where both leave a sentence uncited). ``faithfulness``: the drop/keep
    summary (:class:`mirage.scoring.faithfulness.FaithfulnessSummary`) of self-citations, mirage's citations and random
    sets of the same sizes. ``errors``: answers mirage could not attribute (listed per answer)."""

    rule: str
    n_attributed: int
    n_labelled: int
    self_vs_labels: dict[str, float | None]
    mirage_vs_labels: dict[str, float | None]
    first_vs_labels: dict[str, float | None]
    self_vs_mirage: dict[str, float | None]
    faithfulness: dict[str, Any]
    errors: int = 0

    def to_text(self) -> str:
        def num(v: float | None, digits: int = 1) -> str:
            return "—" if v is None else f"{v:.{digits}f}"

        sl, ml, sm, fl = self.self_vs_labels, self.mirage_vs_labels, self.self_vs_mirage, self.first_vs_labels
        lines = [(f"judge (mirage, rule {self.rule}): {self.n_attributed} answers attributed, {self.n_labelled} "
                 f"with labels, {self.errors} errors"),
                 "vs labels       agreement     F1  bal.acc.",
                 f"self-citation   {num(sl['agreement']):>9} {num(sl['f1']):>6} {num(sl['balanced_accuracy']):>8}",
                 f"mirage          {num(ml['agreement']):>9} {num(ml['f1']):>6} {num(ml['balanced_accuracy']):>8}",
                 (f"cite [1] always  {num(fl['agreement']):>8} {num(fl['f1']):>6} "
                  f"{num(fl['balanced_accuracy']):>8}"),
                 (f"self vs mirage: pair agreement {num(sm['pair_agreement'])} %, kappa {num(sm['kappa'], 3)}, "
                 f"sentence Jaccard {num(sm['sentence_jaccard'], 3)}"),
                 FaithfulnessSummary.from_dict(self.faithfulness).to_text()]
        return "\n".join(lines)


@dataclass
class CitationMisses(JSONRecord):
    """Where the missed citations went: of the ``n_checked`` answers that cite something and whose item has a
    passage labelled as supporting, the ``n_missed`` that cite none of those passages, by where the answer's own
    words are (``exact_match``'s normalised containment, the generated answer looked for in each passage):

    - ``from_cited``: a passage it cites holds them. The model answered from that passage and cited it; the labels
      judge the reference answer, so the miss is in the answer (another passage's fact or wording), not in the
      citation following it;
    - ``elsewhere``: only passages it does not cite hold them (the citation missed the passage it answered from);
    - ``nowhere``: no passage holds them (an answer in the model's own words, or made up);
    - ``yes_no``: the answer is yes or no (no words of a passage to look for).

    ``first_supports``: the misses whose item has passage 1 among its supporting ones (the rows cite-[1] gets
    right); ``ids``: the item ids of each group."""

    n_checked: int
    n_missed: int
    from_cited: int
    elsewhere: int
    nowhere: int
    yes_no: int
    first_supports: int
    ids: dict[str, list[str]] = field(default_factory=dict)

    def to_text(self) -> str:
        return (f"misses: {self.n_missed} of {self.n_checked} cited answers name no supporting passage "
                f"({self.first_supports} where passage 1 supports); the answer's words are in a cited passage in "
                f"{self.from_cited}, only in uncited ones in {self.elsewhere}, in none in {self.nowhere}; "
                f"{self.yes_no} yes/no")


def passages_holding(answer: str, docs: Sequence[dict[str, str]]) -> list[int]:
    """The 1-based passages whose text holds ``answer`` (its citation marks removed), normalised as
    :func:`~mirage.bias.metrics.exact_match` compares them; empty for an answer without words."""
    text = parse_answer(answer, len(docs)).text
    return [i for i, doc in enumerate(docs, start=1) if exact_match(doc.get("text", ""), [text])]


def citation_misses(answers: Sequence[dict[str, Any]], examples: Sequence[TrainingExample]) -> CitationMisses:
    """:class:`CitationMisses` of ``answers`` (rows of :func:`evaluate_citations`, in the order of ``examples``)."""
    groups: dict[str, list[str]] = {"from_cited": [], "elsewhere": [], "nowhere": [], "yes_no": []}
    n_checked = first = 0
    for row, ex in zip(answers, examples, strict=True):
        supporting = set(row.get("supporting") or ())
        if not supporting or not row["cited"]:
            continue
        n_checked += 1
        if supporting & set(row["cited"]):
            continue
        first += 1 in supporting
        if answer_kind(parse_answer(row["answer"], len(ex.docs)).text.strip()) == "yes/no":
            groups["yes_no"].append(row["id"])
            continue
        holding = passages_holding(row["answer"], ex.docs)
        group = "from_cited" if set(holding) & set(row["cited"]) else "elsewhere" if holding else "nowhere"
        groups[group].append(row["id"])
    return CitationMisses(n_checked=n_checked, n_missed=sum(map(len, groups.values())),
                          **{name: len(ids) for name, ids in groups.items()}, first_supports=first, ids=groups)


@dataclass
class CitationEval(JSONRecord):
    """Self-citation of one model over items: the share of answers citing at least one existing document
    (``answers_cited``), of sentences doing so (``sentences_cited``), the number of ids naming no document,
    mean precision/recall/F1 of the cited set against the supporting documents (over the items with at least one;
    the labels judge the annotated answer, so for a generated answer they are an approximation), the
    share of answers holding the reference answer (``exact_match``), the seconds per answer, every answer, and
    where the citations that name no supporting passage went (``misses``, :class:`CitationMisses`)."""

    model: str
    n_answers: int
    answers_cited: float
    sentences_cited: float
    invalid_citations: int
    precision: float | None
    recall: float | None
    f1: float | None
    exact_match: float | None
    seconds_per_answer: float
    max_new_tokens: int
    answers: list[dict[str, Any]] = field(default_factory=list)
    judge: JudgeSummary | None = None
    versions: dict[str, str] = field(default_factory=dict)
    misses: CitationMisses | None = None
    #: the command that wrote the report (``mirage tune eval …``), where one did
    command: str | None = None

    def to_text(self) -> str:
        def pct(v: float | None) -> str:
            return "—" if v is None else f"{100 * v:.1f}%"

        first = mean_citation_set_prf(self.answers, cite_first=True)
        return (f"{self.model}: {self.n_answers} answers; cited {pct(self.answers_cited)} of answers, "
                f"{pct(self.sentences_cited)} of sentences; {self.invalid_citations} invalid ids; P/R/F1 "
                f"{pct(self.precision)} / {pct(self.recall)} / {pct(self.f1)} (cite [1] on the same answers: "
                f"{' / '.join(pct(v) for v in first)}); exact match {pct(self.exact_match)}; "
                f"{self.seconds_per_answer:.2f} s per answer"
                + ("" if self.misses is None or not self.misses.n_missed else "\n" + self.misses.to_text())
                + ("" if self.judge is None else "\n" + self.judge.to_text()))


def judged_base(model: str) -> str:
    """The model whose shipped classifier judges ``model``'s answers by default: the base of a tuned model named
    ``BASE+ADAPTER`` or of an adapter shipped by name (``smollm2-135m-cite-follow`` -> ``smollm2-135m-instruct``),
    else ``model`` itself (a fully fine-tuned model's folder has no shipped classifier)."""
    from mirage.attribution.models import embedded_adapters

    name = model.split("+", 1)[0]
    shipped = embedded_adapters().get(name)
    return shipped.base if shipped is not None else name


def judge_config(config: MirageConfig, base_model: str, *, rule: str | None = None,
                 learned_model: str | None = None) -> MirageConfig:
    """mirage's config as the judge of a (tuned) model's answers. By default the learned citation rule with the
    classifier shipped for ``base_model`` where one ships (mirage's most accurate rule on XOR-AttriQA), else
    ``config``. ``rule`` chooses the rule (``reference``, ``likelihood`` or a registered one), so both rules can
    judge the same answers; ``likelihood`` takes ``learned_model`` (a ``learned.json`` or ``shipped:MODEL``), else
    the classifier shipped for ``base_model``, else a one-line ConfigError naming the flag. A classifier was fitted
    on one model's passage likelihoods: applied to a tuned model's, it is that model's judge only approximately."""
    if rule is None:
        if learned_model is not None:
            raise ConfigError("--judge-learned-model goes with --judge-rule likelihood.")
        shipped = shipped_model_spec(base_model)  # shipped:NAME, so records never hold this install's folder
        if shipped is None:
            return config
        return config.replace(aggregation={"rule": "likelihood", "learned_model": shipped})
    rule = RULE_ALIASES.get(rule, rule)
    if rule != "likelihood":
        if learned_model is not None:
            raise ConfigError(f"--judge-learned-model goes with --judge-rule likelihood, not {rule!r}.")
        return config.replace(aggregation={"rule": rule})
    spec = learned_model or shipped_model_spec(base_model)
    if spec is None:
        raise ConfigError(f"--judge-rule likelihood: no classifier ships for {base_model!r}; give "
                          "--judge-learned-model shipped:MODEL (the classifier of the model it was tuned from) or "
                          "a learned.json.")
    return config.replace(aggregation={"rule": "likelihood", "learned_model": spec})


def _answer_key(ex: TrainingExample) -> str:
    """The store key of an example's answer: what the answer depends on besides the settings (id, question,
    documents), so an item whose documents change is answered again."""
    return content_key({"id": ex.id, "question": ex.question, "docs": ex.docs})


#: The fields a store adds to each answer row; the report's answers leave them out.
_STORE_FIELDS = ("key", "settings")

def judge_answer(mirage: Mirage, ex: TrainingExample, answer: str, judge: MirageConfig) -> dict[str, Any]:
    """mirage's citations of ``answer`` (per sentence and their union) on ``mirage``'s model with the ``judge``
    config, and the faithfulness check of its sets; ``judge_error`` instead when mirage cannot attribute it."""
    import torch

    raw = {"id": ex.id, "question": ex.question, "docs": ex.docs, "output": answer}
    try:
        with torch.inference_mode(False), torch.enable_grad():
            res = mirage.attribute_item(raw, config=judge)
            check = faithfulness(mirage, res)
    except InputError as err:
        return {"judge_error": str(err)}
    per_sentence = [list(s.mirage_citations) for s in res.sentences]
    return {"mirage_citations": per_sentence, "mirage_cited": sorted({d for ids in per_sentence for d in ids}),
            "self_citations_attributed": [list(s.self_citations) for s in res.sentences],
            "faithfulness": check.to_dict()}


def summarize_judge(answers: Sequence[dict[str, Any]], n_docs: Sequence[int], rule: str) -> JudgeSummary:
    """The :class:`JudgeSummary` of judged ``answers`` (``n_docs[i]``: answer i's number of documents)."""
    from mirage.tune.reward import agreement_score

    self_lab: list[bool] = []
    mir_lab: list[bool] = []
    first_lab: list[bool] = []
    labels: list[bool] = []
    self_all: list[bool] = []
    mir_all: list[bool] = []
    jaccards: list[float] = []
    results = []
    n_labelled = errors = 0
    for row, k in zip(answers, n_docs):
        if "mirage_cited" not in row:
            errors += "judge_error" in row
            continue
        own, theirs = set(row["cited"]), set(row["mirage_cited"])
        self_all += [d in own for d in range(1, k + 1)]
        mir_all += [d in theirs for d in range(1, k + 1)]
        jaccards.append(agreement_score(row["self_citations_attributed"], row["mirage_citations"]))
        results.append(FaithfulnessResult.from_dict(row["faithfulness"]))
        if row["supporting"] is not None:
            n_labelled += 1
            gold = set(row["supporting"])
            labels += [d in gold for d in range(1, k + 1)]
            self_lab += [d in own for d in range(1, k + 1)]
            mir_lab += [d in theirs for d in range(1, k + 1)]
            first_lab += [d == 1 for d in range(1, k + 1)]
    kappa = None
    if self_all and len(set(self_all)) + len(set(mir_all)) > 2:
        from sklearn.metrics import cohen_kappa_score

        kappa = float(cohen_kappa_score(self_all, mir_all))
    agree = metrics.agreement(metrics.BinaryCounts.of(self_all, mir_all)) if self_all else None
    return JudgeSummary(
        rule=rule, n_attributed=len(results), n_labelled=n_labelled,
        self_vs_labels=_pair_scores(metrics.BinaryCounts.of(self_lab, labels)),
        mirage_vs_labels=_pair_scores(metrics.BinaryCounts.of(mir_lab, labels)),
        first_vs_labels=_pair_scores(metrics.BinaryCounts.of(first_lab, labels)),
        self_vs_mirage={"pair_agreement": agree, "kappa": kappa,
                        "sentence_jaccard": metrics.mean_or_none(jaccards)},
        faithfulness=summarize_faithfulness(results).to_dict(), errors=errors)


def evaluate_citations(mirage: Mirage, examples: Sequence[TrainingExample], *, max_new_tokens: int = 48,
                       progress: Progress | None = None, judge: MirageConfig | None = None,
                       store: str | Path | None = None) -> CitationEval:
    """Generate a greedy answer (at most ``max_new_tokens``) to each example's question and documents with
    ``mirage``'s model and prompt, and measure its self-citations (see :class:`CitationEval`); with ``judge``, also
    mirage's citations of each answer and the faithfulness check (:class:`JudgeSummary`); with ``store``, reuse
    the answers stored there and append each new one as it is done (:class:`mirage.runs.store.ResumableJSONL`, keyed by
    the example's id, question and documents, refusing a file made with another model, prompt, ``max_new_tokens`` or
    judge rule; an earlier mirage's file is converted once, see :func:`mirage.compat.convert_v0_answer_store`)."""
    cfg = mirage.config.replace(generation={"max_new_tokens": max_new_tokens, "do_sample": False})
    settings = {"model": mirage.lm.name, "prompt": cfg.to_dict()["prompt"], "max_new_tokens": max_new_tokens,
                "judge": judge.aggregation.rule if judge is not None else None}
    base = judged_base(mirage.lm.name)  # a tuned model's default judge is its base model's classifier
    if judge is not None and judge.aggregation.rule == "likelihood" and judge.aggregation.learned_model is not None \
            and judge.aggregation.learned_model != shipped_model_spec(base):
        settings["judge_model"] = judge.aggregation.learned_model  # another classifier: other judged citations
    out: ResumableJSONL | None = None
    done: dict[str, dict[str, Any]] = {}
    if store is not None:
        keys: dict[str, set[str]] = {}
        for ex in examples:
            keys.setdefault(ex.id, set()).add(_answer_key(ex))
        convert_v0_answer_store(Path(store), settings, keys)
        out = ResumableJSONL(store, settings=settings)
        done = {r["key"]: {k: v for k, v in r.items() if k not in _STORE_FIELDS} for r in out.records()}
    answers: list[dict[str, Any]] = []
    loop: Iterable[TrainingExample] = progress(examples, len(examples), "generate") if progress else examples
    for ex in loop:
        key = _answer_key(ex)
        row = done.get(key)
        if row is None:
            prep = mirage.prepare(ex.rag_item(with_output=False), config=cfg, index=ex.id)
            t = time.perf_counter()
            gen = generate_answer(mirage.lm, prep.tokens.ids, cfg=cfg.generation)
            seconds = time.perf_counter() - t
            parsed = parse_answer(gen.text, len(ex.docs))
            reference = parse_answer(ex.output, len(ex.docs)).text if ex.output else ""
            row = {"id": ex.id, "lang": ex.lang, "answer": gen.text,
                   "cited": sorted({d for ids in parsed.citations for d in ids}), "supporting": ex.supporting,
                   "citations": [list(c) for c in parsed.citations],
                   "n_sentences": len(parsed.sentences), "invalid": sum(len(ids) for ids in parsed.invalid),
                   "exact_match": exact_match(parsed.text, [reference]) if reference else None,
                   "n_tokens": len(gen.ids), "seconds": round(seconds, 3)}
            if judge is not None:
                row.update(judge_answer(mirage, ex, gen.text, judge))
            if out is not None:
                out.write({"key": key, **row})
        answers.append(row)
    n = len(answers)
    n_sentences = sum(a["n_sentences"] for a in answers)
    precision, recall, f1 = mean_citation_set_prf(answers)
    matches = [float(a["exact_match"]) for a in answers if a["exact_match"] is not None]
    summary = None
    if judge is not None:
        summary = summarize_judge(answers, [len(ex.docs) for ex in examples], judge.aggregation.rule)
    return CitationEval(
        model=mirage.lm.name, n_answers=n, answers_cited=sum(bool(a["cited"]) for a in answers) / n if n else 0.0,
        sentences_cited=(sum(sum(bool(c) for c in a["citations"]) for a in answers) / n_sentences
                         if n_sentences else 0.0),
        invalid_citations=sum(a["invalid"] for a in answers),
        precision=precision, recall=recall, f1=f1, exact_match=metrics.mean_or_none(matches),
        seconds_per_answer=round(sum(a["seconds"] for a in answers) / n, 3) if n else 0.0,
        max_new_tokens=max_new_tokens, answers=answers, judge=summary, versions=library_versions(),
        misses=citation_misses(answers, examples))
