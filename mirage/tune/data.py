"""Training sets for citation fine-tuning: RAG items whose answer carries ``[n]`` citations, one JSON line each.

Two builders, one format (:class:`TrainingExample`, a JSON line that ``datasets.load_dataset("json", ...)`` and
``mirage attribute`` both read):

- **gold** (:func:`xor_examples`, :func:`eli5_demo_examples`): XOR-AttriQA ``train``/``val`` rows, the annotated
  answer with ``[i]`` on every passage the annotators marked as supporting it (on each of its sentences); and ALCE's
  ELI5 demos, whose answers are cited by hand. The ``fi`` and ``ru`` test splits are refused: they are the
  evaluation.
- **internals** (:func:`internals_examples`): answers the model generates itself, with the citations mirage
  attributes inserted per sentence (self-distillation: the model learns to say what its internals show it used).

Only the item is stored (question, documents, cited answer), never a rendered prompt: the SFT stage renders it with
the model's own prompt builder (:meth:`mirage.pipeline.Mirage.prepare`), so the training prompt is the inference
prompt of whichever model is tuned. Malformed rows are returned as :class:`~mirage.data.readers.BadRow` (file, line,
reason) and skipped.

    examples, bad = xor_examples("train.jsonl")
    write_examples(examples, "gold.jsonl")

Over 600 lines: the builders share one example format, its validation and its writer, and each builder is short;
the module is the format's one home.
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mirage.attribution.citations import citation_marks, parse_answer, strip_citations
from mirage.attribution.sentences import split_sentences
from mirage.attribution.serialization import JSONRecord
from mirage.config import MirageConfig
from mirage.data.inputs import InputError
from mirage.data.readers import BadRow, RawRow, read_rows, read_text
from mirage.runs.experiment import question_digest  # the key an adapter records its questions by
from mirage.runs.progress import Progress
from mirage.runs.store import ResumableJSONL, content_key, write_atomic
from mirage.scoring.eli5 import parse_alce_row
from mirage.scoring.rows import RowError, require
from mirage.scoring.xor_data import TextView, clean_query, load_xor_attriqa

if TYPE_CHECKING:
    from mirage.pipeline import Mirage

__all__ = ["BuildReport", "TrainingExample", "answer_kind", "as_asked", "build_gold", "cite_every_sentence",
           "eli5_demo_examples", "filler_documents", "insert_citations", "internals_cache", "internals_examples",
           "question_digest", "read_examples", "shuffle_documents", "source_label", "spread_positions",
           "trained_questions", "write_examples", "xor_examples", "yes_no_questions"]

#: Where an example comes from.
EXAMPLE_SOURCES = ("xor-attriqa", "eli5-demo", "internals")
#: XOR-AttriQA's test splits: the evaluation of the tuned model, never training data.
TEST_SPLITS = frozenset({"fi", "ru"})
_WORD = re.compile(r"[a-z]+")
#: Punctuation that closes a sentence: citation marks go before it (``… Helsinki [1].``), as in ALCE's answers.
_SENTENCE_STOPS = ".!?…"
_YES_NO = re.compile(r"\W*(yes|no)\b", re.IGNORECASE)
#: The longest answer :func:`yes_no_questions` turns into a yes/no question, in words.
YES_NO_MAX_WORDS = 8

#: English words an answer capitalises only because it starts a sentence ("In 1913.", "The Beatles."), written in
#: lower case inside the question ``Is it in 1913?`` (:func:`as_asked`); names keep their capitals.
_SENTENCE_START_WORDS = frozenset({
    "a", "an", "the", "in", "on", "at", "by", "from", "during", "since", "until", "before", "after", "about",
    "around", "of", "for", "with", "near", "over", "under", "between", "to", "into", "through", "across", "along",
    "some", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
})


def as_asked(answer: str) -> str:
    """``answer`` as the middle of a question (``Is it <answer>?``): its first word in lower case where it is an
    English word capitalised only because it started the answer (:data:`_SENTENCE_START_WORDS`, e.g. ``In 1913`` ->
    ``in 1913``); otherwise unchanged, names included."""
    first = answer.partition(" ")[0]
    if first.lower() in _SENTENCE_START_WORDS and first[:1].isupper() and first[1:].islower():
        return (first.lower() + answer[len(first):]).rstrip()
    return answer


def source_label(file: str | Path) -> str:
    """How a training example names the file its row came from: the dataset's name for a file of the data cache
    (``xor-attriqa-full:train``), never this machine's folders (:func:`~mirage.data.fetch.data_label`)."""
    from mirage.data.fetch import data_label

    return data_label(file) if str(file) else ""


@dataclass
class TrainingExample(JSONRecord):
    """One training item: a question, its documents and the answer to learn, ``output``, with its ``[n]`` marks.

    ``citations[i]``: the 1-based documents cited by sentence i of the answer (marks removed, as
    :func:`mirage.attribution.citations.parse_answer` splits it); ``supporting``: the documents human annotators marked
    as supporting the answer, where such labels exist (XOR-AttriQA), else None; ``file``/``line``: where the row came
    from; ``lang``: its query language, when known.
    """

    id: str
    source: str
    question: str
    docs: list[dict[str, str]]
    output: str
    citations: list[list[int]]
    supporting: list[int] | None = None
    file: str = ""
    line: int = 0
    lang: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def rag_item(self, *, with_output: bool = True) -> dict[str, Any]:
        """The item as :meth:`mirage.pipeline.Mirage.prepare` takes it (the cited answer as ``output``)."""
        item: dict[str, Any] = {"id": self.id, "question": self.question, "docs": self.docs}
        if with_output:
            item["output"] = self.output
        return item


@dataclass
class BuildReport(JSONRecord):
    """What a builder produced: examples per source, the malformed rows it skipped (``FILE:LINE: reason``) and the
    usable rows it left out on purpose, with why (``unsupported``: no passage labelled as supporting;
    ``uncited``: mirage cited nothing in the generated answer; ``duplicate``: the same question and answer as an
    example already kept)."""

    counts: dict[str, int]
    bad_rows: list[str]
    left_out: dict[str, int]

    def to_text(self) -> str:
        lines = [f"{n} examples from {source}" for source, n in self.counts.items()]
        lines += [f"left out ({why}): {n}" for why, n in self.left_out.items() if n]
        lines += [f"skipped {row}" for row in self.bad_rows]
        return "\n".join(lines)


# -- refusing the evaluation ------------------------------------------------------------------------------------------


def trained_questions(examples: Iterable[TrainingExample], earlier: Iterable[str] = ()) -> list[str]:
    """The sorted :func:`question_digest` of every question in ``examples`` and of ``earlier`` (the keys an adapter
    trained further was already trained on)."""
    return sorted({question_digest(ex.question) for ex in examples} | set(earlier))


def split_name(path: str | Path) -> str:
    """The split a data file holds, as :func:`mirage.scoring.xor_data.load_xor_attriqa` names it (the file name
    up to its first dot)."""
    return Path(path).name.split(".")[0]


def refuse_test_split(path: str | Path) -> None:
    """InputError when ``path`` names an XOR-AttriQA test split (``fi``, ``ru``): a file whose split name is, or has
    as a word, ``fi`` or ``ru`` (``fi.jsonl``, ``ru.nli-in-lang.json``, ``fi_sample.jsonl``)."""
    words = set(_WORD.findall(split_name(path).lower()))
    hit = sorted(words & TEST_SPLITS)
    if hit:
        raise InputError(f"{path}: the {hit[0]} split of XOR-AttriQA is the evaluation of the tuned model; training on "
                         "it is refused. Build the training set from train.jsonl and val.jsonl.")


def test_row_keys(folder: str | Path, *, text: TextView = "en", group: bool = False) -> set[str]:
    """Content keys (:attr:`XorItem.key`) of the test rows in ``folder``'s ``fi.jsonl`` and ``ru.jsonl``, where they
    exist: a training row with one of these keys is a test row under another file name."""
    keys: set[str] = set()
    for split in sorted(TEST_SPLITS):
        path = Path(folder) / f"{split}.jsonl"
        if path.is_file():
            keys.update(item.key for item in load_xor_attriqa(path, text=text, group=group).items)
    return keys


# -- citations in an answer -------------------------------------------------------------------------------------------


def insert_citations(text: str, spans: Sequence[tuple[int, int]], citations: Sequence[Sequence[int]]) -> str:
    """``text`` with ``[n]`` marks at the end of each sentence (``spans[i]``, character spans in ``text``): before
    its closing punctuation when it has some (``Helsinki [1].``), else after it (``1986 [1]``). A sentence with no
    citation is left as it is. :func:`mirage.attribution.citations.parse_answer` reads the marks back onto the same
    sentences."""
    if len(spans) != len(citations):
        raise ValueError(f"{len(spans)} sentence spans but {len(citations)} citation lists")
    out, last = [], 0
    for (start, end), ids in zip(spans, citations):
        if not ids:
            continue
        cut = end
        while cut > start and text[cut - 1] in _SENTENCE_STOPS + "\"'”’»)":
            cut -= 1
        if cut == start or not any(c in _SENTENCE_STOPS for c in text[cut:end]):
            cut = end  # no closing punctuation: the marks follow the sentence
        out.append(text[last:cut].rstrip())
        out.append(" " + citation_marks(ids))
        last = cut
    out.append(text[last:])
    return "".join(out)


def cite_every_sentence(text: str, citations: Sequence[int]) -> str:
    """``text`` with the same citations on each of its sentences
    (:func:`mirage.attribution.sentences.split_sentences`)."""
    spans = split_sentences(text) or [(0, len(text))]
    return insert_citations(text, spans, [list(citations)] * len(spans))


# -- gold: XOR-AttriQA ------------------------------------------------------------------------------------------------


def xor_examples(path: str | Path, *, text: TextView = "en", keep_unsupported: bool = False,
                 for_evaluation: bool = False, group_passages: bool = False,
                 ) -> tuple[list[TrainingExample], list[BadRow], int]:
    """Gold examples of an XOR-AttriQA train/val file (match or per-passage release), read by the scorer's loader
    (:func:`mirage.scoring.xor_data.load_xor_attriqa`): passages as untitled documents, the annotated answer cited
    on every sentence with the passages labelled as supporting it. Returns the examples, the malformed rows, and how
    many rows had no supporting passage (left out unless ``keep_unsupported``, then kept uncited).

    The query loses its stray trailing mark (`` [b]``, or `` [`` cut short). InputError for a test split (by its
    name, :func:`refuse_test_split`, or by content: a row equal to one of the ``fi.jsonl``/``ru.jsonl`` rows beside
    it). ``for_evaluation``: the items to evaluate a tuned model on, test splits allowed (never write them to a
    training set). ``group_passages``: the per-passage release's rows that answer one question with one answer
    become one item (:func:`mirage.scoring.xor_data.load_xor_attriqa`'s ``group``)."""
    if not for_evaluation:
        refuse_test_split(path)
    data = load_xor_attriqa(path, text=text, group=group_passages)
    test_keys = set() if for_evaluation else test_row_keys(Path(path).parent, text=text,
                                                                 group=group_passages)
    examples, unsupported = [], 0
    for item in data.items:
        if item.key in test_keys:
            raise InputError(f"{item.file}:{item.line}: this row is also a row of the fi/ru test split beside it; "
                             "training on the evaluation is refused. Remove it from the file.")
        supporting = [i + 1 for i, label in enumerate(item.labels) if label]
        if not supporting:
            unsupported += 1
            if not (keep_unsupported or for_evaluation):
                continue
        docs = [{"title": "", "text": p} for p in item.passages]
        output = cite_every_sentence(item.answer, supporting) if supporting else item.answer
        parsed = parse_answer(output, len(docs))
        examples.append(TrainingExample(
            id=f"xor-{split_name(item.file)}-{item.line}", source="xor-attriqa", question=clean_query(item.question),
            docs=docs, output=output, citations=[list(c) for c in parsed.citations], supporting=supporting,
            file=source_label(item.file), line=item.line, lang=item.lang))
    return examples, list(data.bad_rows), unsupported


def answer_kind(answer: str) -> str:
    """``"yes/no"`` for an answer that starts with yes or no, else ``"other"``. A yes/no answer copies no span of
    the passage it rests on, so a citer that follows extracted answers by their words may still cite yes/no answers
    by position; the follow report splits each citer's row by the kind of each item's reference answer."""
    return "yes/no" if _YES_NO.match(answer) else "other"


def yes_no_questions(examples: Sequence[TrainingExample], *, seed: int = 0) -> list[TrainingExample]:
    """Each supported XOR-AttriQA example of ``examples`` asked again as two yes/no questions: its question followed by
    ``Is it <its answer>?`` (:func:`as_asked`: ``Is it in 1913?``), answered ``Yes``, and followed by ``Is it
    <another question's answer>?`` (one of a question with the same first word where there is one, chosen with
    ``seed``), answered ``No``; both cite the passages labelled as supporting the answer, which say that it is and
    show that the other is not. ``meta["yes_no"]["asked"]`` keeps the answer as it was given.

    A yes/no answer copies no words of its passage, so gold data whose answers are extracted spans teaches citing
    by those words and leaves yes/no questions to position; XOR-AttriQA's ``train`` and ``val`` hold few supported
    yes/no answers. These constructed questions carry the same labels as the examples they come from (no new
    annotation); they are the annotated questions reworded, not yes/no questions as users ask them. Examples whose
    answer is already yes/no, has more than :data:`YES_NO_MAX_WORDS` words or more than one sentence, or cites
    nothing are not asked again; ALCE demos neither (no short answer)."""
    def plain(ex: TrainingExample) -> str:
        return " ".join(strip_citations(ex.output)[0].split()).rstrip(_SENTENCE_STOPS + " ")

    usable = [(ex, answer) for ex, answer in ((ex, plain(ex)) for ex in examples
                                              if ex.source == "xor-attriqa" and ex.supporting and ex.question.split())
              if answer_kind(answer) == "other" and 0 < len(answer.split()) <= YES_NO_MAX_WORDS
              and len(split_sentences(answer)) <= 1]
    out: list[TrainingExample] = []
    for ex, answer in usable:
        others = [(o, a) for o, a in usable if o.question != ex.question and a.lower() != answer.lower()]
        if not others:
            continue
        first = ex.question.split()[0].lower()
        alike = [(o, a) for o, a in others if o.question.split()[0].lower() == first]
        wrong = random.Random(f"{seed}:{content_key([ex.question, answer])}").choice(alike or others)[1]
        question = ex.question.rstrip()
        question = question if question.endswith("?") else question + "?"
        assert ex.supporting  # usable keeps only examples with supporting documents
        for reply, candidate in (("Yes", answer), ("No", wrong)):
            output = cite_every_sentence(reply, ex.supporting)
            out.append(TrainingExample(
                id=f"{ex.id}-{reply.lower()}", source=ex.source, question=f"{question} Is it {as_asked(candidate)}?",
                docs=ex.docs, output=output, citations=[list(c) for c in parse_answer(output, len(ex.docs)).citations],
                supporting=list(ex.supporting), file=ex.file, line=ex.line, lang=ex.lang,
                meta={**ex.meta, "yes_no": {"from": ex.id, "asked": candidate}}))
    return out


# -- gold: ALCE demos -------------------------------------------------------------------------------------------------


def _list_element_lines(text: str, key: str) -> list[int]:
    """1-based line where each element of the top-level list ``key`` of the JSON object ``text`` starts."""
    decoder = json.JSONDecoder()
    found = re.search(rf'"{re.escape(key)}"\s*:\s*\[', text)
    if not found:
        return []
    lines: list[int] = []
    pos = found.end()
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return lines
        lines.append(text.count("\n", 0, pos) + 1)
        try:
            _value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return lines


def eli5_demo_examples(path: str | Path) -> tuple[list[TrainingExample], list[BadRow]]:
    """Gold examples from ALCE's ELI5 prompt file (``eli5_alce_prompt.json``: an object whose ``demos`` each hold a
    ``question``, ``docs`` and a hand-cited ``answer``), the answer kept as written. A demo without an answer, with
    a citation of a document it does not have, or citing nothing is a BadRow (file, the line where the demo starts,
    reason). InputError when the file is not such an object."""
    text = read_text(path, what="ALCE prompt file (JSON object with 'demos')")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON ({err.msg} at line {err.lineno}); give ALCE's prompt file "
                         "(eli5_alce_prompt.json), a JSON object with 'demos'.") from None
    if not isinstance(data, dict) or not isinstance(data.get("demos"), list):
        raise InputError(f"{path} has no list 'demos'; give ALCE's prompt file (eli5_alce_prompt.json).")
    lines = _list_element_lines(text, "demos")
    examples, bad = [], []
    for i, demo in enumerate(data["demos"]):
        line = lines[i] if i < len(lines) else 1
        try:
            item = parse_alce_row(RawRow(index=i, line=line, data=demo), file=str(path))
            answer = require(demo, "answer", str).strip()
            parsed = parse_answer(answer, len(item.docs))
            invalid = sorted({d for ids in parsed.invalid for d in ids})
            if invalid:
                raise RowError(f"the answer cites document(s) {invalid}, but the demo has {len(item.docs)}")
            if not any(parsed.citations):
                raise RowError("the answer cites no document")
        except RowError as err:
            bad.append(BadRow(file=str(path), line=line, error=f"demos[{i}]: {err}"))
            continue
        examples.append(TrainingExample(
            id=f"eli5-demo-{i}", source="eli5-demo", question=item.question,
            docs=[{"title": t, "text": x} for t, x in item.docs], output=answer,
            citations=[list(c) for c in parsed.citations], file=source_label(path), line=line))
    return examples, bad


# -- internals: self-distillation -------------------------------------------------------------------------------------


def internals_examples(mirage: Mirage, items: Sequence[TrainingExample], *, config: MirageConfig | None = None,
                       progress: Progress | None = None,
                       cache: ResumableJSONL | None = None) -> tuple[list[TrainingExample], dict[str, int]]:
    """Self-distillation examples: for each item (its question and documents; its answer is not used), the model
    generates an answer (``config.generation``), mirage attributes it (:meth:`Mirage.attribute_item`), and the
    answer, its own marks removed, gets mirage's citations at the end of each sentence. An answer cut off by
    ``max_new_tokens`` loses its unfinished last sentence. Returns the examples and how many answers were left out,
    by reason: ``uncited`` (mirage cited none of its sentences), ``cut`` (its only sentence was unfinished).
    ``supporting`` labels are kept.

    ``cache``: a store (see :func:`internals_cache`) that gets each item's outcome as soon as it is known, keyed by
    the question and documents; items already in it are not computed again, so a run that dies loses nothing."""
    cfg = config or mirage.config
    known = {r["key"]: r for r in cache.records()} if cache is not None else {}
    examples: list[TrainingExample] = []
    left_out = {"uncited": 0, "cut": 0}
    loop: Iterable[TrainingExample] = progress(items, len(items), "internals") if progress else items
    for item in loop:
        key = content_key({"question": item.question, "docs": item.docs})
        record = known.get(key)
        if record is None:
            ex, reason = _internals_example(mirage, item, cfg)
            record = {"key": key, "id": item.id, "example": ex.to_dict() if ex else None, "left_out": reason}
            if cache is not None:
                cache.write_once(record)
                known[key] = record
        if record["example"] is None:
            left_out[record["left_out"]] += 1
            continue
        stored = TrainingExample.from_dict(record["example"])
        # the item's own identity (file, line, labels) wins over a cached copy of the same content
        examples.append(dataclasses.replace(stored, id=f"internals-{item.id}", supporting=item.supporting,
                                            file=source_label(item.file), line=item.line, lang=item.lang))
    return examples, left_out


def internals_cache(path: str | Path, mirage: Mirage, config: MirageConfig | None = None) -> ResumableJSONL:
    """The resumable store of :func:`internals_examples` at ``path``, bound to the model and pipeline settings that
    its answers depend on: a file made with another model or configuration is refused."""
    cfg = config or mirage.config
    return ResumableJSONL(path, settings={"model": mirage.lm.name, "config": cfg.to_dict()})


def _internals_example(mirage: Mirage, item: TrainingExample,
                       cfg: MirageConfig) -> tuple[TrainingExample | None, str | None]:
    """One item's self-distillation example, or None and why it was left out (``uncited``, ``cut``)."""
    res = mirage.attribute_item(item.rag_item(with_output=False), config=cfg, index=item.id)
    sentences = list(res.sentences)
    cut = len(res.tokens) >= cfg.generation.max_new_tokens
    last = res.answer[: sentences[-1].end] if sentences else ""
    if cut and sentences and not last.rstrip("\"'”’»)").endswith(tuple(_SENTENCE_STOPS)):
        sentences.pop()
        if not sentences:
            return None, "cut"
    citations = [list(s.mirage_citations) for s in sentences]
    if not any(citations):
        return None, "uncited"
    text = res.answer[: sentences[-1].end]
    output = insert_citations(text, [(s.start, s.end) for s in sentences], citations)
    parsed = parse_answer(output, len(item.docs))
    return TrainingExample(
        id=f"internals-{item.id}", source="internals", question=item.question, docs=item.docs, output=output,
        citations=[list(c) for c in parsed.citations], supporting=item.supporting, file=source_label(item.file),
        line=item.line, lang=item.lang,
        meta={"model": mirage.lm.name, "generation": res.config["generation"], "cut": cut,
              "raw_answer": res.raw_answer, "self_citations": [list(s.self_citations) for s in sentences]}), None


# -- augmentation: documents in other orders --------------------------------------------------------------------------

_MARK_RUN = re.compile(r"(?:\[\d+\])+")


def _renumber(output: str, new_id: dict[int, int]) -> str:
    """``output`` with every run of ``[n]`` marks renumbered by ``new_id`` (old 1-based id to new), in order."""
    def run(match: re.Match[str]) -> str:
        ids = [int(n) for n in re.findall(r"\d+", match.group(0))]
        return citation_marks(sorted(dict.fromkeys(new_id.get(i, i) for i in ids)))
    return _MARK_RUN.sub(run, output)


def shuffle_documents(examples: Sequence[TrainingExample], copies: int, *, seed: int = 0) -> list[TrainingExample]:
    """The examples followed by ``copies`` variants of each, its documents in another order (seeded, each variant
    a different permutation, never the original one) and its citations renumbered to follow them.

    Gold sets are positional: in XOR-AttriQA the first passage supports the answer in most rows, so a model tuned
    on them learns to cite ``[1]`` whatever it read. Shuffled copies keep the question, answer and cited passages
    but move the passages, so the citation can only be learnt from their content. An example with one document has
    no other order and is kept once."""
    if copies < 0:
        raise ValueError(f"copies must be >= 0, got {copies}")
    rng = random.Random(seed)
    out = list(examples)
    for ex in examples:
        n = len(ex.docs)
        if n < 2 or copies == 0:
            continue
        seen = {tuple(range(n))}
        budget = min(copies, math.factorial(n) - 1)
        while budget:
            order = list(range(n))
            rng.shuffle(order)
            if tuple(order) in seen:
                continue
            seen.add(tuple(order))
            budget -= 1
            new_id = {old + 1: new + 1 for new, old in enumerate(order)}
            output = _renumber(ex.output, new_id)
            out.append(TrainingExample(
                id=f"{ex.id}-order{len(seen) - 1}", source=ex.source, question=ex.question,
                docs=[ex.docs[old] for old in order], output=output,
                citations=[sorted(new_id[d] for d in c) for c in ex.citations],
                supporting=None if ex.supporting is None else sorted(new_id[d] for d in ex.supporting),
                file=ex.file, line=ex.line, lang=ex.lang,
                meta={**ex.meta, "document_order": [old + 1 for old in order]}))
    return out


def filler_documents(example: TrainingExample, pool: Iterable[TrainingExample]) -> list[dict[str, str]]:
    """Passages of ``pool``'s other questions that ``example`` does not hold, in one fixed order (by text): the
    distractors that fill an item with fewer documents than a presentation needs. They answer other questions, so
    they support nothing in ``example``'s answer."""
    own = {doc["text"] for doc in example.docs}
    return sorted({doc["text"]: doc for other in pool if other.question != example.question
                   for doc in other.docs if doc["text"] not in own}.values(), key=lambda d: d["text"])


def spread_positions(examples: Sequence[TrainingExample], *, k: int = 5, copies: int | None = None, seed: int = 0,
                     pool: Sequence[TrainingExample] | None = None) -> list[TrainingExample]:
    """Training data that cannot be solved by position: each example presented with ``k`` documents (its own, then
    passages of ``pool``'s other questions to fill, :func:`filler_documents`), ``copies`` times (default ``k``),
    with its first supporting passage at position 1, 2, …, ``k`` in turn (cycling from a seeded start when
    ``copies < k``), the other documents shuffled, and the citations renumbered to follow them.

    Over a set, every position holds the supporting passage equally often, so "cite ``[1]``" earns nothing. An
    example without a supporting passage (its answer cites nothing) is presented ``copies`` times in shuffled
    orders and keeps citing nothing. An example with more than ``k`` documents keeps its supporting ones and the
    first others (an ALCE demo, without labels, keeps the documents it cites). ``meta["document_order"]`` records each
    document's origin (its 1-based number in the example, or 0 for a filler)."""
    if k < 2:
        raise InputError(f"--spread-positions must be at least 2, got {k}")
    copies = k if copies is None else copies
    if copies < 1:
        raise ValueError(f"copies must be >= 1, got {copies}")
    out: list[TrainingExample] = []
    for ex in examples:
        rng = random.Random(f"{seed}:{content_key([ex.question, ex.docs, ex.output])}")
        cited = sorted({d for c in ex.citations for d in c})
        supporting = sorted(ex.supporting) if ex.supporting is not None else cited
        anchors = sorted(set(supporting) | set(cited))
        if len(anchors) > k:
            raise ValueError(f"{ex.id}: {len(anchors)} supporting or cited documents do not fit {k} positions; "
                             "give a larger k")
        others = [i for i in range(1, len(ex.docs) + 1) if i not in anchors]
        rng.shuffle(others)
        keep = anchors + others[: k - len(anchors)]
        n_fill = k - len(keep)
        candidates = filler_documents(ex, examples if pool is None else pool) if n_fill else []
        if len(candidates) < n_fill:
            raise InputError(f"{ex.id}: {len(ex.docs)} documents and {len(candidates)} passages of other questions "
                             f"cannot fill {k} positions; give more rows or a smaller --spread-positions")
        fillers = rng.sample(candidates, n_fill)
        start = rng.randrange(k)
        for copy in range(copies):
            slots: list[int] = [i for i in keep if i not in supporting[:1]] + [0] * n_fill
            rng.shuffle(slots)
            if supporting:
                slots.insert((start + copy) % k, supporting[0])
            filler_iter = iter(fillers)
            docs = [ex.docs[i - 1] if i else next(filler_iter) for i in slots]
            new_id = {old: new for new, old in enumerate(slots, start=1) if old}
            output = _renumber(ex.output, new_id)
            out.append(TrainingExample(
                id=f"{ex.id}-spread{copy}", source=ex.source, question=ex.question, docs=docs, output=output,
                citations=[sorted(new_id[d] for d in c if d in new_id) for c in ex.citations],
                supporting=None if ex.supporting is None else sorted(new_id[d] for d in ex.supporting if d in new_id),
                file=ex.file, line=ex.line, lang=ex.lang, meta={**ex.meta, "document_order": slots}))
    return out


# -- files ------------------------------------------------------------------------------------------------------------


def parse_example(raw: RawRow, *, file: str) -> TrainingExample:
    """One row of a training file; RowError naming the field when it cannot be used."""
    row = raw.data
    question = require(row, "question", str)
    output = require(row, "output", str)
    docs = require(row, "docs", list)
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("text"), str) or not doc["text"].strip():
            raise RowError(f"docs[{i}] must be an object with a non-empty 'text'")
        if not isinstance(doc.get("title", ""), str):
            raise RowError(f"docs[{i}].title must be a string")
    parsed = parse_answer(output, len(docs))
    invalid = sorted({d for ids in parsed.invalid for d in ids})
    if invalid:
        raise RowError(f"'output' cites document(s) {invalid}, but the row has {len(docs)}")
    supporting = row.get("supporting")
    if supporting is not None and (not isinstance(supporting, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and 1 <= d <= len(docs) for d in supporting)):
        raise RowError(f"'supporting' must be null or a list of document ids 1..{len(docs)}")
    source = row.get("source", "")
    return TrainingExample(
        id=str(row.get("id") or f"{Path(file).stem}-{raw.line}"), source=str(source), question=question.strip(),
        docs=[{"title": d.get("title", ""), "text": d["text"]} for d in docs], output=output.strip(),
        citations=[list(c) for c in parsed.citations], supporting=supporting,
        file=str(row.get("file") or file), line=int(row.get("line") or raw.line), lang=row.get("lang"),
        meta=row.get("meta") if isinstance(row.get("meta"), dict) else {})


def read_examples(path: str | Path) -> tuple[list[TrainingExample], list[BadRow]]:
    """The examples of a training file (JSONL or a JSON list of :class:`TrainingExample` rows) and its malformed
    rows (BadRow: this file, the line, the reason), which are skipped. Refuses a test split's file name."""
    refuse_test_split(path)
    examples, bad = [], []
    for raw in read_rows(path, what="training set (JSONL written by `mirage tune data`)"):
        if isinstance(raw, BadRow):
            bad.append(raw)
            continue
        try:
            examples.append(parse_example(raw, file=str(path)))
        except RowError as err:
            bad.append(BadRow(file=str(path), line=raw.line, error=str(err)))
    return examples, bad


def write_examples(examples: Iterable[TrainingExample], path: str | Path) -> Path:
    """Write the examples as JSONL (replacing the file at once, never half-written)."""
    return write_atomic(path, "".join(json.dumps(ex.to_dict(), ensure_ascii=False) + "\n" for ex in examples))


def build_gold(xor_files: Sequence[str | Path] = (), eli5_prompt_files: Sequence[str | Path] = (), *,
               text: TextView = "en", keep_unsupported: bool = False,
               group_passages: bool = False) -> tuple[list[TrainingExample], BuildReport]:
    """The gold training set: :func:`xor_examples` of each XOR-AttriQA file, then :func:`eli5_demo_examples` of
    each ALCE prompt file, with the report of what was kept, left out and skipped. A question answered with the
    same answer in an earlier file (the match subset's rows are rows of the per-passage release too) is kept once,
    from the first file, and counted as ``duplicate``."""
    if not xor_files and not eli5_prompt_files:
        raise InputError("no data given; give XOR-AttriQA train/val files and/or ALCE's eli5_alce_prompt.json.")
    for path in xor_files:
        refuse_test_split(path)  # every file checked before any is read
    examples: list[TrainingExample] = []
    bad: list[BadRow] = []
    unsupported = 0
    seen: set[tuple[str, str]] = set()
    duplicates = 0
    for path in xor_files:
        found, skipped, n_unsupported = xor_examples(path, text=text, keep_unsupported=keep_unsupported,
                                                     group_passages=group_passages)
        for ex in found:  # the match subset's rows are also in the per-passage release: one example per answer
            key = (question_digest(ex.question), " ".join(strip_citations(ex.output)[0].split()))
            if key in seen:
                duplicates += 1
                continue
            seen.add(key)
            examples.append(ex)
        bad += skipped
        unsupported += n_unsupported
    for path in eli5_prompt_files:
        found, skipped = eli5_demo_examples(path)
        examples += found
        bad += skipped
    counts = {source: sum(ex.source == source for ex in examples) for source in EXAMPLE_SOURCES[:2]}
    left_out = {"unsupported": 0 if keep_unsupported else unsupported, "duplicate": duplicates}
    return examples, BuildReport(counts=counts, bad_rows=[str(b) for b in bad], left_out=left_out)
