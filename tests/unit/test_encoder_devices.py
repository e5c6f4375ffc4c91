"""Where the transformer encoders run: ``device=auto`` picks a GPU where torch sees one (mocked here at
that boundary, ``torch.cuda.is_available``: no GPU is needed), the ONNX encoder moves to PyTorch there
when onnxruntime has no GPU provider and says so once; fp16 is GPU-only, bf16 runs on a GPU or the
CPU (mixed precision, checked against fp32), and each precision is part of the cache key; the dense
retriever records what encoded its embeddings."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import onnxruntime
import pytest
import torch

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.processes import physical_cores
from ragtrack.retrievers.dense import ENCODED_BY, DenseRetriever
from ragtrack.retrievers.encoders import (
    GPU_BATCH,
    HashingEncoder,
    HashingEncoderSettings,
    OnnxEncoder,
    SentenceTransformerEncoder,
    torch_device,
)
from tests.support import TOY

CPU_ONLY = ["CPUExecutionProvider"]


@pytest.fixture
def gpu(monkeypatch) -> None:
    """torch sees a GPU; this onnxruntime has the CPU provider only."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: CPU_ONLY)


def test_auto_picks_the_gpu_for_every_torch_stage(gpu) -> None:
    assert torch_device("auto") == "cuda" and torch_device("cpu") == "cpu" and torch_device("cuda:1") == "cuda:1"
    assert SentenceTransformerEncoder(precision="bf16").runtime() == {
        "device": "cuda",
        "backend": "torch",
        "precision": "bf16",
    }


def test_onnx_without_a_gpu_provider_runs_the_weights_on_torch_and_says_so_once(gpu, caplog) -> None:
    encoder = OnnxEncoder(precision="fp32", batch_size=None, query_prefix="q: ")
    with caplog.at_level(logging.INFO, logger="ragtrack.retrievers.encoders"):
        assert encoder.runtime() == {"device": "cuda", "backend": "torch", "precision": "fp32"}
        encoder.runtime()
        on_torch = encoder._on_torch()
    lines = [r.getMessage() for r in caplog.records]
    assert (
        len(lines) == 1
        and "onnxruntime has no GPU provider here (CPUExecutionProvider)" in lines[0]
        and "on cuda with PyTorch" in lines[0]
    )
    assert isinstance(on_torch, SentenceTransformerEncoder)
    assert (on_torch.device, on_torch.precision, on_torch.query_prefix, on_torch.max_seq_length) == (
        "cuda",
        "fp32",
        "q: ",
        256,
    )
    assert on_torch.batch_size is None and GPU_BATCH >= 256  # the GPU's batch, not the CPU's 32


def test_onnx_uses_its_cuda_provider_where_it_has_one(gpu, monkeypatch) -> None:
    monkeypatch.setattr(onnxruntime, "get_available_providers", lambda: ["CUDAExecutionProvider", *CPU_ONLY])
    assert OnnxEncoder(precision="fp32").runtime() == {"device": "cuda", "backend": "onnxruntime", "precision": "fp32"}
    assert OnnxEncoder(precision="fp16").runtime()["backend"] == "torch"  # half precision runs on PyTorch
    assert OnnxEncoder(precision="int8").runtime()["device"] == "cpu"  # int8 is a CPU format


def test_cpu_choices(monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert OnnxEncoder(precision="fp32").runtime() == {"device": "cpu", "backend": "onnxruntime", "precision": "fp32"}
    assert SentenceTransformerEncoder(device="cpu").runtime() == {
        "device": "cpu",
        "backend": "torch",
        "precision": "fp32",
    }
    for encoder in (
        SentenceTransformerEncoder(precision="bf16"),
        OnnxEncoder(precision="bf16"),
    ):  # bf16 is PyTorch's, on the CPU too
        assert encoder.runtime() == {"device": "cpu", "backend": "torch", "precision": "bf16"}
    assert HashingEncoder().runtime() == {"device": "cpu", "backend": "numpy"}
    assert HashingEncoder(distributed="ray").document_runtime() == {"distributed": "ray"}
    assert 1 <= physical_cores() <= os.cpu_count()


@pytest.mark.parametrize(
    "encoder, message",
    [
        (
            lambda: SentenceTransformerEncoder(precision="fp16"),
            "encoder.precision=fp16 runs on a GPU only, and this run's device is cpu; use fp32 or bf16",
        ),
        (
            lambda: OnnxEncoder(precision="fp16", device="cpu"),
            "encoder.precision=fp16 runs on a GPU only, and this run's device is cpu; use fp32 or int8 or bf16",
        ),
        (
            lambda: OnnxEncoder(precision="int8", device="cuda"),
            "encoder.precision=int8 runs on the CPU only (ONNX Runtime's int8 kernels); use device=cpu or auto, not cuda",
        ),
        (
            lambda: SentenceTransformerEncoder(precision="int8"),
            "encoder SentenceTransformerEncoder: precision: 'int8' is not allowed: input should be 'fp32', 'fp16' or 'bf16'",
        ),
    ],
)
def test_precision_and_device_mismatches_are_one_line(monkeypatch, encoder, message: str) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RagtrackError) as raised:
        encoder().runtime()
    assert str(raised.value) == message


def test_each_precision_has_its_own_cache_key() -> None:
    keys = [
        encoder.fingerprint()["backend"]
        for encoder in [
            *(SentenceTransformerEncoder(precision=p) for p in ("fp32", "fp16", "bf16")),
            *(OnnxEncoder(precision=p) for p in ("fp32", "int8", "fp16", "bf16")),
        ]
    ]
    assert keys == ["torch-fp32", "torch-fp16", "torch-bf16", "onnx-fp32", "onnx-int8", "onnx-fp16", "onnx-bf16"]
    assert (
        OnnxEncoder(precision="fp32", device="cpu").fingerprint()
        == OnnxEncoder(precision="fp32", device="cuda").fingerprint()
    )


def test_the_embeddings_record_what_encoded_them(tmp_path) -> None:
    dataset = load_beir(TOY)
    cache = Cache(tmp_path)
    for attempt in range(2):  # built, then read from the cache
        retriever = DenseRetriever(HashingEncoder(dim=32))
        retriever.index(dataset.corpus, cache)
        assert retriever.stats.labels == {"encoded_by.device": "cpu", "encoded_by.backend": "numpy"}
    folder = next(path.parent for path in tmp_path.rglob(ENCODED_BY))
    assert json.loads((folder / ENCODED_BY).read_text()) == {"device": "cpu", "backend": "numpy"}


class Tight:
    """A loaded sentence-transformers model that runs out of memory on batches of more than 2 texts."""

    def __init__(self, model):
        self.model, self.device, self.preprocess = model, model.device, model.preprocess

    def __call__(self, features):
        if len(features["input_ids"]) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return self.model(features)


def test_the_batch_halves_while_the_device_runs_out_of_memory(caplog) -> None:
    texts = ["a short text", "a somewhat longer text about cells", "x", "mitochondria " * 30, "plate tectonics"]
    reference = SentenceTransformerEncoder(device="cpu").encode(texts)
    encoder = SentenceTransformerEncoder(device="cpu", batch_size=8)
    encoder._model = Tight(encoder._load())
    with caplog.at_level(logging.WARNING, logger="ragtrack.retrievers.encoders"):
        vectors = encoder.encode(texts)
    assert [r.getMessage().rsplit(" ", 1)[-1] for r in caplog.records] == ["4", "2"]
    assert abs(vectors - reference).max() < 1e-6


def test_bf16_on_the_cpu_is_mixed_precision_close_to_fp32() -> None:
    """The shipped MiniLM: bf16 weights in the linear layers only, fp32 everywhere else and in the
    output; every embedding within cosine 0.9999 of fp32 (a one-word text is the hardest case)."""
    texts = [
        "x",
        "a short text",
        "plate tectonics",
        "mitochondria " * 30,
        "The p53 protein regulates the cell cycle. " * 12,
    ]
    reference = SentenceTransformerEncoder(device="cpu").encode(texts)
    encoder = SentenceTransformerEncoder(device="cpu", precision="bf16", batch_size=2)
    vectors = encoder.encode(texts)
    dtypes = {
        type(m).__name__: {p.dtype for p in m.parameters(recurse=False)}
        for m in encoder._model.modules()
        if list(m.parameters(recurse=False))
    }
    assert dtypes["Linear"] == {torch.bfloat16} and dtypes["LayerNorm"] == dtypes["Embedding"] == {torch.float32}
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-6)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.9999 and cosines.min() < 1 - 1e-7  # close, and not fp32 under another name


def test_an_encoder_takes_its_models_validated_settings() -> None:
    """Keyword arguments are checked by the encoder's settings model, whose defaults are the only ones."""
    assert HashingEncoder().dim == HashingEncoderSettings.model_fields["dim"].default
    with pytest.raises(RagtrackError, match="^encoder HashingEncoder: dims: no such key"):
        HashingEncoder(dims=3)
    with pytest.raises(RagtrackError, match="^encoder HashingEncoder: distributed: 'spark' is not allowed"):
        HashingEncoder(distributed="spark")
