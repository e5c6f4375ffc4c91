"""Typed settings, the base of every component's settings model: value types that read as their own
description in errors and in docs/configuration.md, :class:`Section` (every key declared, numbers
finite), :class:`Open` (a plugin's block), the shared blocks (tokenizer, chat endpoint) and
:class:`ComponentSettings`, the keys every component has.

Each component declares its settings model beside its class (``settings_schema``): that model is the one
home of its defaults, and the validated model is what builds it (``ragtrack.pipeline.registry``). The
job-level checks, with their one-line errors, are ``ragtrack.pipeline.configuration.settings``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, field_validator, model_validator

from ragtrack.core.errors import RagtrackError, did_you_mean

M = TypeVar("M", bound=BaseModel)

# ----------------------------------------------------------------------------- value types
# Each type reads as its own description in error messages and in the table of docs/configuration.md.
Count = Annotated[int, Strict(), Field(ge=1)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
Integer = Annotated[int, Strict()]
NonNegative = Annotated[float, Strict(), Field(ge=0)]
Positive = Annotated[float, Strict(), Field(gt=0)]
Fraction = Annotated[float, Strict(), Field(ge=0, le=1)]
Flag = Annotated[bool, Strict()]
Text = Annotated[str, Field(min_length=1)]
Port = Annotated[int, Strict(), Field(ge=1, le=65535)]
EnvName = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="the NAME of an environment variable (letters, digits, _), e.g. OPENAI_API_KEY",
    ),
]
MAX_NAME_LENGTH = (
    100  # of a system or dataset name: MLflow keys (<system>/<metric>: at most 250 characters) and file names hold it
)
SystemName = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+\-]*$",
        max_length=MAX_NAME_LENGTH,
        description=f"a system name (letters, digits, _ . + -, starting with a letter or digit; "
        f"at most {MAX_NAME_LENGTH} characters)",
    ),
]
MetricName = Annotated[str, Field(min_length=1, description="a metric name (ragtrack metrics lists them)")]
Normalization = Literal["none", "minmax", "zscore", "max", "sum", "rank", "borda", "minmax-inverted"]
REGEX_TOKEN_PATTERN = (
    r"(?u)\b\w\w+\b"  # the regex analyzer's token: a run of 2+ word characters (scikit-learn's default)
)


class InputLocation:
    """Marks a setting naming a file or folder the job reads. Before a job runs, a relative one is made
    absolute against the folder the command runs in (``pipeline.configuration.settings.absolute_inputs``), so the
    logged config.yaml names the same file from any folder (``ragtrack reproduce``, ``compare``).
    ``or_name``: the value may also be a name (a model on a hub, a shipped rubric): it is taken as a
    path only where such a file or folder exists."""

    def __init__(self, or_name: bool = False):
        self.or_name = or_name


InputPath = Annotated[str, Field(min_length=1), InputLocation()]
NameOrPath = Annotated[str, Field(min_length=1), InputLocation(or_name=True)]


class ItemError(ValueError):
    """A problem with item ``index`` of a list-valued key (the message names that item)."""

    def __init__(self, index: int, allowed: str):
        super().__init__(allowed)
        self.index = index


class Section(BaseModel):
    """A block of settings: every key declared, numbers finite; a number typed where text belongs is
    read as text (``run_name=2024``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, coerce_numbers_to_str=True)


class Open(Section):
    """A plugin's block: the common keys are checked, any other key is the plugin's."""

    model_config = ConfigDict(extra="allow")


# ----------------------------------------------------------------------------- shared blocks
class TokenizerSettings(Section):
    """The lexical tokenizer (ragtrack.core.text.Tokenizer). ``analyzer``: ``regex`` (``pattern``
    picks the tokens) or ``lucene`` (Lucene's StandardTokenizer with its English possessive filter and
    Java lower-casing, ragtrack.core.lucene); ``stopwords`` and ``stemmer`` apply to either: ``lucene``
    names Lucene's list (33 words) and Lucene's Porter stemmer."""

    analyzer: Literal["regex", "lucene"] = "regex"
    normalize: Literal["nfkc", "nfc", "none"] = "nfkc"
    lowercase: Flag = True
    stopwords: Literal["en", "lucene"] | list[str] | None = "en"
    stemmer: Text | None = Field(
        "english", description="lucene (Lucene's Porter stemmer), a PyStemmer language (e.g. english) or null"
    )
    pattern: Text = REGEX_TOKEN_PATTERN

    @field_validator("stemmer")
    @classmethod
    def _known_stemmer(cls, stemmer: str | None) -> str | None:
        import Stemmer

        if stemmer is not None and stemmer != "lucene" and stemmer not in Stemmer.algorithms():
            raise ValueError(
                f"lucene, a PyStemmer language (one of {len(Stemmer.algorithms())}, e.g. english) or null"
                f"{did_you_mean(stemmer, ['lucene', *Stemmer.algorithms()])}"
            )
        return stemmer

    @model_validator(mode="after")
    def _pattern_for_regex_only(self) -> "TokenizerSettings":
        if self.analyzer == "lucene" and self.pattern != REGEX_TOKEN_PATTERN:
            raise ValueError(
                "pattern applies to analyzer regex only (analyzer lucene splits text by Unicode's word rules)"
            )
        return self


LOCAL_ENDPOINT = "http://127.0.0.1:8000/v1"  # an OpenAI-compatible server on this machine (vLLM's default port)
HttpURL = Annotated[str, Field(pattern=r"^https?://\S+$", description="an http:// or https:// URL")]


class ChatSettings(Section):
    """An OpenAI-compatible endpoint (ragtrack.core.llm.ChatClient)."""

    base_url: HttpURL
    model: Text
    api_key_env: EnvName | None = None
    timeout: Positive = 60.0
    max_retries: NonNegativeInt = 4
    backoff: NonNegative = 1.0
    max_backoff: NonNegative = 30.0
    concurrency: Count = 4
    parameters: dict[str, Any] = {}
    cache_dir: Text | None = None
    system_prompt: str | None = None
    prompt: Text
    price_prompt: NonNegative | None = Field(
        None, description="price per million prompt tokens (any currency), or null"
    )
    price_completion: NonNegative | None = Field(
        None, description="price per million completion tokens (any currency), or null"
    )

    def client_settings(self) -> dict[str, Any]:
        """The keyword arguments of ``ChatClient``: these settings less the ``prompt``."""
        return self.model_dump(include=set(ChatSettings.model_fields) - {"prompt"})


# ----------------------------------------------------------------------------- components
class ComponentSettings(Open):
    """Keys every component may have: ``type`` (an entry point) or a ``_target_``."""

    type: Text | None = None
    target: Text | None = Field(None, alias="_target_")


class SystemSettings(ComponentSettings):
    """Keys of every stage that makes a system: ``alias``, the system's row label in comparisons and
    benchmark tables (``BM25 (flat)``; default the system name). A label only: no result or cache
    key changes with it."""

    alias: Annotated[str, Field(min_length=1, max_length=MAX_NAME_LENGTH)] | None = None


class StageSettings(SystemSettings):
    """A stage that reads one system (a reranker, a rewriter): ``input`` names it; ``system`` names the
    new system (default ``<input>+<config key>``, e.g. ``bm25+cross_encoder``)."""

    input: SystemName
    system: SystemName | None = None


def validated(model: type[M], values: dict[str, Any], owner: str) -> M:
    """``values`` validated by ``model``, for a component built from Python: the first problem is one
    line naming ``owner`` and the key (``ragtrack run`` checks configs earlier, with the same models)."""
    try:
        return model.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
    where, message = ".".join(map(str, error["loc"])), error["msg"].removeprefix("Value error, ")
    if not where:  # a check of several keys together: its message names them
        raise RagtrackError(f"{owner}: {message}")
    detail = {"missing": "a value is required", "extra_forbidden": "no such key"}.get(
        error["type"], f"{error['input']!r} is not allowed: {message[:1].lower()}{message[1:]}"
    )
    raise RagtrackError(f"{owner}: {where}: {detail}")
