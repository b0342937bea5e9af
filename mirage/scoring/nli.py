"""NLI judges built from Hugging Face models, for ALCE citation quality.

Two kinds, told apart by the model's config (not its name):
- sequence-to-sequence models in the TRUE style (``google/t5_xxl_true_nli_mixture``, the paper's judge): the input is
  ``premise: {premise} hypothesis: {hypothesis}`` and the generated text ``1`` means entailment;
- sequence-classification models (MNLI-style): entailment when the label whose name contains "entail" has the
  highest probability.
"""

from __future__ import annotations

from typing import Any

__all__ = ["HFNLIJudge", "NLIJudgeError"]


class NLIJudgeError(ValueError):
    """The model cannot serve as an NLI judge; the message says why."""


class HFNLIJudge:
    """An NLI judge from an already-loaded model and tokenizer (see :meth:`from_pretrained`)."""

    def __init__(self, model: Any, tokenizer: Any, *, name: str | None = None, max_length: int = 2048) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.name = name or getattr(model.config, "_name_or_path", None) or type(model).__name__
        self.max_length = max_length
        self.seq2seq = bool(getattr(model.config, "is_encoder_decoder", False))
        if not self.seq2seq:
            labels = {int(i): str(n).lower() for i, n in (model.config.id2label or {}).items()}
            entail = [i for i, n in labels.items() if "entail" in n and "not" not in n and "non" not in n]
            if len(entail) != 1:
                raise NLIJudgeError(
                    f"{self.name}: a classification judge needs exactly one label naming entailment in "
                    f"config.id2label, found {labels}; give a TRUE-style seq2seq model or an MNLI classifier.")
            self.entail_label = entail[0]

    @classmethod
    def from_pretrained(cls, name_or_path: str, *, device: str | None = None, dtype: Any = None,
                        trust_remote_code: bool = False) -> HFNLIJudge:
        """Load a Hugging Face id or local path (seq2seq TRUE-style or sequence classification)."""
        import torch
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer

        try:
            cfg = AutoConfig.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
            tok = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust_remote_code)
            auto = AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForSequenceClassification
            model = auto.from_pretrained(name_or_path, dtype=dtype, trust_remote_code=trust_remote_code)
        except (OSError, ValueError) as err:
            raise NLIJudgeError(f"cannot load NLI judge {name_or_path!r}: {err}") from err
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        return cls(model.to(device), tok, name=name_or_path)

    def entails(self, premise: str, hypothesis: str) -> bool:
        import torch

        device = next(self.model.parameters()).device
        with torch.inference_mode():
            if self.seq2seq:
                enc = self.tokenizer(f"premise: {premise} hypothesis: {hypothesis}", return_tensors="pt",
                                     truncation=True, max_length=self.max_length).to(device)
                out = self.model.generate(**enc, max_new_tokens=10)
                text = self.tokenizer.decode(out[0], skip_special_tokens=True)
                return text.strip() == "1"
            enc = self.tokenizer(premise, hypothesis, return_tensors="pt", truncation=True,
                                 max_length=min(self.max_length, getattr(self.tokenizer, "model_max_length", 512))
                                 ).to(device)
            logits = self.model(**enc).logits[0]
            return int(logits.argmax()) == self.entail_label
