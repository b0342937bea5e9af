"""The attribution core: loading a model, building and tokenizing prompts, generating, the teacher-forced passes, CTI,
CCI, aggregation into sentence citations, and the plain result dataclasses."""

__all__ = []
