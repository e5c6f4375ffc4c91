"""Datasets, read once per process: the jobs of a multirun that runs in one process share the (frozen)
dataset (and, through ``ragtrack.core.stages``, every run file read from the cache)."""

from __future__ import annotations

import functools
from collections.abc import Mapping

from ragtrack.core.data import Dataset, load_beir


def load_dataset(cfg: Mapping, check_documents: bool = True) -> Dataset:
    """The dataset a ``dataset`` config names (``path``, ``split``, ``name``, ``qrels_file``)."""
    return _load_beir_once(str(cfg["path"]), str(cfg["split"]), cfg.get("name"), cfg.get("qrels_file"), check_documents)


@functools.lru_cache(maxsize=2)
def _load_beir_once(path: str, split: str, name: str | None, qrels_file: str | None, check_documents: bool) -> Dataset:
    return load_beir(path, split=split, name=name, qrels_file=qrels_file, check_documents=check_documents)
