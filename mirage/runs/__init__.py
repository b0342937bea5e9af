"""Runs and stores: the experiment configuration and its fingerprint, resumable JSONL stores, a run folder's files,
sharding over processes, loading a model on demand, progress."""

__all__ = []
