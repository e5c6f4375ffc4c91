"""Secrets never reach MLflow, artifacts or logs: config values of secret-looking keys, ``key=value``
assignments in free text (Hydra's override lists, log lines) and Hydra's own record files are
redacted to ``***`` before anything is written.

A key pasted where the *name* of an environment variable belongs (``api_key_env``, ``token_env``: any key
ending in ``_env``, see :mod:`ragtrack.core.secrets`) is refused before Hydra starts, since Hydra writes
``.hydra/`` and the log before the job runs: :func:`check_run_arguments` reads the raw overrides and
the YAML files of ``--config-dir``; :func:`check_variable_names` checks the composed config (configs
found elsewhere); and such a value is redacted wherever it would be written."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ragtrack.core.files import write_atomically
from ragtrack.core.secrets import check_variable_name, is_variable_name_key, looks_like_key

SECRET_WORDS = r"api_?key|token|secret|password|authorization"  # a key ending in one of these holds a secret
SECRET_KEY = re.compile(rf"({SECRET_WORDS})$", re.IGNORECASE)


def _redacted(key: object, value: Any) -> Any:
    if isinstance(value, str) and value and is_variable_name_key(str(key)) and looks_like_key(value):
        return "***"  # a key where a variable name belongs
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
VARIABLE_NAME_SETTING = re.compile(r"""([\w.\-]*_env)['"]?\s*[=:]\s*(?:'([^']*)'|"([^"]*)"|([^\s,'"{}\[\]]*))""", re.IGNORECASE)
SECRET_ASSIGNMENT = re.compile(rf"""([\w.\-]*(?:{SECRET_WORDS}))=(?!\*\*\*)(?:'[^']*'|"[^"]*"|[^\s,'"\]]+)""", re.IGNORECASE)


def _setting_value(match: re.Match) -> str:
    return next((group for group in match.groups()[1:] if group is not None), "")


def _masked_variable_name(match: re.Match) -> str:
    value = _setting_value(match)
    return match.group(0).replace(value, "***") if value and looks_like_key(value) and not value.startswith("$") else match.group(0)


def redact_text(text: str) -> str:
    """``key=value`` assignments of secret-looking keys inside free text (override lists, log lines)
    with the value replaced by ``***``; so is a key given as a ``*_env`` variable name."""
    return VARIABLE_NAME_SETTING.sub(_masked_variable_name, SECRET_ASSIGNMENT.sub(r"\1=***", text))


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
        if not (SECRET_ASSIGNMENT.search(original) or SECRET_YAML_ENTRY.search(original) or redact_text(original) != original):
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


def check_variable_names_in(text: str, path: Path | None = None) -> None:
    """Refuse ``*_env: value`` / ``*_env=value`` settings in ``text`` (an override, or the YAML file
    ``path``) whose value looks like a key; the error names the key (and file:line), never the value."""
    for match in VARIABLE_NAME_SETTING.finditer(text):
        value = _setting_value(match)
        if value not in ("null", "~") and not value.startswith("$"):  # an interpolation, checked once resolved
            where = f"{path}:{text.count(chr(10), 0, match.start()) + 1}: " if path else "override "
            check_variable_name(f"{where}{match.group(1).lstrip('+~')}", value)


def config_dirs(arguments: list[str]) -> list[Path]:
    """The folders given to ``ragtrack run`` with ``--config-dir DIR``, ``--config-dir=DIR`` or ``-cd DIR``."""
    folders = []
    for i, argument in enumerate(arguments):
        if argument in ("--config-dir", "-cd") and i + 1 < len(arguments):
            folders.append(Path(arguments[i + 1]))
        elif argument.startswith("--config-dir="):
            folders.append(Path(argument.partition("=")[2]))
    return folders


def check_run_arguments(arguments: list[str]) -> None:
    """``ragtrack run``'s arguments, before Hydra starts: no key where a variable name belongs, neither
    in an override nor in a YAML file of a ``--config-dir`` (:class:`RagtrackError`, value not echoed)."""
    for argument in arguments:
        if "_env" in argument.lower():
            check_variable_names_in(argument)
    for folder in config_dirs(arguments):
        for path in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            text = path.read_text(encoding="utf-8", errors="replace")
            if "_env" in text.lower():
                check_variable_names_in(text, path)


def check_variable_names(config: Any, prefix: str = "") -> None:
    """Every ``*_env`` value of a composed config names a variable (:func:`check_variable_name`)."""
    if isinstance(config, Mapping):
        for key, value in config.items():
            if is_variable_name_key(str(key)) and isinstance(value, str):
                check_variable_name(f"{prefix}{key}", value)
            check_variable_names(value, f"{prefix}{key}.")
    elif isinstance(config, list):
        for i, value in enumerate(config):
            check_variable_names(value, f"{prefix}{i}.")
