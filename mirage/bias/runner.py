"""Running the study: each item in each mode is generated once, its self-citations read with their generation
probabilities, and the citation-stripped answer attributed by mirage; records are written as they finish."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mirage.attribution.aggregation import sentence_of_token
from mirage.attribution.citations import citation_numbers, parse_answer
from mirage.attribution.forward import token_probabilities
from mirage.attribution.generation import generate_answer
from mirage.attribution.prompts import format_prompt, load_template
from mirage.attribution.results import AttributionResult
from mirage.attribution.tokenization import encode_chat, encode_plain
from mirage.bias.items import BiasItem
from mirage.bias.prompts import BiasPrompts, labelled_docs, load_prompts, mode_template, write_template
from mirage.bias.protocol import BiasConfig, Metadata, doc_labels, load_metadata
from mirage.bias.records import BiasRecord
from mirage.config import GenerationConfig, MirageConfig
from mirage.data.inputs import InputError
from mirage.pipeline import Mirage, PreparedItem
from mirage.runs.progress import Progress
from mirage.runs.sharding import owns
from mirage.runs.store import ResumableJSONL, content_key, read_records

__all__ = ["BiasStudy", "mark_probabilities", "mirage_citation_probabilities", "reusable_records"]


def token_spans(tokenizer: Any, ids: Sequence[int], text: str) -> list[tuple[int, int]]:
    """Character span of each generated token in ``text`` (the decoded ids), from decoding growing prefixes."""
    spans, prev = [], 0
    for i in range(len(ids)):
        end = min(len(tokenizer.decode(list(ids[: i + 1]), skip_special_tokens=True)), len(text))
        end = max(end, prev)
        spans.append((prev, end))
        prev = end
    return spans


def mark_probabilities(text: str, spans: Sequence[tuple[int, int]], probs: Sequence[float],
                       n_docs: int) -> list[tuple[int, float]]:
    """Per document number inside a citation mark (``[n]``, ``[n][m]``, ``[n, m]``) of ``text`` naming a document
    1..n_docs: ``(n, p)``, p the product of the probabilities of the tokens overlapping the number's characters
    (the generation probability of that number)."""
    out = []
    for doc, start, end in citation_numbers(text):
        if not 1 <= doc <= n_docs:
            continue
        p = 1.0
        for (s, e), prob in zip(spans, probs):
            if s < end and e > start:
                p *= prob
        out.append((doc, float(p)))
    return out


def mirage_citation_probabilities(res: AttributionResult, token_probs: Sequence[float | None]
                                  ) -> list[tuple[int, float]]:
    """Per sentence and mirage-cited document: the mean generation probability of the sentence's context-sensitive
    tokens that mirage attributes to that document (``token_probs`` indexed like ``res.tokens``, None for a token
    without one, which is left out; a token's sentence by :func:`mirage.attribution.aggregation.sentence_of_token`,
    as for the citations)."""
    spans = [(s.start, s.end) for s in res.sentences]
    owner = [sentence_of_token(res.answer, t.start, spans) for t in res.tokens]
    out = []
    for s, sentence in enumerate(res.sentences):
        for doc in sentence.mirage_citations:
            ps = [p for t, o in zip(res.tokens, owner)
                  if o == s and doc in t.cited_docs and (p := token_probs[t.index]) is not None]
            if ps:
                out.append((doc, float(sum(ps) / len(ps))))
    return out


def record_key(item: BiasItem, mode: str, labels: Sequence[str | None], template: dict[str, str],
               mirage_config: MirageConfig, model: str, explain: bool) -> str:
    """Identifies a generation by everything that determines it, so a re-run skips exactly the finished ones."""
    digest = content_key([item.to_dict(), mode, list(labels), template, mirage_config.to_dict(), model, explain],
                         length=12)
    return f"{item.id}:{mode}:{digest}"


def reusable_records(runs: Sequence[str | Path], settings: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Finished generations of other bias runs (run folders or their ``generations.jsonl``), by key, made with
    ``settings`` (the same model and pipeline configuration): what another study of the same protocol shares with
    this one (the vanilla mode of every metadata study; the informed and counterfactual cells of a mixed grid). A
    key names the item, mode, labels, prompt, configuration and model, so only identical generations match.
    InputError for a run that is not there."""
    wanted = json.loads(json.dumps(settings, default=str))
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        path = Path(run)
        path = path / "generations.jsonl" if path.is_dir() else path
        if not path.is_file():
            raise InputError(f"--reuse-from {run}: no bias run there (no generations.jsonl); give a mirage bias output "
                             "folder.")
        for record in read_records(path):
            if "key" in record and record.get("settings") == wanted and not record.get("error"):
                out.setdefault(record["key"], record)
    return out


@dataclass(frozen=True)
class PlannedGeneration:
    """An item in one mode: its labels, mirage config (with the mode's prompt file) and key."""

    item: BiasItem
    mode: str
    labels: tuple[str | None, ...]
    config: MirageConfig
    key: str


class BiasStudy:
    """The counterfactual protocol over items for one model and one metadata type.

    ``template_dir``: where the modes' prompt files are written (``DIR/prompts`` in the CLI).
    """

    def __init__(self, mirage: Mirage, cfg: BiasConfig, *, template_dir: str | Path,
                 mirage_config: MirageConfig | None = None) -> None:
        self.mirage = mirage
        self.cfg = cfg
        self.mirage_config = mirage_config or mirage.config
        self.metadata: Metadata = load_metadata(cfg)
        self.prompts: BiasPrompts = load_prompts(cfg)
        self.template_dir = Path(template_dir)

    def plan(self, items: Sequence[BiasItem]) -> list[PlannedGeneration]:
        """Every (item, mode) of the study, in item order."""
        paths: dict[str, tuple[dict[str, str], Path]] = {}
        for mode in self.cfg.modes:
            template = mode_template(self.prompts, mode, self.metadata)
            paths[mode] = (template, write_template(template, self.template_dir))
        planned = []
        for item in items:
            for mode in self.cfg.modes:
                labels = tuple(doc_labels(item.id, item.is_relevant, mode, self.cfg, self.metadata))
                template, path = paths[mode]
                config = self.mirage_config.replace(prompt={"path": str(path)})
                key = record_key(item, mode, labels, template, self.mirage_config, self.mirage.lm.name,
                                 self.cfg.explain)
                planned.append(PlannedGeneration(item=item, mode=mode, labels=labels, config=config, key=key))
        return planned

    def run(self, items: Sequence[BiasItem], *, out: ResumableJSONL | None = None,
            progress: Progress | None = None, reuse: Mapping[str, Mapping[str, Any]] | None = None
            ) -> list[BiasRecord]:
        """Run every planned generation not already in ``out`` (writing each as it finishes; a rank's shard store
        runs only its share); return the records of the plan, in plan order. ``reuse``: finished records of other
        runs by key (:func:`reusable_records`); a planned generation found there is copied into ``out``, not run."""
        planned = self.plan(items)
        done = {r["key"]: BiasRecord.from_dict(r) for r in (out.records() if out else []) if "key" in r}
        for p in planned:
            if reuse and p.key in reuse and p.key not in done and owns(out, p.key):
                done[p.key] = BiasRecord.from_dict(dict(reuse[p.key]))
                if out is not None:
                    out.write(done[p.key].to_dict())
        todo = [p for p in planned if p.key not in done and owns(out, p.key)]
        iterator: Iterable[PlannedGeneration] = progress(todo, len(todo), "bias") if progress else todo
        for p in iterator:
            record = self.generate(p)
            done[p.key] = record
            if out is not None:
                out.write(record.to_dict())
        return [done[p.key] for p in planned if p.key in done]  # all of them, unless ``out`` is one rank's shard

    def generate(self, p: PlannedGeneration) -> BiasRecord:
        """Generate one answer, read its self-citations and their probabilities, attribute it with mirage."""
        t0 = time.perf_counter()
        lm, cfg = self.mirage.lm, p.config
        raw = {"question": p.item.question, "id": p.item.id,
               "docs": labelled_docs(p.item.docs, list(p.labels), self.prompts.metadata_format)}
        prep = self.mirage.prepare(raw, config=cfg, index=p.item.id)
        gen = generate_answer(lm, prep.tokens.ids, cfg=cfg.generation)
        timings = {"generation": time.perf_counter() - t0}
        n_docs = len(p.item.docs)
        probs = token_probabilities(gen.logits, gen.ids)
        self_probs = mark_probabilities(gen.text, token_spans(lm.tokenizer, gen.ids, gen.text), probs, n_docs)
        parsed = parse_answer(gen.text, n_docs)
        mirage_cits: list[list[int]] = [[] for _ in parsed.sentences]
        mirage_probs: list[tuple[int, float]] = []
        error = None
        t = time.perf_counter()
        try:
            res = self.mirage.attribute_item({**raw, "output": gen.text}, config=cfg, index=p.item.id)
        except InputError as err:
            error = str(err)
        else:
            mirage_cits = [list(s.mirage_citations) for s in res.sentences]
            mirage_probs = mirage_citation_probabilities(res, [t.prob for t in res.tokens])
        timings["mirage"] = time.perf_counter() - t
        explanation = None
        if self.cfg.explain:
            t = time.perf_counter()
            explanation = self.explain(prep, gen.text, cfg)
            timings["explain"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - t0
        return BiasRecord(
            key=p.key, item_id=p.item.id, mode=p.mode, labels=list(p.labels), relevant=list(p.item.relevant),
            n_docs=n_docs, answers=list(p.item.answers), raw_answer=gen.text, answer=parsed.text,
            self_citations=[list(c) for c in parsed.citations], mirage_citations=mirage_cits,
            self_citation_probs=[[d, pr] for d, pr in self_probs],
            mirage_citation_probs=[[d, pr] for d, pr in mirage_probs],
            n_answer_tokens=len(gen.ids), explanation=explanation, error=error, prompt=prep.prompt.text,
            timings={k: round(v, 3) for k, v in timings.items()})

    def explain(self, prep: PreparedItem, answer: str, cfg: MirageConfig) -> str:
        """Ask the model, as a follow-up turn, to explain its citations (``explainer.yaml``)."""
        lm = self.mirage.lm
        tok = lm.tokenizer
        question = str(self.prompts.explainer["question"]).strip()
        chat = not prep.prompt.add_special_tokens
        if chat:
            content = format_prompt(load_template(cfg.prompt), prep.item.question, prep.item.docs).text
            messages = ([{"role": "system", "content": cfg.prompt.system}] if cfg.prompt.system else []) + [
                {"role": "user", "content": content}, {"role": "assistant", "content": answer},
                {"role": "user", "content": question}]
            ids = encode_chat(tok, messages)
        else:
            ids = encode_plain(tok, f"{prep.prompt.text} {answer}\n\n{question}\n")
        gen_cfg = GenerationConfig(max_new_tokens=int(self.prompts.explainer.get("max_new_tokens", 128)),
                                   seed=cfg.generation.seed)
        return generate_answer(lm, ids, cfg=gen_cfg).text.strip()
