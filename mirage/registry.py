"""Named implementations of one pipeline concept, so a user adds one without editing the stage's code.

The CTI metrics (:data:`CTI_METRICS`), the CTI selectors (:data:`CTI_SELECTORS`), the CCI methods
(:data:`CCI_METHODS`), the document attribution methods (:data:`DOCUMENT_METHODS`), the citation rules
(:data:`CITATION_RULES`), the bias study's retrievers (:data:`RETRIEVERS`) and sentence embedders
(:data:`EMBEDDERS`), the binary scores of citations against human labels (:data:`BINARY_METRICS`) and the benchmarks
of ``mirage score`` (:data:`BENCHMARKS`) are registries; the configuration accepts any registered name for
``cti.metric`` / ``cti.selector`` / ``cci.method`` / ``aggregation.rule`` / ``bias.rage_embedder``, ``mirage
retrieve`` and ``mirage bias --retriever`` any registered retriever, ``mirage score xor-attriqa`` reports every
registered binary metric and ``mirage score`` runs every registered benchmark. Each registry's entries all go
through one conformance test in the tests of the stage that uses them, so registering an entry is enough to get it
tested. Installed packages add entries without any import from the user: each module a package names under the
``mirage.plugins`` entry-point group (:data:`PLUGIN_GROUP`) is imported by :func:`load_plugins`, which the ``mirage``
command and the test suite call before they read a registry, so its registrations reach every command and every
conformance test. The registries live here, and the stages that define the built-ins (:mod:`mirage.attribution.cti`,
:mod:`mirage.attribution.cci`, :mod:`mirage.attribution.methods`, :mod:`mirage.pipeline`,
:mod:`mirage.scoring.metrics`, :mod:`mirage.runs.benchmark_options`) register them on import, so that the
configuration checks a name without importing those stages and no stage's types depend on the configuration in a
cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

__all__ = ["BENCHMARKS", "BINARY_METRICS", "CCI_METHODS", "CITATION_RULES", "CTI_METRICS", "CTI_SELECTORS",
           "DOCUMENT_METHODS", "EMBEDDERS", "PLUGIN_GROUP", "RETRIEVERS", "PluginError", "Registry", "did_you_mean",
           "load_plugins"]

EntryT = TypeVar("EntryT")


class Registry(dict[str, EntryT]):
    """A dict name → implementation that refuses to overwrite silently and names the registered choices."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str, value: EntryT, *, overwrite: bool = False) -> None:
        """Add ``value`` under ``name``; an existing name is replaced only with ``overwrite=True``."""
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"a {self.kind} name must be a non-empty string, got {name!r}.")
        if name in self and not overwrite:
            raise ValueError(f"{self.kind} {name!r} is already registered; pass overwrite=True to replace it.")
        self[name] = value

    def lookup(self, name: str) -> EntryT:
        """The implementation registered as ``name``; a ValueError listing the registered names otherwise."""
        if name not in self:
            raise ValueError(f"unknown {self.kind} {name!r}; registered: {', '.join(map(repr, self))}.")
        return self[name]


def did_you_mean(word: str, choices: Iterable[str], *, n: int = 2) -> str:
    """``"did you mean 'a' or 'b'?"`` naming the (at most ``n``) choices closest to a mistyped ``word`` (``difflib``,
    ratio at least 0.6), best first; ``""`` when none is close."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=n, cutoff=0.6)
    return f"did you mean {' or '.join(map(repr, close))}?" if close else ""


#: The CTI metrics by name: ``metric(logp_ctx, logp_noctx, answer_ids) -> scores`` (see
#: :data:`mirage.attribution.cti.CTIMetricFn`; :func:`mirage.attribution.cti.register_cti_metric` adds one).
CTI_METRICS: Registry[Callable[..., Any]] = Registry("CTI metric")

#: The CTI selectors by name: ``selector(scores, cfg) -> (selected, threshold)`` (see
#: :data:`mirage.attribution.cti.CTISelectorFn`; :func:`mirage.attribution.cti.register_cti_selector` adds one).
CTI_SELECTORS: Registry[Callable[..., Any]] = Registry("CTI selector")

#: The CCI methods by name (see :class:`mirage.attribution.cci.CCIMethodSpec`;
#: :func:`mirage.attribution.cci.register_cci_method` adds one).
CCI_METHODS: Registry[Any] = Registry("CCI method")

#: The document attribution methods by name: each a :class:`mirage.attribution.methods.DocumentMethod` whose
#: ``attribute(inputs)`` gives per answer token a score per document (:mod:`mirage.attribution.methods` registers the
#: built-ins on import; :func:`mirage.attribution.methods.register_document_method` adds one).
DOCUMENT_METHODS: Registry[Any] = Registry("document attribution method")

#: The citation rules by name: ``rule(inputs) -> sentences``, given a :class:`mirage.pipeline.CitationInputs` (the
#: item, its answer, its token scores and the sentences with the reference rule's citations), the answer's sentences
#: with their ``mirage_citations`` (and ``doc_scores``). The built-in ``reference`` and ``likelihood`` are defined in
#: :mod:`mirage.pipeline`, which registers them (:func:`mirage.pipeline.register_citation_rule` adds one); the
#: registry lives here so that the configuration checks ``aggregation.rule`` without importing the pipeline.
CITATION_RULES: Registry[Callable[[Any], list[Any]]] = Registry("citation rule")

#: The bias study's retrievers by name: ``factory(*, cache_dir, embed) -> Retriever`` (see
#: :class:`mirage.bias.retrieval.Retriever`; :func:`mirage.bias.retrieval.register_retriever` adds one).
RETRIEVERS: Registry[Callable[..., Any]] = Registry("retriever")

#: The RAGE mixture's sentence embedders by name: ``factory() -> Embedder`` (texts → L2-normalised embeddings
#: ``[n_texts, dim]``; see :data:`mirage.bias.rage.Embedder`; :func:`mirage.bias.rage.register_embedder` adds one).
EMBEDDERS: Registry[Callable[[], Any]] = Registry("sentence embedder")

#: The binary scores of citations against human labels by name, each a column of XOR-AttriQA's ``results.json`` and a
#: table of its page: a :class:`mirage.scoring.metrics.BinaryMetric` (confusion counts → a percentage, None where
#: undefined, and its table's title; :func:`mirage.scoring.metrics.register_binary_metric` adds one).
BINARY_METRICS: Registry[Any] = Registry("binary metric")

#: The benchmarks of ``mirage score`` by name: each a :class:`mirage.runs.benchmark_options.Benchmark` (its help, data,
#: options, fingerprint, runner, printed table, figure and results-page kind; that module registers the built-ins
#: and :func:`mirage.runs.benchmark_options.register_benchmark` adds one).
BENCHMARKS: Registry[Any] = Registry("benchmark")


#: The entry-point group of mirage's plug-ins: a package that declares, in its ``pyproject.toml``,
#: ``[project.entry-points."mirage.plugins"] NAME = "its_package.mirage_plugin"`` has that module imported by
#: :func:`load_plugins`; the module registers its entries on import, as mirage's own stages do.
PLUGIN_GROUP = "mirage.plugins"


class PluginError(ImportError):
    """An installed plug-in (an entry point of :data:`PLUGIN_GROUP`) failed to load; the message names it."""


def load_plugins() -> list[str]:
    """Import every module installed packages declare under :data:`PLUGIN_GROUP`, once per process, and return their
    entry-point names (sorted). A plug-in that fails to import raises :class:`PluginError` naming its entry point,
    its distribution and the fix, with the original error chained."""
    global _loaded_plugins
    if _loaded_plugins is not None:
        return _loaded_plugins
    from importlib.metadata import entry_points

    names = []
    for point in sorted(entry_points(group=PLUGIN_GROUP), key=lambda p: p.name):
        try:
            point.load()
        except Exception as err:
            dist = point.dist.name if point.dist is not None else "an unknown distribution"
            raise PluginError(f"plug-in {point.name!r} ({point.value}, installed by {dist}) failed to load: "
                              f"{type(err).__name__}: {err}; fix it or uninstall {dist}.") from err
        names.append(point.name)
    _loaded_plugins = names
    return names


_loaded_plugins: list[str] | None = None
