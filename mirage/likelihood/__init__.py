"""The passage-likelihood citation rule: per-document signals (each document alone, none, leave-one-out, attention
share), their named features, and the logistic-regression classifier."""

__all__ = []
