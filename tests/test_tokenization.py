"""Which prompt tokens are context tokens: only those inside the documents block, mapped to the document they overlap
most. Real tokenizers of both embedded models, on the standard prompt over real XOR-AttriQA passages
(``tests/data/xor_attriqa_match/val.jsonl``, the native view)."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer

from mirage.attribution.models import embedded_checkpoint
from mirage.attribution.prompts import build_prompt, load_template, tokenize_prompt
from mirage.config import PromptConfig
from mirage.data.inputs import make_item
from mirage.scoring.xor_attriqa import load_xor_attriqa

VAL = Path(__file__).parent / "data" / "xor_attriqa_match" / "val.jsonl"


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
