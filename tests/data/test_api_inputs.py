"""Items as the ecosystem gives them: any mapping (datasets rows, LazyRow), documents as strings or as columns, the
common field names (contents, passage, ctxs), and clear errors for what is still wrong; generation overrides on
``Mirage.attribute``."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from mirage import Mirage
from mirage.config import ConfigError
from mirage.data.inputs import Document, InputError, make_item

TWO_DOCS = (Document(title="Eiffel", text="Built in 1889."), Document(title="", text="The Moon orbits the Earth."))


@pytest.mark.parametrize(
    "raw",
    [
        {"question": "q", "docs": [{"title": "Eiffel", "text": "Built in 1889."}, "The Moon orbits the Earth."]},
        {"question": "q", "ctxs": [{"title": "Eiffel", "contents": "Built in 1889."},
                                   {"passage": "The Moon orbits the Earth.", "score": 0.3}]},
        {"question": "q", "docs": {"title": ["Eiffel", None],
                                   "text": ["Built in 1889.", "The Moon orbits the Earth."]}},
        MappingProxyType({"question": "q", "docs": [Document("Eiffel", "Built in 1889."),
                                                    {"title": None, "text": "The Moon orbits the Earth."}]}),
    ],
    ids=["strings", "dpr-names", "columns", "mapping-proxy"],
)
def test_items_in_the_shapes_the_ecosystem_produces(raw):
    assert make_item(raw).docs == TWO_DOCS


def test_a_datasets_row_and_a_lazy_row_are_items():
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"question": datasets.Value("string"), "output": datasets.Value("string"),
                                  "docs": datasets.Sequence({"title": datasets.Value("string"),
                                                             "text": datasets.Value("string")})})
    ds = datasets.Dataset.from_dict({"question": ["q"], "output": [None], "docs": [
        {"title": ["Eiffel", ""], "text": ["Built in 1889.", "The Moon orbits the Earth."]}]}, features=features)
    assert make_item(ds[0]).docs == TWO_DOCS  # a Sequence feature of dicts reads back column by column
    seen = []

    def check(row):
        seen.append((type(row).__name__, make_item(row).docs))
        return {}

    ds.map(check)
    assert seen == [("LazyRow", TWO_DOCS)]


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"question": "q"}, ("item 0, field 'docs': is missing; give a list of {\"title\", \"text\"} objects (or of "
                            "strings) as \"docs\" (or \"ctxs\").")),
        ({"question": "q", "docs": ["a"], "ctxs": ["b"]}, ("item 0, field 'docs': has both 'docs' and 'ctxs'; give "
                                                           "only one (they mean the same).")),
        ({"question": "q", "ctxs": [{"title": "t"}]}, ("item 0, field 'ctxs[0].text': is missing; give the document's "
                                                       "text as \"text\" (or \"contents\" / \"passage\").")),
        ({"question": "q", "docs": [{"text": "a", "contents": "b"}]}, ("item 0, field 'docs[0].text': has both "
                                                                       "'docs[0].text' and 'docs[0].contents'")),
        ({"question": "q", "docs": ["  "]}, "item 0, field 'docs[0]': is empty; give non-blank text."),
        ({"question": "q", "docs": [3]}, ("item 0, field 'docs[0]': must be an object {\"title\", \"text\"} or a "
                                          "string, got int.")),
        ({"question": "q", "docs": {"title": "t", "text": "x"}}, ("item 0, field 'docs': must be a list of documents, "
                                                                  "got an object whose 'title', 'text' are not lists")),
        ({"question": "q", "docs": {"title": ["a"], "text": ["x", "y"]}},
         ("item 0, field 'docs': is given column by column, but the columns differ in length ('title' has 1, 'text' "
         "has 2)")),
        ({"question": "q", "docs": "just one text"}, ("item 0, field 'docs': must be a list of documents, got "
                                                      'string; give a list of {"title", "text"} objects')),
        (["q", ["doc"]], 'item 0: must be an object {"question", "docs", "output"?}, got list.'),
    ],
)
def test_what_is_still_wrong_is_named_with_its_fix(raw, message):
    with pytest.raises(InputError) as err:
        make_item(raw, item=0)
    assert str(err.value).startswith(message)


def test_untitled_documents_render_without_a_title(tiny_causal):
    prepared = Mirage(tiny_causal).prepare({"question": "When?", "docs": ["Built in 1889."]})
    assert "Document [1]: Built in 1889." in prepared.prompt.context


def test_attribute_takes_generation_overrides(tiny_causal):
    m = Mirage(tiny_causal)
    res = m.attribute("When was it built?", ["It was built in 1889."], max_new_tokens=3)
    assert res.config["generation"]["max_new_tokens"] == 3 and len(res.tokens) <= 3
    assert m.config.generation.max_new_tokens == 200  # the Mirage's own config is left as it was
    res = m.attribute("When?", {"title": ["A"], "text": ["It was built in 1889."]}, max_new_tokens=2, sample=True,
                      temperature=0.7, top_p=0.9, seed=7)
    assert res.config["generation"] == {"max_new_tokens": 2, "do_sample": True, "temperature": 0.7, "top_p": 0.9,
                                        "seed": 7}
    assert res.docs == [{"title": "A", "text": "It was built in 1889."}]
    with pytest.raises(ConfigError, match=r"generation\.max_new_tokens must be an integer >= 1, got 0"):
        m.attribute("When?", ["x"], max_new_tokens=0)
    with pytest.raises(ConfigError, match="do_sample=True and sample=False disagree"):
        m.attribute("When?", ["x"], do_sample=True, sample=False)
