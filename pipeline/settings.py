"""Typed settings: every config key has a type and a valid range, declared once here as pydantic
models, and :func:`validate` checks a composed job config against them before anything is built or
logged. A bad value stops the job with one line naming the key, the value and what is allowed::

    depth: 'abc' is not allowed: an integer >= 1
    fusion.rrf.kk: no such key; did you mean 'fusion.rrf.k'?

The job itself keeps reading its ``DictConfig``; the models only check it.

Components are chosen by ``type`` (retrievers, fusions, evaluators, generators, chunkers: entry points
of ``ragtrack.<group>``) or by ``_target_`` (encoders). A shipped component is checked strictly (every
key declared, no other key allowed). A plugin's component is checked against the model its entry
point object declares as ``settings_schema`` (a subclass of the group's common model, e.g.
:class:`RetrieverSettings`), else on the group's common keys only; its other keys are the plugin's
business. An encoder or component given by a ``_target_`` that ragtrack does not ship is checked on
the common keys only.

Helpers for the command line: :func:`composition_errors_explained` turns Hydra's composition errors
(an unknown key or group option, an override that does not parse) into the same kind of one-line
error, with a did-you-mean; :func:`discard_job_folder` removes the folder Hydra made for a job that
stopped at validation. ``python -m ragtrack.pipeline.settings`` prints the table of every key
(docs/configuration.md holds it).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import BaseModel, Field, Strict, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from ragtrack.core.errors import InputError, RagtrackError, did_you_mean
from ragtrack.core.settings import (ChatSettings, ComponentSettings, Count, EnvName, Flag, Fraction, Integer, ItemError, MetricName, NonNegative,
                                    NonNegativeInt, Normalization, Open, Port, Positive, Section, SystemName, Text, TokenizerSettings)
from ragtrack.pipeline.redaction import SECRET_KEY

# ----------------------------------------------------------------------------- top-level blocks
class PathsSettings(Section):
    root_dir: Text
    data_dir: Text
    log_dir: Text
    output_dir: Text
    cache_dir: Text
    mlflow_dir: Text


class DatasetSettings(Section):
    name: Text
    path: Text
    split: Text = "test"
    qrels_file: Text | None = None
    slices_file: Text | None = None
    slice_metadata: list[Text] = []


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
    """The top level (conf/config.yaml) and the helper keys of the shipped presets. Component blocks
    are mappings here and are checked one by one against their own models."""

    depth: Count
    seed: NonNegativeInt
    run_name: str | None = None
    slices: list[Literal["query_length", "relevant_docs"]] = []
    robustness: RobustnessSettings | None = None
    optimize_metric: Annotated[str, Field(pattern=r"^[^/]+/[^/]+$", description="'<system>/<metric>', e.g. hybrid/ndcg@10")] | None = None
    normalization: Normalization | None = None  # experiment=fusion_methods: the normalization of every score fusion
    dense_weight: NonNegative | None = None  # hparams_search=rrf_optuna: the dense member's RRF weight
    vars: dict[str, Any] = {}  # your own presets' helper variables (not checked)
    paths: PathsSettings
    dataset: DatasetSettings
    encoder: dict[str, Any] | None = None
    retriever: dict[SystemName, dict[str, Any]] | None = None
    fusion: dict[SystemName, dict[str, Any]] | None = None
    evaluator: dict[Text, dict[str, Any]] | None = None
    generator: dict[str, Any] | None = None
    chunking: dict[str, Any] | None = None
    tracking: TrackingSettings


# ----------------------------------------------------------------------------- encoders (by _target_)
class EncoderSettings(Open):
    target: Text = Field(alias="_target_")
    device: Text = "auto"
    distributed: Literal["none", "ray"] = "none"
    actors: Count | None = None


class HashingEncoderSettings(EncoderSettings, extra="forbid"):
    target: Literal["ragtrack.retrievers.encoders.HashingEncoder"] = Field(alias="_target_")
    dim: Count = 256


class TransformerEncoderSettings(EncoderSettings, extra="forbid"):
    model: Text = "all-MiniLM-L6-v2"
    batch_size: Count | None = 32
    max_seq_length: Count | None = None
    query_prefix: str = ""
    document_prefix: str = ""
    threads: Count | None = None


class SentenceTransformerSettings(TransformerEncoderSettings, extra="forbid"):
    target: Literal["ragtrack.retrievers.encoders.SentenceTransformerEncoder"] = Field(alias="_target_")


class OnnxEncoderSettings(TransformerEncoderSettings, extra="forbid"):
    target: Literal["ragtrack.retrievers.encoders.OnnxEncoder"] = Field(alias="_target_")
    precision: Literal["fp32", "int8"] = "int8"


ENCODERS: dict[str, type[Section]] = {model.model_fields["target"].annotation.__args__[0]: model
                                      for model in (HashingEncoderSettings, SentenceTransformerSettings, OnnxEncoderSettings)}


# ----------------------------------------------------------------------------- components (by type)
class RetrieverSettings(ComponentSettings):
    """A retriever plugin's common keys."""


class BM25Settings(RetrieverSettings, extra="forbid"):
    type: Literal["bm25"]
    backend: Literal["bm25s", "rank_bm25"] = "bm25s"
    k1: NonNegative = 0.9
    b: Fraction = 0.4
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    tokenizer: TokenizerSettings = TokenizerSettings()


class HnswSettings(Section):
    ef_construction: Count = 200
    ef_search: Count = 200
    max_neighbors: Count = 32


class ChromaSettings(Section):
    mode: Literal["persistent", "http"] = "persistent"
    build: Literal["when_used", "always"] = "when_used"
    host: Text = "localhost"
    port: Port = 8000
    ssl: Flag = False
    headers: dict[str, str] = {}
    token_env: EnvName | None = None
    token_header: Text = "Authorization"
    hnsw: HnswSettings = HnswSettings()


class DenseSettings(RetrieverSettings, extra="forbid"):
    type: Literal["dense"]
    encoder: dict[str, Any]  # checked as an encoder (by its _target_)
    search: Literal["exact", "approximate"] = "exact"
    chroma: ChromaSettings = ChromaSettings()


class FusionSettings(ComponentSettings):
    """A fusion plugin's common keys: the pipeline reads ``system`` and ``members``."""

    system: SystemName
    members: Annotated[list[SystemName], Field(min_length=1)]
    depth: Count = 100
    weights: list[NonNegative] | None = None

    @field_validator("members")
    @classmethod
    def _known_systems(cls, members: list[str], info: ValidationInfo) -> list[str]:
        systems = (info.context or {}).get("systems")
        for index, member in enumerate(members):
            if systems is not None and member not in systems:
                raise ItemError(index, f"a system defined before this fusion ({', '.join(systems) or 'none'}){did_you_mean(member, systems)}")
        return members

    @field_validator("weights")
    @classmethod
    def _one_per_member(cls, weights: list[float] | None, info: ValidationInfo) -> list[float] | None:
        members = info.data.get("members")
        if weights is not None and members is not None and len(weights) != len(members):
            raise ValueError(f"null or one weight per member ({len(members)}: {', '.join(members)})")
        return weights


class RRFSettings(FusionSettings, extra="forbid"):
    type: Literal["rrf"]
    k: NonNegative = 60


class CombSettings(FusionSettings, extra="forbid"):
    type: Literal["combsum", "combmnz"]
    normalization: Normalization = "minmax"


class LinearSettings(FusionSettings, extra="forbid"):
    type: Literal["linear"]
    normalization: Normalization = "minmax"

    @field_validator("weights")
    @classmethod
    def _positive_sum(cls, weights: list[float] | None) -> list[float] | None:
        if weights is not None and not sum(weights) > 0:
            raise ValueError("weights >= 0 with a positive sum")
        return weights


class EvaluatorSettings(ComponentSettings):
    """An evaluator plugin's common keys; each metric must be one the evaluator provides."""

    metrics: Annotated[list[MetricName], Field(min_length=1)] | None = None

    @field_validator("metrics")
    @classmethod
    def _provided(cls, metrics: list[str] | None, info: ValidationInfo) -> list[str] | None:
        from ragtrack.pipeline import registry

        kind = info.data.get("type")
        if metrics is None or kind not in registry.installed("evaluators"):
            return metrics
        evaluator = registry.load("evaluators", kind)
        for index, metric in enumerate(metrics):
            base, at, cutoff = metric.partition("@")
            if not evaluator.handles(metric):
                raise ItemError(index, f"a metric of the {kind!r} evaluator (ragtrack metrics lists them){did_you_mean(metric, evaluator.provides())}")
            if at and not (cutoff.isascii() and cutoff.isdigit() and int(cutoff) >= 1):
                raise ItemError(index, f"a cutoff that is an integer >= 1, e.g. {base}@10")
        return metrics


class RankingSettings(EvaluatorSettings, extra="forbid"):
    type: Literal["ranking"]
    relevance_threshold: NonNegativeInt = 1
    max_grade: Count | None = None

    @field_validator("metrics")
    @classmethod
    def _parsed(cls, metrics: list[str] | None) -> list[str] | None:
        from ragtrack.evaluators.ranking import parse_metric

        for index, metric in enumerate(metrics or ()):
            try:
                parse_metric(metric)
            except RagtrackError as exc:
                raise ItemError(index, str(exc)) from None
        return metrics


class AnswerSettings(EvaluatorSettings, extra="forbid"):
    type: Literal["answer", "context_recall"]


class AbstentionSettings(EvaluatorSettings, extra="forbid"):
    type: Literal["abstention"]
    no_answer: Text = "unanswerable"


class FaithfulnessSettings(EvaluatorSettings, extra="forbid"):
    type: Literal["faithfulness"]
    top_k: Count = 3
    support_threshold: Annotated[float, Strict(), Field(gt=0, le=1)] = 0.5


class BertScoreSettings(EvaluatorSettings, extra="forbid"):
    type: Literal["bertscore"]
    model: Text = "all-MiniLM-L6-v2"
    layer: Integer = -1
    batch_size: Count = 64
    max_length: Count = 256


class JudgeSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    type: Literal["llm_judge"]
    rubrics: Annotated[list[Text], Field(min_length=1)] | None = None
    top_k: Count = 3
    output_dir: Text | None = None


class PairwiseJudgeSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    type: Literal["pairwise_judge"]
    baseline: SystemName | None = None
    pairs: list[Annotated[list[SystemName], Field(min_length=2, max_length=2, description="a pair [first, second] of system names")]] | None = None
    rubric: Text = "correctness"
    output_dir: Text | None = None


class GeneratorSettings(ComponentSettings):
    """A generator plugin's common keys."""


class NoGeneratorSettings(GeneratorSettings, extra="forbid"):
    type: Literal["none"]


class ExtractiveSettings(GeneratorSettings, extra="forbid"):
    type: Literal["extractive"]
    top_k: Count = 1
    unit: Literal["span", "sentence"] = "span"
    tokenizer: TokenizerSettings = TokenizerSettings()
    no_answer: Text | None = None
    abstain_below: Fraction = 0.0


class OpenAISettings(GeneratorSettings, ChatSettings, extra="forbid"):
    type: Literal["openai"]
    top_k: Count = 3
    no_answer: Text | None = None


class ChunkerSettings(ComponentSettings):
    """A chunker plugin's common keys."""

    oversample: Count = 1


class NoChunkingSettings(ChunkerSettings, extra="forbid"):
    type: Literal["none"]


class WindowSettings(ChunkerSettings, extra="forbid"):
    type: Literal["sentences", "chars"]
    size: Count
    overlap: Annotated[float, Strict(), Field(ge=0, description="an integer >= 0 below size, or a fraction of size in (0, 1)")] = 0
    repeat_title: Flag = True

    @field_validator("overlap")
    @classmethod
    def _below_size(cls, overlap: float, info: ValidationInfo) -> float:
        size = info.data.get("size")
        if size is not None and not (0 < overlap < 1) and not (overlap == int(overlap) and overlap < size):
            raise ValueError(f"an integer below size ({size}), or a fraction of size in (0, 1)")
        return overlap


class TokenWindowSettings(WindowSettings, extra="forbid"):
    type: Literal["tokens"]
    model: Text | None = None


SHIPPED: dict[str, dict[str, type[ComponentSettings]]] = {
    "retrievers": {"bm25": BM25Settings, "dense": DenseSettings},
    "fusions": {"rrf": RRFSettings, "combsum": CombSettings, "combmnz": CombSettings, "linear": LinearSettings},
    "evaluators": {"ranking": RankingSettings, "answer": AnswerSettings, "context_recall": AnswerSettings,
                   "bertscore": BertScoreSettings, "llm_judge": JudgeSettings,
                   "abstention": AbstentionSettings, "faithfulness": FaithfulnessSettings, "pairwise_judge": PairwiseJudgeSettings},
    "generators": {"none": NoGeneratorSettings, "extractive": ExtractiveSettings, "openai": OpenAISettings},
    "chunkers": {"none": NoChunkingSettings, "tokens": TokenWindowSettings, "sentences": WindowSettings, "chars": WindowSettings},
}
COMMON: dict[str, type[ComponentSettings]] = {"retrievers": RetrieverSettings, "fusions": FusionSettings, "evaluators": EvaluatorSettings,
                                              "generators": GeneratorSettings, "chunkers": ChunkerSettings}


# ----------------------------------------------------------------------------- validation
def validate(cfg: DictConfig | Mapping) -> None:
    """Check a composed job config (interpolations resolved first) against the models; the first
    problem raises :class:`InputError` naming the key (a dotted path), the value and what is allowed."""
    settings = _plain(cfg, "") if isinstance(cfg, DictConfig) else dict(cfg)
    settings.pop("hydra", None)
    _check(JobSettings, settings, "")
    if settings.get("encoder") is not None:
        _check(_encoder_model(settings["encoder"], "encoder"), settings["encoder"], "encoder")
    systems: list[str] = []
    for name, retriever in (settings.get("retriever") or {}).items():
        path = f"retriever.{name}"
        _check(_component_model("retrievers", retriever, path), retriever, path)
        if isinstance(retriever.get("encoder"), Mapping):
            _check(_encoder_model(retriever["encoder"], f"{path}.encoder"), retriever["encoder"], f"{path}.encoder")
        systems.append(name)
    for name, fusion in (settings.get("fusion") or {}).items():
        path = f"fusion.{name}"
        _check(_component_model("fusions", fusion, path), fusion, path, {"systems": list(systems)})
        if fusion["system"] in systems:
            raise InputError(f"{path}.system", f"{fusion['system']!r} is not allowed: a name no other system has ({', '.join(systems)})")
        systems.append(fusion["system"])
    for name, evaluator in (settings.get("evaluator") or {}).items():
        _check(_component_model("evaluators", evaluator, f"evaluator.{name}"), evaluator, f"evaluator.{name}")
    for group, section in (("generators", "generator"), ("chunkers", "chunking")):
        if settings.get(section) is not None:
            _check(_component_model(group, settings[section], section), settings[section], section)


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
    target = settings.get("_target_") if isinstance(settings, Mapping) else None
    return ENCODERS.get(str(target), EncoderSettings)


def _component_model(group: str, settings: Any, path: str) -> type[Section]:
    """The model of a component: the shipped one for its ``type``, else the plugin's own
    ``settings_schema``, else the group's common keys. An unknown ``type`` is an error here."""
    if not isinstance(settings, Mapping):
        return COMMON[group]
    kind = settings.get("type")
    if kind in SHIPPED[group]:
        return SHIPPED[group][kind]
    if kind is None or settings.get("_target_") is not None:
        if kind is None and settings.get("_target_") is None:
            raise InputError(f"{path}.type", f"a value is required: {_known_types(group)}")
        return COMMON[group]
    from ragtrack.pipeline import registry

    installed = registry.installed(group)
    if kind not in installed:
        raise InputError(f"{path}.type", f"{_shown(kind)} is not allowed: {_known_types(group)}{did_you_mean(str(kind), installed)}")
    schema = getattr(registry.load(group, kind), "settings_schema", None)
    return schema if isinstance(schema, type) and issubclass(schema, COMMON[group]) else COMMON[group]


def _known_types(group: str) -> str:
    from ragtrack.pipeline import registry

    known = sorted(set(registry.installed(group)) | set(SHIPPED[group]))
    return f"one of {', '.join(known)} (the installed {group})"


def _check(model: type[Section], settings: Any, path: str, context: dict | None = None) -> None:
    try:
        model.model_validate(settings, context=context)
    except ValidationError as exc:
        raise _one_line(model, settings, path, exc.errors()[0]) from None


def _one_line(model: type[Section], settings: Any, path: str, error: dict) -> InputError:
    """The first pydantic error as ``key: value is not allowed: what is allowed``."""
    keys, value = [], settings
    for part in error["loc"]:
        inside = isinstance(value, Mapping) and part in value or isinstance(value, list) and isinstance(part, int) and part < len(value)
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
        return InputError(where, "no such key" + _key_hint(where, parent, str(keys[-1]), siblings))
    allowed = description or _describe(annotation)
    if error["type"] == "missing":
        return InputError(where, f"a value is required: {allowed}")
    if error["type"] == "value_error":
        problem = error["ctx"]["error"]
        if isinstance(problem, ItemError) and isinstance(value, list):
            keys, value = [*keys, problem.index], value[problem.index]
            where = _join(path, keys)
        allowed = str(problem)
    secret = keys and (SECRET_KEY.search(str(keys[-1])) or str(keys[-1]).endswith("_env"))
    shown = "the value given (not shown)" if secret else _shown(value)
    return InputError(where, f"{shown} is not allowed: {allowed}")


def _key_hint(where: str, parent: str, key: str, siblings: list[str]) -> str:
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
    return {int: "an integer", float: "a finite number", bool: "true or false", str: "a string"}.get(annotation, "any value")


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
            sign, limit = {annotated_types.Ge: (">=", "ge"), annotated_types.Gt: (">", "gt"), annotated_types.Le: ("<=", "le"),
                           annotated_types.Lt: ("<", "lt")}[type(bound)]
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

    components = ("encoder", "retriever", "fusion", "evaluator", "generator", "chunking")  # their own rows below

    def add(prefix: str, model: type[BaseModel], where: str) -> None:
        for name, info in model.model_fields.items():
            key = info.alias or name
            if key in ("type", "_target_") and where or key in components and model in (JobSettings, DenseSettings):
                continue
            annotation = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
            inner = _without_null(annotation)
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                add(f"{prefix}{key}.", inner, where)
            else:
                allowed = (info.description or _describe(annotation)).replace("|", "&#124;")
                rows.setdefault((f"`{prefix}{key}`", allowed), []).append(where)

    add("", JobSettings, "")
    for target, model in ENCODERS.items():
        add("encoder.", model, f"`_target_: ...{target.rsplit('.', 1)[1]}`")
    for section, group in (("retriever", "retrievers"), ("fusion", "fusions"), ("evaluator", "evaluators")):
        for kind, model in SHIPPED[group].items():
            add(f"{section}.{kind}.", model, f"`type: {kind}`")
    for section, group in (("generator", "generators"), ("chunking", "chunkers")):
        for kind, model in SHIPPED[group].items():
            add(f"{section}.", model, f"`type: {kind}`")
    lines = ["| key | where | allowed |", "|---|---|---|"]
    lines += [f"| {key} | {', '.join(dict.fromkeys(wheres))} | {allowed} |" for (key, allowed), wheres in rows.items()]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- Hydra's composition errors
@contextlib.contextmanager
def composition_errors_explained(config_dirs: Sequence[str | Path] = ()) -> Iterator[None]:
    """Hydra's composition errors (an unknown key or group option, an override that does not parse)
    as one-line :class:`RagtrackError` s with a did-you-mean; ``config_dirs``: the user's config
    folders. Hydra prints its own errors and exits unless ``HYDRA_FULL_ERROR`` is set (its documented
    switch to raise them), so it is set meanwhile."""
    from hydra.errors import ConfigCompositionException, OverrideParseException

    previous = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    except (ConfigCompositionException, OverrideParseException) as exc:
        raise explain_composition_error(exc, config_dirs) from None
    finally:
        if previous is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = previous


def explain_composition_error(exc: Exception, config_dirs: Sequence[str | Path] = ()) -> RagtrackError:
    """One line for a Hydra composition error. A group's options are the YAML files of that group in
    the installed configs and in ``config_dirs`` (the user's ``--config-dir`` folders)."""
    from hydra.errors import MissingConfigException, OverrideParseException

    cause = exc.__cause__
    if isinstance(exc, OverrideParseException):
        return RagtrackError(f"{exc.override}: not a valid override: {str(exc).splitlines()[0]}")
    if isinstance(exc, MissingConfigException) and exc.missing_cfg_file and "/" in exc.missing_cfg_file:
        group, _, option = exc.missing_cfg_file.rpartition("/")
        options = sorted(set(group_options(group, config_dirs)) | set(exc.options or ()))
        return InputError(group, f"{option!r} is not allowed: one of {', '.join(options) or '(none found)'}{did_you_mean(option, options)}")
    if isinstance(cause, OmegaConfBaseException) and getattr(cause, "full_key", None) and str(exc).startswith("Could not override"):
        wanted = str(exc).split("'")[1]
        parent = cause.parent_node
        siblings = [str(k) for k in parent.keys()] if isinstance(parent, DictConfig) else []
        if cause.full_key != wanted:
            return InputError(wanted, f"no such key ({cause.full_key} is not set in this config)")
        return InputError(wanted, "no such key" + _key_hint(wanted, wanted.rpartition(".")[0], str(cause.key), siblings))
    return RagtrackError("; ".join(line.strip() for line in str(exc).splitlines() if line.strip() and not line.startswith("\t")))


def group_options(group: str, config_dirs: Sequence[str | Path] = ()) -> list[str]:
    """The options of a config group: its YAML files in the installed configs and in ``config_dirs``."""
    from importlib.resources import files

    from ragtrack.pipeline.config import CONFIG_MODULE

    options = {entry.name.removesuffix(".yaml") for entry in _entries(files(CONFIG_MODULE).joinpath(group))}
    for folder in config_dirs:
        options |= {entry.name.removesuffix(".yaml") for entry in _entries(Path(folder) / group)}
    return sorted(options)


def _entries(folder: Any) -> list:
    return [entry for entry in folder.iterdir() if entry.name.endswith(".yaml")] if folder.is_dir() else []


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
