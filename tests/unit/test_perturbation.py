"""Query perturbations: counts follow the rate, edits are the documented ones, and the output depends
only on (seed, perturbation name, query id, text) - not on other queries, their order or the hash seed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ragtrack.evaluators.perturbation import NEIGHBOURS, _rng, drop_words, perturb_queries, typos

QUERIES = {
    "a": "How many points did the Panthers defense surrender?",
    "b": "0-dimensional biomaterials lack inductive properties.",
    "c": "why",
    "d": "A B C D E F G H I J",
}


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (a swap of neighbours costs 2)."""
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        current = [i]
        for j in range(1, len(b) + 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] != b[j - 1])))
        previous = current
    return previous[-1]


def test_keyboard_neighbours() -> None:
    assert sorted(NEIGHBOURS["s"]) == sorted("adwezx") and sorted(NEIGHBOURS["g"]) == sorted("fhtyvb")
    assert all(ch in NEIGHBOURS[other] for ch, near in NEIGHBOURS.items() for other in near)  # symmetric


@pytest.mark.parametrize("rate", [0.05, 0.1, 0.2, 0.5])
def test_typos_edit_about_rate_times_letters(rate: float) -> None:
    text = QUERIES["a"]
    letters = sum(ch.isalpha() for ch in text)
    for seed in range(20):
        changed = typos(text, rate, _rng(seed, "t", "a"))
        edits = int(rate * letters + 0.5)
        assert (
            0 < edit_distance(text, changed) <= 2 * edits
        )  # one typo per picked letter, each at most 2 character edits
        assert abs(len(changed) - len(text)) <= edits


def test_drop_words_keeps_order_and_one_word() -> None:
    words = QUERIES["d"].split()
    kept = drop_words(QUERIES["d"], 0.2, _rng(0, "d", "d")).split()
    assert len(kept) == 8 and kept == [w for w in words if w in kept]
    assert drop_words("alone", 1.0, _rng(0, "d", "x")) == "alone"
    assert len(drop_words(QUERIES["d"], 1.0, _rng(0, "d", "d")).split()) == 1


def test_case_changes_and_validation() -> None:
    assert perturb_queries(QUERIES, "low", "lowercase")["a"] == QUERIES["a"].lower()
    assert perturb_queries(QUERIES, "up", "uppercase")["b"] == QUERIES["b"].upper()
    with pytest.raises(ValueError, match="unknown perturbation kind 'shout'"):
        perturb_queries(QUERIES, "x", "shout")
    with pytest.raises(ValueError, match=r"rate must be in \(0, 1\], got 0"):
        perturb_queries(QUERIES, "x", "typos", 0)


def test_a_querys_perturbation_depends_only_on_seed_name_and_id() -> None:
    full = perturb_queries(QUERIES, "typos_20", "typos", 0.2, seed=3)
    alone = perturb_queries({"b": QUERIES["b"]}, "typos_20", "typos", 0.2, seed=3)
    reordered = perturb_queries(dict(reversed(list(QUERIES.items()))), "typos_20", "typos", 0.2, seed=3)
    assert alone["b"] == full["b"] and reordered == full
    assert perturb_queries(QUERIES, "typos_20", "typos", 0.2, seed=4) != full
    assert perturb_queries(QUERIES, "other_name", "typos", 0.2, seed=3) != full


def test_same_output_under_any_hash_seed() -> None:
    code = "from ragtrack.evaluators.perturbation import perturb_queries; print(perturb_queries({'a': 'where is ATP produced in cells', 'b': 'x y z w'}, 'n', 'typos', 0.3, 1))"
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1 and "'a'" in outputs.pop()
