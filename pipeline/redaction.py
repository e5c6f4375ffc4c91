"""Secrets never reach MLflow, artifacts or logs: config values of secret-looking keys, ``key=value``
assignments in free text (Hydra's override lists, log lines) and Hydra's own record files are
redacted to ``***`` before anything is written, and so is every known secret value wherever it
appears (:func:`ragtrack.core.secrets.mask`). :func:`remember_config_secrets` fills that registry from a
composed config, :func:`remember_argument_secrets` from ``ragtrack run``'s arguments (before Hydra
logs a sweep's jobs): the values that ``${oc.env:NAME}`` reads (but :data:`LOCATION_VARIABLES`), the
variables that ``*_env`` settings name, the credentials of every URL, and every value under a
``headers`` mapping.

A key pasted where the *name* of an environment variable belongs (``api_key_env``, ``token_env``: any key
ending in ``_env``, see :mod:`ragtrack.core.secrets`) is refused before Hydra starts, since Hydra writes
``.hydra/`` and the log before the job runs: :func:`check_run_arguments` reads the raw overrides and
the YAML files of ``--config-dir``; :func:`check_variable_names` checks the composed config (configs
found elsewhere); and such a value is redacted wherever it would be written."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ragtrack.core.files import write_atomically, yaml_files
from ragtrack.core.secrets import (
    check_variable_name,
    is_variable_name_key,
    known_secrets,
    looks_like_key,
    mask,
    masked,
    remember,
    remember_url_credentials,
)

SECRET_WORDS = r"api_?key|token|secret|password|authorization"  # a key ending in one of these holds a secret
SECRET_KEY = re.compile(rf"({SECRET_WORDS})$", re.IGNORECASE)


def _redacted(key: object, value: Any) -> Any:
    if isinstance(value, str) and value and is_variable_name_key(str(key)) and looks_like_key(value):
        return "***"  # a key where a variable name belongs
    return (
        "***" if SECRET_KEY.search(str(key)) and value not in (None, "") and not isinstance(value, Mapping) else value
    )


def redact(config: Any) -> Any:
    """A copy of a nested config with the values of secret-looking keys replaced by ``***``, and every
    known secret masked in the other strings."""
    if isinstance(config, Mapping):
        return {key: redact(_redacted(key, value)) for key, value in config.items()}
    if isinstance(config, list):
        return [redact(value) for value in config]
    return mask(config) if isinstance(config, str) else config


def redact_overrides(overrides: list[str]) -> list[str]:
    """Hydra overrides (``key=value``) with the values of secret-looking keys replaced by ``***``, and
    every known secret masked."""
    redacted = []
    for override in overrides:
        key, sign, value = override.partition("=")
        redacted.append(mask(f"{key}={_redacted(key.lstrip('+~'), value)}" if sign else override))
    return redacted


SECRET_YAML_ENTRY = re.compile(
    rf"""^[\s-]*['"]?[\w.\-]*(?:{SECRET_WORDS})['"]?:[ \t]*(?!null$|''$|""$|'\*\*\*'$)\S""",
    re.IGNORECASE | re.MULTILINE,
)
VARIABLE_NAME_SETTING = re.compile(
    r"""([\w.\-]*_env)['"]?\s*[=:]\s*(?:'([^']*)'|"([^"]*)"|([^\s,'"{}\[\]]*))""", re.IGNORECASE
)
SECRET_ASSIGNMENT = re.compile(
    rf"""([\w.\-]*(?:{SECRET_WORDS}))=(?!\*\*\*)(?:'[^']*'|"[^"]*"|[^\s,'"\]]+)""", re.IGNORECASE
)


def _setting_value(match: re.Match) -> str:
    return next((group for group in match.groups()[1:] if group is not None), "")


def _masked_variable_name(match: re.Match) -> str:
    value = _setting_value(match)
    return (
        match.group(0).replace(value, "***")
        if value and looks_like_key(value) and not value.startswith("$")
        else match.group(0)
    )


def redact_text(text: str) -> str:
    """``key=value`` assignments of secret-looking keys inside free text (override lists, log lines)
    with the value replaced by ``***``; so is a key given as a ``*_env`` variable name, and every known secret."""
    return mask(VARIABLE_NAME_SETTING.sub(_masked_variable_name, SECRET_ASSIGNMENT.sub(r"\1=***", text)))


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
        if not (
            known_secrets()
            or SECRET_ASSIGNMENT.search(original)
            or SECRET_YAML_ENTRY.search(original)
            or redact_text(original) != original
        ):
            continue  # nothing to redact (parsing Hydra's YAML costs ~0.1 s per job); a known secret may be quoted or escaped there
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
    """Dotted keys of a nested mapping; secrets redacted (by key and by value), lists kept as lists."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat |= flatten(value, f"{dotted}.")
        else:
            flat[dotted] = masked(_redacted(key, value))
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
        for path, text in yaml_files(folder, "config file"):  # Hydra would hang on an alias bomb
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


OC_ENV = re.compile(r"""\$\{\s*oc\.env\s*:\s*['"]?([^,'"}\s]+)""")
LOCATION_VARIABLES = frozenset(
    {"RAGTRACK_ROOT", "MLFLOW_TRACKING_URI"}
)  # read by the shipped configs for where things go: not secrets
# (the credentials of a URI they hold still are)


def _remember_text(text: str) -> None:
    """The secrets a raw config text reveals: URL credentials and what ``${oc.env:NAME}`` reads."""
    remember_url_credentials(text)
    for name in OC_ENV.findall(text):
        if name not in LOCATION_VARIABLES:
            remember(os.environ.get(name))


def _remember_setting(path: tuple, value: object) -> None:
    """The secrets of one setting (its key path and value): URL credentials, the value of the variable
    an ``*_env`` setting names (or the value itself when it is a key), a value under ``headers``."""
    if not isinstance(value, str) or not path:
        return
    remember_url_credentials(value)
    if is_variable_name_key(str(path[-1])) and value:
        remember(value if looks_like_key(value) else os.environ.get(value))
    if any(str(part).lower() == "headers" for part in path[:-1]):
        remember(value)


def _strings(container: Any) -> Iterator[str]:
    if isinstance(container, str):
        yield container
    elif isinstance(container, Mapping):
        for value in container.values():
            yield from _strings(value)
    elif isinstance(container, list):
        for value in container:
            yield from _strings(value)


def _settings(node: DictConfig | ListConfig, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(key path, resolved value) of every leaf of a config that resolves (the others are the settings
    check's business)."""
    for key in range(len(node)) if isinstance(node, ListConfig) else list(node.keys()):
        try:
            value = node[key]
        except Exception:  # an interpolation that does not resolve here
            continue
        if isinstance(value, (DictConfig, ListConfig)):
            yield from _settings(value, (*path, key))
        else:
            yield (*path, key), value


def remember_config_secrets(cfg: DictConfig) -> None:
    """Fill the registry of known secrets (:mod:`ragtrack.core.secrets`) from a composed config."""
    for text in _strings(OmegaConf.to_container(cfg, resolve=False)):
        _remember_text(text)
    for path, value in _settings(cfg):
        _remember_setting(path, value)


def remember_argument_secrets(arguments: list[str]) -> None:
    """Fill the registry of known secrets from ``ragtrack run``'s arguments (overrides as typed)."""
    for argument in arguments:
        _remember_text(argument)
        key, sign, value = argument.partition("=")
        if sign:
            _remember_setting(tuple(key.lstrip("+~").split(".")), value.strip("'\""))
