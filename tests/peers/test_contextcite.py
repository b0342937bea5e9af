"""ContextCite as a peer on XOR-AttriQA (mirage/peers/contextcite.py): it scores mirage's own prompt and answer
tokens, one source per passage, and its batch runner resumes and records failures."""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mirage import Mirage, MirageConfig
from mirage.attribution.tokenization import tokenize_answer
from mirage.runs.store import ResumableJSONL
from mirage.scoring.xor_attriqa import prepare_item
from mirage.scoring.xor_data import XorItem, load_xor_attriqa

# Not pytest.importorskip: importing context_cite as is runs nltk.download (network); the adapter imports it offline.
if importlib.util.find_spec("context_cite") is None:
    pytest.skip("context-cite is not installed (a benchmark dependency: scripts/setup.sh --test installs it)",
                allow_module_level=True)

from mirage.peers.contextcite import (
    CONTEXTCITE_NUM_ABLATIONS,
    ablated_prompt,
    context_cite,
    contextcite_citer,
    contextcite_passage_scores,
    contextcite_scores,
    run_contextcite,
    store_settings,
)

ROOT = Path(__file__).resolve().parents[2]
#: The XOR-AttriQA scorer's prompt (`mirage score xor-attriqa` runs "standard").
XOR_CONFIG = MirageConfig().replace(prompt={"name": "standard"})

#: Three passages; the third spells the chat template's end-of-turn token, which must stay text in every ablation.
ITEM = XorItem(file="mem", line=1, lang="en", question="When was the Ikhwan party formed?",
               passages=("The Ikhwan was a religious militia formed in 1913 in Arabia.",
                         "Wheat is grown in many parts of the world.",
                         "Some text <|im_end|> that spells a special token; the party dissolved in 1930."),
               answer="In 1913.", labels=(True, False, False), idxs=(0, 1, 2))


@pytest.fixture(scope="module")
def tiny(tiny_causal):
    return Mirage(tiny_causal, config=XOR_CONFIG)


def test_import_never_reaches_the_network():
    """ContextCite's import calls nltk.download("punkt_tab"); the adapter's import must not open a connection."""
    code = textwrap.dedent("""
        import socket
        def refuse(*args, **kwargs):
            raise AssertionError("network access")
        socket.socket.connect = socket.create_connection = refuse
        import nltk
        download = nltk.download
        from mirage.peers.contextcite import context_cite
        context_cite()
        assert nltk.download is download
    """)
    done = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nltk_data" not in done.stderr


def test_default_num_ablations_is_contextcites():
    params = inspect.signature(context_cite().ContextCiter.__init__).parameters
    assert params["num_ablations"].default == CONTEXTCITE_NUM_ABLATIONS


def test_full_context_ids_are_mirages_prompt_and_answer(tiny):
    citer = contextcite_citer(tiny, ITEM, num_ablations=4)
    text, prep = prepare_item(tiny, ITEM)
    expected = list(prep.tokens.ids) + list(tokenize_answer(tiny.lm.tokenizer, text).ids)
    assert citer._get_prompt_ids() + citer._response_ids == expected
    assert citer._get_prompt_ids(mask=[True] * 3) == list(prep.tokens.ids)
    assert citer._get_prompt_ids(return_prompt=True)[1] == prep.prompt.text
    assert citer._output == prep.prompt.text + text  # ContextCite's cached prompt + response: the given answer
    assert citer.sources == [prep.prompt.text[s:e] for s, e in prep.prompt.doc_spans]


def test_ablated_context_drops_exactly_the_masked_documents(tiny):
    citer = contextcite_citer(tiny, ITEM, num_ablations=4)
    _, prep = prepare_item(tiny, ITEM)
    prompt = prep.prompt
    entries = [prompt.text[s:e] for s, e in prompt.doc_spans]
    im_end = tiny.lm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    template_im_ends = list(prep.tokens.contextless_ids).count(im_end)
    for mask in itertools.product([True, False], repeat=3):
        kept = "".join(e for e, k in zip(entries, mask) if k)
        assert citer.partitioner.get_context(list(mask)) == kept
        ids, text = citer._get_prompt_ids(mask=list(mask), return_prompt=True)
        start, end = prompt.context_span
        assert text == prompt.text[:start] + kept + prompt.text[end:]
        for passage, k in zip(ITEM.passages, mask):
            assert (passage in text) == k
        # the kept third passage's "<|im_end|>" is read as text after the entries before it moved
        assert ids.count(im_end) == template_im_ends


def test_ablated_prompt_moves_user_spans(tiny):
    _, prep = prepare_item(tiny, ITEM)
    prompt = prep.prompt
    text, spans = ablated_prompt(prompt, [False, True, True])
    shown = {text[s:e] for s, e in spans}
    assert ITEM.passages[1] in shown and ITEM.passages[2] in shown and ITEM.question in shown
    assert ITEM.passages[0] not in shown and ITEM.passages[0] not in text
    assert ablated_prompt(prompt, None) == (prompt.text, prompt.user_spans)


def test_scores_one_finite_per_passage_and_count_passes(tiny, monkeypatch):
    def generate(*_args, **_kwargs):
        raise AssertionError("ContextCite generated instead of scoring the given answer")

    monkeypatch.setattr(tiny.lm.model, "generate", generate)
    scores, seconds, n_forward = contextcite_passage_scores(tiny, ITEM, num_ablations=6, seed=0)
    assert len(scores) == len(ITEM.passages) and all(math.isfinite(s) for s in scores)
    assert n_forward == 6 and seconds > 0
    assert contextcite_passage_scores(tiny, ITEM, num_ablations=6, seed=0)[0] == scores


def test_head_on_the_read_rows_only_gives_contextcites_scores(tiny):
    """The passes compute the logits of the answer rows ContextCite reads (plus the one before), not of every
    position, and the scores equal those of ContextCite's own full-head passes up to float rounding."""
    rows: list[tuple[int, int]] = []

    def seen(_module, args, kwargs, output):
        rows.append((int(kwargs["input_ids"].shape[1]), int(output.logits.shape[1])))

    hook = tiny.lm.model.register_forward_hook(seen, with_kwargs=True)
    try:
        trimmed, _, _ = contextcite_passage_scores(tiny, ITEM, num_ablations=6, seed=0)
        n_trimmed = len(rows)
        full, _, _ = contextcite_passage_scores(tiny, ITEM, num_ablations=6, seed=0, full_head=True)
    finally:
        hook.remove()
    n_answer = len(contextcite_citer(tiny, ITEM, num_ablations=6).answer_ids)
    assert n_trimmed == 6 and len(rows) == 12
    assert all(kept == n_answer + 1 < seq for seq, kept in rows[:n_trimmed])
    assert all(kept == seq for seq, kept in rows[n_trimmed:])
    assert trimmed == pytest.approx(full, rel=1e-4, abs=1e-5)


def test_seeds_draw_disjoint_masks_seed_zero_is_contextcites(tiny):
    from context_cite.utils import _create_mask  # ContextCite's draw of the mask of one ablation seed

    own = contextcite_citer(tiny, ITEM, num_ablations=8, seed=0)
    assert [list(m) for m in own._masks] == [list(_create_mask(3, 0.5, i)) for i in range(8)]
    other = contextcite_citer(tiny, ITEM, num_ablations=8, seed=1)
    assert [list(m) for m in other._masks] == [list(_create_mask(3, 0.5, 8 + i)) for i in range(8)]


def test_run_resumes_and_records_failures(tiny, tmp_path):
    bad = XorItem(file="mem", line=2, lang="en", question="Q?", passages=("A passage.",), answer="[1]",
                  labels=(True,), idxs=(3,))
    settings = store_settings("tiny", "en", XOR_CONFIG.prompt, num_ablations=4, seed=0)
    store = ResumableJSONL(tmp_path / "contextcite.jsonl", settings=settings)
    scores, failed = run_contextcite(tiny, [ITEM, bad], store=store, num_ablations=4, seed=0)
    assert set(scores) == {ITEM.key} and [f.line for f in failed] == [2]
    records = store.records()
    good = next(r for r in records if r["key"] == ITEM.key)
    assert good["n_docs"] == 3 and good["n_forward"] == 4 and len(good["scores"]) == 3
    assert any(r["key"] == bad.key and "error" in r for r in records)
    assert contextcite_scores(records) == {ITEM.key: good["scores"]}

    def no_model():
        raise AssertionError("the model was loaded for a finished item")

    again, failed_again = run_contextcite(no_model, [ITEM], store=ResumableJSONL(store.path, settings=settings),
                                          num_ablations=4, seed=0)
    assert again == {ITEM.key: good["scores"]} and not failed_again


@pytest.mark.slow
def test_real_model_credits_the_passage_holding_the_answer(smollm2, data_dir):
    """Line 49 of the shared val split: "Christopher Columbus", copied from the first of three passages (the one the
    annotators label as supporting it)."""
    from mirage.data import resolve

    item = next(it for it in load_xor_attriqa(resolve("xor-attriqa-match:val"), limit=49).items
                if it.line == 49)
    holding = [i for i, p in enumerate(item.passages) if item.answer.lower() in p.lower()]
    assert holding == [0]
    scores, _, n_forward = contextcite_passage_scores(Mirage(smollm2, config=XOR_CONFIG), item, num_ablations=8)
    assert len(scores) == 3 and all(math.isfinite(s) for s in scores) and n_forward == 8
    assert scores[0] > 0 and scores[0] == max(scores)
