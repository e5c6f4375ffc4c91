"""Typed settings: every config key has a type and a valid range, declared once as pydantic models
(the job's keys here, each component's beside its class), and :func:`validate` checks a composed job
config against them before anything is built or logged. A bad value stops the job with one line naming the key, the value and what is allowed::

    depth: 'abc' is not allowed: an integer >= 1
    fusion.rrf.kk: no such key; did you mean 'fusion.rrf.k'?

The job itself keeps reading its ``DictConfig``; the models only check it.

Components are chosen by ``type`` (datasets, retrievers, rewriters, fusions, rerankers, evaluators, generators,
chunkers: entry points of ``ragtrack.<group>``) or by ``_target_`` (encoders). Each is checked against
the model its class declares as ``settings_schema``, beside the class (shipped models declare every key
and allow no other); a plugin without one is checked on its group's common keys (:data:`COMMON`), its
other keys being the plugin's business, and so is a component given by a ``_target_``. Then the
systems' graph is checked (``pipeline.configuration.systems``: every input a system of the job, no cycle).

A helper for the command line: :func:`discard_job_folder` removes the folder Hydra made for a job that
stopped at validation. ``python -m ragtrack.pipeline.configuration.settings`` prints the table of every key
(docs/configuration.md holds it).
"""

from __future__ import annotations

import functools
import importlib
import math
import os
import shutil
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, Field, Strict, ValidationError, ValidationInfo, create_model, field_validator
from pydantic.fields import FieldInfo

from ragtrack.core import stage_kinds
from ragtrack.core.errors import InputError, did_you_mean
from ragtrack.core.settings import (
    Count,
    Flag,
    InputLocation,
    ItemError,
    MetricName,
    NonNegative,
    NonNegativeInt,
    Normalization,
    Positive,
    Section,
    SystemName,
    Text,
)
from ragtrack.core.stage_kinds import StageKind
from ragtrack.evaluators.base import EvaluatorSettings
from ragtrack.evaluators.providers import DatasetSettings
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.systems import PlannedSystem, plan_systems
from ragtrack.pipeline.redaction import SECRET_KEY
from ragtrack.retrievers.chunking import ChunkerSettings, NoChunkingSettings
from ragtrack.retrievers.dense import DenseSettings
from ragtrack.retrievers.encoders import Encoder, EncoderSettings
from ragtrack.retrievers.generation import GeneratorSettings


# ----------------------------------------------------------------------------- top-level blocks
class PathsSettings(Section):
    root_dir: Text
    data_dir: Text
    log_dir: Text
    output_dir: Text
    cache_dir: Text
    mlflow_dir: Text


class TrackingSettings(Section):
    enabled: Flag
    uri: Text | None = None
    artifact_location: Text | None = None
    experiment: Text | None = None
    key_metrics: Annotated[list[MetricName], Field(min_length=1)] | None = None
    per_query_table: NonNegativeInt = 10
    timeout: Positive = 10
    retries: NonNegativeInt = 2

    @field_validator("experiment")
    @classmethod
    def _given_when_enabled(cls, experiment: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("enabled") and (experiment is None or info.data.get("uri") is None):
            raise ValueError("tracking.uri and tracking.experiment are required when tracking.enabled is true")
        return experiment


class PerturbationSettings(Section):
    kind: Literal["typos", "drop_words", "lowercase", "uppercase"]
    rate: Annotated[float, Strict(), Field(gt=0, le=1)] | None = None


class RobustnessSettings(Section):
    seed: NonNegativeInt = 0
    metrics: Annotated[list[MetricName], Field(min_length=1)] | None = None
    perturbations: dict[Text, PerturbationSettings]


class JobSettings(Section):
    """The top level (conf/config.yaml) and the helper keys of the shipped presets, less the stage
    sections (:func:`job_model` adds one per stage kind). Component blocks are mappings here and are
    checked one by one against their own models."""

    depth: Count
    seed: NonNegativeInt
    run_name: str | None = None
    slices: list[Literal["query_length", "relevant_docs"]] = []
    robustness: RobustnessSettings | None = None
    optimize_metric: (
        Annotated[str, Field(pattern=r"^[^/]+/[^/]+$", description="'<system>/<metric>', e.g. hybrid/ndcg@10")] | None
    ) = None
    tune_on: Text | None = (
        None  # a sweep over splits: the one its setting is chosen on (pipeline.app.sweep_page, compare --tune-on)
    )
    dry_run: Flag = (
        False  # ragtrack run --dry-run: count the LLM calls and tokens, send nothing (pipeline.execution.dryrun)
    )
    normalization: Normalization | None = None  # experiment=fusion_methods: the normalization of every score fusion
    dense_weight: NonNegative | None = None  # hparams_search=rrf_optuna: the dense member's RRF weight
    vars: dict[str, Any] = {}  # your own presets' helper variables (not checked)
    paths: PathsSettings
    dataset: dict[str, Any]
    encoder: dict[str, Any] | None = None
    evaluator: dict[Text, dict[str, Any]] | None = None
    generator: dict[str, Any] | None = None
    chunking: dict[str, Any] | None = None
    tracking: TrackingSettings


@functools.cache
def job_model(kinds: tuple[StageKind, ...]) -> type[JobSettings]:
    """:class:`JobSettings` with a section per stage kind: config keys (system names, where a kind
    names its system by the key) to component blocks."""
    sections: dict[str, Any] = {}
    for kind in kinds:
        keys = SystemName if kind.named == "key" else Text
        sections[kind.section] = (dict[keys, dict[str, Any]] | None, None)
    return create_model("JobSettings", __base__=JobSettings, **sections)


# The common keys of the groups that are no stage kind (a stage kind's: its table's ``settings``).
COMMON: dict[str, type[Section]] = {
    "datasets": DatasetSettings,
    "evaluators": EvaluatorSettings,
    "generators": GeneratorSettings,
    "chunkers": ChunkerSettings,
}


def common_model(group: str) -> type[Section]:
    """The keys every plugin of ``group`` has: what a plugin without its own ``settings_schema`` is checked on."""
    return (
        next((kind.settings_model() for kind in stage_kinds.STAGE_KINDS if kind.group == group), None) or COMMON[group]
    )


# ----------------------------------------------------------------------------- validation
def validate(cfg: DictConfig | Mapping) -> list[tuple[str, type[Section]]]:
    """Check a composed job config (interpolations resolved first) against the models; the first
    problem raises :class:`InputError` naming the key (a dotted path), the value and what is allowed.
    Returns each checked block, (its dotted path, its model), for :func:`absolute_inputs`."""
    checked: list[tuple[str, type[Section]]] = []

    def _check(model: type[Section], section: Any, path: str) -> None:
        _check_block(model, section, path)
        checked.append((path, model))

    settings = _plain(cfg, "") if isinstance(cfg, DictConfig) else dict(cfg)
    settings.pop("hydra", None)
    _check(job_model(stage_kinds.STAGE_KINDS), settings, "")
    _check(_component_model("datasets", settings["dataset"], "dataset"), settings["dataset"], "dataset")
    if settings.get("encoder") is not None:
        _check(_encoder_model(settings["encoder"], "encoder"), settings["encoder"], "encoder")
    for kind in stage_kinds.STAGE_KINDS:
        for name, component in (settings.get(kind.section) or {}).items():
            path = f"{kind.section}.{name}"
            _check(_component_model(kind.group, component, path), component, path)
            if isinstance(component.get("encoder"), Mapping):
                _check(_encoder_model(component["encoder"], f"{path}.encoder"), component["encoder"], f"{path}.encoder")
    _check_chains(plan_systems(settings))
    for name, evaluator in (settings.get("evaluator") or {}).items():
        model = _component_model("evaluators", evaluator, f"evaluator.{name}")
        _check_metrics(evaluator, f"evaluator.{name}")
        _check(model, evaluator, f"evaluator.{name}")
    for group, section in (("generators", "generator"), ("chunkers", "chunking")):
        if settings.get(section) is not None:
            _check(_component_model(group, settings[section], section), settings[section], section)
    _check_fusion_depths(settings)
    _check_key_metrics(settings)
    if not settings.get("dry_run"):  # a dry run sends nothing: it needs no key
        _check_key_variables(settings, "")
    return checked


def _check_key_variables(node: Any, path: str) -> None:
    """Every ``api_key_env`` of the job names a variable that is set: a missing key stops the job before
    it starts, not when the first request goes out (the value is never shown)."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            where = f"{path}.{key}" if path else str(key)
            if key == "api_key_env" and isinstance(value, str) and value and value not in os.environ:
                raise InputError(
                    where, f"the environment variable {value} is not set (export {value}=... before the run)"
                )
            _check_key_variables(value, where)


def _check_chains(planned: list[PlannedSystem]) -> None:
    """Each stage's inputs are systems it can read (:meth:`~ragtrack.core.stages.Stage.input_problem`:
    RM3 needs a BM25 retriever, a rewriter a retriever): refused here, not after the inputs were built."""
    classes = {system.name: _stage_class(system) for system in planned}
    for system in planned:
        for index, name in enumerate(system.inputs):
            problem = classes[system.name] and classes[name] and classes[system.name].input_problem(classes[name])
            if problem:
                at = (
                    f"{system.path}.input"
                    if len(system.inputs) == 1 and "input" in system.config
                    else f"{system.path}.members[{index}]"
                )
                raise InputError(at, f"{name!r} is not allowed: {problem}; {name} is a {classes[name].__name__}")


def _stage_class(system: PlannedSystem) -> type | None:
    """The class of a stage config that names an installed ``type`` (``None`` for a ``_target_``)."""
    kind = system.config.get("type")
    return (
        registry.load(system.group, kind)
        if system.config.get("_target_") is None and kind in registry.installed(system.group)
        else None
    )


def _check_fusion_depths(settings: Mapping) -> None:
    """A fusion returns at most the job's ``depth`` documents per query, as every system does: its own
    ``depth`` (how deep it reads its members, which return ``depth`` each) may not be larger."""
    for name, fusion in (settings.get("fusion") or {}).items():
        if isinstance(fusion, Mapping) and isinstance(fusion.get("depth"), int) and fusion["depth"] > settings["depth"]:
            raise InputError(
                f"fusion.{name}.depth",
                f"{fusion['depth']} is not allowed: at most the job's depth ({settings['depth']}), "
                "the documents each system returns",
            )


def _check_key_metrics(settings: Mapping) -> None:
    """Each of ``tracking.key_metrics`` that an evaluator of the job can score must be in the ``metrics``
    of one that does (where every such evaluator lists its metrics): else it would silently be missing."""
    evaluators = [
        (name, e)
        for name, e in (settings.get("evaluator") or {}).items()
        if isinstance(e, Mapping) and e.get("type") in registry.installed("evaluators")
    ]
    for index, metric in enumerate((settings.get("tracking") or {}).get("key_metrics") or []):
        scoring = [(name, e) for name, e in evaluators if registry.load("evaluators", e["type"]).handles(str(metric))]
        if scoring and all(isinstance(e.get("metrics"), list) and metric not in e["metrics"] for _, e in scoring):
            lists = " or ".join(f"evaluator.{name}.metrics" for name, _ in scoring)
            raise InputError(
                f"tracking.key_metrics[{index}]",
                f"{_shown(metric)} is not allowed: a metric this job scores; add it to {lists}",
            )


def absolute_inputs(cfg: DictConfig, checked: list[tuple[str, type[Section]]]) -> None:
    """Make each relative file or folder the job reads (a setting typed ``InputPath`` or ``NameOrPath``,
    :class:`ragtrack.core.settings.InputLocation`) absolute against the folder the command runs in,
    where the readers open it: the logged config.yaml then names the same files from any folder."""
    for path, model in checked:
        for name, field in model.model_fields.items():
            marker = _input_location(field.annotation, field.metadata)
            key = f"{path}.{field.alias or name}" if path else field.alias or name
            value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False) if marker else None
            given = list(value) if isinstance(value, ListConfig) else [value] if isinstance(value, str) else []
            made = [_absolute(v, marker) if isinstance(v, str) else v for v in given]
            if made != given:
                OmegaConf.update(cfg, key, made if isinstance(value, ListConfig) else made[0], merge=False)


def _input_location(annotation: Any, metadata: list) -> InputLocation | None:
    """The :class:`InputLocation` marker of a field (its metadata, or inside an optional or a list)."""
    found = next((m for m in metadata if isinstance(m, InputLocation)), None)
    if found is not None or annotation is None:
        return found
    if get_origin(annotation) is Annotated:
        return _input_location(get_args(annotation)[0], list(get_args(annotation)[1:]))
    return next((m for arg in get_args(annotation) if (m := _input_location(arg, [])) is not None), None)


def _absolute(value: str, marker: InputLocation) -> str:
    """``value`` as an absolute path; a name (``or_name``) where no such file or folder exists stays as given."""
    if Path(value).is_absolute() or (marker.or_name and not Path(value).exists()):
        return value
    return str(Path(value).absolute())


def _plain(node: DictConfig | ListConfig, path: str) -> Any:
    """A config as plain containers with its interpolations resolved, key by key, so a value that
    cannot be resolved or was never given (``???``) is named. Values taken from Hydra's runtime
    (``${hydra:...}``, e.g. ``paths.output_dir``) are Hydra's: they stay unresolved text (outside a
    Hydra job, as in ``ragtrack.run_experiment``, they have no value yet)."""
    raw = OmegaConf.to_container(node, resolve=False)
    keys = range(len(node)) if isinstance(node, ListConfig) else list(node.keys())
    plain: Any = [] if isinstance(node, ListConfig) else {}
    for key in keys:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        if OmegaConf.is_missing(node, key):
            raise InputError(where, "a value is required (the config has ???)")
        if isinstance(raw[key], str) and "${hydra:" in raw[key]:
            value: Any = raw[key]
        else:
            try:
                value = node[key]
            except OmegaConfBaseException as exc:
                detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise InputError(where, f"cannot resolve {raw[key]!r}: {detail}") from None
        if isinstance(value, (DictConfig, ListConfig)):
            value = _plain(value, where)
        if isinstance(plain, list):
            plain.append(value)
        else:
            plain[key] = value
    return plain


def _encoder_model(settings: Mapping, path: str) -> type[Section]:
    """The model of an encoder config: the ``settings_schema`` of the class its ``_target_`` names, else
    the common keys (a target that does not import fails when the job builds it, with its own error)."""
    target = str(settings.get("_target_")) if isinstance(settings, Mapping) else ""
    module, _, name = target.rpartition(".")
    try:
        schema = getattr(importlib.import_module(module), name).settings_schema
    except (ImportError, AttributeError, ValueError):
        return EncoderSettings
    return schema if isinstance(schema, type) and issubclass(schema, EncoderSettings) else EncoderSettings


def _component_model(group: str, settings: Any, path: str) -> type[Section]:
    """The model of a component: the ``settings_schema`` its plugin class declares, else the group's
    common keys (a plugin without one, or a ``_target_``). An unknown ``type`` is an error here."""
    common = common_model(group)
    if not isinstance(settings, Mapping):
        return common
    kind = settings.get("type")
    if group == "chunkers" and kind == "none":
        return NoChunkingSettings
    if kind is None or settings.get("_target_") is not None:
        if kind is None and settings.get("_target_") is None:
            raise InputError(f"{path}.type", f"a value is required: {_known_types(group)}")
        return common
    installed = registry.installed(group)
    if kind not in installed:
        raise InputError(
            f"{path}.type", f"{_shown(kind)} is not allowed: {_known_types(group)}{did_you_mean(str(kind), installed)}"
        )
    schema = getattr(registry.load(group, kind), "settings_schema", None)
    return schema if isinstance(schema, type) and issubclass(schema, common) else common


def _known_types(group: str) -> str:
    known = sorted(registry.installed(group)) + (["none"] if group == "chunkers" else [])
    return f"one of {', '.join(known)} (the installed {group})"


def _check_metrics(evaluator: Mapping, path: str) -> None:
    """Each metric an evaluator is given must be one it provides; a cutoff is an integer >= 1 (unless the
    evaluator lists the metric as ``name@x``, a number such as a recall level)."""
    kind = evaluator.get("type")
    if not isinstance(evaluator.get("metrics"), list) or kind not in registry.installed("evaluators"):
        return
    plugin = registry.load("evaluators", kind)
    for index, metric in enumerate(evaluator["metrics"]):
        base, at, cutoff = str(metric).partition("@")
        if not plugin.handles(metric):
            raise InputError(
                f"{path}.metrics[{index}]",
                f"{_shown(metric)} is not allowed: a metric of the {kind!r} evaluator "
                f"(ragtrack metrics lists them){did_you_mean(str(metric), plugin.provides())}",
            )
        number = (
            f"{base}@x" in plugin.provides()
        )  # a parameter that is a number (iprec_at_recall@0.25), checked by the plugin's settings
        if at and not number and not (cutoff.isascii() and cutoff.isdigit() and int(cutoff) >= 1):
            raise InputError(
                f"{path}.metrics[{index}]",
                f"{_shown(metric)} is not allowed: a cutoff that is an integer >= 1, e.g. {base}@10",
            )


def _check_block(model: type[Section], settings: Any, path: str, context: dict | None = None) -> None:
    try:
        model.model_validate(settings, context=context)
    except ValidationError as exc:
        raise _one_line(model, settings, path, exc.errors()[0]) from None


def _one_line(model: type[Section], settings: Any, path: str, error: dict) -> InputError:
    """The first pydantic error as ``key: value is not allowed: what is allowed``."""
    keys, value = [], settings
    for part in error["loc"]:
        inside = (
            isinstance(value, Mapping)
            and part in value
            or isinstance(value, list)
            and isinstance(part, int)
            and part < len(value)
        )
        if not inside:
            if error["type"] == "missing":
                keys.append(part)
            break  # the rest names a member of a union, not a key
        keys.append(part)
        value = value[part]
    where = _join(path, keys)
    annotation, description, siblings = _declared(model, keys)
    if error["type"] == "extra_forbidden":
        parent = _join(path, keys[:-1])
        return InputError(where, "no such key" + key_hint(where, parent, str(keys[-1]), siblings))
    allowed = description or _describe(annotation)
    if error["type"] == "missing":
        return InputError(where, f"a value is required: {allowed}")
    if error["type"] == "value_error":
        problem = error["ctx"]["error"]
        if isinstance(problem, ItemError) and isinstance(value, list):
            keys, value = [*keys, problem.index], value[problem.index]
            where = _join(path, keys)
        elif isinstance(value, Mapping):  # a rule across the block's keys: the rule says what is wrong
            return InputError(where, str(problem))
        allowed = str(problem)
    if error["loc"][-1] == "[key]" and error["type"] == "literal_error":  # a mapping's key outside its choices
        shown_key = keys[-1]
        expected = [choice.strip(" '") for choice in error["ctx"]["expected"].replace(" or ", ", ").split(",")]
        return InputError(where, f"{_shown(shown_key)} is not allowed: one of {', '.join(expected)}")
    secret = keys and (SECRET_KEY.search(str(keys[-1])) or str(keys[-1]).endswith("_env"))
    shown = "the value given (not shown)" if secret else _shown(value)
    return InputError(where, f"{shown} is not allowed: {allowed}")


def key_hint(where: str, parent: str, key: str, siblings: list[str]) -> str:
    """``; did you mean 'fusion.rrf.k'?`` when a sibling key is close to ``key`` (matched on the last
    part, printed as a full path), else the keys that are allowed there."""
    if did_you_mean(key, siblings):
        return did_you_mean(where, [_join(parent, [sibling]) for sibling in siblings])
    return f"; known: {', '.join(siblings)}" if siblings else ""


def _join(path: str, keys: list) -> str:
    text = path
    for key in keys:
        text += f"[{key}]" if isinstance(key, int) else f".{key}" if text else str(key)
    return text


def _declared(model: type[BaseModel], keys: list) -> tuple[Any, str | None, list[str]]:
    """The annotation and description declared for ``keys`` under ``model``, and the keys allowed
    beside the last one."""
    annotation: Any = model
    description, siblings = None, []
    for key in keys:
        annotation = _without_null(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            fields = {info.alias or name: info for name, info in annotation.model_fields.items()}
            siblings = list(fields)
            if key not in fields:
                return Any, None, siblings
            info = fields[key]
            annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            description = info.description
        elif get_origin(annotation) is list:
            annotation, description = get_args(annotation)[0], None
        elif get_origin(annotation) is dict:
            annotation, description = get_args(annotation)[1], None
        else:
            return Any, None, siblings
    return annotation, description, siblings


def _without_null(annotation: Any) -> Any:
    if get_origin(annotation) is Annotated:
        return _without_null(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        members = [a for a in get_args(annotation) if a is not type(None)]
        return _without_null(members[0]) if len(members) == 1 else annotation
    return annotation


def _describe(annotation: Any) -> str:
    """What a type allows, in words: ``an integer >= 1``, ``one of lucene, robertson``, ``... or null``."""
    origin = get_origin(annotation)
    if origin is Annotated:
        base, *metadata = get_args(annotation)
        constraints = []
        for item in metadata:
            if isinstance(item, FieldInfo):
                if item.description:
                    return item.description
                constraints += item.metadata
            else:
                constraints.append(item)
        return _bounded(_describe(base), constraints)
    if origin in (Union, types.UnionType):
        members = get_args(annotation)
        text = " or ".join(_describe(a) for a in members if a is not type(None))
        return f"{text} or null" if type(None) in members else text
    if origin is Literal:
        values = get_args(annotation)
        return f"one of {', '.join(map(str, values))}" if len(values) > 1 else f"{values[0]}"
    if origin is list:
        return f"a list, each {_describe(get_args(annotation)[0])}"
    if origin is dict or annotation is dict:
        return "a mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"a mapping of {', '.join(info.alias or name for name, info in annotation.model_fields.items())}"
    return {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}.get(
        annotation, "any value"
    )


def _bounded(text: str, constraints: list) -> str:
    low = next((c for c in constraints if isinstance(c, (annotated_types.Ge, annotated_types.Gt))), None)
    high = next((c for c in constraints if isinstance(c, (annotated_types.Le, annotated_types.Lt))), None)
    length = next((c for c in constraints if isinstance(c, annotated_types.MinLen)), None)
    if length is not None and length.min_length >= 1:
        text = text.replace("a string", "a non-empty string").replace("a list", "a non-empty list")
    if low is not None and isinstance(high, annotated_types.Le):
        opening, limit = ("[", low.ge) if isinstance(low, annotated_types.Ge) else ("(", low.gt)
        return f"{text} in {opening}{limit}, {high.le}]"
    for bound in (low, high):
        if bound is not None:
            sign, limit = {
                annotated_types.Ge: (">=", "ge"),
                annotated_types.Gt: (">", "gt"),
                annotated_types.Le: ("<=", "le"),
                annotated_types.Lt: ("<", "lt"),
            }[type(bound)]
            text += f" {sign} {getattr(bound, limit)}"
    return text


def _shown(value: Any) -> str:
    """A value as the user typed it (YAML words for null and booleans)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return repr(value)


# ----------------------------------------------------------------------------- the table in the docs
def settings_table() -> str:
    """Every key of the shipped configs with what it allows, as the Markdown table of docs/configuration.md
    (a component's ``type``/``_target_`` picks its rows: the "where" column)."""
    rows: dict[tuple[str, str], list[str]] = {}

    components = (
        "dataset",
        "encoder",
        *(kind.section for kind in stage_kinds.STAGE_KINDS),
        "evaluator",
        "generator",
        "chunking",
    )  # their own rows below
    job = job_model(stage_kinds.STAGE_KINDS)

    def add(prefix: str, model: type[BaseModel], where: str) -> None:
        for name, info in model.model_fields.items():
            key = info.alias or name
            if (
                key in ("type", "_target_")
                and where
                or key in components
                and model in (job, DenseSettings)
                and where != ""
                or key in components
                and model is job
            ):
                continue
            annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            inner = _without_null(annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                add(f"{prefix}{key}.", inner, where)
            else:
                allowed = (info.description or _describe(annotation)).replace("|", "&#124;")
                rows.setdefault((f"`{prefix}{key}`", allowed), []).append(where)

    add("", job, "")
    for kind, plugin in _shipped("datasets").items():
        add("dataset.", plugin.settings_schema, f"`type: {kind}`")
    for encoder in shipped_encoders():
        add("encoder.", encoder.settings_schema, f"`_target_: ...{encoder.__name__}`")
    for section, group in (
        *((kind.section, kind.group) for kind in stage_kinds.STAGE_KINDS),
        ("evaluator", "evaluators"),
    ):
        for kind, plugin in _shipped(group).items():
            add(f"{section}.{kind}.", plugin.settings_schema, f"`type: {kind}`")
    for section, group in (("generator", "generators"), ("chunking", "chunkers")):
        for kind, plugin in _shipped(group).items():
            add(f"{section}.", plugin.settings_schema, f"`type: {kind}`")
    lines = ["| key | where | allowed |", "|---|---|---|"]
    lines += [f"| {key} | {', '.join(dict.fromkeys(wheres))} | {allowed} |" for (key, allowed), wheres in rows.items()]
    return "\n".join(lines)


def _shipped(group: str) -> dict[str, Any]:
    """The plugins ragtrack itself registers in ``group`` (third-party ones are their own docs' business)."""
    return {
        kind: plugin
        for kind, plugin in registry.load_all(group).items()
        if registry.installed(group)[kind].value.startswith("ragtrack.") and getattr(plugin, "settings_schema", None)
    }


def shipped_encoders() -> list[type]:
    """The encoder classes ragtrack ships with their own settings (every subclass of ``Encoder`` in
    ragtrack's modules: a subclass defined elsewhere, a test's or a user's, is not ragtrack's to list)."""
    found, waiting = [], list(Encoder.__subclasses__())
    while waiting:
        encoder = waiting.pop(0)
        waiting += encoder.__subclasses__()
        if encoder.settings_schema is not EncoderSettings and encoder.__module__.startswith("ragtrack."):
            found.append(encoder)
    return sorted(found, key=lambda encoder: encoder.__name__)


# ----------------------------------------------------------------------------- a job that stopped at validation
def discard_job_folder(output_dir: Path, job_name: str, log_dir: str | Path | None) -> None:
    """Remove the folder Hydra made for a job that stopped before it started: only when it holds
    nothing but Hydra's ``.hydra/`` records and the job's log (a folder the user reused is kept).
    A sweep folder left with only its ``multirun.yaml`` goes too, and so do the folders above that are
    left empty, up to and including ``log_dir`` (``paths.log_dir``)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir() or not {p.name for p in output_dir.iterdir()} <= {".hydra", f"{job_name}.log"}:
        return
    shutil.rmtree(output_dir, ignore_errors=True)
    sweep = output_dir.parent
    if (sweep / "multirun.yaml").is_file() and {p.name for p in sweep.iterdir()} == {"multirun.yaml"}:
        shutil.rmtree(sweep, ignore_errors=True)
    if log_dir is None or not output_dir.is_relative_to(log_dir):
        return
    for folder in output_dir.parents:
        if not folder.is_relative_to(log_dir) or folder.is_dir() and any(folder.iterdir()):
            break
        if folder.is_dir():
            folder.rmdir()


if __name__ == "__main__":
    print(settings_table())
