"""Datasets, read once per process through their providers (``ragtrack.evaluators.providers``, entry-point group
``ragtrack.datasets``) and again when one of their files changed: the jobs of a multirun that runs in one
process share the (frozen) dataset (and,
through ``ragtrack.core.stages``, every run file read from the cache); and how a job reads its
judgments (relevance threshold, queries without a relevant judgment), for the job and for ``compare``."""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ragtrack.core.data import Dataset
from ragtrack.evaluators.ranking import COUNT_WITHOUT_RELEVANT, WithoutRelevant
from ragtrack.pipeline import registry
from ragtrack.pipeline.records.library_logs import quiet_libraries


def load_dataset(cfg: Mapping | DictConfig, check_documents: bool = True) -> Dataset:
    """The dataset a ``dataset`` config names (its ``type``: beir, trec, irds or a plugin)."""
    quiet_libraries()  # before ir_datasets logs its first line
    settings = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    return _load_once(json.dumps(settings, sort_keys=True), check_documents, _files_signature(settings))


def _files_signature(settings: Mapping) -> tuple:
    """Path, size, mtime, ctime and inode of every file under each path the settings name (a folder:
    every file in it), sorted: any write to a dataset's files changes it (a write always moves ctime),
    so a process that keeps running (a notebook, a service) reads an edited qrels file again."""
    signature = []
    for value in _strings(settings):
        for path in (
            sorted(Path(value).rglob("*")) if os.path.isdir(value) else [Path(value)] if os.path.isfile(value) else []
        ):
            with contextlib.suppress(OSError):  # gone meanwhile: the reader says so
                info = path.stat()
                signature.append((str(path), info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino))
    return tuple(signature)


def _strings(value: object) -> list[str]:
    if isinstance(value, Mapping):
        return [s for item in value.values() for s in _strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


@functools.lru_cache(maxsize=2)
def _load_once(settings: str, check_documents: bool, signature: tuple) -> Dataset:
    """The dataset of ``settings``, read again when the ``signature`` of its files changed."""
    return registry.build("datasets", json.loads(settings)).load(check_documents)


def relevance_threshold(cfg: DictConfig) -> int:
    """The grade from which a document counts as relevant (``evaluator.ranking.relevance_threshold``)."""
    return int(OmegaConf.select(cfg, "evaluator.ranking.relevance_threshold", default=1))


def without_relevant(cfg: DictConfig) -> WithoutRelevant:
    """Whether judged queries without a relevant document count in the ranking means
    (``evaluator.ranking.without_relevant``; ``ranking.counted_rows``)."""
    return OmegaConf.select(cfg, "evaluator.ranking.without_relevant", default=COUNT_WITHOUT_RELEVANT)
