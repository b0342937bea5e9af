"""The datasets mirage's commands read, by name: where each file comes from and the checksum it must have.

A dataset is a set of parts (XOR-AttriQA's splits and languages, or one part named after the dataset); a part is
one or more files laid out under the data cache (``<cache>/data/<folder>/``, the layout of the project's data
folder). Each file is built from files of a public source repository, pinned at a commit, by a named recipe of
:mod:`mirage.data.build` (a plain copy, or the small join or reformatting that gives the files the project reads),
and has a pinned SHA-256 where the built file could be computed when this table was written.

    spec = parse_spec("xor-attriqa-match:fi,ru")   # the dataset and two of its parts
    DATASETS["eli5-alce"].parts["eli5-alce"]          # the files of one part

Upstream files are pinned by SHA-256, or by git's blob id (``git rev-parse COMMIT:PATH``: the SHA-1 of
``blob <size>\\0`` and the content) where only that is known: the project's snapshot of the repository lists those
files without their content (the per-passage release of bn and te).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mirage.data.inputs import InputError

__all__ = ["DATASETS", "SOURCES", "XOR_SPLITS", "DataError", "DataSpec", "Dataset", "Output", "Source", "Upstream",
           "is_spec", "parse_spec"]


class DataError(InputError):
    """A dataset name, a download or an imported copy that cannot be used; the message says what to run."""


@dataclass(frozen=True)
class Source:
    """A public repository pinned at a commit, with the address its raw files download from."""

    name: str
    repo: str
    commit: str
    url: str
    cite: str

    @property
    def base_url(self) -> str:
        return self.url.format(repo=self.repo, commit=self.commit)


@dataclass(frozen=True)
class Upstream:
    """One file of a source repository: its path there and its pinned checksum (SHA-256, else git's blob id)."""

    source: str
    path: str
    sha256: str | None = None
    git_blob: str | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Output:
    """One file a dataset lays out in the cache: ``path`` under the data root, built from ``inputs`` (upstream files,
    or ``dataset:part`` files already built) by the recipe ``build``; ``sha256`` pins the result where known."""

    path: str
    inputs: tuple[Upstream | str, ...]
    build: str
    sha256: str | None = None

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Dataset:
    """A named dataset: its folder under the data root and its parts. A part's name resolves to its first file (the
    others, such as NLI prediction files, lie beside it), several parts' to a folder of theirs, the whole dataset's to
    its folder; ``as_folder``: every name of the dataset resolves to its folder (a BEIR folder)."""

    name: str
    folder: str
    description: str
    parts: dict[str, tuple[Output, ...]] = field(default_factory=dict)
    as_folder: bool = False

    def outputs(self, parts: tuple[str, ...] | None = None) -> list[Output]:
        return [o for p in (parts or tuple(self.parts)) for o in self.parts[p]]


@dataclass(frozen=True)
class DataSpec:
    """A parsed dataset name: ``NAME`` (every part) or ``NAME:PART[,PART…]``."""

    dataset: Dataset
    parts: tuple[str, ...]
    whole: bool

    def __str__(self) -> str:
        return self.dataset.name if self.whole else f"{self.dataset.name}:{','.join(self.parts)}"


SOURCES = {
    "mirage-reproduce": Source(
        "mirage-reproduce", "Betswish/MIRAGE-reproduce", "a9201b69d015ad0a5e830b36f7e855da74fe827f",
        "https://raw.githubusercontent.com/{repo}/{commit}/",
        "Qi, Sarti et al. (2024), the MIRAGE authors' reproduction repository"),
    "alce": Source(
        "alce", "princeton-nlp/ALCE", "246c476a4edfc564266b7346b6e29ef4861ae937",
        "https://raw.githubusercontent.com/{repo}/{commit}/",
        "Gao et al. (2023), ALCE"),
}

_MATCH = "sec4_alignment/data/data-match/pos-{split}.jsonl"
_FULL = "sec4_alignment/data/xor_attriqa/in-language/{split}.jsonl"
_NLI = "sec4_alignment/nli-predictions/{split}-nli-{kind}.txt"

# split: (match pos-*.jsonl, per-passage in-language/*.jsonl (sha256 or None), its git blob id,
#         NLI in-lang, NLI translate-en, built match file)
_XOR = {
    "train": ("e1d325851cdc52a8f36a7a4b64a082087d683ab633f71b647cca7627895eb83a",
              "244ce7e958b86ecd2015d675fb1c255ec9809bed3a92bcfd44f5620f44e72dad",
              "1eadd1ff8c3e4bcab40871412947f0fc1c8e4746",
              "1f1038f16811656ce8a8a3b4708f8a8d576c7596b9caa050d09f5f1f89d41862",
              "4caba86c2a9bafd88dc82c30f3fc8e62af65eff867bb212270c7ec0660003f1c",
              "28cf619d0eb8ff6d3c0649ebb4187e4ed2dd9ad20179ebfdf4a015ab66d33b9e"),
    "val": ("141d656f4c5bcf64f060807533a2b468e4695b972a0878146513d592a5a0846f",
            "9b041a22fc8a73f74004f2fd9520e4a0eeeeb1f53fbb31916ecaab765f001a38",
            "d92d7f34048265560010765ce7b5b201b03b96c4",
            "03f18990b072396a42ed155372e01a324660adfb2366a4475a094a04d0f41519",
            "552b3618d14adc0efc87e849ca79c0e38f6dce85d01fc3457ee274800e171cd3",
            "29d83df9d2ab532725af384c676446401c0225828600cf88de2b4d831a71ddb9"),
    "bn": ("a7414a4ba8eedfe7b2d7a93a5afb4ccc279ff1fb9520064d50a0c035ecb46ce8",
           None,
           "0cf4101fdadf678e9798213bf9684bb05f081f17",
           "68b436bfb5b58c487a8794cce4ff5bff18b460ac77973dfe2619e8ea1cd82a7b",
           "17b1dfbd487051e3800539d85a3ac42ab5e3f30a5fa6a52f80a5fc0c742f4995",
           None),
    "fi": ("f8156242e1df2e76a367374b1db45b590fa0cf9f2d90fa45bb6001eac69a47bc",
           "f9613efd00163556346977b16bdc8b01ae2566351613f4d7b470ad93ff3b820c",
           "dc3c08f141a2eb4d2bb863aa870d0d32c3176c78",
           "2957e2e24c1772f84506e2a508796fccbe6cde7601a37445805696d9b355ed2a",
           "d2b724a4c1045936468826659f89a887f0b993b1ae63309f9f13e232ce98abca",
           "08743b024875fef6a0fe9d0e1c804e8f43ed559e48fff78000e247f0499c4269"),
    "ja": ("16ee7f20786f4a97ca37e89a2ee06962c2fb1cb4db219b6ee4a31acbb13ec8d3",
           "f0e021a2ed225268eceba15f20399c0333aa3b89a13d3e5f7167da74938522f5",
           "58435dcb1d2d76ebc61ce1cf26f7fed7fc66ce8d",
           "417aba3bdb28de077c078e33761706d4595c7ac26cb683a7f5b84d4d5b112730",
           "203947a3aee646a83b07a9501db4ba8a46ed6f8805b5d4bc94cefabef454cddc",
           "45cc4100c8fb62e61cdb0a983777b4c80a88f7aa9a2d2e35f7cb57a1e4de3a42"),
    "ru": ("db3ae5fbf8ea050ea0c636a5c25098ff1c5b61537f5b13b770b9352158094f1e",
           "d686d8c0d990f0f933d72fd608104fb45b98c59bcdc2a7756d226711b8af536d",
           "730826de8995d1c689d6e793cf81e558dd0df091",
           "7a5bcef1710efc34bddf87078c57a5a4b20e63b4c1cd7cefd7bd4d51d78831df",
           "26eb5b50c4fe1c3276f8a33598e2720def077f2b1380d93c1328c5693a558e3f",
           "426b58e724a668bb4b315db4179d94e9d2ac95dfcbbb15124d2e6af6d762c60a"),
    "te": ("19198eef6e9fe5d9d0a478d6b9a922bd50954e67fc43b45a39b7ea192ae18f30",
           None,
           "9ea0974d8c049f30aeca9cc652d4e876f5bfb9f6",
           "aaf9bd43bc68e9aadf4d6197017ab68fd5f35b2648b2e627d50c6e8b148ccc9d",
           "96301326551f9e48b6c20e39368009bb995ae4ff3fe343207c04ed0e37811526",
           None),
}


def _per_passage(split: str) -> Upstream:
    _, full, blob, *_ = _XOR[split]
    return Upstream("mirage-reproduce", _FULL.format(split=split), full, blob)


def _match_part(split: str) -> tuple[Output, ...]:
    match, _, _, nli_in, nli_mt, built = _XOR[split]
    folder = "xor_attriqa_match"
    return (
        Output(f"{folder}/{split}.jsonl", (Upstream("mirage-reproduce", _MATCH.format(split=split), match),
                                           _per_passage(split)), "xor-match-join", built),
        Output(f"{folder}/{split}.nli-translate-en.json",
               (Upstream("mirage-reproduce", _NLI.format(split=split, kind="translate-en"), nli_mt),), "copy", nli_mt),
        Output(f"{folder}/{split}.nli-in-lang.json",
               (Upstream("mirage-reproduce", _NLI.format(split=split, kind="in-lang"), nli_in),), "copy", nli_in),
    )


def _full_part(split: str) -> tuple[Output, ...]:
    up = _per_passage(split)
    return (Output(f"xor_attriqa_full/{split}.jsonl", (up,), "copy", up.sha256),)


#: Splits and languages of the XOR-AttriQA releases: calibration splits, then the five test languages.
XOR_SPLITS = ("train", "val", "bn", "fi", "ja", "ru", "te")

_ELI5_RESULT = "sec5_longQA/result/selfcitation/eli5-zephyr-7b-beta-bm25-shot0-ndoc5-42.json.mirage_cite_CTI_1_CCI_-5"

DATASETS: dict[str, Dataset] = {d.name: d for d in (
    Dataset(
        "xor-attriqa-match", "xor_attriqa_match",
        "XOR-AttriQA (Muller et al., 2023), the MIRAGE authors' 'match' subset (data-match/pos-*.jsonl) with "
        "query_en/prediction_en joined from the per-passage release, and the TRUE NLI baselines' predictions",
        {s: _match_part(s) for s in XOR_SPLITS}),
    Dataset(
        "xor-attriqa-full", "xor_attriqa_full",
        "XOR-AttriQA's per-passage release (xor_attriqa/in-language/*.jsonl): one (query, passage, answer) per line",
        {s: _full_part(s) for s in XOR_SPLITS}),
    Dataset(
        "eli5-alce", "eli5_alce",
        "three ELI5 questions of ALCE (Gao et al., 2023; BM25 top-5 web passages), as the MIRAGE authors' "
        "long-form runs hold them",
        {"eli5-alce": (Output("eli5_alce/eli5_eval_sample.json",
                              (Upstream("mirage-reproduce", _ELI5_RESULT,
                                        "4321ca8c9d2cfd9fc0be78ad24473775499db4e0d0fe156bf81714fab53c188c"),),
                              "eli5-items", "f32bb55ca58087a93685acfac6e6230a51c09f9f585ef7a685e8df92da7800b7"),)}),
    Dataset(
        "eli5-alce-prompt", "eli5_alce",
        "ALCE's ELI5 prompt file (prompts/eli5_default.json): the self-citation instruction and four cited demos",
        {"eli5-alce-prompt": (Output("eli5_alce/eli5_alce_prompt.json",
                                     (Upstream("alce", "prompts/eli5_default.json",
                                               "0c00ba7f9e790325201465a0783927e9c0a8a57032485ca90f2009f4390fd7cc"),),
                                     "json-indent1",
                                     "cda50fbf0088702053ad48804986de2f1fbbbbc28fef9cbd24f6e0221b347759"),)}),
    Dataset(
        "beir-small", "beir_small",
        "a BEIR-format corpus (10 queries, 74 English passages, qrels, answers) built from xor-attriqa-match:val "
        "(the retriever study's data; the rule: tests/data/beir_small/README.md)",
        {"beir-small": tuple(
            Output(f"beir_small/{name}", ("xor-attriqa-match:val",), "beir-small", sha) for name, sha in (
                ("corpus.jsonl", "569179af7b09b7b21e74e8083112bac7862705c8f799f41d68b76b767a64b885"),
                ("queries.jsonl", "c39e67474ae1443f27359549c4ab5d0c365a6e8b0010038a7f4760a30aa7e92b"),
                ("answers.jsonl", "7675af872582417bf8988796bfcccd47aa4c8199c69a17c5f5f56b6ff9e91a97"),
                ("qrels/test.tsv", "4cce89890201f23a285110acee3c99d3bb7f0a1b3107ddd0dd809c188230587e")))},
        as_folder=True),
    Dataset(
        "xor-attriqa-fi-ru", "xor_fi_ru",
        "xor-attriqa-match:fi and :ru in one file, fi first: the bias study's fi/ru questions (its row ids, "
        "xor_fi_ru-LINE, seed where each question's documents go, so the study reads the same items as the runs "
        "of benchmarks/results/bias_*_fi_ru)",
        {"xor-attriqa-fi-ru": (Output("xor_fi_ru/xor_fi_ru.jsonl", ("xor-attriqa-match:fi", "xor-attriqa-match:ru"),
                                      "concat", "501802821d0b57424ea32940ca0c7ff6bfdd2f00740a7a7ee8372ff36dd142a0"),)}),
)}


def is_spec(text: str) -> bool:
    """Whether ``text`` names a dataset (``NAME`` or ``NAME:PARTS``) rather than a path."""
    return text.split(":", 1)[0] in DATASETS


def parse_spec(text: str) -> DataSpec:
    """``NAME`` or ``NAME:PART[,PART…]`` as a :class:`DataSpec`; DataError naming the known names or parts."""
    name, _, parts_text = text.partition(":")
    if name not in DATASETS:
        raise DataError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)} (`mirage data list`).")
    dataset = DATASETS[name]
    if not parts_text:
        return DataSpec(dataset, tuple(dataset.parts), whole=True)
    parts = tuple(p.strip() for p in parts_text.split(","))
    unknown = [p for p in parts if p not in dataset.parts]
    if unknown or not parts:
        raise DataError(f"{text}: {dataset.name} has no part {', '.join(map(repr, unknown)) or repr('')}; its parts: "
                        f"{', '.join(dataset.parts)}.")
    return DataSpec(dataset, tuple(p for p in dataset.parts if p in parts), whole=False)  # the dataset's order
