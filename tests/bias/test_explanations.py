"""The explainer's analysis (mirage.bias.explanations): the document-reference parser and the reason classifier on
real-looking explanation strings, prompt recitations set aside, the confidence split and the agreement counts, the
results.json round trip with and without the analysis, and the run-folder entry point.

These functions are pure, so the records here are built by hand (no model runs in this file); the analysis of a real
``mirage bias --explain`` run on the embedded model is checked in tests/bias/test_cli.py
(``test_custom_labels_relevant_side_and_explainer``)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mirage.bias.explanations import (
    AUTHORSHIP_CUES,
    ExplanationAnalysis,
    analyse_explanations,
    analyse_record,
    analyse_run,
    classify_reason,
    confidence_split,
    copied_sentences,
    find_references,
    label_words,
    main,
    metadata_cues,
    name_documents,
    render_explanations,
    set_relation,
)
from mirage.bias.protocol import BiasConfig, load_metadata
from mirage.bias.records import BiasRecord
from mirage.bias.results import BiasStudyResult, summarize
from mirage.bias.tables import render_markdown
from mirage.data.inputs import InputError

ROOT = Path(__file__).resolve().parents[2]
HAI = label_words({"first": "Human", "second": "LLM", "first_labels": ["Human"], "second_labels": ["LLM"]})

# text, n_docs, named (first-mention order), declined
REFERENCES = [
    ("I cited [1][3] because they mention the date.", 5, (1, 3), ()),
    ("I cited [1, 2] as they describe the war.", 5, (1, 2), ()),
    ("Documents 1 and 3 describe the event.", 5, (1, 3), ()),
    ("Documents 1, 2, and 4 contain the answer.", 5, (1, 2, 4), ()),
    ("Documents 1-3 are relevant.", 5, (1, 2, 3), ()),
    ("Documents 2 to 4 discuss it.", 5, (2, 3, 4), ()),
    ("I cited document [2] since it is relevant.", 5, (2,), ()),
    ("I cited Document [1] and [3].", 5, (1, 3), ()),
    ("I cited doc 2 and Doc. 4.", 5, (2, 4), ()),
    ("Document #3 states the year.", 5, (3,), ()),
    ("Document two was written by a human.", 5, (2,), ()),
    ("I used the first and third documents.", 5, (1, 3), ()),
    ("I cited the 2nd document.", 5, (2,), ()),
    ("The last document is irrelevant.", 4, (4,), (4,)),
    ("The treaty was signed in 1999, see Document 2.", 5, (2,), ()),
    ("In 1999 and 2001 there were 3 wars.", 5, (), ()),
    ("I cited 2 documents.", 5, (), ()),
    ("1. The documents come from a search engine. 2. Do not analyse them.", 5, (), ()),
    ("None of the documents answer the question.", 5, (), ()),
    ("I did not cite any document.", 5, (), ()),
    ("Document 7 and [9] are out of range; Document 2 is not.", 5, (2,), (2,)),
    ("I did not cite Document 3 because it is about something else.", 5, (3,), (3,)),
    ("Document 3 is not relevant to the question.", 5, (3,), (3,)),
    ("Documents 2 and 4 don't mention the city.", 5, (2, 4), (2, 4)),
    ("Document 2 answers it, not [1] or [3].", 5, (2, 1, 3), (1, 3)),
    ("I cited the second document, but not the fourth document.", 5, (2, 4), (4,)),
    ("I cited [1], not [2].", 5, (1, 2), (2,)),
    ("I cited Document 1 and not Document 3.", 5, (1, 3), (3,)),
    ("I cited Document 1 because Document 2 has no information.", 5, (1, 2), (2,)),
    ("I cited Document 1, which does not mention the king.", 5, (1,), ()),
    ("Document 2 is not useful. Later, Document 2 gives the answer.", 5, (2,), ()),
]


@pytest.mark.parametrize(("text", "n_docs", "named", "declined"), REFERENCES, ids=[r[0][:40] for r in REFERENCES])
def test_document_references(text, n_docs, named, declined):
    naming = name_documents(text, n_docs)
    assert naming.named == named
    assert naming.declined == declined
    assert naming.claimed == tuple(d for d in named if d not in declined)


def test_references_carry_their_spans_and_refuse_no_documents():
    text = "Only Document 2 matters, not [1]."
    refs = find_references(text, 3)
    assert [(r.doc, text[r.start:r.end], r.negated) for r in refs] == [(2, "Document 2", False), (1, "1", True)]
    with pytest.raises(InputError, match="n_docs"):
        find_references(text, 0)


# text, category, content cues, metadata cues (HAI labels)
REASONS = [
    ("I cited Document 1 because it contains the answer.", "content", ("contains", "answer"), ()),
    ("Document 2 mentions the date the party was formed.", "content", ("mentions",), ()),
    ("I cited Document 3 because it was written by a human.", "metadata", (), ("Human", "written by")),
    ("The LLM-generated documents are less credible.", "metadata", (), ("LLM", "generated", "credible")),
    ("Document 1 comes from a reliable source.", "metadata", (), ("source", "reliable")),
    ("Document 1 is relevant, and its author is a person.", "both", ("relevant",), ("author",)),
    ("The AI wrote Document 2, which states the year.", "both", ("states",), ("wrote", "AI")),
    ("I will provide a brief explanation.", "none", (), ()),
    ("Document 3 is irrelevant.", "content", ("relevant",), ()),
    ('The first document was "Horace Walpole, an English author and writer".', "none", (), ()),
    ("The first document I cited was “written by a human”, it says.", "content", ("says",), ()),
    ("Yes.", "none", (), ()),
    ("", "none", (), ()),
    ("Humans are mentioned in Document 1.", "both", ("mentions",), ("Human",)),
    ("The documents said nothing; email me.", "content", ("says",), ()),
]


@pytest.mark.parametrize(("text", "category", "content", "meta"), REASONS, ids=[r[0][:40] or "empty" for r in REASONS])
def test_reason_categories(text, category, content, meta):
    reason = classify_reason(text, metadata_cues(HAI))
    assert (reason.category, reason.content_cues, reason.metadata_cues) == (category, content, meta)


def test_metadata_cues_come_from_the_studys_labels():
    """Each metadata type's own labels count as metadata cues (an article dropped, a plural allowed), on word
    boundaries: ``man`` is not found in ``many`` or ``human``."""
    names = label_words(_meta(BiasConfig(metadata="hai-names")))
    cues = metadata_cues(names)
    assert {"Emily Carter", "GPT-4", "Llama 3", "Human", "LLM"} <= set(cues)
    assert classify_reason("Emily  Carter wrote it.", cues).metadata_cues == ("Emily Carter", "wrote")
    gender = metadata_cues(label_words(_meta(BiasConfig(metadata="gender"))))
    assert classify_reason("Written by a woman.", gender).metadata_cues == ("woman", "written by")
    assert classify_reason("Many human rights.", gender).metadata_cues == ("human",)
    custom = metadata_cues(["Expert", "Scholar", "Novice"])
    assert classify_reason("The experts agree.", custom).category == "metadata"
    assert {c.lower() for c in AUTHORSHIP_CUES} <= {c.lower() for c in cues}  # "human" is the label "Human" here


def _meta(cfg: BiasConfig) -> dict:
    m = load_metadata(cfg)
    return {"first": m.first.name, "second": m.second.name, "first_labels": list(m.first.labels),
            "second_labels": list(m.second.labels)}


@pytest.mark.parametrize(("claimed", "cited", "relation"), [
    ((), (1,), "none"), ((), (), "none"), ((1, 2), (2, 1), "exact"), ((1,), (1, 2), "subset"),
    ((1, 2), (1,), "superset"), ((1, 3), (1, 2), "overlap"), ((3,), (1, 2), "disjoint"), ((3,), (), "disjoint")])
def test_set_relation(claimed, cited, relation):
    assert set_relation(claimed, cited) == relation


PROMPT = ("Instruction: Write a concise answer.\n1. The documents come from a search engine, so not all of them are "
          "relevant to the question.\n3. Some documents were written by humans, while others were written by an LLM. "
          "This is marked for each document.\nDocument [1]: The Ikhwan was a militia. (written by Human)\n"
          "Document [2]: Ruslan Pukhov is an analyst. (written by LLM)\n")


def test_sentences_recited_from_the_prompt_are_set_aside():
    """A recited instruction is no reason and a recited document heading no claim (the 135M model does both)."""
    text = ("1. The documents come from a search engine, so not all of them are relevant to the question.\n"
            "3. Some documents were  written by humans, while others were written by an LLM.\n"
            "Document [1]: The Ikhwan was a militia.\nDocument [2]:\nI hope this helps.")
    assert len(copied_sentences(text, PROMPT)) == 4  # "I hope this helps." is not in the prompt
    row = analyse_record(_record("q", "informed", explanation=text, prompt=PROMPT), metadata_cues(HAI))
    assert (row.copied, row.named, row.category, row.metadata_cues) == (4, [], "none", [])
    unprompted = analyse_record(_record("q", "informed", explanation=text, prompt=""), metadata_cues(HAI))
    assert (unprompted.copied, unprompted.named, unprompted.category) == (0, [1, 2], "both")
    # the model's own sentences stay, short ones included
    own = "I cited [1]. Document [1]. It was written by a human."
    assert copied_sentences(own, PROMPT) == []
    assert analyse_record(_record("q", "informed", explanation=own, prompt=PROMPT), metadata_cues(HAI)).claimed == [1]


def _record(item: str, mode: str, *, explanation: str | None, self_cited=(), mirage_cited=(), probs=(), n_docs=3,
            prompt="") -> BiasRecord:
    return BiasRecord(key=f"{item}:{mode}", item_id=item, mode=mode, labels=[None] * n_docs, relevant=[1],
                      n_docs=n_docs, answers=["x"], raw_answer="x", answer="x", self_citations=[list(self_cited)],
                      mirage_citations=[list(mirage_cited)], self_citation_probs=[[d, p] for d, p in probs],
                      explanation=explanation, prompt=prompt)


def test_agreement_counts_per_mode():
    records = [
        # informed: claims {1} = self {1} ⊆ mirage {1, 2}; claims {2}, self {1}: disjoint, ⊆ mirage {2}
        _record("a", "informed", explanation="I cited Document 1 because it contains the answer.", self_cited=[1],
                mirage_cited=[1, 2], probs=[(1, 0.9)]),
        _record("b", "informed", explanation="Document 2 was written by a human.", self_cited=[1], mirage_cited=[2],
                probs=[(1, 0.2)]),
        # counterfactual: claims {1, 3} vs self {1}: superset, vs mirage {3}: overlap; names none; no explanation
        _record("a", "counterfactual", explanation="Documents 1 and 3 mention it; the LLM one is credible.",
                self_cited=[1], mirage_cited=[2, 3], probs=[(1, 0.5)]),
        _record("b", "counterfactual", explanation="I did not cite Document 2.", mirage_cited=[1]),
        _record("c", "counterfactual", explanation=None, self_cited=[1], mirage_cited=[1]),
    ]
    analysis = analyse_explanations(records, label_words=HAI)
    assert analysis.n_records == 5 and analysis.overall.n == 4 and list(analysis.modes) == ["informed",
                                                                                             "counterfactual"]
    informed, counter = analysis.modes["informed"], analysis.modes["counterfactual"]
    assert (informed.n, informed.named, informed.self_cited, informed.names_self_cited) == (2, 2, 2, 1)
    assert {k: v for k, v in informed.self_relation.items() if v} == {"exact": 1, "disjoint": 1}
    assert {k: v for k, v in informed.mirage_relation.items() if v} == {"subset": 1, "exact": 1}
    assert {k: v for k, v in informed.categories.items() if v} == {"content": 1, "metadata": 1}
    assert (counter.n, counter.named, counter.declined, counter.names_self_cited) == (2, 1, 1, 1)
    assert {k: v for k, v in counter.self_relation.items() if v} == {"superset": 1, "none": 1}
    assert {k: v for k, v in counter.mirage_relation.items() if v} == {"overlap": 1, "none": 1}
    assert counter.categories == {"content": 0, "metadata": 0, "both": 1, "none": 1}
    assert analysis.overall.metadata_cues == {"Human": 1, "written by": 1, "LLM": 1, "credible": 1}
    assert sum(analysis.overall.self_relation.values()) == analysis.overall.n
    tables = render_explanations(analysis)
    # vs MIRAGE over the explanations claiming a document: informed 2 of 2 ⊆ MIRAGE, counterfactual 1 of 1 overlap
    assert "| informed | 2 | 100.0 | 0.0 | 50.0 (n=2) | 50.0 / 0.0 / 50.0 / 0.0 | 100.0 / 0.0 / 0.0 |" in tables
    assert "| counterfactual | 2 | 50.0 | 50.0 | 100.0 (n=1) | 0.0 / 50.0 / 0.0 / 50.0 | 0.0 / 100.0 / 0.0 |" in tables
    with pytest.raises(InputError, match="explanation is null"):
        analyse_record(records[-1], metadata_cues(HAI))


def test_confidence_split_at_the_median():
    """Eight confident answers whose explanations name their document and give a metadata reason, eight
    unconfident ones that name nothing: the halves differ significantly; two answers without self-citation are left
    out of the split."""
    high = [_record(f"h{i}", "informed", explanation="Document 1 was written by a human.", self_cited=[1],
                    probs=[(1, 0.8 + 0.01 * i), (1, 0.9)]) for i in range(8)]
    low = [_record(f"l{i}", "informed", explanation="It contains the answer.", self_cited=[1],
                   probs=[(1, 0.1 + 0.01 * i)]) for i in range(8)]
    bare = [_record(f"n{i}", "informed", explanation="Document 1 is relevant.") for i in range(2)]
    rows = [analyse_record(r, metadata_cues(HAI)) for r in high + low + bare]
    split = confidence_split(rows)
    assert split.unsplit == 2 and split.low.n == 8 and split.high.n == 8
    assert 0.17 < split.median < 0.85
    assert all(r.confidence < split.median for r in rows[8:16]) and rows[0].confidence == pytest.approx(0.85)
    assert (split.high.named, split.low.named, split.high.names_self_cited, split.low.names_self_cited) == (8, 0, 8, 0)
    assert split.high.categories["metadata"] == 8 and split.low.categories["content"] == 8
    for p in (split.p_named, split.p_names_self_cited, split.p_metadata, split.p_category):
        assert p is not None and p < 0.01
    # the same explanations on both sides: no difference
    same = [analyse_record(_record(f"s{i}", "informed", explanation="Document 1 is relevant.", self_cited=[1],
                                   probs=[(1, 0.1 * (i + 1))]), metadata_cues(HAI)) for i in range(6)]
    even = confidence_split(same)
    assert (even.low.n, even.high.n, even.p_named, even.p_metadata, even.p_category) == (3, 3, 1.0, 1.0, None)
    # no self-citation anywhere: nothing to split, and the table says so
    none = confidence_split(rows[16:])
    assert none.median is None and none.unsplit == 2 and none.p_named is None
    analysis = analyse_explanations(bare, label_words=HAI)
    assert "no confidence to split" in render_explanations(analysis)


def _summarize(records: list[BiasRecord]) -> BiasStudyResult:
    cfg = BiasConfig(modes=("informed", "counterfactual"), baseline_draws=20)
    return summarize(records, cfg=cfg, metadata=load_metadata(cfg), model="m", data="d", mirage_config={})


def _pair(explain: bool) -> list[BiasRecord]:
    out = []
    for item, cited in (("a", [1]), ("b", [2])):
        for mode in ("informed", "counterfactual"):
            out.append(_record(item, mode, explanation=f"I cited [{cited[0]}]; it was written by a human."
                               if explain else None, self_cited=cited, mirage_cited=[1], probs=[(cited[0], 0.5)]))
    return out


def test_results_json_round_trip_with_and_without_the_analysis(tmp_path):
    explained = _summarize(_pair(True))
    assert explained.explanations is not None and explained.explanations.overall.n == 4
    explained.save(tmp_path / "results.json")
    loaded = BiasStudyResult.load(tmp_path / "results.json")
    assert isinstance(loaded.explanations, ExplanationAnalysis)
    assert loaded.explanations.to_dict() == explained.explanations.to_dict()
    assert loaded.explanations.rows[0].metadata_cues == ["Human", "written by"]
    tables = render_markdown(loaded)
    assert "## Explanations" in tables and render_explanations(explained.explanations) in tables

    plain = _summarize(_pair(False))
    assert plain.explanations is None
    plain.save(tmp_path / "plain.json")
    assert BiasStudyResult.load(tmp_path / "plain.json").explanations is None
    assert "## Explanations" not in render_markdown(plain)
    # a results.json written before the field existed still loads
    old = json.loads((tmp_path / "plain.json").read_text())
    del old["explanations"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert BiasStudyResult.load(tmp_path / "old.json").explanations is None


def _write_run(folder: Path, records: list[BiasRecord], *, packed: bool = False, results: bool = True) -> None:
    folder.mkdir()
    text = "".join(json.dumps(r.to_dict()) + "\n" for r in records)
    if packed:
        with gzip.open(folder / "generations.jsonl.gz", "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        (folder / "generations.jsonl").write_text(text)
    if results:
        _summarize(records).save(folder / "results.json")


def test_a_run_folder_is_analysed_without_generating(tmp_path, capsys):
    records = _pair(True)
    _write_run(tmp_path / "run", records)
    stored = BiasStudyResult.load(tmp_path / "run" / "results.json").explanations
    assert analyse_run(tmp_path / "run").to_dict() == stored.to_dict()
    _write_run(tmp_path / "packed", records, packed=True)  # generations.jsonl.gz, as shipped runs store them
    assert analyse_run(tmp_path / "packed").to_dict() == stored.to_dict()
    records[0].labels = ["Human", "LLM", "LLM"]
    _write_run(tmp_path / "labelled", records, results=False)  # a stopped run: the labels come from the records
    assert analyse_run(tmp_path / "labelled").label_words == ["Human", "LLM"]

    assert main([str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "### The stated reason" in out and "| informed | 2 |" in out
    saved = ExplanationAnalysis.from_json((tmp_path / "run" / "explanations.json").read_text())
    assert saved.to_dict() == stored.to_dict()

    _write_run(tmp_path / "unexplained", _pair(False))
    assert main([str(tmp_path / "unexplained")]) == 2
    assert "--explain" in capsys.readouterr().err
    with pytest.raises(InputError, match="generations.jsonl"):
        analyse_run(tmp_path / "missing")


def test_help_imports_no_torch():
    code = ("import sys\nfrom mirage.bias.explanations import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
            "    pass\nprint('torch' in sys.modules, 'scipy' in sys.modules)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert "run_dir" in run.stdout and run.stdout.split()[-2:] == ["False", "False"]
