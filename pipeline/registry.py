"""Plugins by entry point, constructed by Hydra.

Entry-point groups ``ragtrack.<group>`` (datasets, retrievers, rewriters, fusions, rerankers, evaluators,
generators, chunkers) name the plugins (built-ins are registered there like any third-party package);
a config names one by ``type`` (or gives a ``_target_``), and :func:`instantiate` - the only caller of
``hydra.utils.instantiate`` - constructs it. A plugin whose class declares ``settings_schema`` (a
pydantic model, the one home of its defaults) is built from that model's validated values: every key,
defaults filled in. A plugin that fails to import is a warning when listing, an error only when it is
asked for.
"""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.stage_kinds import STAGE_KINDS

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from omegaconf import (
        DictConfig,  # Hydra, OmegaConf and pydantic are imported where a plugin is built: listing needs none
    )

log = logging.getLogger(__name__)

GROUPS = (
    "datasets",
    *(kind.group for kind in STAGE_KINDS),
    "evaluators",
    "generators",
    "chunkers",
)  # stage kinds: their table


def installed(group: str) -> dict[str, EntryPoint]:
    """Entry points of ``ragtrack.<group>`` by name."""
    return dict(_scan(tuple(sys.path))[group])


@functools.lru_cache(maxsize=4)
def _scan(search_path: tuple[str, ...]) -> dict[str, dict[str, EntryPoint]]:
    """One scan of the distributions on ``search_path`` (``sys.path``) per process: a scan costs ~20 ms
    and a multirun builds its plugins in every job."""
    from importlib.metadata import entry_points  # ~10 ms: imported where plugins are scanned

    return {group: {ep.name: ep for ep in entry_points(group=f"ragtrack.{group}")} for group in GROUPS}


def load(group: str, name: str) -> Any:
    """The object an entry point names; unknown names fail listing the installed ones."""
    found = installed(group)
    if name not in found:
        raise RagtrackError(
            f"unknown {group[:-1]} {name!r}; installed: {', '.join(sorted(found)) or 'none'}{did_you_mean(name, found)}"
        )
    return found[name].load()


def load_all(group: str) -> dict[str, Any]:
    """Every plugin of a group that imports; the others are logged as warnings and skipped."""
    loaded = {}
    for name, ep in sorted(installed(group).items()):
        try:
            loaded[name] = ep.load()
        except Exception as exc:  # a broken third-party plugin must not break ragtrack
            log.warning("plugin %s %r failed to load: %s", group, name, exc)
    return loaded


def instantiate(config: Mapping | DictConfig, **kwargs: Any) -> Any:
    """Construct an object from a config with ``_target_`` (the only call of hydra's instantiate)."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate as hydra_instantiate

    try:
        return hydra_instantiate(config, **kwargs)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, RagtrackError):
            raise cause from None
        target = config.get("_target_", "?")  # the target only: a config may hold secrets
        raise RagtrackError(f"cannot construct {target}: {cause or exc}") from None


def build(group: str, config: Mapping | DictConfig, **kwargs: Any) -> Any:
    """Construct the plugin a config names by ``type`` (entry point) unless it gives a ``_target_``;
    where the plugin declares ``settings_schema``, from that model's validated values."""
    from omegaconf import DictConfig, OmegaConf
    from pydantic import ValidationError

    settings = OmegaConf.to_container(config, resolve=True) if isinstance(config, DictConfig) else dict(config)
    kind = settings.pop("type", None)
    if "_target_" not in settings:
        if kind is None:
            raise RagtrackError(
                f"a {group[:-1]} config needs 'type' (one of: {', '.join(sorted(installed(group)))}) or '_target_'"
            )
        found = installed(group)
        if kind not in found:
            raise RagtrackError(
                f"unknown {group[:-1]} type {kind!r}; installed: {', '.join(sorted(found)) or 'none'}{did_you_mean(str(kind), found)}"
            )
        schema = getattr(load(group, kind), "settings_schema", None)
        if schema is not None:
            try:
                settings = schema.model_validate(settings).model_dump(exclude={"type", "target", "alias"})
            except (
                ValidationError
            ) as exc:  # a caller that skipped pipeline.configuration.settings.validate: the first problem, one line
                error = exc.errors()[0]
                where = ".".join(map(str, error["loc"]))
                raise RagtrackError(f"cannot construct {found[kind].value}: {where}: {error['msg']}") from None
        settings["_target_"] = found[kind].value.replace(":", ".")
    settings.pop(
        "alias", None
    )  # a system's label (ragtrack.core.settings.SystemSettings): the pipeline's, not the component's
    settings.setdefault("_convert_", "all")
    return instantiate(settings, **kwargs)


def metric_names(metrics: str | Sequence[str] | None, parameter: str = "metrics") -> list[str] | None:
    """Metric names as given: one name or a list of them; a name that differs from ragtrack's only in
    case is read as ragtrack's (``NDCG@10`` is ``ndcg@10``, ``ROUGEL`` is ``rougeL``). Names the ranking
    evaluator takes as they are need no plugin loaded (``ragtrack eval`` starts without them)."""
    from ragtrack.evaluators.ranking import METRICS

    if metrics is None:
        return None
    names = [metrics] if isinstance(metrics, str) else metrics
    if not isinstance(names, Sequence) or not all(isinstance(name, str) for name in names):
        raise TypeError(f"{parameter}: a metric name or a list of them, e.g. ['ndcg@10', 'mrr'], got {metrics!r}")
    if all(
        name.partition("@")[0] in METRICS for name in names
    ):  # the ranking evaluator's: no plugin (nor pydantic) to load
        return list(names)
    classes = load_all("evaluators")
    bases = {name.partition("@")[0].rstrip("[") for cls in classes.values() for name in cls.provides()}
    known = {base.casefold(): base for base in bases}
    canonical = []
    for name in names:
        base, at, cutoff = name.partition("@")
        handled = any(cls.handles(name) for cls in classes.values())
        canonical.append(name if handled or base.casefold() not in known else f"{known[base.casefold()]}{at}{cutoff}")
    return canonical
