"""Seeded query perturbations for robustness studies: typos, dropped words, case changes.

Every function is deterministic: the random choices for one query come from a generator seeded by
sha256(seed, perturbation name, query id), so a query's perturbed text depends neither on the other
queries, nor on their order, nor on Python's hash seed.

- ``typos`` at rate r: k = round(r · L) of the query's L letters (round half up) are picked without
  replacement; each gets one edit, chosen uniformly: *swap* with the next character, *drop* it,
  *insert* a QWERTY neighbour after it, or *replace* it by a QWERTY neighbour (the case of the letter
  is kept). Edits are applied from the last position to the first, so positions stay valid.
- ``drop_words`` at rate r: k = round(r · W) of the W whitespace-separated words are removed (at most
  W − 1: one word always stays).
- ``lowercase`` / ``uppercase``: the whole query.

A perturbation that would leave no letter or digit returns the query unchanged.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping

KINDS = ("typos", "drop_words", "lowercase", "uppercase")
TYPO_EDITS = ("swap", "drop", "insert", "replace")

_ROWS = ("qwertyuiop", "asdfghjkl", "zxcvbnm")


def _neighbours() -> dict[str, str]:
    """Letters touching each letter on a QWERTY keyboard: left and right in its row, columns c and c+1
    of the row above, c−1 and c of the row below (the rows are staggered): s -> a d w e z x."""
    found = {}
    for r, row in enumerate(_ROWS):
        for c, ch in enumerate(row):
            spots = [(r, c - 1), (r, c + 1), (r - 1, c), (r - 1, c + 1), (r + 1, c - 1), (r + 1, c)]
            found[ch] = "".join(_ROWS[r2][c2] for r2, c2 in spots if 0 <= r2 < len(_ROWS) and 0 <= c2 < len(_ROWS[r2]))
    return found


NEIGHBOURS = _neighbours()


def _rng(seed: int, name: str, qid: str) -> random.Random:
    digest = hashlib.sha256(f"{seed}\x00{name}\x00{qid}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _count(rate: float, total: int) -> int:
    return math.floor(rate * total + 0.5)


def _near(ch: str, rng: random.Random) -> str:
    key = rng.choice(NEIGHBOURS.get(ch.lower(), "") or ch.lower())
    return key.upper() if ch.isupper() else key


def typos(text: str, rate: float, rng: random.Random) -> str:
    """``text`` with round(rate · letters) keyboard typos (module docstring)."""
    chars = list(text)
    letters = [i for i, ch in enumerate(chars) if ch.isalpha()]
    for i in sorted(rng.sample(letters, _count(rate, len(letters))), reverse=True):
        edit = rng.choice(TYPO_EDITS)
        if edit == "swap" and i + 1 < len(chars):
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif edit == "drop":
            del chars[i]
        elif edit == "insert":
            chars.insert(i + 1, _near(chars[i], rng))
        elif edit == "replace":
            chars[i] = _near(chars[i], rng)
    return "".join(chars)


def drop_words(text: str, rate: float, rng: random.Random) -> str:
    """``text`` without round(rate · words) of its words (one word always stays)."""
    words = text.split()
    dropped = set(rng.sample(range(len(words)), min(_count(rate, len(words)), max(len(words) - 1, 0))))
    return " ".join(word for i, word in enumerate(words) if i not in dropped)


def perturb(text: str, kind: str, rate: float, rng: random.Random) -> str:
    """One query under one perturbation; unchanged if the result would have no letter or digit."""
    if kind == "typos":
        changed = typos(text, rate, rng)
    elif kind == "drop_words":
        changed = drop_words(text, rate, rng)
    elif kind == "lowercase":
        changed = text.lower()
    elif kind == "uppercase":
        changed = text.upper()
    else:
        raise ValueError(f"unknown perturbation kind {kind!r}; known: {', '.join(KINDS)}")
    return changed if any(ch.isalnum() for ch in changed) else text


def perturb_queries(
    queries: Mapping[str, str], name: str, kind: str, rate: float = 0.0, seed: int = 0
) -> dict[str, str]:
    """Every query under perturbation ``name`` (its ``kind`` and ``rate``), seeded per query."""
    if kind not in KINDS:
        raise ValueError(f"unknown perturbation kind {kind!r}; known: {', '.join(KINDS)}")
    if kind in ("typos", "drop_words") and not 0 < rate <= 1:
        raise ValueError(f"perturbation {name!r}: rate must be in (0, 1], got {rate}")
    return {qid: perturb(text, kind, rate, _rng(seed, name, qid)) for qid, text in queries.items()}
