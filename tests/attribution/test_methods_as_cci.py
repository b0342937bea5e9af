"""Every document method that scores context tokens also serves as MIRAGE's CCI step (``cci.method`` /
``--cci-method``): CTI selects the tokens as with gradients, the method's own rows of those tokens are the CCI scores,
and the usual selectors and aggregation make sentence citations of them, on the real embedded model. Every CCI method
backed by a document method (``CCIMethodSpec.document_method``) is collected here by registering it."""

from __future__ import annotations

import pytest

from mirage import MirageConfig
from mirage.attribution.cci import CONTEXT_DOCUMENT_METHODS, compute_cci, register_cci_method
from mirage.attribution.forward import model_inputs
from mirage.attribution.methods import attribute_documents, document_inputs
from mirage.attribution.tokenization import tokenize_answer
from mirage.registry import CCI_METHODS

QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "Ikhwan", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud to settle the tribes."},
    {"title": "Weather", "text": "Rain fell in the north of the country during the spring of that year."},
]
ANSWER = "The Ikhwan was formed in 1913 by Ibn Saud."
BACKED = sorted(name for name in CCI_METHODS if CCI_METHODS[name].document_method is not None)


def test_the_context_scoring_document_methods_are_cci_methods():
    assert set(CONTEXT_DOCUMENT_METHODS) <= set(BACKED)
    with pytest.raises(ValueError, match="exactly one"):
        register_cci_method("both", lambda f, x, c: x, document_method="attention_all")


@pytest.mark.parametrize("name", BACKED)
def test_a_document_method_as_the_cci_step(embedded_mirage, name):
    m = embedded_mirage
    cfg = MirageConfig().replace(cci={"method": name, "top_k": 3})
    prep = m.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER}, config=cfg)
    answer = tokenize_answer(m.lm.tokenizer, ANSWER)
    scores = m.score_tokens(prep, answer, config=cfg)
    gradient = m.score_tokens(prep, answer)  # saliency: the same CTI, so the same selected tokens
    assert scores.cti == gradient.cti and scores.cci.selected == gradient.cti.selected and scores.cci.selected
    method = CCI_METHODS[name].document_method
    own = attribute_documents(document_inputs(m, prep, answer.ids, config=cfg), method)
    assert scores.cci.scores == tuple(own.context_scores[i] for i in scores.cci.selected)
    assert scores.cci.contrast_ids == (None,) * len(scores.cci.selected)
    assert scores.cci.scores != gradient.cci.scores
    # end to end: the attribution's cited documents come from these rows (top-3 context tokens per selected token)
    res = m.attribute_item({"question": QUESTION, "docs": DOCS, "output": ANSWER}, config=cfg)
    assert res.config["cci"]["method"] == name
    picked = [t for t in res.tokens if t.context_sensitive]
    assert [t.index for t in picked] == list(scores.cci.selected) and all(t.cited_docs for t in picked)
    assert all(set(t.cited_docs) <= {1, 2} for t in picked) and any(s.mirage_citations for s in res.sentences)
    batch = m.score_batch([prep, prep], [answer, answer], config=cfg)  # item by item: the same rows
    assert [b.cci.scores for b in batch] == [scores.cci.scores] * 2


def test_compute_cci_refuses_a_document_backed_method_in_one_line(embedded_mirage):
    m = embedded_mirage
    cfg = MirageConfig().replace(cci={"method": "attention_last"})
    prep = m.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER})
    ids = tokenize_answer(m.lm.tokenizer, ANSWER).ids
    input_ids, positions = model_inputs(m.lm, prep.tokens.ids, ids)
    with pytest.raises(ValueError, match="Mirage.score_tokens") as err:
        compute_cci(m.lm, input_ids, ids, positions, [0], [0] * len(ids), prep.tokens.context_positions,
                    cfg=cfg.cci)
    assert "\n" not in str(err.value)


def test_the_flag_names_them_and_a_wrong_name_lists_them(capsys):
    from mirage.cli import main
    from mirage.config import ConfigError

    with pytest.raises(SystemExit):
        main(["attribute", "--help"])
    assert "attnlrp" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(ConfigError) as err:
        MirageConfig().replace(cci={"method": "attention"})
    assert all(name in str(err.value) for name in CONTEXT_DOCUMENT_METHODS) and "\n" not in str(err.value)
