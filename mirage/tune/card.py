"""The model card of a citation adapter, written from its records and its evaluations' results files.

    mirage tune card mirage/assets/adapters/smollm2-135m-cite-follow --name smollm2-135m-cite-follow \
        --follow val=FOLLOW_VAL.json --follow fi/ru=FOLLOW_FIRU.json --eval val=EVAL_VAL.json --eval fi/ru=EVAL.json

Every figure on the card comes from a ``mirage tune follow`` or ``mirage tune eval`` report named on it: the
permutation test (does the citation move with the supporting passage?) and the rows in their published order, each
beside cite-[1] on the same answers. A card mirage did not write is never replaced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mirage.bias.metrics import mean_citation_set_prf
from mirage.data.readers import parse_json, read_text
from mirage.runs.store import write_atomic
from mirage.tune.adapters import AdapterError, read_adapter_info
from mirage.views.markdown import md_table

__all__ = ["adapter_card", "write_card"]

#: The first line of a card mirage wrote: only such a README is replaced by :func:`write_card`.
CARD_MARK = "<!-- written by `mirage tune card` from the results files named below; do not edit by hand -->"


def _pc(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def _read_report(path: str | Path) -> dict[str, Any]:
    try:
        data = parse_json(read_text(path, what="results file"))
    except (OSError, ValueError) as err:
        raise AdapterError(f"{path} cannot be read as a results file ({err}); give a report written by mirage tune "
                           "follow or mirage tune eval.") from err
    if not isinstance(data, dict):
        raise AdapterError(f"{path} is not a results file (not a JSON object).")
    return data


def follow_rows(reports: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[tuple[str, ...]]:
    """One row per ``mirage tune follow`` report (label, report, file name): the adapter's figures beside
    cite-[1]'s, and how often mirage's citations of the same answers follow (a report made with ``--judge``; else
    –)."""
    rows: list[tuple[str, ...]] = []
    for label, d, name in reports:
        own, first = d["self_citation"], d["cite_first"]
        if first is None or own is None:
            raise AdapterError(f"{name}: not a mirage tune follow report (no self_citation / cite_first).")
        rows.append((label, str(d["n_items"]), f"{_pc(own['follow_rate'])} ({_pc(first['follow_rate'])})",
                     f"{_pc(own['first_when_not_supporting'])} ({_pc(first['first_when_not_supporting'])})",
                     f"{own['mean_cited']:.2f}", f"{_pc(own['f1'])} ({_pc(first['f1'])})",
                     _pc((d.get("mirage") or {}).get("follow_rate")), _pc(d["quality"]["exact_match"]),
                     f"`{name}`"))
    return rows


def eval_rows(reports: Sequence[tuple[str, Mapping[str, Any], str]]) -> list[tuple[str, ...]]:
    """One row per ``mirage tune eval`` report (label, report, file name): per-answer P / R / F1 against the labels
    beside cite-[1]'s on the same answers, and exact match."""
    rows: list[tuple[str, ...]] = []
    for label, d, name in reports:
        if "answers" not in d:
            raise AdapterError(f"{name}: not a mirage tune eval report (no answers).")
        own = " / ".join(_pc(d.get(k)) for k in ("precision", "recall", "f1"))
        first = " / ".join(_pc(v) for v in mean_citation_set_prf(d["answers"], cite_first=True))
        rows.append((label, str(d["n_answers"]), own, first, _pc(d.get("exact_match")), f"`{name}`"))
    return rows


def _also_trained_in(training: dict[str, Any]) -> str:
    """`` (and, for some of its examples, in `short`)``: the other prompts a run trained in (``also_prompts``)."""
    also = training.get("also_prompts") or []
    return f" (and, for some of its examples, in {', '.join(f'`{p}`' for p in also)})" if also else ""


def adapter_card(folder: str | Path, *, name: str, follow: Sequence[tuple[str, str | Path]] = (),
                 evals: Sequence[tuple[str, str | Path]] = ()) -> str:
    """The model card (Markdown) of the adapter in ``folder``, shipped as ``name``: what it is and how it was made
    (its ``mirage-adapter.json``), the prompt to use, and the figures of the ``follow`` and ``evals`` reports
    (label, path), each beside cite-[1]'s."""
    info = read_adapter_info(folder)
    training, prompt = info.training, info.prompt.get("name", "selfcitation")
    extracted = training.get("extracted")
    made = (f"a LoRA taken from a fully fine-tuned model (`mirage tune export DIR/model --rank {extracted['rank']} "
            f"--embed-rank {extracted['embed_rank']}{' --norms' if extracted['norms'] else ''}`: each linear "
            f"layer's change truncated by SVD, {_pc(extracted['linear_change_kept'])} % of it kept), whose "
            f"training ran in {len(extracted['chain'])} stages from `{info.base_model}`, the last one "
            f"`{training.get('train', {}).get('method', '?')}` fine-tuning over {training.get('examples', '?')} "
            f"examples in {training.get('steps', '?')} steps" if extracted else
            f"a LoRA adapter trained by `mirage tune {info.stage}` over {training.get('examples', '?')} examples in "
            f"{training.get('steps', '?')} steps")
    parts = [CARD_MARK, f"# `{name}`: a citation adapter for `{info.base_model}`", "",
             (f"`{info.base_model}` with {made}. It writes `[n]` self-citations in the `{prompt}` prompt it was "
             f"trained with{_also_trained_in(training)}; `mirage-adapter.json` holds the base model's fingerprint, "
             "that prompt and the training config, and `training.questions` the questions it saw (`mirage tune "
             "eval` and `follow` leave them out)."),
             "", "```python", "from mirage import Mirage, MirageConfig", "",
             f'mirage = Mirage.from_pretrained("{name}", config=MirageConfig().replace(prompt={{"name": "{prompt}"}}))',
             "```", "", (f"On the command line: `--model {name} --prompt {prompt}`. Loaded without a prompt of "
                         "one's own (no `--prompt`, no config), mirage prompts it in that template and says so.")]
    if follow:
        reports = [(label, _read_report(path), Path(path).name) for label, path in follow]
        k = reports[0][1].get("k", "?")
        parts += ["", f"## Does the citation follow the content? (the permutation test, k = {k})", "",
                  ("Each question whose answer one passage supports is asked with that passage moved through "
                  f"positions 1 to {k} (the others in a fixed order); an answer *follows* when its citations include "
                  "the passage's new number and at most one other. In brackets, citing `[1]` in every answer, on the "
                  "same presentations. *mirage follows*: mirage's citations of the same answers, read the same way "
                  "(reports made with `--judge`)."), "",
                  md_table(["split", "items", "follows (cite-[1])", "[1] when not supporting (cite-[1])",
                          "documents cited", "F1 (cite-[1])", "mirage follows", "exact match", "from"],
                         follow_rows(reports))]
    if evals:
        reports = [(label, _read_report(path), Path(path).name) for label, path in evals]
        parts += ["", "## In the published order (`mirage tune eval`)", "",
                  ("The same kind of rows with their documents in the order the dataset gives them, where document 1 "
                  "is most often the supporting passage, so citing `[1]` is usually right there. Per-answer "
                  "precision / recall / F1 of the cited documents against the supporting ones."), "",
                  md_table(["split", "answers", "P / R / F1", "cite-[1] P / R / F1", "exact match", "from"],
                         eval_rows(reports))]
    parts += ["", ("The reports are in `benchmarks/results/` of the mirage repository; `docs/tuning.md` tells how they "
              "were made and what they show.")]
    return "\n".join(parts) + "\n"


def write_card(folder: str | Path, text: str) -> Path:
    """Write ``text`` as ``folder``'s README.md, unless a README there was not written by ``mirage tune card``
    (AdapterError: it is never replaced)."""
    path = Path(folder) / "README.md"
    if path.is_file() and not path.read_text(encoding="utf-8").startswith(CARD_MARK) \
            and not path.read_text(encoding="utf-8").startswith("# LoRA adapter for "):
        raise AdapterError(f"{path} was not written by mirage (mirage tune card or export); move it away to write "
                           "the card there.")
    write_atomic(path, text)
    return path
