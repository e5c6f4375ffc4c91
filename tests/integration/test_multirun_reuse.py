"""What the jobs of one multirun process share, and that sharing never changes a result: every job
composes through Hydra's public API, runs from the cache are scored and formatted once, plugins are discovered once,
the bootstrap draws are made once; fused runs and TREC files are identical to a fresh computation."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf, open_dict

from ragtrack.core.cache import IdentityMemo
from ragtrack.core.runs import Run, rank_documents, read_trec, write_trec
from ragtrack.evaluators.base import aggregate
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.retrievers.fusion import reciprocal_rank_fusion
from tests.support import package_sources, random_qrels_and_run

SWEEP_JOB_OVERRIDES = [  # value overrides, group choices, a dict value for a group, deletions, Hydra's own settings
    [],
    ["fusion.rrf.k=30"],
    ["seed=3", "fusion.rrf.k=50"],
    ["retriever=[bm25]"],
    ["retriever=[bm25]", "depth=20"],
    ["encoder=hashing", "fusion.rrf.k=7"],
    ["fusion.rrf.k=7", "encoder=hashing"],
    ["experiment=rrf_k"],
    ["~chunking", "depth=5"],
    ["tracking={enabled: false, uri: x, experiment: y}"],
    ["fusion=[rrf,combsum]", "fusion.combsum.system=sum"],
    ["hydra.job.chdir=true", "fusion.rrf.k=9"],
    ["+extra=1"],
    ["dataset=toy", "chunking=tokens", "chunking.size=8"],
    [],
]


@pytest.mark.parametrize("overrides", SWEEP_JOB_OVERRIDES, ids=" ".join)
def test_every_kind_of_sweep_override_composes_through_hydras_public_api(overrides: list[str]) -> None:
    """Each job composes afresh with Hydra's compose API; what one job edits never reaches the next."""
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        first = compose("config", overrides=overrides, return_hydra_config=True)
        expected = OmegaConf.to_container(first)
        with open_dict(first):
            first.fusion = {"edited": True}
            first.hydra.job.name = "edited"
        assert OmegaConf.to_container(compose("config", overrides=overrides, return_hydra_config=True)) == expected
    if "fusion.rrf.k=30" in overrides:
        assert expected["fusion"]["rrf"]["k"] == 30


def test_a_bad_override_fails_as_in_hydra() -> None:
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        compose("config", overrides=["fusion.rrf.k=1"])
        with pytest.raises(Exception, match="Could not override 'fusion.rrf.nope'"):
            compose("config", overrides=["fusion.rrf.nope=1"])
        with pytest.raises(Exception, match="Could not find 'encoder/nope'"):
            compose("config", overrides=["encoder=nope"])


def test_no_module_imports_private_hydra_or_mlflow_internals() -> None:
    for source in package_sources():
        text = source.read_text()
        assert "hydra._internal" not in text and "._impl" not in text and "omegaconf._" not in text, source


def test_identity_memo_computes_once_per_object_and_settings() -> None:
    memo, calls = IdentityMemo(size=2), []
    a, b, c = Run("a"), Run("b"), Run("c")

    def compute(label: str) -> str:
        calls.append(label)
        return label

    assert memo.get((a,), "s", lambda: compute("a")) == "a"
    assert memo.get((a,), "s", lambda: compute("again")) == "a"  # same object and settings: a hit
    assert memo.get((Run("a"),), "s", lambda: compute("equal")) == "equal"  # equal but not the same object: a miss
    assert memo.get((a,), "other", lambda: compute("a-other")) == "a-other"  # other settings: a miss
    memo.get((b,), "s", lambda: compute("b"))
    memo.get((c,), "s", lambda: compute("c"))
    assert memo.get((a,), "s", lambda: compute("evicted")) == "evicted"  # only the 2 most recent entries stay
    assert calls == ["a", "equal", "a-other", "b", "c", "evicted"]


def test_plugin_discovery_is_cached_per_search_path(monkeypatch, tmp_path) -> None:
    first = registry.installed("retrievers")
    assert registry.installed("retrievers") == first and registry._scan.cache_info().hits >= 1
    misses = registry._scan.cache_info().misses
    monkeypatch.syspath_prepend(str(tmp_path))  # a new search path (e.g. a plugin folder) is scanned again
    assert registry.installed("retrievers") == first and registry._scan.cache_info().misses == misses + 1


@pytest.mark.parametrize("seed", range(5))
def test_bootstrap_counts_equal_the_draws_they_summarize(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, resamples = int(rng.integers(1, 60)), 200
    values = pd.DataFrame(rng.random((n, 3)), columns=["x", "y", "z"])
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    means = values.to_numpy()[draws].mean(axis=1)  # each resample's mean, computed directly
    low, high = np.percentile(means, [2.5, 97.5], axis=0)
    summary = aggregate(values, resamples=resamples, seed=seed)
    np.testing.assert_allclose(summary["ci_low"], low, rtol=0, atol=1e-12)
    np.testing.assert_allclose(summary["ci_high"], high, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(20))
def test_kept_rankings_equal_a_fresh_sort_and_fusion_is_unchanged(seed: int, tmp_path) -> None:
    _, scores_a = random_qrels_and_run(seed)
    _, scores_b = random_qrels_and_run(seed + 100)
    runs = {"a": Run("a", scores_a), "b": Run("b", scores_b)}
    for run in runs.values():
        assert all(run.ranking(qid) == rank_documents(scores) for qid, scores in run.scores.items())
        assert run.ranking(next(iter(run.scores), "q")) is run.ranking(next(iter(run.scores), "q"))  # sorted once
    k, depth = random.Random(seed).choice([0, 1, 60]), random.Random(seed).choice([3, 10, 100])
    fused = reciprocal_rank_fusion(runs, ["a", "b"], k=k, depth=depth)
    expected: dict[str, dict[str, float]] = {}  # the formula, summed in the same order
    for run in runs.values():
        for qid, scores in run.scores.items():
            expected.setdefault(qid, {})
            for rank, (doc, _) in enumerate(rank_documents(scores)[:depth], start=1):
                expected[qid][doc] = expected[qid].get(doc, 0.0) + 1 / (k + rank)
    assert fused.scores == {qid: dict(rank_documents(s)[:depth]) for qid, s in expected.items()}
    assert read_trec(write_trec(fused, tmp_path / "f.trec")).scores == {q: s for q, s in fused.scores.items() if s}
