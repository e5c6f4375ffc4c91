"""The Hydra config tree of ragtrack, found through the installed package ``ragtrack.conf`` (its
folder, :func:`config_path`), never through a checkout, and the OmegaConf resolvers its files use. Nothing is registered at import time:
the app (``app.py``) and :func:`compose` call :func:`register_resolvers`.

Resolvers: ``${ragtrack_data:}`` is the folder of the shipped datasets (the installed
``ragtrack.datasets`` package); ``${cwd:}`` is the launch folder (unlike ``${hydra:runtime.cwd}`` it
resolves before Hydra's own config is set, which a multirun's sweep folder needs); ``${unique:}`` is
six random hex digits, drawn once per composed config (cached like Hydra's ``${now:}``, and copied
into every job of a sweep), which keeps the output folders of jobs started in the same second apart.
``${user_cache:}`` is the user's cache folder (:func:`ragtrack.core.checksums.user_cache_dir`). ``${stem:PATH}`` and ``${slug:ID}`` name a dataset after its folder or file (:func:`stem`) or its
ir_datasets id (``/`` as ``-``).
``${sqlite_uri:PATH}`` and ``${file_uri:PATH}`` make the default store's tracking URI and artifact
location from folders whatever characters their names hold (``%``, ``?``, ``#``: ``pipeline.records.layout``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
from collections.abc import Iterator, Sequence
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ragtrack.core.checksums import user_cache_dir
from ragtrack.core.errors import InputError, RagtrackError, did_you_mean
from ragtrack.core.files import yaml_error, yaml_files
from ragtrack.pipeline.records.layout import file_uri, sqlite_uri

CONFIG_MODULE = "ragtrack.conf"
CONFIG_NAME = "config"
HYDRA_STATE = threading.Lock()  # compose() from two threads: one after the other (GlobalHydra is one per process)


def config_path() -> str:
    """Where Hydra reads the configs: the installed package's ``conf`` folder, read as plain files
    (a composition costs ~20% less than through ``pkg://ragtrack.conf``, and a sweep composes every job
    twice), or ``pkg://ragtrack.conf`` where the package is not a folder on disk (a zip import)."""
    folder = Path(str(files(CONFIG_MODULE)))
    return str(folder) if (folder / f"{CONFIG_NAME}.yaml").is_file() else f"pkg://{CONFIG_MODULE}"


def datasets_dir() -> Path:
    """The folder holding the shipped datasets (``scifact``, ``xquad_en``, ``toy``)."""
    return Path(str(files("ragtrack.datasets")))


def register_resolvers() -> None:
    """Register ragtrack's resolvers (idempotent)."""
    OmegaConf.register_new_resolver("ragtrack_data", lambda: str(datasets_dir()), replace=True)
    OmegaConf.register_new_resolver("cwd", os.getcwd, replace=True)
    OmegaConf.register_new_resolver("unique", lambda: secrets.token_hex(3), use_cache=True, replace=True)
    OmegaConf.register_new_resolver("user_cache", lambda: str(user_cache_dir()), replace=True)
    OmegaConf.register_new_resolver("stem", stem, replace=True)
    OmegaConf.register_new_resolver("slug", lambda text: str(text).replace("/", "-"), replace=True)
    OmegaConf.register_new_resolver("sqlite_uri", sqlite_uri, replace=True)
    OmegaConf.register_new_resolver("file_uri", file_uri, replace=True)


def stem(path: str) -> str:
    """A file's or folder's name without its suffixes (``/data/queries.dev.tsv.gz`` -> ``queries``): a
    dataset's default name."""
    return Path(str(path).rstrip("/\\")).name.partition(".")[0] or "dataset"


def compose(
    overrides: Sequence[str] = (), config_dir: str | Path | None = None, hydra_node: bool = False
) -> DictConfig:
    """The job config Hydra would compose for ``ragtrack run OVERRIDES`` (without Hydra's own
    ``hydra:`` node, so ``paths.output_dir`` must be given), for tests and Python callers;
    ``config_dir`` adds a folder of the user's configs, like ``--config-dir``. An unknown key or group
    option raises a one-line :class:`~ragtrack.core.errors.RagtrackError`; the values are checked by
    :func:`ragtrack.pipeline.configuration.settings.validate`. ``hydra_node``: with Hydra's own node (its sweeper, the
    group choices)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import ConfigCompositionException, OverrideParseException

    register_resolvers()
    if config_dir:
        yaml_files(Path(config_dir), "config file")  # checked before Hydra reads them: an alias bomb would hang it
    extra = [f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"] if config_dir else []
    with HYDRA_STATE, initialize_config_module(CONFIG_MODULE, version_base="1.3"):  # Hydra's state is one per process
        try:
            return hydra_compose(CONFIG_NAME, overrides=[*extra, *overrides], return_hydra_config=hydra_node)
        except (ConfigCompositionException, OverrideParseException) as exc:  # one line, with a did-you-mean
            raise explain_composition_error(exc, [config_dir] if config_dir else []) from None


def sweep_jobs(
    overrides: Sequence[str], config_dir: str | Path | None = None
) -> tuple[list[str], list[list[str]]] | None:
    """The fixed overrides and the swept ones of each job ``ragtrack run -m OVERRIDES`` makes with Hydra's basic sweeper, in its
    order (the last swept key varies fastest): the sweeps of ``hydra.sweeper.params`` (a preset's) and
    of the command line (``k=1,2``, ``choice(...)``, ``range(...)``; the command line's win for a key in
    both). None for another sweeper (Optuna's draws its jobs as it goes) or an interval sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    parser = OverridesParser.create()
    given = parser.parse_overrides(list(overrides))
    fixed = [o.input_line for o in given if not o.is_sweep_override()]
    hydra = compose(fixed, config_dir, hydra_node=True).hydra
    if hydra.runtime.choices.get("hydra/sweeper") != "basic":  # Hydra's default sweeper
        return None
    sweeper = hydra.sweeper
    params = [f"{key}={value}" for key, value in (sweeper.get("params") or {}).items()]
    swept = {o.get_key_element(): o for o in [*parser.parse_overrides(params), *given] if o.is_sweep_override()}
    if any(o.value_type == ValueType.INTERVAL_SWEEP for o in swept.values()):
        return None
    jobs: list[list[str]] = [[]]
    for key, override in swept.items():
        jobs = [[*job, f"{key}={value}"] for job in jobs for value in override.sweep_string_iterator()]
    return fixed, jobs


def check_sweep(overrides: Sequence[str], config_dir: str | Path | None = None) -> None:
    """Every job of a sweep checked before the first runs (:func:`sweep_jobs`, the settings of each):
    a bad value in its last job stops the sweep at once, not hours in. The first problem raises a
    :class:`RagtrackError` naming the job by its swept values."""
    from ragtrack.pipeline.configuration.settings import (
        validate,  # the settings models import every component: only when needed
    )

    planned = sweep_jobs(overrides, config_dir)
    fixed, jobs = planned or ([], [])
    placeholder = (
        [] if any(o.lstrip("+").startswith("paths.output_dir=") for o in fixed) else ["paths.output_dir=sweep-job"]
    )  # Hydra's, per job
    for swept in jobs:
        try:
            validate(compose([*fixed, *swept, *placeholder], config_dir))
        except RagtrackError as exc:
            raise RagtrackError(f"the sweep's job {' '.join(swept)}: {exc}") from None


# ----------------------------------------------------------------------------- Hydra's composition errors
@contextlib.contextmanager
def composition_errors_explained(config_dirs: Sequence[str | Path] = ()) -> Iterator[None]:
    """Hydra's composition errors (an unknown key or group option, an override that does not parse)
    as one-line :class:`RagtrackError` s with a did-you-mean; ``config_dirs``: the user's config
    folders. Hydra prints its own errors and exits unless ``HYDRA_FULL_ERROR`` is set (its documented
    switch to raise them), so it is set meanwhile."""
    from hydra.errors import ConfigCompositionException, OverrideParseException, SearchPathException

    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except (ConfigCompositionException, OverrideParseException) as exc:
        raise explain_composition_error(exc, config_dirs) from None
    except yaml.YAMLError as exc:  # a YAML file of the user's --config-dir that does not parse
        mark = getattr(exc, "problem_mark", None)
        raise yaml_error(mark.name if mark is not None else "config", exc) from None
    except SearchPathException:  # Hydra's own text names the folder
        missing = [str(d) for d in config_dirs if not Path(d).is_dir()]
        raise InputError(", ".join(missing) or "--config-dir", "no such folder (given as --config-dir)") from None
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous


PLUGIN_EXTRAS = {
    ("hydra/sweeper", "optuna"): "ragtrack[optuna]"
}  # Hydra plugins a preset may ask for, by the extra that installs them


def explain_composition_error(exc: Exception, config_dirs: Sequence[str | Path] = ()) -> RagtrackError:
    """One line for a Hydra composition error. A group's options are the YAML files of that group in
    the installed configs and in ``config_dirs`` (the user's ``--config-dir`` folders)."""
    from hydra.errors import MissingConfigException, OverrideParseException

    from ragtrack.pipeline.configuration.settings import (
        key_hint,  # the settings models import every component: only when needed
    )

    cause = exc.__cause__
    if isinstance(exc, OverrideParseException):
        return RagtrackError(f"{exc.override}: not a valid override: {str(exc).splitlines()[0]}")
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        options = sorted(set(group_options(group, config_dirs)) | set(exc.options or ()))
        hint = did_you_mean(option, options) or (
            "" if config_dirs else f" (your own: --config-dir DIR with DIR/{group}/{option}.yaml)"
        )
        if (group, option) in PLUGIN_EXTRAS:
            hint = f" (it comes with {PLUGIN_EXTRAS[group, option]}: pip install '{PLUGIN_EXTRAS[group, option]}')"
        return InputError(group, f"{option!r} is not allowed: one of {', '.join(options) or '(none found)'}{hint}")
    if (
        isinstance(cause, OmegaConfBaseException)
        and getattr(cause, "full_key", None)
        and str(exc).startswith("Could not override")
    ):
        wanted = str(exc).split("'")[1]
        parent = cause.parent_node
        siblings = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
        if cause.full_key != wanted:
            return InputError(wanted, f"no such key ({cause.full_key} is not set in this config)")
        return InputError(wanted, "no such key" + key_hint(wanted, wanted.rpartition(".")[0], str(cause.key), siblings))
    return RagtrackError(
        "; ".join(line.strip() for line in str(exc).splitlines() if line.strip() and not line.startswith("\t"))
    )


def group_options(group: str, config_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The options of a config group: its YAML files in the installed configs and in ``config_dirs``."""
    from importlib.resources import files

    options = {entry.name.removesuffix(".yaml") for entry in _entries(files(CONFIG_MODULE).joinpath(group))}
    for folder in config_dirs:
        options |= {entry.name.removesuffix(".yaml") for entry in _entries(Path(folder) / group)}
    return sorted(options)


def _entries(folder: Any) -> list:
    return [entry for entry in folder.iterdir() if entry.name.endswith(".yaml")] if folder.is_dir() else []
