"""The real pipeline on the embedded default model and real RAG items (examples/rag_items.json)."""

import json
import re
import warnings

import pytest
import torch

from mirage import AttributionResult, InputError, Mirage, MirageConfig
from mirage.attribution.forward import answer_logits
from mirage.attribution.generation import generate_answer
from mirage.views.report import result_to_html


@pytest.fixture(scope="module")
def mirage(smollm2):
    return Mirage(smollm2, config=MirageConfig().replace(generation={"max_new_tokens": 32}))


@pytest.fixture(scope="module")
def short_eli5(example_items):
    item = example_items[0]
    return {"question": item["question"],
            "docs": [{"title": d["title"], "text": " ".join(d["text"].split()[:40])} for d in item["docs"][:2]]}


@pytest.fixture(scope="module")
def forced(mirage, xor_item):
    return mirage.attribute(xor_item["question"], xor_item["docs"], answer=xor_item["output"])


def test_forced_answer_is_attributed_to_its_documents(forced, xor_item):
    assert forced.answer == xor_item["output"] and not forced.generated
    assert forced.sentences and forced.sentences[0].text == xor_item["output"]
    cs = [t for t in forced.tokens if t.context_sensitive]
    assert cs, "a year copied from the documents must be context-sensitive"
    assert all(0 < t.prob <= 1 for t in forced.tokens)
    assert all(1 <= d <= len(xor_item["docs"]) for s in forced.sentences for d in s.mirage_citations)
    # The prompt records exactly the documents block and the contextless prompt lacks it.
    assert forced.context in forced.prompt and forced.context not in forced.contextless_prompt
    for tok in cs:
        for cue in tok.top_context:
            assert forced.prompt[cue.start:cue.end] == cue.token
            assert cue.token.strip() in forced.docs[cue.doc - 1]["text"] + forced.docs[cue.doc - 1]["title"] \
                or cue.token.strip() in f"Document [{cue.doc}]:"
    # An untitled document renders without an empty "(Title: )".
    assert "(Title: )" not in forced.context


def test_result_round_trips_through_json(forced, tmp_path):
    path = tmp_path / "r.json"
    path.write_text(forced.to_json())
    back = AttributionResult.from_json(path.read_text())
    assert back == forced
    assert back.config == MirageConfig().replace(generation={"max_new_tokens": 32}).to_dict()
    assert back.versions["mirage"] and back.model == "smollm2-135m-instruct"


def test_html_escapes_document_and_answer_text(mirage, xor_item):
    docs = [dict(d) for d in xor_item["docs"]]
    docs[0]["text"] = "<script>alert('x')</script> " + docs[0]["text"]
    res = mirage.attribute(xor_item["question"], docs, answer=xor_item["output"] + " <b>bold</b>")
    html = result_to_html(res)
    # the document text is shown in heat segments (tags between its pieces): compare the text between the tags
    text = re.sub(r"<[^>]*>", "", html)
    assert "<script>" not in html and "&lt;script&gt;alert" in text
    assert "<b>bold</b>" not in html and "&lt;b&gt;bold&lt;/b&gt;" in text


def test_generation_is_seeded_and_its_logits_are_reused_exactly(mirage, short_eli5):
    prep = mirage.prepare(short_eli5)
    a = generate_answer(mirage.lm, prep.tokens.ids, cfg=mirage.config.generation)
    b = generate_answer(mirage.lm, prep.tokens.ids, cfg=mirage.config.generation)
    assert a.ids == b.ids and a.text
    # The logits kept from generation equal a teacher-forced pass over the generated answer.
    forced = answer_logits(mirage.lm, prep.tokens.ids, a.ids)
    assert torch.allclose(a.logits, forced, atol=1e-3)
    sampled = generate_answer(mirage.lm, prep.tokens.ids,
                              cfg=mirage.config.generation.__class__(max_new_tokens=16, do_sample=True, seed=3))
    again = generate_answer(mirage.lm, prep.tokens.ids,
                            cfg=mirage.config.generation.__class__(max_new_tokens=16, do_sample=True, seed=3))
    assert sampled.ids == again.ids


def test_generated_answer_end_to_end(mirage, short_eli5):
    res = mirage.attribute(short_eli5["question"], short_eli5["docs"])
    assert res.generated and res.answer.strip()
    assert "[1]" not in res.answer
    assert len(res.tokens) > 0 and res.timings["total"] > 0
    assert sum(t.context_sensitive for t in res.tokens) >= 1
    json.loads(res.to_json())


def test_over_long_prompt_is_truncated_with_a_warning(smollm2, xor_item):
    from dataclasses import replace

    small = replace(smollm2, context_window=300)
    m = Mirage(small)
    docs = xor_item["docs"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prep = m.prepare({"question": xor_item["question"], "docs": docs, "output": "x"}, reserve_tokens=20)
    assert any("truncated" in str(w.message) for w in caught)
    assert len(prep.tokens.ids) <= 280 and prep.prompt.truncated_docs
    assert prep.prompt.text.count("Document [") == len(docs)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"question": "", "docs": [{"text": "x"}]}, "question"),
        ({"question": "q", "docs": []}, "docs"),
        ({"question": "q", "docs": [{"title": "t", "text": ""}]}, "docs[0].text"),
        ({"question": "q", "docs": [{"text": "x"}], "answer": "[1][2]"}, "output"),
    ],
)
def test_bad_input_gets_a_clear_error(mirage, kwargs, field):
    with pytest.raises(InputError) as err:
        mirage.attribute(**kwargs)
    assert err.value.field == field


def test_unknown_model_name_is_a_clear_error():
    from mirage.attribution.models import ModelLoadError

    with pytest.raises(ModelLoadError, match="embedded model"):
        Mirage.from_pretrained("/nonexistent/model-folder")
