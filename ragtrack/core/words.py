"""Counts in messages: ``counted(1, "query")`` is ``1 query``, ``counted(2, "query")`` ``2 queries``."""

from __future__ import annotations


def plural(noun: str) -> str:
    """The English plural of a regular noun: ``query`` -> ``queries`` (consonant + y), ``pass`` ->
    ``passes`` (s, x, z, ch, sh), else + s."""
    if noun.endswith("y") and noun[-2:-1] not in ("", *"aeiou"):
        return noun[:-1] + "ies"
    return noun + ("es" if noun.endswith(("s", "x", "z", "ch", "sh")) else "s")


def counted(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and ``noun``, singular for 1 and plural (``many``, else :func:`plural`) otherwise:
    ``1 attempt``, ``0 attempts``, ``1,200 queries`` (thousands separated)."""
    return f"{count:,} {noun if count == 1 else many or plural(noun)}"
