"""Memory that scales (#42): the differentiable pass checkpointed when the whole graph would not fit, CCI's backward
passes batched by a memory budget, the attention kernel's fallback named in the result, and a prompt that cannot fit
refused in one line (never an out-of-memory traceback)."""

from __future__ import annotations

import copy
import dataclasses
import gc
import json
from pathlib import Path

import pytest
import torch

from mirage import Mirage
from mirage.attribution.forward import frozen_parameters
from mirage.attribution.models import load_model, wrap_model
from mirage.attribution.planner import (
    CPU_ALLOCATOR_SHARE,
    MemoryBudgetError,
    activation_bytes,
    backward_row_bytes,
    checkpointed_layers,
    graph_bytes,
    graph_upper_bytes,
    memory_in_use,
    plan_graph,
    return_freed_memory,
    saved_tensor_bytes,
)
from mirage.cli import main
from mirage.runs.experiment import ExperimentConfig

DATA = Path(__file__).parents[1] / "data"


def _docs(n: int) -> list[dict]:
    """The first ``n`` retrieved documents of the ELI5 sample (about 130 tokens each)."""
    rows = json.loads((DATA / "eli5_alce" / "eli5_eval_sample.json").read_text())
    docs = [{"title": d["title"], "text": d["text"]} for row in rows for d in row["docs"]]
    return docs[:n]


ANSWER = ("Startups are valued on expected future profits: investors buy a share of the company and expect to "
          "be repaid when it is sold or listed.")


def _fresh(lm, **changes):
    """A LoadedModel sharing the session's weights with its own settings (the fixture is never changed)."""
    return dataclasses.replace(lm, passes={"attention": lm.passes["attention"]}, batched_backward=None, **changes)


def _in_use(lm) -> int:
    """Memory in use as the planner counts it under a budget: after the allocator gave back what is free (an
    earlier test's freed memory would otherwise count here and not there)."""
    return_freed_memory(lm.device)
    return memory_in_use(lm.device)


def _saved_bytes(lm, ids, *, checkpoint: bool) -> int:
    """Bytes the autograd graph of one differentiable pass keeps for the backward pass (activations: the weights
    it also refers to cost nothing more)."""
    total = 0
    weights = {p.data_ptr() for p in lm.model.parameters()}

    def pack(t):
        nonlocal total
        if t.data_ptr() not in weights:
            total += t.numel() * t.element_size()
        return t

    with frozen_parameters(lm.model):
        leaf = lm.model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), checkpointed_layers(lm.model, checkpoint):
            out = lm.model(inputs_embeds=leaf, use_cache=False, logits_to_keep=1).logits
        (grad,) = torch.autograd.grad(out[0, -1].log_softmax(-1)[42], leaf)
    return total, grad


def test_checkpointed_layers_keep_a_fraction_of_the_activations_and_give_the_same_gradient(smollm2, one_thread):
    ids = torch.tensor([smollm2.tokenizer(" ".join(d["text"] for d in _docs(2)))["input_ids"]])
    full, grad_full = _saved_bytes(smollm2, ids, checkpoint=False)
    light, grad_light = _saved_bytes(smollm2, ids, checkpoint=True)
    assert light < full / 10  # each block's input alone (30 blocks of smollm2-135m)
    assert torch.equal(grad_full, grad_light)
    # the estimate the budget plans with is what the graph really keeps (measured on short passes, then scaled; a
    # tensor saved by two operations is kept once, which the count above does not know)
    estimate = graph_bytes(smollm2, ids.shape[1], checkpoint=False)
    distinct = sum(saved_tensor_bytes(smollm2, ids.shape[1] - 1))
    assert activation_bytes(smollm2).source == "measured with sdpa"
    assert 0.98 < estimate / distinct < 1.02 and distinct < full, (estimate, distinct, full)
    # the model is left as it was: no wrapper remains on any block
    assert not any("forward" in vars(m) for m in smollm2.model.modules() if type(m).__name__.endswith("DecoderLayer"))


def test_plan_graph_checkpoints_under_a_budget_and_refuses_in_one_line_when_even_that_cannot_fit(smollm2):
    seq = 2000
    full = graph_bytes(smollm2, seq, checkpoint=False)
    light = graph_bytes(smollm2, seq, checkpoint=True)
    row = backward_row_bytes(smollm2, seq)
    now = _in_use(smollm2)
    roomy = _fresh(smollm2, memory_budget=int((now + full + 4 * row) / 0.9) + 2**30)  # 10 % of a budget is kept free
    assert plan_graph(roomy, seq).checkpoint is False and roomy.passes["checkpointing"] == "off"
    tight = _fresh(smollm2, memory_budget=int((now + light + 3 * row) / 0.9) + 2**28)
    assert full > tight.memory_budget * 0.9 - now  # the whole graph does not fit this budget
    assert plan_graph(tight, seq).checkpoint is True and tight.passes["checkpointing"] == "on"
    tiny = _fresh(smollm2, memory_budget=now + light // 10)
    with pytest.raises(MemoryBudgetError) as err:
        plan_graph(tiny, seq)
    message = str(err.value)
    assert "\n" not in message and "2000 tokens" in message and "memory budget" in message
    assert "--memory-budget" in message and "gradient checkpointing" in message


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_a_pass_far_below_its_budget_is_planned_from_the_upper_bound_without_probes(name, request, monkeypatch):
    """A small model's ~1,000-token pass on a CPU: the size-based upper bound (graph_upper_bytes) is above what the
    probes measure, and it fits, so plan_graph decides "no checkpointing" (what the measured estimate decides too)
    without running a probe pass; a budget the bound does not fit is measured as before."""
    from mirage.attribution import planner

    lm = request.getfixturevalue("smollm2") if name == "smollm2" else load_model("gemma3-270m")
    seq = 1000
    for rows in (1, 2):
        upper, upper_row = graph_upper_bytes(lm, seq, rows)
        assert upper >= graph_bytes(lm, seq, checkpoint=False, rows=rows)
        assert upper_row >= backward_row_bytes(lm, seq, rows)
    probes: list[int] = []  # every call for the measured estimate (it probes the first time, then reads its cache)
    real = planner.activation_bytes
    monkeypatch.setattr(planner, "activation_bytes", lambda *a, **k: probes.append(1) or real(*a, **k))
    monkeypatch.setenv("MIRAGE_CPU_ALLOCATOR", "auto")
    fresh = _fresh(lm)
    plan = plan_graph(fresh, seq)
    assert probes == [] and plan.checkpoint is False and fresh.passes["checkpointing"] == "off"
    # what the measured estimate would decide: it fits the room the bound left, with the bound's own bytes
    assert graph_bytes(lm, seq, checkpoint=False) + backward_row_bytes(lm, seq) <= plan.room + sum(
        graph_upper_bytes(lm, seq))
    probes.clear()
    tight = _fresh(lm, memory_budget=_in_use(lm) + sum(graph_upper_bytes(lm, seq)) // 2)
    plan_graph(tight, seq)
    assert probes, "a budget the bound does not fit is planned from the measured estimate"


def test_cpu_passes_near_the_free_memory_return_freed_memory_without_a_budget(smollm2, monkeypatch):
    """Without a budget, a CPU pass that needs more than CPU_ALLOCATOR_SHARE of the free memory has glibc return
    freed blocks (they add much to a long pass's peak, benchmarks/cpu_allocator.py); one with room to spare
    leaves the allocator alone (returning costs time). MIRAGE_CPU_ALLOCATOR=return / keep decide for every pass; any
    other value is refused in one line."""
    from mirage.attribution import planner

    seq = 2000
    need = graph_bytes(smollm2, seq, checkpoint=False) + backward_row_bytes(smollm2, seq)
    monkeypatch.delenv("MIRAGE_CPU_ALLOCATOR", raising=False)

    def planned(free: int) -> dict:
        monkeypatch.setattr(planner, "free_memory", lambda device: free)
        lm = _fresh(smollm2)
        plan_graph(lm, seq)
        return lm.passes

    assert "allocator" not in planned(int(need / CPU_ALLOCATOR_SHARE) + 2**20)  # room to spare
    assert planned(int(need / CPU_ALLOCATOR_SHARE) - 2**20)["allocator"].startswith(
        "glibc: blocks of 128 KiB or more returned when freed")
    monkeypatch.setenv("MIRAGE_CPU_ALLOCATOR", "keep")
    assert "allocator" not in planned(int(need / CPU_ALLOCATOR_SHARE) - 2**20)
    monkeypatch.setenv("MIRAGE_CPU_ALLOCATOR", "return")
    assert "allocator" in planned(100 * need)
    monkeypatch.setenv("MIRAGE_CPU_ALLOCATOR", "off")
    with pytest.raises(ValueError, match=r"^MIRAGE_CPU_ALLOCATOR='off': give 'auto'") as err:
        plan_graph(_fresh(smollm2), seq)
    assert "\n" not in str(err.value)


def test_without_a_budget_a_cpu_pass_is_planned_within_the_default_budget(smollm2, monkeypatch):
    """No --memory-budget on a CPU: a prompt that fills the context window (``mirage bias --ndocs 1000``) is planned
    within half of the memory in use and available (CPU_DEFAULT_BUDGET_SHARE), not 80 % of what is free: with the
    available memory forced to a little more than the whole graph needs from 80 % of it, the graph is checkpointed
    and CCI's batches stay within what the default leaves. The model's own budget stays None (a pass too large for
    the default is still tried), and a GPU has no default."""
    from mirage.attribution import cci, planner

    seq = smollm2.context_window
    full = graph_bytes(smollm2, seq, checkpoint=False) + backward_row_bytes(smollm2, seq)
    free = int(full / 0.8) + 2**30  # 80 % of it holds the whole graph: what ran before there was a default
    monkeypatch.setattr(planner, "free_memory", lambda device: free)
    monkeypatch.setattr(cci, "free_memory", lambda device: free)
    monkeypatch.setenv("MIRAGE_CPU_ALLOCATOR", "keep")  # the allocator is not what this test is about
    lm = _fresh(smollm2)
    plan = plan_graph(lm, seq)
    assert lm.memory_budget is None and plan.checkpoint is True and lm.passes["checkpointing"] == "on"
    budget = planner.default_memory_budget(lm.device)
    assert budget == pytest.approx(planner.CPU_DEFAULT_BUDGET_SHARE * (memory_in_use(lm.device) + free), rel=0.01)
    light = graph_bytes(smollm2, seq, checkpoint=True)
    assert plan.room + light <= budget * 0.9 - memory_in_use(lm.device) + 2**26  # planned within the default
    row = backward_row_bytes(smollm2, seq)
    width = cci.auto_batch_size(lm, seq, 64, checkpointed=True)
    assert width * row <= planner.default_budget_room(lm) + 2**26 < free // 2  # the default, not half the free
    assert planner.default_memory_budget(torch.device("meta")) is None


def test_a_budget_changes_how_the_passes_run_not_the_scores(smollm2, one_thread):
    """~650 prompt tokens under a budget the whole graph does not fit: checkpointed, CCI in small batches; the same
    CTI, the same CCI scores (to float rounding) and the same citations as without a budget, and the result names
    how its passes ran."""
    docs = _docs(4)
    plain = Mirage(_fresh(smollm2))
    base = plain.attribute("How are startups valued so highly without profits?", docs, answer=ANSWER)
    prep = plain.prepare({"question": "How are startups valued so highly without profits?", "docs": docs})
    seq = len(prep.tokens.ids) + 40
    budget = int((_in_use(smollm2) + graph_bytes(smollm2, seq, checkpoint=True)
                  + 3 * backward_row_bytes(smollm2, seq) + 300 * 2**20) / 0.9)  # 10 % of a budget is kept free
    assert budget * 0.9 - _in_use(smollm2) < graph_bytes(smollm2, seq, checkpoint=False)
    limited = Mirage(_fresh(smollm2, memory_budget=budget))
    res = limited.attribute("How are startups valued so highly without profits?", docs, answer=ANSWER)
    assert res.versions["checkpointing"] == "on" and base.versions["checkpointing"] == "off"
    assert "vmapped backward" in res.versions["cci_backward"] and res.versions["attention"] == "sdpa"
    # the checkpointed graph takes several targets per pass (each pass recomputes the blocks); the plain one, one
    assert int(res.versions["cci_backward"].split(", ")[-1].split()[0]) >= 3, res.versions["cci_backward"]
    assert "1 target(s) per pass" in base.versions["cci_backward"]
    assert res.versions["allocator"].startswith("glibc: blocks of") and "allocator" not in base.versions
    assert [t.cti for t in res.tokens] == [t.cti for t in base.tokens]
    assert [t.context_sensitive for t in res.tokens] == [t.context_sensitive for t in base.tokens]
    assert any(t.context_sensitive for t in res.tokens)
    for a, b in zip(res.tokens, base.tokens):
        assert [c.start for c in a.top_context] == [c.start for c in b.top_context]
        assert [c.score for c in a.top_context] == pytest.approx([c.score for c in b.top_context], rel=1e-4)
    assert [s.mirage_citations for s in res.sentences] == [s.mirage_citations for s in base.sentences]


def _tiny(real_tokenizer, family: str, **extra):
    """A tiny seeded model of ``family`` (llama, gemma3 or mistral) around the real tokenizer, with its attention
    kernel."""
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        MistralConfig,
        MistralForCausalLM,
    )

    torch.manual_seed(0)
    sizes = {"vocab_size": len(real_tokenizer), "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 4096}
    if family == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**sizes, head_dim=8, **extra))
    elif family == "mistral":
        model = MistralForCausalLM(MistralConfig(**sizes, **extra))
    else:
        model = LlamaForCausalLM(LlamaConfig(**sizes, **extra))
    return wrap_model(model.eval(), real_tokenizer, name=f"tiny-{family}")


@pytest.mark.parametrize("family,kernel,extra", [
    ("llama", "sdpa", {}),
    ("llama", "eager", {}),  # the attention probabilities: a term in the square of the length
    ("gemma3", "sdpa", {"sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"]}),
])
def test_the_estimates_are_measured_on_short_passes_and_hold_at_length(real_tokenizer, family, kernel, extra):
    """activation_bytes counts what autograd saves on three short passes (past the sliding window, where masks are
    saved) and fits a quadratic in the length: the estimate at 600 tokens is what a 600-token pass saves."""
    lm = _tiny(real_tokenizer, family, **extra)
    lm.model.set_attn_implementation(kernel)
    act = activation_bytes(lm)
    where = ", past the sliding window" if family == "gemma3" else ""
    assert act.source == f"measured with {kernel}{where}" and act.blocks == 2
    assert (act.block_square > 0) == (kernel == "eager" or family == "gemma3")
    saved = sum(saved_tensor_bytes(lm, 600))  # the distinct tensors a long pass saves
    estimate = graph_bytes(lm, 600, checkpoint=False)
    assert 0.98 < estimate / saved < 1.02, (estimate, saved)
    # Two rows left-padded into one pass (batched_attribution_graph) keep the padding mask, and under sdpa the mask
    # turns off the kernel's shared key/value heads: more than twice one row, which the padded probe counts.
    padded = sum(saved_tensor_bytes(lm, 600, padded=True))
    assert (padded > 1.05 * 2 * saved) == (kernel == "sdpa")
    estimate = graph_bytes(lm, 600, checkpoint=False, rows=2)
    assert 0.98 < estimate / padded < 1.02, (estimate, padded)
    # the bound plan_graph may plan with instead of probing is above what these passes really keep
    for rows, n in ((1, 600), (2, 600), (1, 100)):
        upper, upper_row = graph_upper_bytes(lm, n, rows)
        assert upper >= graph_bytes(lm, n, checkpoint=False, rows=rows) and upper_row >= backward_row_bytes(lm, n, rows)


@pytest.mark.parametrize("family", ["gemma3", "mistral"])
def test_a_long_sliding_window_is_probed_on_short_passes(real_tokenizer, family):
    """Past a sliding window the attention masks are saved, at a size set by the length alone: the probe counts them
    with the window shrunk, on passes no longer than its short ones (a 7B model's window is thousands of tokens,
    and probes that long would need more memory than the pass planned). Estimates hold within the window and past
    it, and the model's window is restored."""
    layers = {"layer_types": ["sliding_attention", "full_attention"]} if family == "gemma3" else {}
    lm = _tiny(real_tokenizer, family, sliding_window=256, **layers)
    lm.model.set_attn_implementation("sdpa")
    lengths: list[int] = []
    hook = lm.model.register_forward_pre_hook(
        lambda _m, _a, kw: lengths.append(kw["inputs_embeds"].shape[1]), with_kwargs=True)
    acts = {(rows, n): activation_bytes(lm, padded=rows > 1, seq=n) for rows in (1, 2) for n in (200, 600)}
    hook.remove()
    assert lengths and max(lengths) <= 114, lengths  # the longest probe: 112 prompt tokens and a 2-token answer
    assert acts[1, 200].source == "measured with sdpa, within the sliding window"
    assert acts[1, 600].source == "measured with sdpa, past the sliding window"
    # within the window sdpa needs no mask: less per token than past it, where the mask grows with the length
    assert acts[1, 200].block_square < acts[1, 600].block_square
    windows = {getattr(m, "sliding_window", None) for m in [lm.model.config, *lm.model.modules()]} - {None}
    assert windows == {256}, windows
    for rows, n in acts:
        saved = sum(saved_tensor_bytes(lm, n, padded=rows > 1))
        estimate = graph_bytes(lm, n, checkpoint=False, rows=rows)
        assert 0.98 < estimate / saved < 1.02, (rows, n, estimate, saved)
        assert graph_upper_bytes(lm, n, rows)[0] >= estimate, (rows, n)


def _live_tensor_bytes() -> int:
    gc.collect()
    seen, total = set(), 0
    for obj in gc.get_objects():
        if type(obj) in (torch.Tensor, torch.nn.Parameter) and obj.device.type != "meta":
            key = obj.untyped_storage().data_ptr()
            if key not in seen:
                seen.add(key)
                total += obj.untyped_storage().nbytes()
    return total


def test_the_probe_passes_leave_nothing_behind(real_tokenizer):
    """The probe's passes are never run backward: what they saved must be freed with them (a saved output kept as
    itself would hold its own graph node, a cycle the garbage collector cannot see, and each probe pass would stay
    in memory: on a model with a sliding window the probe runs past the window)."""
    lm = _tiny(real_tokenizer, "gemma3", sliding_window=64, layer_types=["sliding_attention", "full_attention"])
    lm.model.set_attn_implementation("sdpa")
    saved_tensor_bytes(lm, 200)  # anything created once (rotary tables) is created here
    before = _live_tensor_bytes()
    for padded in (False, True, False):
        assert sum(saved_tensor_bytes(lm, 200, padded=padded)) > 0
    assert _live_tensor_bytes() - before < 64 * 1024, "a probe pass stayed in memory"


def test_cci_batches_without_a_budget_follow_the_free_memory(smollm2, monkeypatch):
    from mirage.attribution import cci

    seq = 3000
    row = backward_row_bytes(smollm2, seq)
    monkeypatch.setattr(cci, "free_memory", lambda device: 2 * 40 * row + 10)
    lm = _fresh(smollm2)
    assert cci.auto_batch_size(lm, seq, 64, checkpointed=True) == 40  # half the free memory, one block's each
    assert cci.auto_batch_size(lm, seq, 12, checkpointed=True) == 12
    # on a CPU a graph that is not checkpointed gains nothing from wider passes: one target each
    assert cci.auto_batch_size(lm, seq, 64) == 1
    monkeypatch.setattr(cci, "free_memory", lambda device: row)
    assert cci.auto_batch_size(lm, seq, 64, checkpointed=True) == 1


def test_cci_batches_shrink_with_the_budget(smollm2):
    from mirage.attribution.cci import auto_batch_size

    seq = 3000
    row = backward_row_bytes(smollm2, seq)
    now = _in_use(smollm2)

    def width(budget: int) -> int:  # a checkpointed graph, as a budget makes (otherwise one target per pass here)
        return auto_batch_size(_fresh(smollm2, memory_budget=budget), seq, 64, checkpointed=True)

    assert width(int((now + 40 * row) / 0.9) + 2**28) >= 30
    assert width(now + 3 * row) <= 3
    assert width(now // 2) == 1  # never fewer than one


def _unbatchable_attention():
    """An attention kernel whose backward pass vmap cannot batch (it reads a value with ``.item()``), standing in for
    the GPU kernels (FlashAttention, cuDNN) whose backward has no batching rule: no such kernel runs on a CPU."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    class Probe(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            if grad.abs().sum().item() < 0:  # vmap refuses .item() on a batched tensor
                return grad * 0
            return grad

    def attention(module, query, key, value, attention_mask, **kwargs):
        out, weights = sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
        return Probe.apply(out), weights

    AttentionInterface.register("mirage_test_unbatchable", attention)
    return "mirage_test_unbatchable"


def test_attention_without_a_batched_backward_falls_back_to_eager_and_says_so(real_tokenizer, xor_item):
    from transformers import LlamaConfig, LlamaForCausalLM

    kernel = _unbatchable_attention()
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    torch.manual_seed(0)
    eager = LlamaForCausalLM(copy.deepcopy(config)).eval()  # each its own config: the kernel is set on it
    eager.set_attn_implementation("eager")
    fused = LlamaForCausalLM(copy.deepcopy(config)).eval()
    fused.load_state_dict(eager.state_dict())
    fused.set_attn_implementation(kernel)
    args = (xor_item["question"], xor_item["docs"])
    reference = Mirage(wrap_model(eager, real_tokenizer)).attribute(*args, answer=xor_item["output"])
    m = Mirage(wrap_model(fused, real_tokenizer))
    res = m.attribute(*args, answer=xor_item["output"])
    assert res.versions["attention"].startswith(f"eager (fallback: vmap cannot batch {kernel}'s backward")
    assert m.lm.batched_backward is True  # the one-graph path kept, with eager attention
    assert [t.context_sensitive for t in res.tokens] == [t.context_sensitive for t in reference.tokens]
    for a, b in zip(res.tokens, reference.tokens):
        assert [c.score for c in a.top_context] == pytest.approx([c.score for c in b.top_context], rel=1e-4)


def test_without_a_batched_backward_a_long_prompt_keeps_its_kernel_where_eager_attention_would_not_fit(
        real_tokenizer, xor_item):
    """The fallback above costs eager attention's square of the length in every block: where that does not fit the
    budget (a 32k-token prompt on a GPU would need 65 GiB per block), the kernel stays and each target gets its own
    backward pass, with the same scores."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.planner import graph_bytes, graph_fits

    kernel = _unbatchable_attention()
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    torch.manual_seed(0)
    eager = LlamaForCausalLM(copy.deepcopy(config)).eval()
    eager.set_attn_implementation("eager")
    fused = LlamaForCausalLM(copy.deepcopy(config)).eval()
    fused.load_state_dict(eager.state_dict())
    fused.set_attn_implementation(kernel)
    docs = [*xor_item["docs"], *xor_item["docs"], *xor_item["docs"]]  # a longer prompt: eager's square grows
    args = (xor_item["question"], docs)
    reference = Mirage(wrap_model(eager, real_tokenizer)).attribute(*args, answer=xor_item["output"])
    lm = wrap_model(fused, real_tokenizer)
    seq = len(real_tokenizer(reference.prompt)["input_ids"]) + len(reference.tokens)
    square = graph_bytes(wrap_model(eager, real_tokenizer), seq, checkpoint=True)
    linear = graph_bytes(lm, seq, checkpoint=True)
    assert square > 10 * linear, (square, linear)  # the budget below tells the two apart by a wide margin
    lm.memory_budget = int((_in_use(lm) + (square * linear) ** 0.5 + 4 * 2**20) / 0.9)
    assert graph_fits(lm, seq)
    m = Mirage(lm)
    res = m.attribute(*args, answer=xor_item["output"])
    assert res.versions["attention"].startswith(f"{kernel} (vmap cannot batch its backward")
    assert "eager attention would not fit" in res.versions["attention"]
    assert m.lm.batched_backward is False and fused.config._attn_implementation == kernel
    assert [t.context_sensitive for t in res.tokens] == [t.context_sensitive for t in reference.tokens]
    for a, b in zip(res.tokens, reference.tokens):
        assert [c.score for c in a.top_context] == pytest.approx([c.score for c in b.top_context], rel=1e-4)


def test_a_checkpointed_block_is_recomputed_in_the_attention_kernels_of_the_forward_pass(real_tokenizer):
    """On a GPU mirage holds a model's forward pass to attention kernels other than cuDNN's; the backward pass
    recomputes a checkpointed block outside that forward pass, where cuDNN's kernel was free to run (it saves other
    tensors than the forward pass's kernel, and the checkpoint's check then fails: seen on an H200 at 32k tokens).
    No GPU here: the flag is read inside every attention call of the forward pass and of the recomputation."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from mirage.attribution.models import without_cudnn_attention

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = without_cudnn_attention(LlamaForCausalLM(config).eval())
    ids = torch.tensor([real_tokenizer("The Ikhwan were formed in 1913.")["input_ids"]])
    seen = []
    model.model.layers[0].self_attn.register_forward_hook(
        lambda *_: seen.append(torch.backends.cuda.cudnn_sdp_enabled()))
    with frozen_parameters(model):
        leaf = model.get_input_embeddings()(ids).detach().requires_grad_(True)
        with checkpointed_layers(model):
            logits = model(inputs_embeds=leaf, use_cache=False).logits
        assert seen == [False]
        (grad,) = torch.autograd.grad(logits[0, -1].logsumexp(-1), leaf)
    assert seen == [False, False]  # the recomputation, in the backward pass, too
    assert torch.backends.cuda.cudnn_sdp_enabled() and grad.abs().sum() > 0


def test_out_of_memory_in_a_pass_is_one_line_naming_the_budget(tiny_causal, xor_item, monkeypatch):
    """A CUDA out-of-memory error cannot happen on a CPU: a forward hook raises torch's own OutOfMemoryError in its
    place, and the pass reports it as a MemoryBudgetError in one line."""
    lm = _fresh(tiny_causal)
    layer = lm.model.model.layers[1]

    def boom(module, inputs, output):
        if torch.is_grad_enabled():
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB\nmore details")

    handle = layer.register_forward_hook(boom)
    try:
        m = Mirage(lm)
        with pytest.raises(MemoryBudgetError) as err:
            m.attribute(xor_item["question"], xor_item["docs"], answer=xor_item["output"])
    finally:
        handle.remove()
    assert "\n" not in str(err.value) and "out of memory" in str(err.value) and "--memory-budget" in str(err.value)


def test_max_memory_of_one_size_is_the_budget_and_bad_sizes_are_config_errors():
    from mirage.config import ConfigError

    assert ExperimentConfig(command="attribute", max_memory="3GB").loading()["max_memory"] == "3GB"
    from mirage.attribution.models import resolve_placement

    assert resolve_placement(max_memory="3GB").budget == 3 * 10**9
    assert resolve_placement(memory_budget="2GiB").budget == 2 * 2**30
    placed = resolve_placement(max_memory={0: "20GiB", "cpu": "60GiB"})
    assert placed.budget is None and placed.max_memory == {0: 20 * 2**30, "cpu": 60 * 2**30} \
        and placed.device_map == "auto"
    with pytest.raises(ConfigError, match="memory_budget='lots' is not a size"):
        ExperimentConfig(command="attribute", memory_budget="lots")
    with pytest.raises(ConfigError, match="same setting"):
        ExperimentConfig(command="attribute", memory_budget="2GB", max_memory="3GB")


def test_cli_budget_too_small_for_the_weights_skips_the_item_in_one_line(tmp_path, xor_item, capsys):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({**xor_item, "id": "x"}) + "\n")
    out = tmp_path / "out.jsonl"
    code = main(["attribute", str(items), "-o", str(out), "--memory-budget", "200MB", "--quiet"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" not in err
    (line,) = [json.loads(x) for x in Path(str(out) + ".errors.jsonl").read_text().splitlines()]
    assert "MemoryBudgetError" in line["error"] and "memory budget 200.0 MB" in line["error"]
    assert "--memory-budget" in line["error"]
    code = main(["attribute", str(items), "-o", str(tmp_path / "b.jsonl"), "--memory-budget", "lots", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "memory_budget='lots' is not a size" in err


def test_a_backward_eager_attention_cannot_batch_either_leaves_the_kernel(real_tokenizer, xor_item, monkeypatch,
                                                                          refuse_batched_grad):
    """When vmap fails whatever the kernel (here every batched backward is refused), the model keeps its attention
    kernel and CCI repeats the input per target, as before the fallback existed."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(real_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048)
    m = Mirage(wrap_model(LlamaForCausalLM(config).eval(), real_tokenizer))
    refuse_batched_grad()
    res = m.attribute(xor_item["question"], xor_item["docs"], answer=xor_item["output"])
    assert m.lm.batched_backward is False and m.lm.model.config._attn_implementation == "sdpa"
    assert res.versions["attention"] == "sdpa" and res.versions["cci_backward"].startswith("input repeated")


_CHURN = """
import json, sys, torch
from mirage.attribution.planner import memory_in_use, return_freed_memory
cpu = torch.device("cpu")
how = return_freed_memory(cpu) if sys.argv[1] == "budget" else None
# what a pass does to the heap: one 8 MiB block freed (glibc then keeps blocks of that size on its heap), then many
# allocated and all but the last freed; the freed ones below the last cannot be trimmed from the heap's top
first = torch.ones(2**21)
del first
before = memory_in_use(cpu)
blocks = [torch.ones(2**21) for _ in range(24)]
last = blocks[-1]
del blocks
if how:
    how = return_freed_memory(cpu)  # as before each planned pass
print(json.dumps({"kept": memory_in_use(cpu) - before, "how": how}))
"""


def test_under_a_cpu_budget_freed_tensors_leave_resident_memory(tmp_path):
    """The budget is counted against resident memory, so freed activations must leave it: without the budget's
    allocator setting glibc keeps 23 freed 8 MiB blocks resident (the over-run of docs/scaling.md's 7.7k-token
    point); with it they go back. Each case runs in its own process: the setting is process-wide."""
    import subprocess
    import sys

    runs = {}
    for case in ("plain", "budget"):
        out = subprocess.run([sys.executable, "-c", _CHURN, case], capture_output=True, text=True, check=True)
        runs[case] = json.loads(out.stdout.strip().splitlines()[-1])
    assert runs["plain"]["kept"] > 150 * 2**20, runs  # the allocator's habit this guards against, reproduced
    assert runs["budget"]["kept"] < 40 * 2**20, runs
    assert runs["budget"]["how"].startswith("glibc: blocks of 128 KiB or more returned when freed")
