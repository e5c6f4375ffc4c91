"""Secrets in the base layer: mask a known secret in text, and refuse a secret given where the *name*
of an environment variable belongs (``api_key_env``, ``token_env``: every config key ending in ``_env``).

A value is taken for a variable name when it matches ``[A-Z_][A-Z0-9_]*`` (so ``sk-...``, ``ghp_...``,
``AIza...`` and every key with a lower-case letter, dash or dot are refused) and is not a run of 20 or
more upper-case letters and digits without an underscore, as AWS key ids are (``OPENAI_API_KEY`` passes,
``AKIAIOSFODNN7EXAMPLE`` does not).
Errors never echo the value.
"""

from __future__ import annotations

import re

from ragtrack.core.errors import RagtrackError

MASK = "***"
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
LONG_TOKEN = re.compile(r"(?=[A-Z0-9]*[0-9])(?=[A-Z0-9]*[A-Z])[A-Z0-9]{20,}")


def mask(text: str, secret: str | None) -> str:
    """``text`` with every occurrence of ``secret`` replaced by ``***`` (unchanged without a secret)."""
    return text.replace(secret, MASK) if secret else text


def is_variable_name_key(key: str) -> bool:
    """Whether a config key holds the name of an environment variable (its last part ends in ``_env``)."""
    return str(key).rsplit(".", 1)[-1].lower().endswith("_env")


def looks_like_key(value: str) -> bool:
    """Whether a value given as an environment variable's name is rather a secret (module docstring)."""
    return VARIABLE_NAME.fullmatch(value) is None or LONG_TOKEN.fullmatch(value) is not None


def check_variable_name(key: str, value: object) -> None:
    """Refuse (one line, never echoing the value) a ``*_env`` setting whose value is not a variable name."""
    if value is None or value == "" or not looks_like_key(str(value)):
        return
    raise RagtrackError(f"{key} must be the NAME of an environment variable such as OPENAI_API_KEY ([A-Z_][A-Z0-9_]*); "
                        "the value given looks like a key itself and was neither used nor stored: put the key in an "
                        "environment variable and give its name")
