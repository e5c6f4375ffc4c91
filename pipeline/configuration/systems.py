"""The systems of a job: one record per stage config, in dependency order.

A job's systems come from the config sections of the stage kinds, in the order of their table
(:data:`ragtrack.core.stage_kinds.STAGE_KINDS`: ``retriever``, ``rewriter``, ``fusion``, ``reranker``).
A stage config names the systems it reads by its kind's ``reads`` key (``input`` for a rewriter or a
reranker, ``members`` for a fusion), and the system it makes by ``system``; by default its kind's
naming rule names it (a retriever's or a fusion's system is its config key; a rewriter's or reranker's
is ``<input>+<config key>``, e.g. ``bm25+cross_encoder``).

:func:`plan_systems` checks the graph before anything runs (every input is a system of the job, no
name is used twice, no cycle) and orders it: inputs first, otherwise in config order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ragtrack.core import stage_kinds
from ragtrack.core.errors import InputError, did_you_mean
from ragtrack.core.settings import MAX_NAME_LENGTH
from ragtrack.core.stage_kinds import StageKind, stage_kind
from ragtrack.pipeline.records.layout import system_key


@dataclass
class PlannedSystem:
    """One stage config: where it is (``section.key``), the system it makes and the systems it reads."""

    section: str
    key: str
    name: str
    inputs: list[str]
    config: Any  # the stage's config node (plain mapping or DictConfig)

    @property
    def group(self) -> str:
        return stage_kind(self.section).group

    @property
    def path(self) -> str:
        return f"{self.section}.{self.key}"


def _inputs(kind: StageKind, config: Mapping) -> tuple[list[str], str]:
    """The systems a stage config of ``kind`` reads and the key that names them."""
    given = config.get(kind.reads) if kind.reads != "none" else None
    if given is None:
        return [], ""
    return ([str(name) for name in given] if kind.reads == "members" else [str(given)]), kind.reads


def plan_systems(cfg: Mapping) -> list[PlannedSystem]:
    """Every stage config of ``cfg`` as a :class:`PlannedSystem`, inputs before the stages that read
    them (config order otherwise). An unknown input, a name used twice or a cycle raises
    :class:`InputError` naming the key."""
    planned, where = [], {}
    for kind in stage_kinds.STAGE_KINDS:
        section = kind.section
        for key, config in (cfg.get(section) or {}).items():
            inputs, _ = _inputs(kind, config)
            name = str(config.get("system") or (f"{inputs[0]}+{key}" if kind.named == "input+key" and inputs else key))
            if len(name) > MAX_NAME_LENGTH:  # MLflow would refuse its keys after every stage had run
                raise InputError(
                    f"{section}.{key}.system" if kind.named != "key" or "system" in config else f"{section}.{key}",
                    f"a system name of {len(name)} characters is not allowed: at most {MAX_NAME_LENGTH} "
                    "(MLflow keys and file names are made from it)",
                )
            clash = next((other for other in where if system_key(other) == system_key(name)), None)
            if clash is not None:  # equal names, or names MLflow would log under one key (bm25+rm3, bm25_rm3)
                raise InputError(
                    f"{section}.{key}.system" if kind.named != "key" or "system" in config else f"{section}.{key}",
                    f"{name!r} is not allowed: a name no other system has ({where[clash]} makes {clash!r})",
                )
            where[name] = f"{section}.{key}"
            planned.append(PlannedSystem(section, str(key), name, inputs, config))
    for system in planned:
        _, named_by = _inputs(stage_kind(system.section), system.config)
        for index, name in enumerate(system.inputs):
            if name in system.inputs[:index]:
                raise InputError(
                    f"{system.path}.{named_by}[{index}]",
                    f"{name!r} is not allowed: a member given once ({name!r} is "
                    f"{named_by}[{system.inputs.index(name)}])",
                )
            if name not in where:
                at = f"{system.path}.{named_by}" + (f"[{index}]" if named_by == "members" else "")
                known = [n for n in where if n != system.name]
                raise InputError(
                    at,
                    f"{name!r} is not allowed: a system of this job ({', '.join(known) or 'none'}){did_you_mean(name, known)}",
                )
    return _ordered(planned)


def _ordered(planned: list[PlannedSystem]) -> list[PlannedSystem]:
    """Kahn's order, stable: of the systems whose inputs are done, the first in config order goes next."""
    done: set[str] = set()
    ordered: list[PlannedSystem] = []
    waiting = list(planned)
    while waiting:
        ready = next((s for s in waiting if set(s.inputs) <= done), None)
        if ready is None:
            cycle = " -> ".join(s.name for s in waiting)
            raise InputError(
                f"{waiting[0].path}",
                f"the systems {cycle} read each other in a cycle: a system may read only systems made before it",
            )
        waiting.remove(ready)
        done.add(ready.name)
        ordered.append(ready)
    return ordered
