"""The memory planner of the differentiable passes: what a pass keeps for its backward pass (counted once per model
on short probe passes, :func:`activation_bytes`; :func:`graph_bytes`), the memory budget it must fit (the model's
``memory_budget``, else on a CPU a default share of the memory, else 80 % of the free memory; the CPU allocator made
to return freed memory), whether its layers are checkpointed to fit (:func:`plan_graph`,
:func:`checkpointed_layers`), and the one-line :class:`MemoryBudgetError` when it cannot (docs/scaling.md).

Shapes: ``seq`` input positions, ``rows`` sequences of a left-padded batch.

Over 600 lines: everything the differentiable passes know about memory is here (the probes' counts, the device's
budget and its allocator, checkpointing), so that a plan's figures have one source; the budget and the allocator
(about 80 lines) are the part to move out next.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import functools
import os
import weakref
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.utils.checkpoint

from mirage.attribution.forward import (
    causal_pass,
    embed,
    frozen_parameters,
    left_padded,
    logits_from_embeds,
    model_inputs,
    token_budget,
)
from mirage.attribution.models import LoadedModel, attention_kernels, format_size

__all__ = [
    "BUDGET_HEADROOM",
    "CPU_ALLOCATOR_SHARE",
    "CPU_DEFAULT_BUDGET_SHARE",
    "CPU_GRAPH_TOKENS",
    "CPU_MMAP_THRESHOLD",
    "PROBE_LENGTHS",
    "PROBE_PADDING",
    "PROBE_WINDOW",
    "UPPER_FACTOR",
    "ActivationBytes",
    "GraphPlan",
    "MemoryBudgetError",
    "activation_bytes",
    "backward_row_bytes",
    "budget_room",
    "checkpointed_layers",
    "counting_saved_tensors",
    "default_budget_room",
    "default_memory_budget",
    "element_bytes",
    "free_memory",
    "graph_bytes",
    "graph_fits",
    "graph_token_budget",
    "graph_upper_bytes",
    "guessed_activations",
    "has_checkpoint_layers",
    "layer_token_bytes",
    "memory_in_use",
    "model_blocks",
    "out_of_memory_error",
    "past_window",
    "plan_graph",
    "probing",
    "return_freed_memory",
    "saved_tensor_bytes",
    "shrunk_window",
    "sliding_window",
]


class MemoryBudgetError(RuntimeError):
    """A differentiable pass that cannot fit the memory budget (or the free memory), with the fix in the message."""


def memory_in_use(device: torch.device) -> int:
    """Bytes this process holds where a budget is counted: allocated memory of a CUDA device, else the process's
    resident memory (Linux ``/proc/self/statm``; 0 where it cannot be read)."""
    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


def free_memory(device: torch.device) -> int:
    """Bytes free for new tensors on ``device``: CUDA's free memory, else the machine's available memory."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return 4 * 2**30


def element_bytes(lm: LoadedModel) -> int:
    """Bytes per element of the model's activations (its dtype's width, at least 2)."""
    return max(2, torch.finfo(lm.dtype).bits // 8)


def _eager_attention(lm: LoadedModel) -> bool:
    return str(getattr(lm.model.config, "_attn_implementation", "eager") or "eager") == "eager"


@dataclass(frozen=True)
class ActivationBytes:
    """What a differentiable pass of one model keeps for its backward pass, in bytes per input token: in each block
    (``block``, plus ``block_square`` per token for each position attended, where attention keeps its
    probabilities), outside the blocks (``outside``: embeddings, final norm, rotary tables), and the input of each
    of the ``blocks`` blocks (``block_input``: all a checkpointed block keeps). ``source``: ``measured`` (counted
    by :func:`activation_bytes` on a short pass) or ``guessed`` (from the model's sizes, where no block is
    found)."""

    block: float
    block_square: float
    outside: float
    block_input: int
    blocks: int
    source: str


#: Input lengths of the short differentiable passes :func:`activation_bytes` counts the saved tensors of.
PROBE_LENGTHS = (16, 48, 112)


#: The sliding window a model's probe passes run with to count what a pass past its real window keeps: past a window
#: the attention masks are materialised and saved, at a size set by the length alone, so probes of
#: :data:`PROBE_LENGTHS` tokens past a window this short count it without running a pass as long as the real window
#: (thousands of tokens on 7B models, more memory than the pass being planned).
PROBE_WINDOW = 8


def sliding_window(lm: LoadedModel) -> int | None:
    """The model's sliding attention window in tokens (its config's ``sliding_window``), None without one."""
    cfg = lm.model.config
    text = getattr(cfg, "text_config", None) or cfg
    window = getattr(text, "sliding_window", None)
    return int(window) if isinstance(window, int) and window > 0 else None


def past_window(lm: LoadedModel, seq: int) -> bool:
    """Whether a pass over ``seq`` positions is counted as past the model's sliding window (:func:`activation_bytes`):
    longer than the window, or any pass where the window is too short for probes to stay below it."""
    window = sliding_window(lm)
    return window is not None and (seq > window or window < PROBE_LENGTHS[-1] + 2)


@contextmanager
def shrunk_window(lm: LoadedModel, size: int) -> Iterator[None]:
    """Run the model with its sliding window shrunk to ``size`` tokens (its config and every module holding the
    window), restored on exit; nothing changes for a model without a window or with one no longer."""
    window = sliding_window(lm)
    changed: dict[int, Any] = {}
    if window is not None and window > size:
        for obj in (lm.model.config, getattr(lm.model.config, "text_config", None), *lm.model.modules()):
            if obj is not None and id(obj) not in changed and getattr(obj, "sliding_window", None) == window:
                changed[id(obj)] = obj
                obj.sliding_window = size
    try:
        yield
    finally:
        for obj in changed.values():
            obj.sliding_window = window


#: How many tokens shorter the second input of :func:`saved_tensor_bytes`' padded probe is: enough that the batch
#: needs its padding mask.
PROBE_PADDING = 8


_MEASURED: weakref.WeakKeyDictionary[torch.nn.Module, dict[str, ActivationBytes]] = weakref.WeakKeyDictionary()


def _storage_key(t: torch.Tensor) -> tuple[str, int]:
    storage = t.untyped_storage()
    return str(t.device), storage.data_ptr()


@contextmanager
def counting_saved_tensors(lm: LoadedModel) -> Iterator[dict[str, int]]:
    """Count, for the differentiable passes run inside the block, the bytes of the distinct tensors autograd saves
    for the backward pass (weights and buffers, which are kept anyway, not counted): the yielded dict's ``block``
    (inside the model's blocks) and ``outside`` totals, filled as the passes run."""
    blocks = model_blocks(lm.model)
    kept = {_storage_key(t) for t in [*lm.model.parameters(), *lm.model.buffers()] if t.device.type != "meta"}
    seen: set[tuple[str, int]] = set()
    where, total = ["outside"], {"block": 0, "outside": 0}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if t.device.type != "meta" and t.layout == torch.strided:
            key = _storage_key(t)
            if key not in kept and key not in seen:
                seen.add(key)
                total[where[0]] += t.untyped_storage().nbytes()
        # Detached: a saved output returned as itself would hold its own graph node (a reference cycle through C++
        # that the garbage collector cannot see), and a pass never run backward would stay in memory.
        return t.detach()

    def enter(*_args: object, **_kw: object) -> None:
        where[0] = "block"

    def leave(*_args: object, **_kw: object) -> None:
        where[0] = "outside"

    handles = [h for b in blocks for h in (b.register_forward_pre_hook(enter), b.register_forward_hook(leave))]
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield total
    finally:
        for h in handles:
            h.remove()


def saved_tensor_bytes(lm: LoadedModel, n: int, *, padded: bool = False) -> tuple[int, int]:
    """Bytes of the distinct tensors a differentiable pass over an ``n``-token prompt (and a two-token answer) saves
    for its backward pass, inside the model's blocks and outside them (:func:`counting_saved_tensors`). ``padded``
    (causal models): the pass is a left-padded batch of two such inputs, the second :data:`PROBE_PADDING` tokens
    shorter, as :func:`batched_attribution_graph` runs it; the bytes are its two rows'."""
    if padded and lm.is_encoder_decoder:
        raise ValueError("saved_tensor_bytes(padded=True): causal models only (encoder-decoders are not batched).")
    vocab = max(2, lm.sizes.vocab)
    ids = [(7 + 13 * i) % vocab for i in range(n + 2)]
    seq, positions = model_inputs(lm, ids[:n], ids[n:])
    with frozen_parameters(lm.model), torch.inference_mode(False), torch.enable_grad():
        if padded:
            batch, kwargs = left_padded(lm, [seq, seq[min(PROBE_PADDING, n - 1):]])
            leaf = lm.model.get_input_embeddings()(batch).detach().requires_grad_(True)
            with counting_saved_tensors(lm) as total:
                logits = causal_pass(lm, range(len(seq) - 2, len(seq)), inputs_embeds=leaf, **kwargs).logits
        else:
            leaf = embed(lm, seq).clone().requires_grad_(True)
            with counting_saved_tensors(lm) as total:
                logits = logits_from_embeds(lm, leaf, ids[n:], positions)
        del logits, leaf
    return total["block"], total["outside"]


def guessed_activations(lm: LoadedModel) -> ActivationBytes:
    """The estimate from the model's sizes alone (a Llama-style block keeps about ten hidden-wide and four MLP-wide
    tensors per token; eager attention two rows of ``heads`` probabilities), for models whose blocks are not found."""
    sizes, width = lm.sizes, element_bytes(lm)
    return ActivationBytes(block=(10 * sizes.hidden + 4 * (sizes.intermediate or 4 * sizes.hidden)) * width,
                           block_square=2 * sizes.heads * width if _eager_attention(lm) else 0.0,
                           outside=0.0, block_input=sizes.hidden * width, blocks=sizes.layers, source="guessed")


#: True while the planner's probe passes run (:func:`activation_bytes`): passes that measure the model once, part of
#: no attribution's work, which cost meters leave out (:class:`mirage.attribution.methods.PassMeter`).
_PROBING: contextvars.ContextVar[bool] = contextvars.ContextVar("mirage_planner_probing", default=False)


def probing() -> bool:
    """Whether the model's passes running now are the planner's one-time probes (:func:`activation_bytes`)."""
    return _PROBING.get()


def activation_bytes(lm: LoadedModel, *, padded: bool = False, seq: int | None = None) -> ActivationBytes:
    """What ``lm``'s differentiable passes keep per token, counted once per model (and attention kernel): three
    short passes (:data:`PROBE_LENGTHS` tokens) record the tensors autograd saves, inside the model's blocks and
    outside them, and a quadratic in the length through the three counts gives the per-token and per-token-squared
    bytes. Exact for what is saved; what a pass allocates and frees on the way is left to the budget's headroom.
    ``padded``: per row of a left-padded batch (:func:`batched_attribution_graph`), counted on padded batches of
    two: with a padding mask, attention keeps the mask and may give up kernels that share key/value heads (causal
    models; an encoder-decoder's are unpadded). ``seq``: the length of the pass planned; on a model with a sliding
    window, one past the window (:func:`past_window`; the default when ``seq`` is None) keeps its attention masks,
    counted on probes run with the window shrunk to :data:`PROBE_WINDOW` tokens (:func:`shrunk_window`)."""
    padded = padded and not lm.is_encoder_decoder
    window = sliding_window(lm)
    past = window is not None and (seq is None or past_window(lm, seq))
    kernel = str(getattr(lm.model.config, "_attn_implementation", "") or "")
    if torch.is_autocast_enabled(lm.device.type):
        kernel += f", autocast to {str(torch.get_autocast_dtype(lm.device.type)).removeprefix('torch.')}"
    key = kernel + (", padded batch" if padded else "")
    if window is not None:
        key += ", past the sliding window" if past else ", within the sliding window"
    cached = _MEASURED.setdefault(lm.model, {})
    if key in cached:
        return cached[key]
    blocks = model_blocks(lm.model)
    if not blocks:
        return guessed_activations(lm)
    lengths = PROBE_LENGTHS
    rows = 2 if padded else 1
    probe = _PROBING.set(True)
    try:
        with shrunk_window(lm, PROBE_WINDOW) if past else nullcontext():
            counts = [[c / rows for c in saved_tensor_bytes(lm, n, padded=padded)] for n in lengths]
    except torch.OutOfMemoryError as err:
        raise out_of_memory_error(lm, rows * lengths[-1], err) from None
    finally:
        _PROBING.reset(probe)

    def fit(values: list[float]) -> tuple[float, float]:
        (a, b, c), (ya, yb, yc) = lengths, values
        square = ((yc - yb) / (c - b) - (yb - ya) / (b - a)) / (c - a)
        linear = (yb - ya) / (b - a) - square * (a + b)
        return max(0.0, linear), max(0.0, square)

    block, square = fit([c[0] for c in counts])
    outside, _ = fit([c[1] for c in counts])
    measured = ActivationBytes(block=block / len(blocks), block_square=square / len(blocks), outside=outside,
                               block_input=lm.sizes.hidden * element_bytes(lm), blocks=len(blocks),
                               source=f"measured with {key}")
    cached[key] = measured
    return measured


def layer_token_bytes(lm: LoadedModel, seq: int, *, padded: bool = False) -> int:
    """Bytes one block keeps per token for the backward pass of a ``seq``-token input (:func:`activation_bytes`;
    ``padded``: a row of a left-padded batch)."""
    act = activation_bytes(lm, padded=padded, seq=seq)
    return int(act.block + act.block_square * seq)


def graph_bytes(lm: LoadedModel, seq: int, *, checkpoint: bool, rows: int = 1, padded: bool | None = None) -> int:
    """Estimated bytes of a differentiable pass over ``rows`` sequences of ``seq`` positions: every block's saved
    activations and what the model saves outside its blocks, or, checkpointed, each block's input instead of its
    activations, plus one block recomputed at a time in the backward pass. ``padded`` (default: ``rows > 1``): the
    rows are a left-padded batch, counted with its mask (:func:`activation_bytes`)."""
    padded = rows > 1 if padded is None else padded
    act = activation_bytes(lm, padded=padded, seq=seq)
    per_block = layer_token_bytes(lm, seq, padded=padded)
    if checkpoint:
        return int(rows * seq * (act.blocks * act.block_input + act.outside + per_block))
    return int(rows * seq * (act.blocks * per_block + act.outside))


def backward_row_bytes(lm: LoadedModel, seq: int, rows: int = 1) -> int:
    """Estimated bytes one more target adds to a vmapped backward pass: the gradients flowing through one block at
    a time, bounded by what that block saved (``benchmarks/memory_estimates.py`` measures how far below it stays on
    smollm2-135m and Gemma 3 270M); ``rows`` > 1: a left-padded batch's rows."""
    return rows * seq * layer_token_bytes(lm, seq, padded=rows > 1)


#: Padded tokens per batched differentiable pass on a CPU (its activations stay for the backward passes).
CPU_GRAPH_TOKENS = 2048


def graph_token_budget(lm: LoadedModel) -> int:
    """Padded tokens per batched differentiable pass (:func:`batched_attribution_graph`): a quarter of free GPU memory
    over the activations a padded batch's token keeps for the backward pass (:func:`graph_bytes` of one), at least one
    sequence; :data:`CPU_GRAPH_TOKENS` on a CPU."""
    if lm.device.type != "cuda":
        return CPU_GRAPH_TOKENS
    return token_budget(lm, max(1, graph_bytes(lm, 1, checkpoint=False, padded=True)), CPU_GRAPH_TOKENS)


@dataclass(frozen=True)
class GraphPlan:
    """How a differentiable pass fits: ``checkpoint`` its layers or not, and ``room`` (bytes) left for the backward
    passes' targets."""

    checkpoint: bool
    room: int


#: The share of a memory budget kept free of planned tensors: the allocator's fragmentation and the passes'
#: temporaries (see docs/scaling.md).
BUDGET_HEADROOM = 0.1


#: Under a CPU memory budget, blocks of at least this many bytes are mapped from the system for each allocation and
#: returned to it when freed (glibc's ``M_MMAP_THRESHOLD``, fixed), so that resident memory follows the live tensors.
CPU_MMAP_THRESHOLD = 128 * 1024


_M_MMAP_THRESHOLD = -3  # mallopt's parameter number (malloc.h)


#: Without a budget, a CPU pass that needs more than this share of the free memory has the allocator return freed
#: memory too (:func:`return_freed_memory`): glibc's kept blocks add much to a long pass's peak, which could then
#: run out of memory, while returning them costs time on every allocation, so passes with room to spare keep
#: them (``benchmarks/cpu_allocator.py`` measures both ways). ``MIRAGE_CPU_ALLOCATOR``: ``auto`` (this rule),
#: ``return`` (every CPU pass) or ``keep`` (only a budget changes the allocator).
CPU_ALLOCATOR_SHARE = 0.5


@functools.cache
def _glibc() -> Any | None:
    """The C library where it is glibc (it has ``mallopt`` and ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt, libc.malloc_trim  # noqa: B018 - both must exist
    except (OSError, AttributeError):
        return None
    return libc


@functools.cache
def _fix_mmap_threshold() -> bool:
    libc = _glibc()
    return libc is not None and libc.mallopt(_M_MMAP_THRESHOLD, CPU_MMAP_THRESHOLD) == 1


def return_freed_memory(device: torch.device) -> str:
    """Make the process's resident memory, which a CPU budget is counted against, follow its live tensors, and say
    how (recorded as ``versions["allocator"]``). glibc keeps freed blocks below a threshold that grows with the
    blocks freed (to 32 MB), so a pass's freed activations stay resident and the next pass's peak lands on top of
    them, over the budget (docs/scaling.md). Here, for the whole process and from the
    first budgeted pass on (without a budget, the first pass that needs more than :data:`CPU_ALLOCATOR_SHARE` of
    the free memory), blocks of :data:`CPU_MMAP_THRESHOLD` or more are returned when freed, and what is free is
    trimmed now (before a pass is planned). Not on a GPU (its budget counts allocated memory) and not
    without glibc (the budget then also counts memory the allocator keeps)."""
    if device.type != "cpu":
        return f"{device.type}: allocated memory counted" if device.type == "cuda" else f"{device.type}: unchanged"
    libc = _glibc()
    if libc is None:
        return "not glibc: resident memory includes freed blocks the allocator keeps"
    fixed = _fix_mmap_threshold()
    libc.malloc_trim(0)
    return (f"glibc: blocks of {CPU_MMAP_THRESHOLD // 1024} KiB or more returned when freed, free memory trimmed "
            f"before each pass" if fixed else "glibc: free memory trimmed before each pass")


def _allocator_mode() -> str:
    """``MIRAGE_CPU_ALLOCATOR``: ``auto`` (the default), ``return`` or ``keep``; anything else is a one-line
    ValueError."""
    mode = os.environ.get("MIRAGE_CPU_ALLOCATOR", "").strip() or "auto"
    if mode not in ("auto", "return", "keep"):
        raise ValueError(f"MIRAGE_CPU_ALLOCATOR={mode!r}: give 'auto' (CPU passes that need more than half the free "
                         "memory return freed memory), 'return' (every CPU pass does) or 'keep' (only a memory "
                         "budget changes the allocator).")
    return mode


#: Without a budget, a CPU pass is planned within this share of the memory the process could hold (what it holds
#: now and what the machine has available, :func:`default_memory_budget`): a prompt that fills a model's context
#: window is then checkpointed, and CCI's batches narrowed, before it takes most of the machine. ``--memory-budget``
#: (``memory_budget``) replaces it; on a GPU passes are planned within 80 % of its free memory.
CPU_DEFAULT_BUDGET_SHARE = 0.5


def default_memory_budget(device: torch.device) -> int | None:
    """The budget passes on ``device`` are planned within when none is given: on a CPU,
    :data:`CPU_DEFAULT_BUDGET_SHARE` of this process's resident memory and the machine's available memory together
    (read now); None on other devices. It only changes how passes run (checkpointing, CCI's batch widths), never a
    score, and a pass that cannot fit it is still tried, as without a budget."""
    if device.type != "cpu":
        return None
    return int(CPU_DEFAULT_BUDGET_SHARE * (memory_in_use(device) + free_memory(device)))


def default_budget_room(lm: LoadedModel) -> int | None:
    """Bytes :func:`default_memory_budget` leaves for new tensors now (its headroom kept), None off a CPU."""
    budget = default_memory_budget(lm.device)
    return None if budget is None else int(budget * (1 - BUDGET_HEADROOM)) - memory_in_use(lm.device)


def _in_use_under_budget(lm: LoadedModel) -> int:
    """Bytes in use where ``lm``'s budget is counted, its allocator first made to give back what is free."""
    lm.passes["allocator"] = return_freed_memory(lm.device)
    return memory_in_use(lm.device)


def budget_room(lm: LoadedModel) -> int:
    """Bytes the memory budget leaves for new tensors now (its headroom kept; negative when over)."""
    return int((lm.memory_budget or 0) * (1 - BUDGET_HEADROOM)) - _in_use_under_budget(lm)


def _limit(lm: LoadedModel) -> tuple[int, str]:
    """Bytes a new pass may use now, and what limits it (for messages)."""
    if lm.memory_budget is not None:
        used = _in_use_under_budget(lm)
        return int(lm.memory_budget * (1 - BUDGET_HEADROOM)) - used, (
            f"the memory budget {format_size(lm.memory_budget)} ({format_size(used)} already in use, "
            f"{BUDGET_HEADROOM:.0%} kept free)")
    room = default_budget_room(lm)
    if room is not None:
        return room, f"the default CPU budget ({CPU_DEFAULT_BUDGET_SHARE:.0%} of the memory in use and available)"
    free = free_memory(lm.device)
    return int(free * 0.8), f"the free memory ({format_size(free)} on {lm.device})"


def plan_graph(lm: LoadedModel, seq: int, rows: int = 1) -> GraphPlan:
    """Whether a differentiable pass over ``rows`` x ``seq`` positions fits as it is or with its layers checkpointed
    (each layer's activations recomputed in the backward pass: about one more forward pass of time), within the
    memory budget (:attr:`~mirage.attribution.models.LoadedModel.memory_budget`), else on a CPU the default budget
    (:func:`default_memory_budget`), else 80 % of the free memory. With a budget given, a pass that does not fit
    even checkpointed (with one backward target) raises :class:`MemoryBudgetError`, in one line naming the budget
    and the switches; without one it is tried (checkpointed), and an out-of-memory error
    becomes that message (:func:`out_of_memory_error`). The choice is recorded in ``lm.passes["checkpointing"]``.
    A pass whose upper bound (:func:`graph_upper_bytes`) fits (and, on a CPU without a budget, needs no allocator
    change) is planned uncheckpointed from that bound, without the probe passes of :func:`activation_bytes`: the
    choice measuring would make.
    On a CPU without a budget, a pass that needs more than :data:`CPU_ALLOCATOR_SHARE` of the free memory has the
    allocator return freed memory (``lm.passes["allocator"]`` says how)."""
    mode = _allocator_mode() if lm.memory_budget is None and lm.device.type == "cpu" else None  # None: not used
    upper_graph, upper_target = graph_upper_bytes(lm, seq, rows)
    upper = upper_graph + upper_target
    if mode in (None, "keep") or (mode == "auto" and upper <= CPU_ALLOCATOR_SHARE * free_memory(lm.device)):
        left, _what = _limit(lm)
        if upper <= left:  # even the upper bound fits: the choice measuring would make, without its probe passes
            lm.passes["checkpointing"] = "off"
            return GraphPlan(checkpoint=False, room=left - upper_graph)
    full = graph_bytes(lm, seq, checkpoint=False, rows=rows)
    one_target = backward_row_bytes(lm, seq, rows)
    if mode == "return" or (mode == "auto" and full + one_target > CPU_ALLOCATOR_SHARE * free_memory(lm.device)):
        lm.passes["allocator"] = return_freed_memory(lm.device)
    left, what = _limit(lm)
    can = has_checkpoint_layers(lm.model)
    if full + one_target <= left or not can:
        checkpoint, need = False, full
    else:
        checkpoint, need = True, graph_bytes(lm, seq, checkpoint=True, rows=rows)
    if lm.memory_budget is not None and need + one_target > left:
        raise MemoryBudgetError(
            f"the differentiable pass over {rows * seq} tokens needs about {format_size(need + one_target)}"
            f"{' with gradient checkpointing' if checkpoint else ''}, more than {what} leaves "
            f"({format_size(max(0, left))}); {_FIXES}")
    lm.passes["checkpointing"] = "on" if checkpoint else "off"
    return GraphPlan(checkpoint=checkpoint, room=left - need)


#: How many times the size-based estimate (:func:`guessed_activations`) :func:`graph_upper_bytes` takes as the most a
#: block can keep; the measured counts of the embedded models are 0.61 (smollm2-135m) and 0.86 (Gemma 3 270M) of the
#: estimate (tests/attribution/test_memory_budget.py checks them and the tiny test models against the bound).
UPPER_FACTOR = 2


def graph_upper_bytes(lm: LoadedModel, seq: int, rows: int = 1) -> tuple[int, int]:
    """Upper bounds, from the model's sizes alone (no probe pass), of :func:`graph_bytes` of an uncheckpointed pass over
    ``rows`` x ``seq`` positions and of :func:`backward_row_bytes`: :data:`UPPER_FACTOR` times the estimate of
    :func:`guessed_activations` per block and per token, with a term in the square of the length (eager attention's
    two rows of probabilities per head; under the fused kernels two masks, which a padded batch or a sliding window
    keeps), and a hidden-wide tensor per token outside the blocks. :func:`plan_graph` plans with them where even they
    fit, so that a pass far below its budget (a small model on a CPU) needs no measuring."""
    sizes, width = lm.sizes, element_bytes(lm)
    guess = guessed_activations(lm)
    square = 2 * (sizes.heads if _eager_attention(lm) else 1) * width
    per_block = UPPER_FACTOR * (guess.block + square * seq)
    outside = UPPER_FACTOR * sizes.hidden * width
    return int(rows * seq * (sizes.layers * per_block + outside)), int(rows * seq * per_block)


def graph_fits(lm: LoadedModel, seq: int) -> bool:
    """Whether a differentiable pass over ``seq`` positions with one backward target fits at all, its layers
    checkpointed where they can be, within the memory budget, the default CPU budget or else 80 % of the free
    memory (what :func:`plan_graph` would try); with the model's attention kernel as it is now (eager attention
    keeps a square of the length per block, the fused kernels do not)."""
    left, _what = _limit(lm)
    checkpoint = has_checkpoint_layers(lm.model)
    return graph_bytes(lm, seq, checkpoint=checkpoint) + backward_row_bytes(lm, seq) <= left


_SHORTER = "shorten the prompt (fewer or shorter documents), or split the model over more devices (--device-map)."


_FIXES = f"raise the budget (--memory-budget / memory_budget, or --max-memory SIZE), {_SHORTER}"


def out_of_memory_error(lm: LoadedModel, seq: int, err: BaseException) -> MemoryBudgetError:
    """The one-line :class:`MemoryBudgetError` for an out-of-memory error during a pass over ``seq`` positions."""
    limit = (f"the memory budget {format_size(lm.memory_budget)}" if lm.memory_budget is not None
             else f"the memory of {lm.device}")
    first = str(err).strip().splitlines()[0][:160] if str(err).strip() else type(err).__name__
    return MemoryBudgetError(f"out of memory attributing over {seq} tokens within {limit} ({first}); set a budget "
                             f"the model can keep to (--memory-budget SIZE: gradient checkpointing and smaller CCI "
                             f"batches, or --max-memory SIZE), {_SHORTER}")


def model_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: transformers' ``GradientCheckpointingLayer`` modules (the decoder and encoder
    layers of every recent model)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # pragma: no cover - transformers < 4.52
        return []
    return [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]


def has_checkpoint_layers(model: torch.nn.Module) -> bool:
    """Whether :func:`checkpointed_layers` can checkpoint ``model``."""
    return bool(model_blocks(model))


@contextmanager
def checkpointed_layers(model: torch.nn.Module, on: bool = True) -> Iterator[None]:
    """Within: each of the model's blocks runs under ``torch.utils.checkpoint`` (non-reentrant), so a forward pass
    keeps each block's input alone and the backward pass recomputes the rest, block by block. The model stays in
    eval mode (no dropout; transformers' own switch needs training mode), so no random state is saved for the
    recomputation; the backward passes may run after the block ends. The recomputation runs in the attention
    kernels the model's forward pass is held to (:func:`~mirage.attribution.models.attention_kernels`): on a GPU
    it would otherwise be free to pick cuDNN's attention, which saves other tensors than the forward pass's kernel
    and fails the checkpoint's check. Works under accelerate's hooks (the recompute runs the hooked forward again).
    ``on`` False: nothing changes."""
    layers = model_blocks(model) if on else []
    patched = []
    for layer in layers:
        inner = layer.forward

        def run(*args: object, _inner: Any = inner, **kwargs: object) -> object:
            with attention_kernels(model):
                return _inner(*args, **kwargs)

        def forward(*args: object, _inner: Any = inner, _run: Any = run, **kwargs: Any) -> object:
            if not torch.is_grad_enabled():
                return _inner(*args, **kwargs)
            return torch.utils.checkpoint.checkpoint(_run, *args, use_reentrant=False, preserve_rng_state=False,
                                                     **kwargs)

        had = "forward" in vars(layer)
        patched.append((layer, had, inner))
        layer.forward = forward
    try:
        yield
    finally:
        for layer, had, inner in patched:
            if had:
                layer.forward = inner
            else:
                del layer.forward
