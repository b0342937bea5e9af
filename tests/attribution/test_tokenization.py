"""Which prompt tokens are context tokens: only those inside the documents block, mapped to the document they overlap
most. Real tokenizers of both embedded models, on the standard prompt over real XOR-AttriQA passages
(``tests/data/xor_attriqa_match/val.jsonl``, the native view)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from mirage import Mirage, MirageConfig
from mirage.attribution.models import embedded_checkpoint
from mirage.attribution.prompts import build_prompt, load_template, mark_sentences, tokenize_prompt
from mirage.config import PromptConfig
from mirage.data.inputs import make_item
from mirage.scoring.xor_data import load_xor_attriqa

VAL = Path(__file__).parents[1] / "data" / "xor_attriqa_match" / "val.jsonl"


@pytest.fixture(scope="module")
def gemma_tokenizer():
    """Gemma 3's tokenizer, which merges the documents block's closing newline with the template's next one."""
    return AutoTokenizer.from_pretrained(embedded_checkpoint("gemma3-270m"))


@pytest.mark.parametrize("which", ["gemma", "smollm2"])
def test_context_tokens_lie_inside_the_documents_block(which, gemma_tokenizer, real_tokenizer):
    tokenizer = gemma_tokenizer if which == "gemma" else real_tokenizer
    items = [i for i in load_xor_attriqa(VAL, text="native", limit=8).items if len(i.passages) > 1]
    template = load_template(PromptConfig(name="standard"))
    straddling = 0
    for item in items:
        rag = make_item(item.rag_item())
        built = build_prompt(template, rag.question, rag.docs, tokenizer=tokenizer, use_chat_template=False)
        tok = tokenize_prompt(tokenizer, built)
        start, end = built.context_span
        assert tok.context_offsets and all(start <= a and b <= end for a, b in tok.context_offsets)
        # every token fully inside a document's entry is a context token of that document
        for pos, (a, b) in enumerate(tok.offsets):
            for doc, (d_start, d_end) in enumerate(built.doc_spans):
                if d_start <= a < b <= d_end:
                    assert tok.context_docs[tok.context_positions.index(pos)] == doc
        # a token reaching across the block's end (part document, part template) is left out
        for pos, (a, b) in enumerate(tok.offsets):
            if a < end < b:
                straddling += 1
                assert pos not in tok.context_positions
        assert tok.context_docs == tuple(sorted(tok.context_docs))
        assert set(tok.context_docs) == set(range(len(rag.docs)))
    if which == "gemma":  # the case that motivated the rule: "\n" + "\n" -> "\n\n" across the block's end
        assert straddling == len(items) > 0


#: Documents whose sentences selfcitation_marked marks: a question mark, a quote after the stop, no stop at the end.
MARKED_DOCS = [{"title": "Cats", "text": "Why do cats purr? They purr when content. They also purr when hurt!"},
               {"title": "", "text": 'Dogs bark. Highly scalable, dogs "fetch sticks." Dogs sleep a lot'},
               {"title": "Birds", "text": "Birds sing at dawn."}]


def test_marked_documents_spans_cover_each_text_with_its_marks(tiny_causal):
    cfg = MirageConfig().replace(prompt={"name": "selfcitation_marked"}, aggregation={"keep_saliency": True},
                                 cti={"std_k": 0.0})
    res = Mirage(tiny_causal, config=cfg).attribute("Why do cats purr?", MARKED_DOCS,
                                                    answer="Cats purr when content [1]. Highly scalable [2].")
    sal = res.saliency
    base = res.prompt.index(res.context)
    assert res.context == "".join(
        (f"Document [{d}](Title: {doc['title']}): " if doc["title"] else f"Document [{d}]: ")
        + mark_sentences(doc["text"], f" [{d}]") + "\n" for d, doc in enumerate(MARKED_DOCS, start=1))
    assert mark_sentences(MARKED_DOCS[0]["text"], " [1]").startswith("Why do cats purr [1]? They purr when")
    cursor = base
    for d, doc in enumerate(MARKED_DOCS, start=1):
        marked = mark_sentences(doc["text"], f" [{d}]")
        text_at = res.prompt.index(marked, cursor)
        title_at = res.prompt.index(doc["title"], cursor, text_at) if doc["title"] else text_at
        entry = (res.prompt.index(f"Document [{d}]", cursor), text_at + len(marked) + 1)  # with its closing newline
        content = [range(title_at, title_at + len(doc["title"])), range(text_at, text_at + len(marked))]
        cursor = entry[1]
        columns = [j for j, doc_of in enumerate(sal.context_docs) if doc_of == d]
        covered = {c for j in columns for c in range(*sal.context_offsets[j])}
        assert covered == set(range(*entry))  # document d's tokens cover exactly its entry, marks included
        for j in columns:
            a, b = sal.context_offsets[j]
            assert sal.content[j] == any(a < r.stop and r.start < b for r in content), res.prompt[a:b]
        assert {c for j in columns if sal.content[j] for c in range(*sal.context_offsets[j])} >= set(content[1])
        for span in (s for s in res.context_spans if s.doc == d):
            assert entry[0] <= span.start < span.end <= entry[1]
    assert res.context_spans
