"""The kinds of stage a system is made of, declared once (:data:`STAGE_KINDS`).

Everything that differs between kinds is a column of this table, and the rest of ragtrack reads it:
the plugin registry's entry-point groups (``pipeline.registry.GROUPS``), the systems planner's config
sections and naming rule (``pipeline.configuration.systems``), the job settings' sections and each kind's common
keys (``pipeline.configuration.settings``), and the pyproject entry-point tables (checked by a test). Adding a kind
takes a base class (a :class:`~ragtrack.core.stages.Stage`), one row here, its YAML folder under
``conf/`` and its entry in ``conf/config.yaml``'s defaults, its entry points and config package in
``pyproject.toml``, and its docs (docs/development.md walks through it).

Classes are named as ``module:Class`` (like entry points), so that this module imports nothing:
listing plugins and scoring run files read the table without loading pydantic or any component.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class StageKind:
    """One kind of stage.

    ``section``: its config section (``retriever``); ``group``: the entry-point group ``ragtrack.<group>``
    its plugins register in; ``base`` and ``settings``: its base class and the model of the keys every
    plugin of the kind has (``module:Class``); ``named``: a system's default name, its config ``key`` or
    ``input+key`` (``<input>+<config key>``, e.g. ``bm25+rm3``); ``reads``: the key that names the
    systems it reads (``input``: one, ``members``: several) or ``none``."""

    section: str
    group: str
    base: str
    settings: str
    named: Literal["key", "input+key"]
    reads: Literal["none", "input", "members"]

    def base_class(self) -> type:
        return _load(self.base)

    def settings_model(self) -> Any:
        return _load(self.settings)


def _load(name: str) -> Any:
    module, _, attribute = name.partition(":")
    return getattr(importlib.import_module(module), attribute)


STAGE_KINDS: tuple[StageKind, ...] = (  # in the order jobs plan and list them
    StageKind(
        "retriever",
        "retrievers",
        "ragtrack.retrievers.base:Retriever",
        "ragtrack.retrievers.base:RetrieverSettings",
        "key",
        "none",
    ),
    StageKind(
        "rewriter",
        "rewriters",
        "ragtrack.retrievers.rewriters:Rewriter",
        "ragtrack.core.settings:StageSettings",
        "input+key",
        "input",
    ),
    StageKind(
        "fusion",
        "fusions",
        "ragtrack.retrievers.fusion:Fusion",
        "ragtrack.retrievers.fusion:FusionSettings",
        "key",
        "members",
    ),
    StageKind(
        "reranker",
        "rerankers",
        "ragtrack.retrievers.rerankers:Reranker",
        "ragtrack.retrievers.rerankers:RerankerSettings",
        "input+key",
        "input",
    ),
)


def stage_kind(section: str) -> StageKind:
    """The kind whose config section is ``section``."""
    return next(kind for kind in STAGE_KINDS if kind.section == section)
