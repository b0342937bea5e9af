"""AttnLRP (mirage.attribution.methods.relevance): its rules change the backward pass only and leave the model as it
was, and its relevance is lxt's (the authors' package, efficient mode) on the same tiny Llama and the same inputs.
lxt 2.1 does not import or patch as released under this transformers (its bundled BERT copy imports a module
transformers 5 removed, and its attention patch replaces the attention registry with a plain dict): the parity script
runs it in a subprocess with those two parts stood in for, and says so."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from mirage import Mirage
from mirage.attribution.forward import answer_logits, model_inputs
from mirage.attribution.methods import attribute_documents, document_inputs, lrp_rules

pytestmark = pytest.mark.usefixtures("one_thread")

DOCS = [{"title": "France", "text": "Paris is the capital of France."},
        {"title": "Germany", "text": "Berlin is the capital of Germany."}]


@pytest.fixture(scope="module")
def inputs(tiny_causal):
    return document_inputs(Mirage(tiny_causal), {"question": "What is the capital of France?", "docs": DOCS},
                           "Paris is the capital.")


def test_the_rules_keep_the_forward_pass_and_leave_the_model_as_it_was(inputs):
    model = inputs.lm.model
    kernel = model.config._attn_implementation
    prompt = inputs.prepared.tokens.ids
    plain = answer_logits(inputs.lm, prompt, inputs.answer_ids)
    with lrp_rules(model):
        ruled = answer_logits(inputs.lm, prompt, inputs.answer_ids)
        assert model.config._attn_implementation.startswith("mirage_attnlrp_")
    torch.testing.assert_close(ruled, plain)
    assert model.config._attn_implementation == kernel
    assert all("forward" not in vars(m) and "_norm" not in vars(m) for m in model.modules())


def test_the_relevance_is_not_plain_gradient_times_input(inputs):
    """Without the rules the same product is gradient × input; the rules must change it."""
    from mirage.attribution.forward import embed, logits_from_embeds

    lm = inputs.lm
    seq, positions = model_inputs(lm, inputs.prepared.tokens.ids, inputs.answer_ids)
    embeds = embed(lm, seq).detach().requires_grad_(True)
    logits = logits_from_embeds(lm, embeds, inputs.answer_ids, positions)[0]
    (grad,) = torch.autograd.grad(logits[0, inputs.answer_ids[0]], embeds)
    plain = (embeds[0] * grad[0]).sum(-1)[list(inputs.prepared.tokens.context_positions)].double()
    lrp = torch.tensor(attribute_documents(inputs, "attnlrp").context_scores[0], dtype=torch.float64)
    assert not torch.allclose(lrp, plain, rtol=1e-3, atol=1e-6)


LXT_SCRIPT = textwrap.dedent('''
    import json, sys, types
    import torch
    # lxt 2.1's model table imports its BERT copy (transformers.modeling_attn_mask_utils, gone in transformers 5) and
    # torchvision's ViT: stand-ins for those two entries, which this check does not use
    for name, attrs in {"lxt.efficient.models.bert": ("modeling_bert", "attnLRP"),
                        "lxt.efficient.models.vit_torch": ("vision_transformer", "cp_LRP")}.items():
        stub = types.ModuleType(name)
        setattr(stub, attrs[0], types.ModuleType(name + "_unused"))
        setattr(stub, attrs[1], {})
        sys.modules[name] = stub
    from lxt.efficient import monkey_patch
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.models.llama import modeling_llama
    monkey_patch(modeling_llama)
    class Registry(dict):  # lxt's patch left a dict where transformers 5 calls get_interface
        def get_interface(self, name, default):
            return self.get(name, default)
    modeling_llama.ALL_ATTENTION_FUNCTIONS = Registry(modeling_llama.ALL_ATTENTION_FUNCTIONS)
    given = json.load(open(sys.argv[1]))
    model = LlamaForCausalLM(LlamaConfig(**given["config"]))
    model.load_state_dict(torch.load(given["weights"]))
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    model.config._attn_implementation = given["kernel"]
    embeds = model.get_input_embeddings()(torch.tensor([given["seq"]])).detach().requires_grad_(True)
    logits = model(inputs_embeds=embeds).logits[0]
    rows = []
    for pos, token in zip(given["positions"], given["answer"]):
        (grad,) = torch.autograd.grad(logits[pos, token], embeds, retain_graph=True)
        rows.append((embeds[0] * grad[0]).sum(-1).tolist())
    json.dump(rows, open(sys.argv[2], "w"))
''')


def test_attnlrp_is_lxts_relevance_on_the_same_model_and_inputs(inputs, tmp_path):
    pytest.importorskip("lxt")
    lm = inputs.lm
    seq, positions = model_inputs(lm, inputs.prepared.tokens.ids, inputs.answer_ids)
    torch.save(lm.model.state_dict(), tmp_path / "weights.pt")
    config = {k: v for k, v in lm.model.config.to_dict().items()
              if k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                       "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "hidden_act", "rope_theta",
                       "tie_word_embeddings", "rope_parameters", "head_dim")}
    (tmp_path / "given.json").write_text(json.dumps({
        "config": config, "weights": str(tmp_path / "weights.pt"), "seq": seq, "positions": positions,
        "answer": list(inputs.answer_ids), "kernel": lm.model.config._attn_implementation}))
    (tmp_path / "lxt_run.py").write_text(LXT_SCRIPT)
    done = subprocess.run([sys.executable, str(tmp_path / "lxt_run.py"), str(tmp_path / "given.json"),
                           str(tmp_path / "out.json")], check=False, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = torch.tensor(json.loads((tmp_path / "out.json").read_text()), dtype=torch.float64)
    ours = torch.tensor(attribute_documents(inputs, "attnlrp").context_scores, dtype=torch.float64)
    context = list(inputs.prepared.tokens.context_positions)
    torch.testing.assert_close(ours, theirs[:, context], rtol=1e-4, atol=1e-6)
