"""Document-level attribution methods behind one interface, on mirage's own passes: each takes the prepared item
and the answer tokens (:class:`DocumentInputs`) and returns a frozen, JSON round-tripping
:class:`DocumentAttribution`: per answer token a score per document ``[n_answer, n_docs]``, per context token too
where the method has them ``[n_answer, n_context]``, and its cost (:class:`PassCost`: passes, positions, seconds,
peak GPU memory).

    from mirage import Mirage
    from mirage.attribution.methods import attribute_documents, cite_documents, document_inputs

    m = Mirage.from_pretrained()
    inputs = document_inputs(m, {"question": q, "docs": docs}, answer)
    res = attribute_documents(inputs, "arc_jsd")      # res.doc_scores[t][d], res.cost
    cite_documents(res, tokens=selected).cited        # 1-based documents, strongest first

The methods, registered in :data:`mirage.registry.DOCUMENT_METHODS` (n = the number of documents; a pass "from the
cache" computes only the prompt from the first document it drops on, reusing the full prompt's cached prefix on a
decoder-only model):

=====================  ==========================================  =============================================
name                   cost                                        source
=====================  ==========================================  =============================================
``attention_last``     1 forward pass (eager attention)            raw attention, last ⌈L/4⌉ layers; the attention
                                                                   baseline of ContextCite (Cohen-Wang et al.,
                                                                   2024) and AttnTrace (Wang et al., 2025)
``attention_all``      1 forward pass (eager attention)            the same over all layers
``attntrace``          ``samples`` forward passes (eager, 8)       AttnTrace (Wang, Geng, Chen and Jia, 2025):
                                                                   top-k attention, context subsampling
``rollout``            1 forward pass (eager attention)            attention rollout (Abnar and Zuidema, 2020)
``at2``                1 forward pass (eager attention); trained   AT2 (Cohen-Wang, Chuang and Mądry, 2025): a
                       once per model on ablations                 learned weight per attention head
``leave_one_out``      n + 1 forward passes, n from the cache      leave-one-out ablation (ContextCite's baseline)
``arc_jsd``            n + 1 forward passes, n from the cache      ARC-JSD (Li et al., 2025)
``shapley``            2**n forward passes (n <= 10), from the     Shapley (1953); sampled permutations above
                       cache; sampled above: one per subset        (Castro, Gómez and Tejada, 2009)
``contextcite``        one pass per distinct random mask (64),     ContextCite (Cohen-Wang et al., 2024): a LASSO
                       from the cache                              surrogate of the answer on document masks
``selfcite``           2n forward passes, from the cache           SelfCite's reward (Chuang et al., 2025) of each
                                                                   document cited alone
``document_gate_jvp``  n forward-mode (JVP) passes, no cache       mirage's; first-order ablation estimate as in
                                                                   attribution patching (Nanda, 2023; Syed et al.,
                                                                   2023), by forward-mode differentiation
``mirage_cci``         2 forward passes, 1 backward per token CTI  MIRAGE (Qi, Sarti et al., 2024): CTI, then CCI
                       selects                                     saliency summed over each document's tokens
``gradient_all``       2 forward passes, 1 backward per answer     the same CCI for every answer token, without
                       token                                       CTI: the plain gradient baseline
``attnlrp``            1 forward pass, 1 backward per answer       AttnLRP (Achtibat et al., 2024), gradient ×
                       token                                       input form, as ``lxt``'s efficient mode
``value_zeroing``      1 forward pass, each block run again once   value zeroing (Mohebbi et al., 2023), a
                       per document (n more passes' worth)         document's values zeroed in one layer at a time
=====================  ==========================================  =============================================

Each method's docstring says exactly what it computes. A new method is a frozen dataclass subclassing
:class:`DocumentMethod` (its fields are its settings) with ``compute(inputs, meter)``, registered with
:func:`register_document_method`; ``tests/attribution/test_methods.py`` runs every registered method through the
same conformance test. :func:`cite_documents` is the per-answer citation rule over any method's document scores.

Modules: ``base`` (the interface, the result, the cost meter, the registry functions), ``passes`` (the subset and
attention passes the methods share), ``attention``, ``heads``, ``ablation``, ``gates``, ``gradients``, ``relevance``,
``zeroing`` (the methods), ``citing`` (the citation rule), ``selfcite`` (SelfCite's citation reward, its best-of-N
reranking and the method of its per-document reward).
"""

from mirage.attribution.methods.ablation import (
    ArcJSDMethod,
    ContextCiteMethod,
    LeaveOneOutMethod,
    ShapleyMethod,
    answer_logprobs,
    contextcite_masks,
    lasso_surrogate,
    logit_of_logprob,
    permutation_orders,
    shapley_values,
)
from mirage.attribution.methods.attention import (
    AttentionMethod,
    AttnTraceMethod,
    RolloutMethod,
    context_attention,
    rollout,
    subsamples,
)
from mirage.attribution.methods.base import (
    DocumentAttribution,
    DocumentInputs,
    DocumentMethod,
    MethodScores,
    PassCost,
    PassMeter,
    attribute_documents,
    document_inputs,
    register_document_method,
)
from mirage.attribution.methods.citing import DocumentCitation, cite_documents
from mirage.attribution.methods.gates import DocumentGateJVPMethod, gated_logprobs, gated_pass
from mirage.attribution.methods.gradients import MirageCCIMethod
from mirage.attribution.methods.heads import AT2Method, HeadWeights, head_features, train_head_weights
from mirage.attribution.methods.passes import (
    attention_pass,
    attention_rows,
    layer_indices,
    log_distributions,
    subset_readouts,
)
from mirage.attribution.methods.relevance import AttnLRPMethod, lrp_rules
from mirage.attribution.methods.selfcite import (
    RankedCitations,
    SelfCiteMethod,
    best_citation,
    candidate_sets,
    citation_rewards,
)
from mirage.attribution.methods.zeroing import (
    ValueZeroingMethod,
    value_projections,
    zeroed_distances,
    zeroed_layer_distances,
)
from mirage.registry import DOCUMENT_METHODS

__all__ = [
    "DOCUMENT_METHODS",
    "AT2Method",
    "ArcJSDMethod",
    "AttentionMethod",
    "AttnLRPMethod",
    "AttnTraceMethod",
    "ContextCiteMethod",
    "DocumentAttribution",
    "DocumentCitation",
    "DocumentGateJVPMethod",
    "DocumentInputs",
    "DocumentMethod",
    "HeadWeights",
    "LeaveOneOutMethod",
    "MethodScores",
    "MirageCCIMethod",
    "PassCost",
    "PassMeter",
    "RankedCitations",
    "RolloutMethod",
    "SelfCiteMethod",
    "ShapleyMethod",
    "ValueZeroingMethod",
    "answer_logprobs",
    "attention_pass",
    "attention_rows",
    "attribute_documents",
    "best_citation",
    "candidate_sets",
    "citation_rewards",
    "cite_documents",
    "context_attention",
    "contextcite_masks",
    "document_inputs",
    "gated_logprobs",
    "gated_pass",
    "head_features",
    "lasso_surrogate",
    "layer_indices",
    "log_distributions",
    "logit_of_logprob",
    "lrp_rules",
    "permutation_orders",
    "register_document_method",
    "rollout",
    "shapley_values",
    "subsamples",
    "subset_readouts",
    "train_head_weights",
    "value_projections",
    "zeroed_distances",
    "zeroed_layer_distances",
]
