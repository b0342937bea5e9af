"""Datasets by name: a registry of public sources with pinned checksums (:mod:`~mirage.data.registry`), the recipes
that give the files mirage reads (:mod:`~mirage.data.build`), and the cache with its download and import
(:mod:`~mirage.data.fetch`).

    from mirage.data import get, resolve
    get("xor-attriqa-match:fi")              # once: download, check, build; or get(..., source=LOCAL_COPY)
    resolve("xor-attriqa-match:fi")          # the file, for any command or function that reads one
"""

from mirage.data.fetch import (
    data_label,
    data_root,
    dataset_table,
    get,
    is_cached,
    resolve,
    resolve_all,
    resolve_files,
)
from mirage.data.registry import DATASETS, DataError, parse_spec

__all__ = ["DATASETS", "DataError", "data_label", "data_root", "dataset_table", "get", "is_cached", "parse_spec",
           "resolve", "resolve_all", "resolve_files"]
