"""CTI selectors and citation rules are registries, like CTI metrics and CCI methods: a user-defined one, registered
by name, runs through the real pipeline on the embedded model, and an unknown name is a one-line config error. Their
conformance tests are parametrised over the registries (:data:`~mirage.registry.CTI_SELECTORS`,
:data:`~mirage.registry.CITATION_RULES`): registering one is enough to get it tested."""

import dataclasses
import math

import pytest
import torch

from mirage import MirageConfig
from mirage.attribution.cti import CTI_SELECTORS, register_cti_selector, select_tokens
from mirage.config import AggregationConfig, ConfigError, CTIConfig
from mirage.pipeline import CitationInputs, register_citation_rule
from mirage.registry import CITATION_RULES

QUESTION = "When was the Ikhwan party formed?"
DOCS = [
    {"title": "Ikhwan", "text": "The Ikhwan was a Wahhabi militia formed in 1913 by Ibn Saud to settle the tribes."},
    {"title": "Weather", "text": "Rain fell in the north of the country during the spring of that year."},
]
ANSWER = "The Ikhwan was formed in 1913 by Ibn Saud. It settled the tribes."


def _last_token(scores, cfg):
    return [len(scores) - 1], float(scores[-1])


def test_a_registered_selector_chooses_the_context_sensitive_tokens(embedded_mirage, registries):
    with pytest.raises(ConfigError, match=r"^cti\.selector='test_last' is not valid; choose one of 'std', "
                                          r"'threshold' \(or register one with .*register_cti_selector\)\.$"):
        CTIConfig(selector="test_last")
    register_cti_selector("test_last", _last_token)
    with pytest.raises(ValueError, match="already registered"):
        register_cti_selector("test_last", _last_token)
    cfg = MirageConfig().replace(cti={"selector": "test_last"})
    assert cfg.to_dict()["cti"]["selector"] == "test_last"
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    n = len(res.tokens)
    assert n > 2 and [i for i, t in enumerate(res.tokens) if t.context_sensitive] == [n - 1]
    assert res.cti_threshold == pytest.approx(res.tokens[-1].cti)
    # CCI ran for that token alone: only it has context cues
    assert [i for i, t in enumerate(res.tokens) if t.top_context] == [n - 1]
    assert res.config["cti"]["selector"] == "test_last"
    # the built-ins still select as before: under std the last token is not the only one
    default = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER)
    assert [i for i, t in enumerate(default.tokens) if t.context_sensitive] != [n - 1]


def test_built_in_selectors_are_registered_and_select_tokens_uses_them():
    assert list(CTI_SELECTORS)[:2] == ["std", "threshold"]
    scores = [0.1, 2.0, 0.3, 1.5]
    assert select_tokens(scores, CTIConfig()) == CTI_SELECTORS["std"](torch.tensor(scores, dtype=torch.float64),
                                                                      CTIConfig())
    assert select_tokens(scores, CTIConfig(threshold=1.0)) == ((1, 3), 1.0)
    assert select_tokens([], CTIConfig(selector="threshold", threshold=1.0))[0] == ()


@pytest.mark.parametrize("name", sorted(CTI_SELECTORS))
def test_every_selector_gives_ascending_token_indices_and_the_threshold_they_passed(name):
    """The selector's contract (:data:`mirage.attribution.cti.CTISelectorFn`) on answers of one to five tokens."""
    cfg = CTIConfig(selector=name, threshold=0.5)
    for scores in ([0.1, 2.0, 0.3, 1.5], [0.7], [-1.0, 0.2, 3.0, 0.0, 0.4], [0.5, 0.5]):
        raw, threshold = CTI_SELECTORS[name](torch.tensor(scores, dtype=torch.float64), cfg)
        picked = [int(i) for i in raw]
        assert picked == sorted(set(picked)) and all(0 <= i < len(scores) for i in picked), (scores, raw)
        assert math.isnan(threshold) or all(abs(scores[i]) >= float(threshold) - 1e-9 for i in picked)
        assert select_tokens(scores, cfg) == (tuple(picked), float(threshold))
    assert select_tokens([], cfg)[0] == ()


@pytest.mark.parametrize("name", sorted(CITATION_RULES))
def test_every_citation_rule_cites_the_items_documents(embedded_mirage, name):
    """The rule's contract (:data:`mirage.pipeline.CitationRuleFn`) through the real pipeline: one sentence per
    answer sentence, each citing distinct documents of the item (at most ``max_citations``), with one doc_score per
    document or none."""
    cfg = MirageConfig().replace(aggregation={"rule": name})
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    assert res.config["aggregation"]["rule"] == name and len(res.sentences) == 2
    for sentence in res.sentences:
        cited = sentence.mirage_citations
        assert len(set(cited)) == len(cited) <= cfg.aggregation.max_citations and set(cited) <= {1, 2}, cited
        assert sentence.doc_scores == [] or len(sentence.doc_scores) == len(DOCS)


def test_a_registered_citation_rule_gives_the_sentences_citations(embedded_mirage, registries):
    with pytest.raises(ConfigError, match=r"^aggregation\.rule='test_first' is not valid; choose one of 'reference', "
                                          r"'likelihood', 'selfcite', 'selfcite_answer' \(or register one with "
                                          r".*register_citation_rule\)\.$"):
        AggregationConfig(rule="test_first")
    seen = []

    def cite_first(inputs: CitationInputs):
        seen.append(inputs)
        return [dataclasses.replace(s, mirage_citations=[1]) for s in inputs.sentences]

    register_citation_rule("test_first", cite_first)
    cfg = MirageConfig().replace(aggregation={"rule": "test_first"})
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    assert len(res.sentences) == 2 and all(s.mirage_citations == [1] for s in res.sentences)
    assert res.config["aggregation"]["rule"] == "test_first" and res.timings["test_first"] >= 0
    (inputs,) = seen  # the rule was given this answer's own scores and the reference rule's sentences
    assert inputs.text == res.answer and inputs.config == cfg and inputs.mirage is embedded_mirage
    assert list(inputs.scores.cti.scores) == [t.cti for t in res.tokens]
    reference = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER)
    assert [s.mirage_citations for s in inputs.sentences] == [s.mirage_citations for s in reference.sentences]
    assert "reference" not in reference.timings and "learned" not in reference.timings


def test_unknown_names_are_one_line_errors_naming_the_nearest():
    with pytest.raises(ConfigError) as err:
        CTIConfig(selector="stdd")
    assert str(err.value) == ("cti.selector='stdd' is not valid; choose one of 'std', 'threshold' (or register one "
                              "with mirage.attribution.cti.register_cti_selector); did you mean 'std'?")
    with pytest.raises(ConfigError, match=r"aggregation\.rule='refrence' is not valid; .*did you mean 'reference'\?$"):
        MirageConfig.from_dict({"aggregation": {"rule": "refrence"}})
    with pytest.raises(ConfigError, match=r"aggregation\.rule=\['reference'\] is not valid"):
        AggregationConfig(rule=["reference"])
    with pytest.raises(ConfigError, match="cti.selector='threshold' needs cti.threshold"):
        CTIConfig(selector="threshold")


def test_the_selfcite_rule_cites_each_sentence_its_best_rewarded_set(embedded_mirage):
    """``--citation-rule selfcite``: per sentence, of every set of one or two documents, the one whose SelfCite reward
    over that sentence's tokens is highest (computed here with the method's own ``best_citation`` on the same
    answer), cited where it is positive; its doc_scores are each document's reward cited alone; no sentence cites
    more than two documents."""
    from mirage.attribution.aggregation import tokens_by_sentence
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import best_citation, citation_rewards
    from mirage.attribution.tokenization import tokenize_answer

    cfg = MirageConfig().replace(aggregation={"rule": "selfcite"})
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    assert res.config["aggregation"]["rule"] == "selfcite" and res.timings["selfcite"] > 0
    prep = embedded_mirage.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER}, config=cfg)
    inputs = document_inputs(embedded_mirage, prep, res.answer, config=cfg)
    answer = tokenize_answer(embedded_mirage.lm.tokenizer, res.answer)
    members = tokens_by_sentence(res.answer, [(s.start, s.end) for s in res.sentences],
                                 [a for a, _b in answer.offsets], range(len(answer.ids)))
    assert len(res.sentences) == 2 and all(members)
    for sentence, tokens in zip(res.sentences, members):
        ranked = best_citation(inputs, max_size=2, tokens=tokens)
        assert sentence.mirage_citations == (list(ranked.best) if ranked.rewards[0] > 0 else [])
        assert len(sentence.mirage_citations) <= 2
        alone = citation_rewards(inputs, [[1], [2]], tokens=tokens)
        assert sentence.doc_scores == pytest.approx(alone, abs=1e-5)
    # the Ikhwan sentence is made likelier by the Ikhwan document, not by the weather one
    assert res.sentences[0].doc_scores[0] > res.sentences[0].doc_scores[1]
    with pytest.raises(ValueError, match="tokens"):
        citation_rewards(inputs, [[1]], tokens=[])


def test_the_selfcite_answer_rule_cites_one_set_for_the_whole_answer(embedded_mirage):
    """``--citation-rule selfcite_answer``: the set best-rewarded over all the answer's tokens (the method's own
    ``best_citation`` with no ``tokens``), cited by each sentence whose own reward for it is positive, so the answer's
    citations are that set at most; doc_scores are the per-sentence rule's (the same passes)."""
    from mirage.attribution.methods import document_inputs
    from mirage.attribution.methods.selfcite import best_citation, citation_rewards

    cfg = MirageConfig().replace(aggregation={"rule": "selfcite_answer"})
    res = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER, config=cfg)
    per_sentence = embedded_mirage.attribute(QUESTION, DOCS, answer=ANSWER,
                                             config=MirageConfig().replace(aggregation={"rule": "selfcite"}))
    assert res.timings["selfcite_answer"] > 0
    prep = embedded_mirage.prepare({"question": QUESTION, "docs": DOCS, "output": ANSWER}, config=cfg)
    inputs = document_inputs(embedded_mirage, prep, res.answer, config=cfg)
    whole = best_citation(inputs, max_size=2).best
    assert len(res.sentences) == 2
    cited = [sentence.mirage_citations for sentence in res.sentences]
    assert all(c in ([], list(whole)) for c in cited) and any(cited)
    assert [s.doc_scores for s in res.sentences] == [s.doc_scores for s in per_sentence.sentences]
    for sentence in res.sentences:  # cited where the whole answer's set makes this sentence likelier
        own = sentence.doc_scores if len(whole) == 1 else None
        if own is not None:
            assert bool(sentence.mirage_citations) == (own[whole[0] - 1] > 0)
    assert citation_rewards(inputs, [list(whole)])[0] == max(citation_rewards(inputs, [[1], [2], [1, 2]]))
