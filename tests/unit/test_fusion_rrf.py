"""Reciprocal Rank Fusion against hand-computed values."""

from __future__ import annotations

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.retrievers.fusion import reciprocal_rank_fusion


def test_rrf_hand_computed() -> None:
    runs = {"a": Run("a", {"q": {"x": 3.0, "y": 2.0, "z": 1.0}}), "b": Run("b", {"q": {"z": 0.9, "x": 0.1}})}
    fused = reciprocal_rank_fusion(runs, ["a", "b"], k=60, depth=10)
    assert fused.name == "hybrid"
    assert fused.scores["q"] == pytest.approx({"x": 1 / 61 + 1 / 62, "y": 1 / 62, "z": 1 / 63 + 1 / 61})
    assert [d for d, _ in fused.ranking("q")] == ["x", "z", "y"]


def test_rrf_member_depth_weights_and_output_depth() -> None:
    runs = {"a": Run("a", {"q": {"x": 3.0, "y": 2.0}}), "b": Run("b", {"q": {"y": 1.0, "x": 0.5}})}
    fused = reciprocal_rank_fusion(runs, ["a", "b"], k=0, depth=1, weights=[2.0, 1.0])
    assert fused.scores["q"] == {
        "x": 2.0
    }  # each member read to depth 1: x from a (2/1); y from b (1/1) is cut by the output depth
    assert reciprocal_rank_fusion(runs, ["a", "b"], k=0, depth=2, weights=[2.0, 1.0]).scores["q"] == pytest.approx(
        {"x": 2.0 + 0.5, "y": 1.0 + 1.0}
    )


def test_rrf_errors() -> None:
    runs = {"a": Run("a", {})}
    with pytest.raises(RagtrackError, match="fusion members \\['dense'\\] are not among the systems"):
        reciprocal_rank_fusion(runs, ["a", "dense"])
    with pytest.raises(RagtrackError, match="2 members but 1 weights"):
        reciprocal_rank_fusion({"a": Run("a"), "b": Run("b")}, ["a", "b"], weights=[1.0])
