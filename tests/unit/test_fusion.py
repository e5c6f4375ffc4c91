"""Fusion methods against hand-computed values (max normalization against ranx); every one is registered
and configured like a plugin."""

from __future__ import annotations

import math
import random

import pytest
from hydra import compose, initialize_config_module

from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.retrievers.fusion import combmnz, combsum, linear_fusion, normalize, reciprocal_rank_fusion

RUNS = {
    "bm25": Run("bm25", {"q1": {"a": 3.0, "b": 2.0, "c": 1.0}}),
    "dense": Run("dense", {"q1": {"b": 0.9, "c": 0.5, "d": 0.1}}),
}
MEMBERS = ["bm25", "dense"]
Z = math.sqrt(1.5)  # z-score of the extremes of a 3-element evenly spaced list


def scores(run: Run) -> dict[str, float]:
    return run.scores["q1"]


def test_rrf_hand_computed() -> None:
    fused = reciprocal_rank_fusion(RUNS, MEMBERS, k=60)
    assert scores(fused) == pytest.approx({"a": 1 / 61, "b": 1 / 62 + 1 / 61, "c": 1 / 63 + 1 / 62, "d": 1 / 63})
    assert [d for d, _ in fused.ranking("q1")] == ["b", "c", "a", "d"]


@pytest.mark.parametrize(
    "method, ranked, expected",
    [
        ("none", [("a", 3.0), ("b", 2.0), ("c", 1.0)], {"a": 3.0, "b": 2.0, "c": 1.0}),
        ("minmax", [("a", 3.0), ("b", 2.0), ("c", 1.0)], {"a": 1.0, "b": 0.5, "c": 0.0}),
        ("minmax", [("a", 7.0)], {"a": 1.0}),
        ("zscore", [("a", 3.0), ("b", 2.0), ("c", 1.0)], {"a": Z, "b": 0.0, "c": -Z}),
        ("zscore", [("a", 2.0), ("b", 2.0)], {"a": 0.0, "b": 0.0}),
        ("max", [("b", 0.9), ("c", 0.5), ("d", 0.1)], {"b": 1.0, "c": 5 / 9, "d": 1 / 9}),
        ("max", [("a", 0.0), ("b", -1.0)], {"a": 0.0, "b": -1e9}),
        (
            "max",
            [("a", -1.0), ("b", -2.0), ("c", -4.0)],
            {"a": -1e9, "b": -2e9, "c": -4e9},
        ),  # all negative: the order kept
    ],
)
def test_normalizations(method: str, ranked: list, expected: dict) -> None:
    assert normalize(ranked, method) == pytest.approx(expected)


def test_max_normalization_equals_ranx_and_never_reverses_a_ranking() -> None:
    """ranx's ``max_norm`` (ranx/normalization/max_norm.py: s / max(max, 1e-9)) on random lists, a
    third of them all negative (reranker logits, log-probabilities): the same values, and the order of
    every list kept."""
    from ranx import Run as RanxRun
    from ranx.normalization import max_norm

    rng = random.Random(0)
    lists = {
        f"q{i}": {f"d{j}": rng.uniform(-10, 10) - (15 if i % 3 == 0 else 0) for j in range(rng.randint(1, 12))}
        for i in range(90)
    }
    reference = max_norm(RanxRun({q: dict(docs) for q, docs in lists.items()})).to_dict()
    for qid, docs in lists.items():
        ours = normalize(sorted(docs.items(), key=lambda item: -item[1]), "max")
        assert ours == pytest.approx(reference[qid], rel=1e-12, abs=0)
        assert sorted(ours, key=lambda doc: -ours[doc]) == sorted(docs, key=lambda doc: -docs[doc])


@pytest.mark.parametrize(
    "normalization, expected",
    [
        ("none", {"a": 3.0, "b": 2.9, "c": 1.5, "d": 0.1}),
        ("minmax", {"a": 1.0, "b": 1.5, "c": 0.5, "d": 0.0}),
        ("zscore", {"a": Z, "b": Z, "c": -Z, "d": -Z}),
        ("max", {"a": 1.0, "b": 5 / 3, "c": 1 / 3 + 5 / 9, "d": 1 / 9}),
    ],
)
def test_combsum(normalization: str, expected: dict) -> None:
    assert scores(combsum(RUNS, MEMBERS, normalization=normalization)) == pytest.approx(expected)


def test_combsum_weights_and_depth() -> None:
    assert scores(combsum(RUNS, MEMBERS, weights=[2, 1], normalization="none")) == pytest.approx(
        {"a": 6.0, "b": 4.9, "c": 2.5, "d": 0.1}
    )
    # depth 2: bm25 keeps a, b; dense keeps b, c; the fused run keeps its top 2
    fused = combsum(RUNS, MEMBERS, depth=2, normalization="none")
    assert scores(fused) == pytest.approx({"a": 3.0, "b": 2.9})


def test_combmnz_multiplies_by_hits() -> None:
    fused = combmnz(RUNS, MEMBERS, normalization="minmax")
    assert scores(fused) == pytest.approx({"a": 1.0, "b": 3.0, "c": 1.0, "d": 0.0})
    assert [d for d, _ in fused.ranking("q1")] == ["b", "c", "a", "d"]  # a/c tie: trec_eval order (id descending)
    assert fused.name == "combmnz"


def test_linear_is_convex_and_imputes_the_member_minimum() -> None:
    minmax = linear_fusion(RUNS, MEMBERS, weights=[1, 3], normalization="minmax")
    assert scores(minmax) == pytest.approx({"a": 0.25, "b": 0.875, "c": 0.375, "d": 0.0})
    # z-scores: a missing document takes the member's lowest z-score (-Z), not 0
    zscore = linear_fusion(RUNS, MEMBERS, weights=[1, 1], normalization="zscore")
    assert scores(zscore) == pytest.approx({"a": 0.0, "b": Z / 2, "c": -Z / 2, "d": -Z})
    assert scores(linear_fusion(RUNS, MEMBERS, weights=[2, 6])) == pytest.approx(scores(minmax))


def test_queries_of_one_member_only() -> None:
    runs = {
        "bm25": Run("bm25", {"q1": {"a": 1.0}, "q2": {"x": 2.0, "y": 1.0}}),
        "dense": Run("dense", {"q1": {"a": 0.5}}),
    }
    assert combsum(runs, MEMBERS).scores["q2"] == pytest.approx({"x": 1.0, "y": 0.0})
    assert linear_fusion(runs, MEMBERS).scores["q2"] == pytest.approx({"x": 0.5, "y": 0.0})


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: combsum(RUNS, MEMBERS, normalization="softmax"), "unknown score normalization 'softmax'"),
        (lambda: combmnz(RUNS, MEMBERS, weights=[1.0]), "2 members but 1 weights"),
        (lambda: combsum(RUNS, ["bm25", "splade"]), "fusion members ['splade']"),
        (lambda: linear_fusion(RUNS, MEMBERS, weights=[1, -1]), "weights must be >= 0"),
        (lambda: reciprocal_rank_fusion(RUNS, MEMBERS, k=-1), "RRF k must be >= 0"),
    ],
)
def test_bad_settings_fail_with_one_line(call, message: str) -> None:
    with pytest.raises(RagtrackError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        call()


def test_every_fusion_config_builds_its_registered_stage() -> None:
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=["fusion=[rrf,combsum,combmnz,linear]", "dataset=toy"])
    systems = {}
    for name, fcfg in cfg.fusion.items():
        assert name in registry.installed("fusions")
        fusion = registry.build("fusions", fcfg)
        assert fusion.name == fcfg.system and fusion.inputs == list(fcfg.members)
        systems[fcfg.system] = fusion.fuse(RUNS)
    assert set(systems) == {"hybrid", "combsum", "combmnz", "linear"}
    assert scores(systems["combsum"]) == pytest.approx({"a": 1.0, "b": 1.5, "c": 0.5, "d": 0.0})


def test_every_fusion_breaks_ties_by_document_id_descending() -> None:
    """Members whose documents all score the same fuse into equal scores: order and cut by id."""
    runs = {
        "a": Run("a", {"q": {"d1": 1.0, "d2": 1.0, "d3": 1.0}}),
        "b": Run("b", {"q": {"d1": 2.0, "d2": 2.0, "d3": 2.0}}),
    }
    for fuse in (reciprocal_rank_fusion, combsum, combmnz, linear_fusion):
        fused = fuse(runs, ["a", "b"], depth=2)
        assert [d for d, _ in fused.ranking("q")] == ["d3", "d2"], fuse.__name__


def test_an_alias_labels_a_system_and_changes_no_key() -> None:
    """``alias`` (every system's setting) is the pipeline's row label: the stage never sees it, so
    nothing it keys or makes changes with it."""
    plain = {"type": "rrf", "system": "hybrid", "members": ["bm25", "dense"]}
    named = registry.build("fusions", {**plain, "alias": "Hybrid (RRF)"})
    assert named.identity() == registry.build("fusions", plain).identity() and "alias" not in named.identity()
    bm25 = registry.build("retrievers", {"type": "bm25", "alias": "BM25 (flat)"}, name="bm25")
    assert bm25.identity() == registry.build("retrievers", {"type": "bm25"}, name="bm25").identity()
    with pytest.raises(RagtrackError, match="alias"):
        registry.build("fusions", {**plain, "alias": ""})
