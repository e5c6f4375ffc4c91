"""Secrets in the base layer: the registry of known secret values that every writer and printer masks
(:func:`mask`), URL credentials, and the refusal of a secret given where the *name* of an environment
variable belongs (``api_key_env``, ``token_env``: every config key ending in ``_env``).

The registry is filled by the orchestration layer when a config is composed (``pipeline.redaction``)
and by the tracking code from a tracking URI: :func:`remember` a value, :func:`remember_url_credentials`
for the userinfo of every URL in a text. Values shorter than :data:`MIN_SECRET_LENGTH` (8) characters
are not remembered: masking every ``true``, year or hash prefix would garble files and tags, and a
credential that short is guessed anyway.

A value is taken for a variable name when it matches ``[A-Z_][A-Z0-9_]*`` (so ``sk-...``, ``ghp_...``,
``AIza...`` and every key with a lower-case letter, dash or dot are refused) and is not a run of 20 or
more upper-case letters and digits without an underscore, as AWS key ids are (``OPENAI_API_KEY`` passes,
``AKIAIOSFODNN7EXAMPLE`` does not).
Errors never echo the value.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ragtrack.core.errors import RagtrackError

MASK = "***"
MIN_SECRET_LENGTH = 8  # GitLab's minimum for masked variables too
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
LONG_TOKEN = re.compile(r"(?=[A-Z0-9]*[0-9])(?=[A-Z0-9]*[A-Z])[A-Z0-9]{20,}")
URL_USERINFO = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#\s]*)@"
)  # up to the last @ of the authority, as urlsplit reads it

_known: set[str] = set()


def remember(value: object) -> None:
    """Treat ``value`` as a secret from now on, as written and percent-encoded or decoded (a URL may
    carry it either way); ``None`` and values shorter than :data:`MIN_SECRET_LENGTH` are ignored."""
    text = "" if value is None else str(value)
    if len(text) >= MIN_SECRET_LENGTH:
        _known.update({text, quote(text, safe=""), unquote(text)})


def remember_url_credentials(text: str) -> None:
    """Remember the credentials in every URL of ``text``: the password of ``user:password@``, or the
    whole userinfo when it has no password (a token given as the user name)."""
    for userinfo in URL_USERINFO.findall(text):
        user, colon, password = userinfo.partition(":")
        remember(password if colon else user)


def known_secrets() -> frozenset[str]:
    return frozenset(_known)


def mask(text: str, secret: str | None = None) -> str:
    """``text`` with ``secret`` and every remembered secret replaced by ``***`` (longest first, so a
    secret holding another is masked whole)."""
    for known in sorted(_known | ({secret} if secret else set()), key=len, reverse=True):
        text = text.replace(known, MASK)
    return text


def masked(value: Any) -> Any:
    """A copy of a nested structure (mappings, lists, tuples) with every string :func:`mask` ed."""
    if isinstance(value, str):
        return mask(value)
    if isinstance(value, Mapping):
        return {key: masked(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(masked(item) for item in value)
    return value


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """``url`` without its userinfo, and the user name and password it held (decoded; ``None`` when absent)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    return bare, unquote(parts.username or ""), None if parts.password is None else unquote(parts.password)


def without_credentials(url: str) -> str:
    """``url`` without its userinfo (``http://alice:pw@host/x`` -> ``http://host/x``)."""
    return split_credentials(url)[0]


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
    raise RagtrackError(
        f"{key} must be the NAME of an environment variable such as OPENAI_API_KEY ([A-Z_][A-Z0-9_]*); "
        "the value given looks like a key itself and was neither used nor stored: put the key in an "
        "environment variable and give its name"
    )
