"""Secrets never reach MLflow, artifacts or logs: config values of secret-looking keys, ``key=value``
assignments in free text (Hydra's override lists, log lines) and Hydra's own record files are
redacted to ``***`` before anything is written."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragtrack.core.files import write_atomically

SECRET_WORDS = r"api_?key|token|secret|password|authorization"  # a key ending in one of these holds a secret
SECRET_KEY = re.compile(rf"({SECRET_WORDS})$", re.IGNORECASE)


def _redacted(key: object, value: Any) -> Any:
    return "***" if SECRET_KEY.search(str(key)) and value not in (None, "") and not isinstance(value, Mapping) else value


def redact(config: Any) -> Any:
    """A copy of a nested config with the values of secret-looking keys replaced by ``***``."""
    if isinstance(config, Mapping):
        return {key: redact(_redacted(key, value)) for key, value in config.items()}
    if isinstance(config, list):
        return [redact(value) for value in config]
    return config


def redact_overrides(overrides: list[str]) -> list[str]:
    """Hydra overrides (``key=value``) with the values of secret-looking keys replaced by ``***``."""
    redacted = []
    for override in overrides:
        key, sign, value = override.partition("=")
        redacted.append(f"{key}={_redacted(key.lstrip('+~'), value)}" if sign else override)
    return redacted


SECRET_YAML_ENTRY = re.compile(rf"""^[\s-]*['"]?[\w.\-]*(?:{SECRET_WORDS})['"]?:[ \t]*(?!null$|''$|""$|'\*\*\*'$)\S""",
                               re.IGNORECASE | re.MULTILINE)
SECRET_ASSIGNMENT = re.compile(rf"""([\w.\-]*(?:{SECRET_WORDS}))=(?!\*\*\*)(?:'[^']*'|"[^"]*"|[^\s,'"\]]+)""", re.IGNORECASE)


def redact_text(text: str) -> str:
    """``key=value`` assignments of secret-looking keys inside free text (override lists, log lines)
    with the value replaced by ``***``."""
    return SECRET_ASSIGNMENT.sub(r"\1=***", text)


def redact_everywhere(config: Any) -> Any:
    """``redact``, plus ``redact_text`` on every string (Hydra's own files hold overrides as strings)."""
    if isinstance(config, Mapping):
        return {key: redact_everywhere(_redacted(key, value)) for key, value in config.items()}
    if isinstance(config, list):
        return [redact_everywhere(value) for value in config]
    return redact_text(config) if isinstance(config, str) else config


def redact_hydra_files(paths: list[Path]) -> None:
    """Rewrite Hydra's records of a job (``.hydra/*.yaml``, a sweep's ``multirun.yaml``) with secrets
    redacted, before anything is logged: a secret typed on the command line is stored in them as typed."""
    import yaml

    for path in paths:
        original = path.read_text(encoding="utf-8")
        if not (SECRET_ASSIGNMENT.search(original) or SECRET_YAML_ENTRY.search(original)):
            continue  # nothing to redact (parsing Hydra's YAML costs ~0.1 s per job)
        loaded = yaml.safe_load(original)
        redacted = redact_everywhere(loaded)
        if redacted != loaded:
            write_atomically(path, yaml.safe_dump(redacted, sort_keys=False, allow_unicode=True))


class SecretFilter(logging.Filter):
    """A logging filter (wired into Hydra's log handlers in ``conf/hydra/default.yaml``) that redacts
    secret-looking ``key=value`` assignments in every record, e.g. Hydra's list of a sweep's jobs."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


def flatten(config: Mapping, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested mapping; secrets redacted, lists kept as their string form."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, f"{dotted}.")
        else:
            flat[dotted] = _redacted(key, value)
    return flat
