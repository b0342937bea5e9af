"""``mirage tune data`` as a library runner: a training set built from :class:`~mirage.tune.options.TrainingSetOptions`
(:func:`build_training_set`), the gold answers or the model's own (internals, stored resumably beside the output as
they are done), less the ``--exclude`` questions, cut to ``--limit``, with the ``--yes-no`` questions and the
``--shuffle-docs`` and ``--spread-positions`` presentations added.

    from mirage.tune.data import write_examples
    from mirage.tune.options import TrainingSetOptions
    from mirage.tune.training_set import build_training_set

    options = TrainingSetOptions(mode="gold", xor=("xor-attriqa-match:train",), yes_no=True, spread_positions=5,
                                 output="gold.jsonl")
    result = build_training_set(options)                 # result.messages: what the command says on the way
    write_examples(result.examples, options.output)
    print(result.summary())                              # the command's counts: examples per source, left out

Option combinations are checked before any file is read (ConfigError); nothing is written but the internals' store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mirage.config import ConfigError, MirageConfig
from mirage.data import resolve_files
from mirage.data.inputs import InputError
from mirage.runs.progress import Progress
from mirage.tune.data import (
    BuildReport,
    TrainingExample,
    build_gold,
    internals_cache,
    internals_examples,
    question_digest,
    read_examples,
    shuffle_documents,
    source_label,
    spread_positions,
    xor_examples,
    yes_no_questions,
)
from mirage.tune.options import TrainingSetOptions

__all__ = ["TrainingSetResult", "build_training_set", "held_out_questions", "internals_store", "leave_out_questions"]


@dataclass
class TrainingSetResult:
    """What :func:`build_training_set` built: the examples, in the order they are written; the report (examples per
    source, rows left out and why, malformed rows skipped); and the lines said on the way (rows left out by
    ``--exclude``, where the internals' store is), in order."""

    examples: list[TrainingExample]
    report: BuildReport
    messages: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The report's counts as ``mirage tune data`` prints them: examples per source and rows left out, without
        the malformed rows (said one a line before it)."""
        return BuildReport(counts=self.report.counts, bad_rows=[], left_out=self.report.left_out).to_text()


def internals_store(output: str | Path) -> Path:
    """Where the internals mode keeps each item's outcome as it is done: ``OUTPUT.partial`` (a rerun with the same
    output skips the items already there)."""
    return Path(output).with_name(Path(output).name + ".partial")


def build_training_set(options: TrainingSetOptions, *, loading: Mapping[str, Any] | None = None,
                       progress: Progress | None = None,
                       say: Callable[[str], None] | None = None) -> TrainingSetResult:
    """The training set ``options`` describe (``mirage tune data``), not written
    (:func:`~mirage.tune.data.write_examples` writes it). ``loading``: the keywords of
    :meth:`mirage.Mirage.from_pretrained` the internals' model loads with (device, dtype, adapter, placement);
    ``progress`` wraps the items the model answers (the internals mode; ``options.quiet`` is the command's, which
    then gives none); ``say`` is called with each line of :attr:`TrainingSetResult.messages` as it is said.
    ConfigError for options that do not go together, InputError for data that cannot be used, both before the model
    loads."""
    _check_combinations(options)
    messages: list[str] = []

    def said(line: str) -> None:
        messages.append(line)
        if say is not None:
            say(line)

    xor, eli5_demos, alce = (resolve_files(files) for files in (options.xor, options.eli5_demos, options.alce))
    if options.mode == "internals" and not xor and not alce:
        raise ConfigError("give the questions to answer: --xor FILE... (XOR-AttriQA train/val) and/or --alce FILE.")
    held_out = held_out_questions(options.exclude)
    if options.mode == "gold":
        examples, report = build_gold(xor, eli5_demos, text=options.text, keep_unsupported=options.keep_unsupported,
                                      group_passages=options.group_passages)
        examples = _selected(examples, held_out, options.limit, said)
        if options.yes_no:
            asked = yes_no_questions(examples, seed=options.seed)
            report.counts["xor-attriqa yes/no"] = len(asked)
            examples = examples + asked
    else:
        examples, report = _internals(options, xor, alce, held_out, loading=loading or {}, progress=progress,
                                      said=said)
    if options.shuffle_docs:
        examples = shuffle_documents(examples, options.shuffle_docs, seed=options.seed)
    if options.spread_positions:
        pool = examples
        if options.mode == "gold" and not options.keep_unsupported:  # unsupported rows' passages fill too
            pool = build_gold(xor, eli5_demos, text=options.text, keep_unsupported=True,
                              group_passages=options.group_passages)[0]
        pool = [ex for ex in pool if question_digest(ex.question) not in held_out]  # no held-out passage as filler
        examples = spread_positions(examples, k=options.spread_positions, copies=options.copies, seed=options.seed,
                                    pool=pool)
    return TrainingSetResult(examples=examples, report=report, messages=messages)


def _check_combinations(options: TrainingSetOptions) -> None:
    """ConfigError for flags that do not go together (checked before any file is read or model loads)."""
    if options.mode == "gold":
        if options.alce:
            raise ConfigError("--alce gives questions for the internals mode; gold data comes from --xor and "
                              "--eli5-demos.")
    else:
        if options.yes_no:
            raise ConfigError("--yes-no asks the gold answers again as yes/no questions; it goes with the gold mode.")
        if options.eli5_demos:
            raise ConfigError("--eli5-demos are gold answers; the internals mode takes questions from --xor and "
                              "--alce.")
    if options.copies and not options.spread_positions:
        raise ConfigError("--copies goes with --spread-positions K.")


def held_out_questions(paths: Iterable[str | Path] | None) -> set[str]:
    """The :func:`~mirage.tune.data.question_digest` of every question in the ``--exclude`` files (training sets as
    ``tune data`` writes them): the questions an evaluation keeps unseen when training uses the same split."""
    held: set[str] = set()
    for path in paths or ():
        examples, bad = read_examples(path)
        if not examples:
            raise InputError(f"--exclude {path}: no example in it ({len(bad)} malformed rows); give a training set "
                             "as `mirage tune data` writes it")
        held |= {question_digest(ex.question) for ex in examples}
    return held


def leave_out_questions(examples: Sequence[TrainingExample], questions: set[str], what: str, noun: str = "items"
                        ) -> tuple[list[TrainingExample], str]:
    """``examples`` less those asking one of ``questions`` (:func:`~mirage.tune.data.question_digest`), and the line
    that says how many, as asking a question of ``what`` (``noun``: what the examples are called)."""
    kept = [ex for ex in examples if question_digest(ex.question) not in questions]
    return kept, f"{len(examples) - len(kept)} of {len(examples)} {noun} ask a question of {what} and are left out."


def _selected(items: list[TrainingExample], held_out: set[str], limit: int | None,
              said: Callable[[str], None]) -> list[TrainingExample]:
    """``items`` less the ``--exclude`` questions (the count said), then the first ``limit``."""
    if held_out:
        items, line = leave_out_questions(items, held_out, "--exclude")
        said(line)
    return items[:limit] if limit is not None else items


def _internals(options: TrainingSetOptions, xor: list[str], alce: list[str], held_out: set[str], *,
               loading: Mapping[str, Any], progress: Progress | None,
               said: Callable[[str], None]) -> tuple[list[TrainingExample], BuildReport]:
    """The self-distillation examples of the internals mode and their report: the model answers each question of
    ``xor`` and ``alce`` (less the held-out ones, the first ``--limit``), each outcome stored as it is done."""
    from mirage.pipeline import Mirage
    from mirage.scoring.eli5 import load_alce

    items: list[TrainingExample] = []
    bad: list[str] = []
    for path in xor:
        found, skipped, _unsupported = xor_examples(path, text=options.text, keep_unsupported=True)
        items += found
        bad += [str(b) for b in skipped]
    for path in alce:
        data = load_alce(path)
        bad += [str(b) for b in data.bad_rows]
        items += [TrainingExample(id=f"alce-{Path(path).stem}-{it.line}", source="alce", question=it.question,
                                  docs=it.docs_dicts(options.ndocs), output="", citations=[],
                                  file=source_label(it.file), line=it.line)
                  for it in data.items]
    items = _selected(items, held_out, options.limit, said)
    config = MirageConfig.from_yaml(options.mirage_config) if options.mirage_config else MirageConfig()
    config = config.replace(generation={"max_new_tokens": options.max_new_tokens})
    mirage = Mirage.from_pretrained(options.model, config=config, **loading)
    store = internals_store(options.output)
    cache = internals_cache(store, mirage)
    # said before the long loop, so a user who stops the run knows where its work is
    said(f"each item's outcome is kept in {store}: a rerun with the same -o skips the items already done")
    examples, left_out = internals_examples(mirage, items, progress=progress, cache=cache)
    return examples, BuildReport(counts={"internals": len(examples)}, bad_rows=bad, left_out=left_out)
