"""Hydra composition for sweeps at the cost of what changes between jobs.

Composing this config tree costs 0.15-0.4 s (every YAML file is parsed again, the defaults tree rebuilt
and merged), a large share of a sweep job that reads its runs from the cache. ``share_composition()``
installs two in-process memos into Hydra's config loader; the composed configs equal Hydra's own
(tests/test_multirun_reuse.py composes both ways and compares):

- each job's config is composed once, not twice: the sweeper's validation result is handed to the
  job's launch (``ConfigLoaderImpl.load_sweep_config``);
- jobs that choose the same config groups share the merged defaults: the defaults list and the config
  merged from it before value overrides are built once per (config, group overrides, search path), and
  each job applies its own value overrides (``fusion.rrf.k=30``) to a copy.

Config files are thus read once per process (per sweep); a launcher that runs jobs in other processes
composes there as before.
"""

from __future__ import annotations

import copy
import functools
from collections import OrderedDict

from hydra._internal import config_loader_impl
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.defaults_list import DefaultsList, Overrides
from omegaconf import DictConfig

MERGED_DEFAULTS_KEPT = 32  # group choices a process keeps merged (a sweep over encoders x chunkers, say)


def share_composition() -> None:
    """Install both memos (idempotent)."""
    if getattr(ConfigLoaderImpl.load_sweep_config, "composed", None) is None:
        ConfigLoaderImpl.load_sweep_config = _compose_each_job_once(ConfigLoaderImpl.load_sweep_config)
    if getattr(config_loader_impl.create_defaults_list, "merged", None) is None:
        merged: OrderedDict = OrderedDict()
        config_loader_impl.create_defaults_list = _share_defaults_list(config_loader_impl.create_defaults_list, merged)
        ConfigLoaderImpl._compose_config_from_defaults_list = _share_merged_config(ConfigLoaderImpl._compose_config_from_defaults_list, merged)


def _compose_each_job_once(compose):
    composed: dict[tuple[int, tuple[str, ...]], tuple[DictConfig, DictConfig]] = {}  # entries hold their master config: no id reuse

    @functools.wraps(compose)
    def load_sweep_config(self, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
        key = (id(master_config), tuple(sweep_overrides))
        if key in composed:
            return composed.pop(key)[1]
        for other in [k for k in composed if k[0] != key[0]]:  # left by an earlier sweep whose jobs ran elsewhere
            del composed[other]
        config = compose(self, master_config, sweep_overrides)
        composed[key] = (master_config, config)
        return config

    load_sweep_config.composed = composed
    return load_sweep_config


def _share_defaults_list(create, merged: OrderedDict):
    """``create_defaults_list`` depends on the group overrides only (Hydra's ``Overrides`` sorts each
    override into group choice or config value by the same rule used here); value overrides are
    handed through as ``config_overrides``."""

    @functools.wraps(create)
    def create_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing) -> DefaultsList:
        values = Overrides(repo=repo, overrides_list=overrides_list).config_overrides
        value_ids = {id(o) for o in values}
        groups = tuple(o.input_line for o in overrides_list if id(o) not in value_ids and not o.is_sweep_override())
        sources = tuple((s.provider, s.path) for s in repo.get_sources())
        key = (config_name, groups, prepend_hydra, skip_missing, sources)
        if key in merged:
            merged.move_to_end(key)
            shared = merged[key]["defaults"]
            return DefaultsList(defaults=shared.defaults, defaults_tree=shared.defaults_tree, config_overrides=values, overrides=shared.overrides)
        defaults = create(repo, config_name, overrides_list, prepend_hydra, skip_missing)
        merged[key] = {"defaults": defaults, "config": None}
        while len(merged) > MERGED_DEFAULTS_KEPT:
            merged.popitem(last=False)
        return defaults

    create_defaults_list.merged = merged
    return create_defaults_list


def _share_merged_config(compose, merged: OrderedDict):
    """The config merged from a shared defaults list, kept pristine; every composition gets a copy."""

    @functools.wraps(compose)
    def compose_config_from_defaults_list(self, defaults, repo) -> DictConfig:
        entry = next((e for e in reversed(merged.values()) if e["defaults"].defaults is defaults), None)
        if entry is None:
            return compose(self, defaults, repo)
        if entry["config"] is None:
            entry["config"] = compose(self, defaults, repo)  # kept unchanged: Hydra then edits what it is given
        return copy.deepcopy(entry["config"])

    return compose_config_from_defaults_list
