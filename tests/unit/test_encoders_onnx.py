"""The ONNX Runtime encoder reproduces sentence-transformers' embeddings (its fp32 graph fused); its
exports are cached."""

from __future__ import annotations

import json
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.errors import RagtrackError
from ragtrack.core.models import resolve_model
from ragtrack.retrievers.encoders import OnnxEncoder, SentenceTransformerEncoder

TEXTS = [
    "short one",
    "ATP is produced in the mitochondria of eukaryotic cells " * 6,
    "",
    "mid length text about plate tectonics",
    "Glucose and oxygen come from photosynthesis in the chloroplasts of plants " * 40,
]  # the last one is truncated


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Cache:
    return Cache(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def encoders(cache: Cache) -> dict[str, OnnxEncoder]:
    built = {precision: OnnxEncoder(precision=precision, batch_size=2) for precision in ("fp32", "int8")}
    for encoder in built.values():
        encoder.prepare(cache)
    return built


def test_fp32_equals_sentence_transformers(encoders) -> None:
    reference = SentenceTransformerEncoder().encode(TEXTS)
    assert np.abs(encoders["fp32"].encode(TEXTS) - reference).max() < 1e-5


def test_int8_stays_close_to_fp32(encoders) -> None:
    cosine = (encoders["int8"].encode(TEXTS) * encoders["fp32"].encode(TEXTS)).sum(axis=1)
    assert cosine.min() > 0.97


def test_rows_follow_input_order_whatever_the_batching(encoders) -> None:
    order = list(range(len(TEXTS)))
    random.Random(0).shuffle(order)
    encoder = encoders["fp32"]
    shuffled = encoder.encode([TEXTS[i] for i in order])
    assert np.allclose(shuffled, encoder.encode(TEXTS)[order], atol=1e-6)
    assert np.allclose(np.linalg.norm(shuffled, axis=1), 1.0, atol=1e-6)


def test_exports_are_cached_and_precision_is_in_the_key(cache: Cache, encoders) -> None:
    builds = list(cache.builds)
    OnnxEncoder(precision="int8").prepare(cache)
    assert cache.builds == builds and len([b for b in builds if b.startswith("onnx/")]) == 3  # export, fusion, int8
    assert encoders["fp32"].fingerprint() != encoders["int8"].fingerprint()
    assert encoders["fp32"].fingerprint() != SentenceTransformerEncoder().fingerprint()


def test_fp32_runs_the_fused_graph_at_float_rounding(encoders) -> None:
    import onnx

    operators = Counter(node.op_type for node in onnx.load(str(encoders["fp32"]._model_file)).graph.node)
    assert (
        operators["Attention"] == 6
        and operators["EmbedLayerNormalization"] == 1
        and operators["SkipLayerNormalization"] == 12
    )
    reference = SentenceTransformerEncoder().encode(TEXTS)
    assert (encoders["fp32"].encode(TEXTS) * reference).sum(axis=1).min() >= 0.9999


def test_unsupported_settings_fail_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RagtrackError, match="precision: 'fp8' is not allowed"):
        OnnxEncoder(precision="fp8")
    with pytest.raises(RagtrackError, match="tokenizer.json"):
        OnnxEncoder(model=str(tmp_path))
    model = tmp_path / "cls-model"
    shutil.copytree(resolve_model("all-MiniLM-L6-v2"), model, ignore=shutil.ignore_patterns("*.safetensors"))
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(RagtrackError, match="mean Pooling"):
        OnnxEncoder(model=str(model))
