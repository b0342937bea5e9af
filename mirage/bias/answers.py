"""Answers generated elsewhere (an API model, another stack), evaluated by the study (pattrieval's standalone
evaluation).

Two steps, neither needing a local model for the self-citation metrics:

1. ``mirage bias DATA -o DIR --write-requests`` writes ``DIR/requests.jsonl``: one request per item and mode, with
   the chat messages to send (``system`` when the prompt has one, ``user`` the filled template with the labelled
   documents) and a ``key`` that depends only on what the prompt shows (item, mode, labels, template).
2. The user generates an answer per request and writes ``answers.jsonl``: ``{"key": ..., "answer": "... [1] ..."}``,
   optionally ``"citation_probs": [[doc, p], ...]`` (the generation probability of each ``[n]`` mark, when the API
   returns log-probabilities; attribution confidence needs them). ``mirage bias DATA -o OUT --answers answers.jsonl``
   rebuilds the same requests from DATA and the same options, parses each answer's ``[n]`` citations and computes
   every self-citation metric (P/R, CAS, CAB, EM, AC, tests). With ``--model`` given too, the local model
   force-decodes each answer and mirage attributes it: "what would this model have used to write that answer".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mirage.attribution.citations import CitationSource, parse_answer
from mirage.attribution.models import dtype_name
from mirage.attribution.prompts import format_prompt, load_template
from mirage.bias.items import BiasItem
from mirage.bias.prompts import labelled_docs, load_prompts, mode_template, write_template
from mirage.bias.protocol import BiasConfig, doc_labels, load_metadata
from mirage.bias.records import BiasRecord, PromptCell
from mirage.bias.results import BiasStudyResult, summarize
from mirage.bias.runner import mirage_citation_probabilities
from mirage.config import MirageConfig
from mirage.data import data_label
from mirage.data.inputs import InputError, make_item
from mirage.runs.progress import Progress
from mirage.runs.store import ResumableJSONL, content_key

if TYPE_CHECKING:
    from mirage.pipeline import Mirage

__all__ = ["BiasRequest", "read_external_answers", "run_answers_study", "write_study_requests"]


@dataclass
class BiasRequest(PromptCell):
    """One prompt of the study, as a chat API takes it. ``key`` identifies it by what the prompt shows."""

    user: str
    system: str | None = None
    template: str = ""

    @property
    def messages(self) -> list[dict[str, str]]:
        """The chat messages to send."""
        return ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": self.user}]


@dataclass
class ExternalAnswer:
    """An answer from ``answers.jsonl``: its raw text (with ``[n]`` marks) and, if given, citation probabilities."""

    key: str
    answer: str
    citation_probs: list[list[float]] = field(default_factory=list)
    line: int = 0


def request_key(item: BiasItem, mode: str, labels: Sequence[str | None], template: dict[str, str]) -> str:
    """The key of a request: the item, mode, labels and template, nothing about a model."""
    return f"{item.id}:{mode}:{content_key([item.to_dict(), mode, list(labels), template], length=12)}"


def plan_requests(items: Sequence[BiasItem], cfg: BiasConfig, *, template_dir: str | Path,
                  system: str | None = None) -> list[BiasRequest]:
    """Every (item, mode) of the study as a request, in item order (the modes' templates written to
    ``template_dir``, as a generating run writes them)."""
    prompts, metadata = load_prompts(cfg), load_metadata(cfg)
    templates = {}
    for mode in cfg.modes:
        template = mode_template(prompts, mode, metadata)
        path = write_template(template, template_dir)
        templates[mode] = (template, load_template(MirageConfig().replace(prompt={"path": str(path)}).prompt),
                           path.name)
    out = []
    for item in items:
        for mode in cfg.modes:
            labels = doc_labels(item.id, item.is_relevant, mode, cfg, metadata)
            template, loaded, name = templates[mode]
            rag = make_item({"question": item.question,
                             "docs": labelled_docs(item.docs, labels, prompts.metadata_format)}, item=item.id)
            user = format_prompt(loaded, rag.question, rag.docs).text
            out.append(BiasRequest(key=request_key(item, mode, labels, template), item_id=item.id, mode=mode,
                                   labels=list(labels), relevant=list(item.relevant), n_docs=len(item.docs),
                                   answers=list(item.answers), user=user, system=system, template=name))
    return out


def write_requests(requests: Iterable[BiasRequest], path: str | Path) -> Path:
    """``requests.jsonl``: one request per line, with its ``messages``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in requests:
            f.write(json.dumps({**r.to_dict(), "messages": r.messages}, ensure_ascii=False) + "\n")
    return path


def read_external_answers(path: str | Path, requests: Sequence[BiasRequest]) -> dict[str, ExternalAnswer]:
    """The answers of ``path`` by request key. A line that is not JSON, lacks ``key``/``answer``, names a key that
    is not one of ``requests`` or repeats a key is an InputError naming the line and the fix."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"--answers {path}: no such file.")
    known = {r.key for r in requests}
    out: dict[str, ExternalAnswer] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            row = json.loads(raw)
        except json.JSONDecodeError as err:
            raise InputError(f"{where}: not a JSON object ({err.msg}).") from None
        if not isinstance(row, dict) or not isinstance(row.get("key"), str) or not isinstance(row.get("answer"), str):
            raise InputError(f'{where}: each line needs "key" (from requests.jsonl) and "answer" (the answer text '
                             'with its [n] citations).')
        key = row["key"]
        if key not in known:
            raise InputError(f"{where}: key {key!r} is not one of this study's requests; write the requests and "
                             "evaluate the answers with the same DATA, --ndocs, --seed, --metadata, --modes and "
                             "prompts.")
        if key in out:
            raise InputError(f"{where}: key {key!r} already answered on line {out[key].line}; keep one answer per "
                             "request.")
        probs = row.get("citation_probs") or []
        if not isinstance(probs, list) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, (int, float)) for v in p)
                for p in probs):
            raise InputError(f'{where}: "citation_probs" must be a list of [document number, probability] pairs.')
        out[key] = ExternalAnswer(key=key, answer=row["answer"], citation_probs=[[int(d), float(p)] for d, p in probs],
                                  line=lineno)
    return out


def answer_record(request: BiasRequest, answer: ExternalAnswer, *, mirage: Mirage | None = None,
                  item: BiasItem | None = None, cfg: BiasConfig | None = None,
                  mirage_config: MirageConfig | None = None, template_dir: str | Path | None = None) -> BiasRecord:
    """The study record of an external answer: its parsed self-citations (and given probabilities); with a local
    ``mirage`` (and the ``item``, ``cfg`` and ``template_dir`` of the run), mirage's citations of the
    force-decoded, citation-stripped answer."""
    parsed = parse_answer(answer.answer, request.n_docs)
    mirage_cits: list[list[int]] = [[] for _ in parsed.sentences]
    mirage_probs: list[list[float]] = []
    error = None if mirage is not None else "no local model: mirage's citations not computed"
    if mirage is not None:
        assert item is not None and cfg is not None and template_dir is not None
        prompts = load_prompts(cfg)
        template = mode_template(prompts, request.mode, load_metadata(cfg))
        config = (mirage_config or mirage.config).replace(prompt={"path": str(write_template(template, template_dir))})
        raw = {"question": item.question, "id": item.id, "output": answer.answer,
               "docs": labelled_docs(item.docs, list(request.labels), prompts.metadata_format)}
        try:
            res = mirage.attribute_item(raw, config=config, index=item.id)
        except InputError as err:
            error = str(err)
        else:
            mirage_cits = [list(s.mirage_citations) for s in res.sentences]
            mirage_probs = [[d, p] for d, p in mirage_citation_probabilities(res, [t.prob for t in res.tokens])]
    return BiasRecord(
        **request.cell(), raw_answer=answer.answer, answer=parsed.text,
        self_citations=[list(c) for c in parsed.citations], mirage_citations=mirage_cits,
        self_citation_probs=[list(p) for p in answer.citation_probs], mirage_citation_probs=mirage_probs,
        n_answer_tokens=0, error=error, prompt=request.user)


def evaluate_answers(items: Sequence[BiasItem], cfg: BiasConfig, answers_path: str | Path, *, out_dir: str | Path,
                     mirage: Mirage | None = None, name: str = "external",
                     progress: Progress | None = None) -> tuple[list[BiasRecord], list[BiasRequest]]:
    """Records for every request with an answer (resumable in ``out_dir/generations.jsonl`` when a local model
    attributes them), and the requests left unanswered."""
    out_dir = Path(out_dir)
    requests = plan_requests(items, cfg, template_dir=out_dir / "prompts")
    answers = read_external_answers(answers_path, requests)
    by_id = {i.id: i for i in items}
    settings = {"answers": content_key(sorted((a.key, a.answer, a.citation_probs) for a in answers.values()),
                                       length=16),
                "name": name, "model": mirage.lm.name if mirage is not None else None,
                "pipeline": mirage.config.to_dict() if mirage is not None else None}
    dtype = dtype_name(mirage.lm.dtype) if mirage is not None else "float32"
    if dtype != "float32":  # float32 runs, and all those written before, leave it out
        settings["dtype"] = dtype
    store = ResumableJSONL(out_dir / "generations.jsonl", settings=settings)
    done = {r["key"]: BiasRecord.from_dict(r) for r in store.records() if "key" in r}
    todo = [r for r in requests if r.key in answers and r.key not in done]
    iterator: Iterable[BiasRequest] = progress(todo, len(todo), "answers") if progress else todo
    for request in iterator:
        record = answer_record(request, answers[request.key], mirage=mirage, item=by_id[request.item_id], cfg=cfg,
                               template_dir=out_dir / "prompts")
        done[request.key] = record
        store.write(record.to_dict())
    records = [done[r.key] for r in requests if r.key in done]
    missing = [r for r in requests if r.key not in answers]
    return records, missing


def run_answers_study(data: str, answers_path: str | Path, *, cfg: BiasConfig, output_dir: str | Path,
                      mirage: Mirage | None = None, name: str | None = None, limit: int | None = None,
                      split: str = "test", progress: Progress | None = None) -> tuple[BiasStudyResult, int]:
    """Evaluate the answers of ``answers_path`` for the study of DATA (built as a generating run builds it) and write
    the results, tables and CAB figure to ``output_dir``; return the result and the number of unanswered requests.
    Without ``mirage`` only the self-citations are evaluated."""
    from mirage.bias.study import build_items, write_outputs

    out_dir = Path(output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    items = build_items(data, cfg, limit=limit, split=split)
    name = name or Path(answers_path).stem
    records, missing = evaluate_answers(items, cfg, answers_path, out_dir=out_dir, mirage=mirage, name=name,
                                        progress=progress)
    if not records:
        raise InputError(f"--answers {answers_path}: no answer matches a request of this study; write the requests "
                         "with --write-requests and the same options.")
    sources: tuple[CitationSource, ...] = ("self", "mirage") if mirage is not None else ("self",)
    result = summarize(records, cfg=cfg, metadata=load_metadata(cfg), model=name, data=data_label(data),
                       mirage_config=mirage.config.to_dict() if mirage is not None else {}, sources=sources)
    write_outputs(result, out_dir)
    return result, len(missing)


def write_study_requests(data: str, *, cfg: BiasConfig, output_dir: str | Path, limit: int | None = None,
                         split: str = "test", system: str | None = None) -> Path:
    """``output_dir/requests.jsonl`` (and ``items.jsonl``, the modes' prompt files) for DATA; no model needed."""
    from mirage.bias.items import write_items
    from mirage.bias.study import build_items

    out_dir = Path(output_dir)
    items = build_items(data, cfg, limit=limit, split=split)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_items(items, out_dir / "items.jsonl")
    return write_requests(plan_requests(items, cfg, template_dir=out_dir / "prompts", system=system),
                          out_dir / "requests.jsonl")
