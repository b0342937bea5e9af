"""Shared fixtures: tiny seeded models built in memory (with the embedded model's real tokenizer), the embedded
model itself, the example items, and real attribution results computed on the embedded model once per session."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import settings

from mirage.registry import load_plugins

# The same examples on every run: a property test that passes in CI passes again on the next run.
settings.register_profile("mirage", derandomize=True)
settings.load_profile("mirage")

# Under CI a skip that CI could remove is a failure (tests/ci_policy.py).
pytest_plugins = ["ci_policy"]

# The installed plug-ins' registrations (mirage.registry.PLUGIN_GROUP) before any test module is collected, so that
# every registry's conformance test is parametrised over their entries too.
load_plugins()

ROOT = Path(__file__).resolve().parents[1]
#: A document whose text would run as code if a page did not escape it.
SCRIPT_DOC = {
    "title": "Kitchen notes <b>not bold</b>",
    "text": "Raw eggs in cookie dough can carry salmonella. <script>window.__mirage_pwned = 1</script> Heat kills it.",
}


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium() -> str | None:
    """The headless Chromium the browser tests drive: ``$MIRAGE_CHROMIUM``, else ``chromium`` (or
    ``chromium-browser``) on the PATH (scripts/setup.sh --test installs it)."""
    return os.environ.get("MIRAGE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's page tests (playwright)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: run `bash scripts/setup.sh --test`.")
    executable = chromium()
    if executable is None or not Path(executable).exists():
        pytest.fail(f"no chromium ({executable or 'none on the PATH'}): run `bash scripts/setup.sh --test` (apt-get "
                    "install chromium) or set MIRAGE_CHROMIUM to the browser's path.")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        yield b
        b.close()


#: The project's data folder (read-only; tests/data holds slices of it): beside the checkout, or $MIRAGE_TEST_DATA.
SHARED_DATA = Path(os.environ.get("MIRAGE_TEST_DATA") or ROOT.parent / "shared" / "data")
#: The datasets of the data folder, by name (`mirage data list`).
SHARED_DATASETS = ("xor-attriqa-match:train,val,fi,ru", "xor-attriqa-full:train,val,fi,ru", "eli5-alce",
                   "eli5-alce-prompt", "beir-small", "xor-attriqa-fi-ru")


@pytest.fixture(scope="session")
def data_folder() -> Path:
    """The project's data folder (read it only through ``mirage data get --from``); skips when it is not there."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"the project's data folder is not here ({SHARED_DATA.name}; set MIRAGE_TEST_DATA)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def data_cache(data_folder, tmp_path_factory) -> Path:
    """A data cache (a folder for $MIRAGE_DATA_DIR) holding the data folder's datasets, imported once per session as a
    user would (`mirage data get NAME --from FOLDER`, each file checked against its pinned checksum). Skips when the
    data folder is not there. Tests take ``data_dir``, which points mirage at it."""
    from mirage.cli import main

    root = tmp_path_factory.mktemp("data-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MIRAGE_DATA_DIR", str(root))
        assert main(["data", "get", *SHARED_DATASETS, "--from", str(data_folder), "--quiet"]) == 0
    return root


@pytest.fixture
def data_dir(data_cache, monkeypatch) -> Path:
    """$MIRAGE_DATA_DIR set to ``data_cache`` for one test, so that it reads datasets by name
    (``mirage.data.resolve("xor-attriqa-match:fi")``, ``mirage score xor-attriqa xor-attriqa-match:fi``)."""
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(data_cache))
    return data_cache


@pytest.fixture
def data_if_present(request, monkeypatch) -> Path | None:
    """``data_dir`` where the data folder is here; otherwise $MIRAGE_DATA_DIR set to an empty folder, so that code
    with a fallback for a missing dataset takes it (and never reads this machine's own data cache)."""
    if SHARED_DATA.is_dir():
        return request.getfixturevalue("data_dir")
    empty = request.getfixturevalue("tmp_path") / "no-data"
    monkeypatch.setenv("MIRAGE_DATA_DIR", str(empty))
    return None


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module: on a shared two-core machine, two threads per process oversubscribe the cores
    and make real-model runs several times slower (measured in tests/bias/test_cli.py: about 50 s for eight generations
    with one thread, 8 min with two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def example_items() -> list[dict]:
    """The real RAG items of examples/rag_items.json."""
    return json.loads((ROOT / "examples" / "rag_items.json").read_text())


@pytest.fixture(scope="session")
def xor_item(example_items) -> dict:
    """A force-decoded XOR-AttriQA item whose answer (a year) is copied from a document."""
    return next(it for it in example_items if it["id"] == "xor-val-0")


@pytest.fixture(scope="session")
def real_tokenizer():
    """The embedded default model's (fast) tokenizer, from mirage's offline cache."""
    from transformers import AutoTokenizer

    from mirage.attribution.models import embedded_checkpoint

    return AutoTokenizer.from_pretrained(embedded_checkpoint("smollm2-135m-instruct"))


@pytest.fixture(scope="session")
def tiny_causal(real_tokenizer):
    """A tiny seeded Llama model built in memory around the real tokenizer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.models import wrap_model

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    return wrap_model(LlamaForCausalLM(config), real_tokenizer, name="tiny-causal")


@pytest.fixture(scope="session")
def tiny_sliding(real_tokenizer):
    """A tiny seeded Gemma 3 model (sliding-window and global attention layers, a 16-token window: every test prompt
    is longer) built in memory around the real tokenizer."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    from mirage.attribution.models import wrap_model

    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, sliding_window=16,
                              layer_types=["sliding_attention", "full_attention"], max_position_embeddings=2048,
                              pad_token_id=0)
    return wrap_model(Gemma3ForCausalLM(config), real_tokenizer, name="tiny-sliding")


@pytest.fixture(scope="session")
def tiny_seq2seq(real_tokenizer):
    """A tiny seeded T5 encoder-decoder built in memory around the real tokenizer."""
    from transformers import T5Config, T5ForConditionalGeneration

    from mirage.attribution.models import wrap_model

    torch.manual_seed(0)
    config = T5Config(vocab_size=len(real_tokenizer), d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                      num_heads=4, decoder_start_token_id=0, pad_token_id=0, eos_token_id=real_tokenizer.eos_token_id)
    return wrap_model(T5ForConditionalGeneration(config), real_tokenizer, name="tiny-seq2seq")


@pytest.fixture(scope="session")
def smollm2():
    """The default embedded model (smollm2-135m-instruct) as a LoadedModel, loaded offline once."""
    from mirage.attribution.models import load_model

    return load_model("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def embedded_mirage(smollm2):
    """A Mirage on the embedded default model."""
    from mirage import Mirage

    return Mirage(smollm2)


def _short(doc: dict, words: int = 45) -> dict:
    return {"title": doc["title"], "text": " ".join(doc["text"].split()[:words])}


@pytest.fixture(scope="session")
def real_results(embedded_mirage, example_items):
    """Two real results on the embedded model: a short generated ELI5 answer over two shortened documents and a
    document holding ``<script>``, and a force-decoded XOR-AttriQA answer."""
    from mirage import MirageConfig

    items = {it["id"]: it for it in example_items}
    cfg = MirageConfig().replace(generation={"max_new_tokens": 28})
    eli5 = items["eli5-1"]
    generated = embedded_mirage.attribute(eli5["question"], [_short(d) for d in eli5["docs"][:2]] + [SCRIPT_DOC],
                                          config=cfg, id="eli5-1")
    xor = items["xor-val-1"]
    forced = embedded_mirage.attribute(xor["question"], [_short(d, 60) for d in xor["docs"]], answer=xor["output"],
                                       config=cfg, id="xor-val-1")
    return [generated, forced]


@pytest.fixture(scope="session")
def tiny_judges(tmp_path_factory):
    """Two tiny random NLI judges saved as Hugging Face checkpoints: an MNLI-style classifier and a TRUE-style T5."""
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForSequenceClassification,
        T5Config,
        T5ForConditionalGeneration,
    )

    from mirage.attribution.models import embedded_checkpoint

    tok = AutoTokenizer.from_pretrained(embedded_checkpoint("smollm2-135m-instruct"))
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("judges")
    bert = BertForSequenceClassification(BertConfig(
        vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        num_labels=3, id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
        label2id={"entailment": 0, "neutral": 1, "contradiction": 2}))
    t5 = T5ForConditionalGeneration(T5Config(
        vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2, decoder_start_token_id=0,
        pad_token_id=0, eos_token_id=tok.eos_token_id))
    paths = {}
    for name, model in (("bert", bert), ("t5", t5)):
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        paths[name] = root / name
    return paths


@pytest.fixture
def refuse_batched_grad(monkeypatch):
    """Call it to make ``torch.autograd.grad`` fail on batched (``is_grads_batched``) calls from then on, as on a
    model whose operations have no vmap batching rule; unbatched calls go through."""
    def apply() -> None:
        real_grad = torch.autograd.grad

        def no_vmap(*args, **kwargs):
            if kwargs.get("is_grads_batched"):
                raise RuntimeError("Batching rule not implemented for aten::fake_op")
            return real_grad(*args, **kwargs)

        monkeypatch.setattr(torch.autograd, "grad", no_vmap)

    return apply


@pytest.fixture
def registries():
    """Whatever a test registers in mirage's registries (CTI metrics and selectors, CCI methods, document
    attribution methods, citation rules) is gone afterwards."""
    from mirage.registry import CCI_METHODS, CITATION_RULES, CTI_METRICS, CTI_SELECTORS, DOCUMENT_METHODS

    every = (CTI_METRICS, CTI_SELECTORS, CCI_METHODS, DOCUMENT_METHODS, CITATION_RULES)
    saved = [dict(registry) for registry in every]
    yield
    for registry, entries in zip(every, saved):
        registry.clear()
        registry.update(entries)


@pytest.fixture
def one_line_error(capsys):
    """``one_line_error(argv)``: ``mirage ARGV`` fails with exit status 2 and no traceback; its last line of stderr,
    which starts ``mirage: error: ``."""
    from mirage.cli import main

    def run(argv: list[str]) -> str:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        last = err.strip().splitlines()[-1]
        assert last.startswith("mirage: error: ")
        return last

    return run
