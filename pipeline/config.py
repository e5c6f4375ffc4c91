"""The Hydra config tree of ragtrack, found through the installed package ``ragtrack.conf`` (its
folder, :func:`config_path`), never through a checkout, and the OmegaConf resolvers its files use. Nothing is registered at import time:
the app (``app.py``) and :func:`compose` call :func:`register_resolvers`.

Resolvers: ``${ragtrack_data:}`` is the folder of the shipped datasets (the installed
``ragtrack.datasets`` package); ``${cwd:}`` is the launch folder (unlike ``${hydra:runtime.cwd}`` it
resolves before Hydra's own config is set, which a multirun's sweep folder needs); ``${unique:}`` is
six random hex digits, drawn once per composed config (cached like Hydra's ``${now:}``, and copied
into every job of a sweep), which keeps the output folders of jobs started in the same second apart.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence
from importlib.resources import files
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

CONFIG_MODULE = "ragtrack.conf"
CONFIG_NAME = "config"


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


def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> DictConfig:
    """The job config Hydra would compose for ``ragtrack run OVERRIDES`` (without Hydra's own
    ``hydra:`` node, so ``paths.output_dir`` must be given), for tests and Python callers;
    ``config_dir`` adds a folder of the user's configs, like ``--config-dir``. An unknown key or group
    option raises a one-line :class:`~ragtrack.core.errors.RagtrackError`; the values are checked by
    :func:`ragtrack.pipeline.settings.validate`."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import ConfigCompositionException, OverrideParseException

    from ragtrack.pipeline.settings import explain_composition_error

    register_resolvers()
    extra = [f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"] if config_dir else []
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        try:
            return hydra_compose(CONFIG_NAME, overrides=[*extra, *overrides])
        except (ConfigCompositionException, OverrideParseException) as exc:  # one line, with a did-you-mean
            raise explain_composition_error(exc, [config_dir] if config_dir else []) from None
