"""Tokens, cost and latency of a job's LLM calls, per query, stage and system (docs/answers.md, "Cost
and tokens").

Every LLM component asks through :class:`~ragtrack.core.llm.ChatClient`, which records a
:class:`~ragtrack.core.llm.ChatCall` per prompt that got a reply. A :class:`Meter` takes them after each
step of the job and files each under the system it was made for and its stage: ``rewriter`` and
``reranker`` (the calls that made a system's run; a system made from another counts its input's too),
``generator``, an evaluator's config key (``llm_judge``, ...) and ``pairwise_judge`` (filed under the
pair, ``a vs b``). The robustness study's reruns (``pipeline.execution.robustness``) file theirs under
``robustness/<perturbation>/<stage>`` (:meth:`Meter.rerun`), apart from the main run's stages. Figures
of a set of calls (:func:`figures`):

- ``calls``: prompts answered; ``cached``: those answered from the cache (no new spend); ``sent``:
  the others (requests that got a reply; retries are not counted again);
- ``prompt_tokens``, ``completion_tokens``: the sums of the server's ``usage`` figures over the calls
  whose usage is known, cached ones with their original figures; ``unknown_usage``: calls without
  them (a server that reports no usage, or replies cached before ragtrack stored usage): the sums
  leave them out, so they are lower bounds whenever ``unknown_usage`` > 0, and absent (blank in
  usage.csv) where no call's figure is known;
- ``new_prompt_tokens``, ``new_completion_tokens``, ``new_cost``: the same over the sent calls only:
  what this run spent;
- ``cost`` = Σ (price_prompt · prompt_tokens + price_completion · completion_tokens) / 10⁶ over the
  calls, with the stage's prices per million tokens (``price_prompt``, ``price_completion``); absent
  without prices; ``cost_per_query`` = cost / queries;
- ``seconds_per_request``: mean wall time of the sent calls (retries and back-off included).

:func:`by_stage` gives them per stage and for ``all`` stages of the main run (a robustness study leaves
these as they were); with robustness reruns also for ``robustness/all`` (every rerun's calls) and
``total`` (every call of the job: ``all`` + ``robustness/all``).

A dry run (``pipeline.execution.dryrun``) files planned calls the same way: estimated prompt tokens, ``max_tokens``
as completion tokens, and ``bound`` where the prompt could not be known yet.
"""

from __future__ import annotations

import html
import textwrap
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.core.files import write_atomically
from ragtrack.core.llm import ChatClient, chat_clients
from ragtrack.pipeline.analysis.comparison_tables import TEXT_WIDTH
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.records.csv_files import csv_text

COLUMNS = (
    "system",
    "stage",
    "qid",
    "chain",
    "cached",
    "planned",
    "bound",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "seconds",
)
FILE = "usage.csv"  # per query and stage: a system's (its folder) and the job's (with a system column)
ALL = "all"  # the stage name of every stage of the main run together
ROBUSTNESS = "robustness"  # the robustness study's reruns file their calls under robustness/<perturbation>/<stage>
TOTAL = "total"  # the stage name of every call, robustness reruns included (only with reruns)
PER_QUERY_FIGURES = ("calls", "cached", "unknown_usage", "prompt_tokens", "completion_tokens", "cost", "seconds")


def query_of(prompt_id: Hashable) -> str:
    """The query a prompt belongs to: its id, or the first item of a tuple id (``(qid, docid)``)."""
    return str(prompt_id[0] if isinstance(prompt_id, tuple) else prompt_id)


PAIRWISE = "(pairwise)"  # what pairwise judges' calls are filed under (no system has parentheses in its name)


@dataclass
class Meter:
    """The job's chat calls, one row per call (:data:`COLUMNS`); ``stages``: the stage name of each
    component given a name by :meth:`name` (an evaluator's config key); ``prefix``: put before every
    stage name this meter files (:meth:`rerun`)."""

    rows: list[dict] = field(default_factory=list)
    stages: dict[int, str] = field(default_factory=dict)
    prefix: str = ""

    def rerun(self, perturbation: str) -> Meter:
        """This meter (the same rows and stage names) filing under ``robustness/<perturbation>/<stage>``:
        a robustness rerun's calls, kept apart from the main run's."""
        return replace(self, prefix=f"{ROBUSTNESS}/{perturbation}/")

    def name(self, stage: str, component: object) -> object:
        """Name ``component``'s stage (returns the component)."""
        self.stages[id(component)] = stage
        return component

    def stage_of(self, component: object) -> str:
        return self.stages.get(id(component), type(component).__name__)

    def collect(
        self,
        system: str,
        stage: str,
        components: Iterable[object],
        chain: bool = False,
        bound: Callable[[str], bool] | None = None,
    ) -> int:
        """File the calls recorded by the chat clients of ``components`` since the last take under
        ``system`` and ``stage``; ``chain``: the calls made the system's run (they count for the systems
        made from it too); ``bound(qid)``: that query's prompts are guesses (built from a stand-in), so each
        of its calls is an upper bound, and a reply cache hit counts to send (the real prompt may differ).
        Returns how many calls were filed."""
        taken = 0
        for component in components:
            for client in chat_clients(component):
                for call in client.take_calls():
                    qid = query_of(call.prompt_id)
                    guessed = bool(bound and bound(qid))
                    hit = (
                        call.cached and not call.planned
                    )  # a reply from the cache (not a prompt the dry run counted already)
                    self._add(
                        system,
                        stage,
                        qid,
                        chain,
                        call.cached and not (guessed and hit),
                        call.planned or guessed,
                        guessed,
                        call.prompt_tokens,
                        call.completion_tokens,
                        client,
                        call.seconds,
                    )
                    taken += 1
        return taken

    def add_bound(self, system: str, stage: str, client: ChatClient, calls: int, chain: bool = False) -> None:
        """``calls`` planned calls whose prompts cannot be known yet: upper bounds, prompt tokens
        unknown, completion tokens ``max_tokens``."""
        for _ in range(max(calls, 0)):
            self._add(system, stage, "", chain, False, True, True, None, client.max_tokens, client, 0.0)

    def _add(
        self,
        system: str,
        stage: str,
        qid: str,
        chain: bool,
        cached: bool,
        planned: bool,
        bound: bool,
        prompt_tokens: int | None,
        completion_tokens: int | None,
        client: ChatClient,
        seconds: float,
    ) -> None:
        self.rows.append(
            dict(
                zip(
                    COLUMNS,
                    (
                        system,
                        self.prefix + stage,
                        qid,
                        chain,
                        cached,
                        planned,
                        bound,
                        prompt_tokens,
                        completion_tokens,
                        client.cost(prompt_tokens, completion_tokens),
                        seconds,
                    ),
                )
            )
        )

    def table(self) -> pd.DataFrame:
        table = pd.DataFrame(self.rows, columns=list(COLUMNS))
        for column in ("prompt_tokens", "completion_tokens"):
            table[column] = table[column].astype("Int64")
        table["cost"] = table["cost"].astype(float)
        return table


def figures(calls: pd.DataFrame, queries: int | None = None) -> dict[str, int | float]:
    """The figures of a set of calls (module docstring); token sums over the calls with known usage,
    cost over those with a cost; ``cost`` and ``seconds_per_request`` absent when nothing has one.
    Counts (calls, tokens) are ints, cost and seconds floats."""
    cached = calls["cached"].astype(bool)
    known = calls["prompt_tokens"].notna() & calls["completion_tokens"].notna()
    new = calls[~cached]
    result = {
        "calls": len(calls),
        "sent": len(new),
        "cached": int(cached.sum()),
        "unknown_usage": int((~known).sum()),
        "prompt_tokens": _total(calls["prompt_tokens"]),
        "completion_tokens": _total(calls["completion_tokens"]),
        "new_prompt_tokens": _total(new["prompt_tokens"]),
        "new_completion_tokens": _total(new["completion_tokens"]),
    }
    if calls["cost"].notna().any():
        result |= {"cost": _total(calls["cost"], float), "new_cost": _total(new["cost"], float)}
        if queries:
            result["cost_per_query"] = result["cost"] / queries
    if len(new) and not calls["planned"].any():
        result["seconds_per_request"] = float(new["seconds"].mean())
    return {name: value for name, value in result.items() if value is not None}


def _total(values: pd.Series, kind: type = int) -> int | float | None:
    """The sum of the known values as ``kind`` (int: token counts; float: costs); ``None`` (the figure
    is left out) when there are values and none is known: unknown, never 0. No values (no call sent)
    sum to 0."""
    return None if len(values) and values.isna().all() else kind(values.sum())


def by_stage(calls: pd.DataFrame, queries: int | None = None) -> dict[str, dict[str, int | float]]:
    """:func:`figures` per stage and of all stages of the main run (:data:`ALL`); with robustness
    reruns also of all of theirs (``robustness/all``) and of every call (:data:`TOTAL`); empty without
    calls."""
    if calls.empty:
        return {}
    stages = {stage: figures(group, queries) for stage, group in calls.groupby("stage", sort=False)}
    rerun = is_rerun(calls)
    stages[ALL] = figures(calls[~rerun], queries)
    if rerun.any():
        stages |= {f"{ROBUSTNESS}/{ALL}": figures(calls[rerun], queries), TOTAL: figures(calls, queries)}
    return stages


def is_rerun(calls: pd.DataFrame) -> pd.Series:
    """Which calls a robustness rerun made (:meth:`Meter.rerun`)."""
    return calls["stage"].str.startswith(f"{ROBUSTNESS}/")


def ancestors(system: str, inputs: Mapping[str, list[str]]) -> set[str]:
    """The systems ``system`` is made from, directly or through others (``inputs``: by system)."""
    found, todo = set(), list(inputs.get(system, []))
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo += inputs.get(name, [])
    return found


def system_calls(calls: pd.DataFrame, system: str, inputs: Mapping[str, list[str]]) -> pd.DataFrame:
    """A system's calls: those filed under it and the calls that made the runs it is made from."""
    return calls[
        (calls["system"] == system) | (calls["chain"].astype(bool) & calls["system"].isin(ancestors(system, inputs)))
    ]


def per_query(calls: pd.DataFrame, keys: tuple[str, ...] = ("stage", "qid")) -> pd.DataFrame:
    """Per query and stage (and ``keys``): calls, cached, unknown_usage, token sums, cost and
    seconds (of the sent calls)."""
    frame = calls.assign(
        calls=1,
        unknown_usage=(calls["prompt_tokens"].isna() | calls["completion_tokens"].isna()).astype(int),
        cached=calls["cached"].astype(int),
        seconds=calls["seconds"].where(~calls["cached"].astype(bool), 0.0),
    )
    grouped = frame.groupby(list(keys))  # sorted: replies arrive in any order, the file is the same
    table = grouped[["calls", "cached", "unknown_usage", "seconds"]].sum()
    for column in ("prompt_tokens", "completion_tokens", "cost"):  # blank, not 0, where no call's figure is known
        table[column] = grouped[column].sum(min_count=1)
    table["seconds"] = table["seconds"].round(6)
    table = table.reset_index()
    return (
        table[[*keys, *PER_QUERY_FIGURES]]
        if table["cost"].notna().any()
        else table[[*keys, *[f for f in PER_QUERY_FIGURES if f != "cost"]]]
    )


def usage_csv(calls: pd.DataFrame, keys: tuple[str, ...] = ("stage", "qid")) -> str:
    return csv_text(per_query(calls, keys))


def metrics(stages: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """MLflow metrics of :func:`by_stage`: ``llm/<stage>/<figure>`` (``llm/all/cost``)."""
    return {
        layout.usage_key(stage, name): value
        for stage, values in stages.items()
        for name, value in values.items()
        if np.isfinite(value)
    }


@dataclass
class Usage:
    """A job's usage: its calls and each system's inputs (to count a chain's calls)."""

    calls: pd.DataFrame
    inputs: dict[str, list[str]]
    queries: int

    def systems(self) -> dict[str, dict[str, dict[str, float]]]:
        """:func:`by_stage` of each system that made or needed calls (its chain included)."""
        names = list(dict.fromkeys(n for n in self.calls["system"] if n in self.inputs))
        names += [n for n in self.inputs if n not in names and not system_calls(self.calls, n, self.inputs).empty]
        return {name: by_stage(system_calls(self.calls, name, self.inputs), self.queries) for name in names}

    def section(self) -> dict:
        """results.json ``usage``: ``systems`` (each with its chain) and ``job`` (every call once, the
        pairwise judges' too); empty without calls."""
        if self.calls.empty:
            return {}
        return {"systems": self.systems(), "job": by_stage(self.calls, self.queries)}


def summary_table(calls: pd.DataFrame, dry: bool = False) -> pd.DataFrame:
    """Text cells, a row per (system or pair, stage) in the order of the calls and a total: calls
    (``≤ n`` where some are upper bounds), cached, prompt and completion tokens, cost and seconds per
    request (a real run) - every call counted once (a system's input's calls under that input); the
    robustness reruns of a stage in one row, ``robustness/<stage>``, all perturbations together."""
    shown = calls.assign(stage=calls["stage"].str.replace(rf"^{ROBUSTNESS}/[^/]*/", f"{ROBUSTNESS}/", regex=True))
    rows = {}
    for (system, stage), group in [*shown.groupby(["system", "stage"], sort=False), ((TOTAL, ""), shown)]:
        rows[(system, stage)] = _cells(group, dry)
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["system", "stage"])
    return table.loc[:, (table != "").any()]


def _cells(group: pd.DataFrame, dry: bool) -> dict[str, str]:
    cached = group["cached"].astype(bool)
    spend = group[~cached] if dry else group
    bound = "≤ " if dry and spend["bound"].any() else ""

    def tokens(column: str) -> str:
        values = spend[column]
        unknown = int(values.isna().sum())
        text = f"{bound}{int(values.sum()):,}" if unknown < len(values) or not len(values) else "?"
        return text + (f" (+{unknown} ?)" if unknown and unknown < len(values) else "")

    cells = {
        "calls" if not dry else "to send": f"{bound}{len(spend):,}",
        "cached": f"{int(cached.sum()):,}",
        "prompt tokens": tokens("prompt_tokens"),
        "completion tokens": tokens("completion_tokens"),
        "cost": f"{bound}{spend['cost'].sum():.4g}" if spend["cost"].notna().any() else "",
    }
    if not dry:
        sent = group[~cached]
        cells["s/request"] = f"{sent['seconds'].mean():.3f}" if len(sent) else ""
    return cells


def summary_text(calls: pd.DataFrame, dry: bool = False) -> str:
    """:func:`summary_table` as text with its notes wrapped at 100 columns ("" without calls)."""
    if calls.empty:
        return ""
    table = summary_table(calls, dry)
    return table.to_string() + "\n" + "\n".join(wrapped(note) for note in notes(calls, table.columns, dry))


def wrapped(text: str) -> str:
    """``text`` in lines of at most 100 columns (the terminal summary's width), later lines indented."""
    return textwrap.fill(text, TEXT_WIDTH, subsequent_indent="  ", break_on_hyphens=False, break_long_words=False)


def summary_html(calls: pd.DataFrame) -> str:
    """:func:`summary_table` as an HTML table with its notes, for report.html."""
    table = summary_table(calls)
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in ["system", "stage", *table.columns])
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in [*index, *cells]) + "</tr>"
        for index, cells in zip(table.index, table.to_numpy())
    )
    return f"<table><tr>{head}</tr>{rows}</table>" + "".join(
        f'<p class="note">{html.escape(n)}</p>' for n in notes(calls, table.columns)
    )


def notes(calls: pd.DataFrame, shown: Iterable[str], dry: bool = False) -> list[str]:
    """The notes under :func:`summary_table`, each column's only where it is ``shown`` (a column blank in
    every row is left out: no cost without prices, no s/request when every reply was cached)."""
    shown = set(shown)
    cost = "; cost: with the stages' price_prompt / price_completion per million tokens" if "cost" in shown else ""
    apart = "dry_run.json" if dry else "usage.csv, results.json"
    reruns = (
        [
            f"{ROBUSTNESS}/<stage>: the stage's calls in the robustness study's reruns on perturbed queries, all perturbations "
            f"together (each apart: {apart}); total: the main run's calls and the reruns'"
        ]
        if is_rerun(calls).any()
        else []
    )
    if dry:
        return [
            "to send: requests the job would send (the rest are answered from the reply or run cache); ≤: an upper bound, where "
            "prompts depend on replies that are not cached yet (answers, rewritten queries, reranked rankings)",
            "prompt tokens: characters / 4 of each prompt (an estimate; ? where the prompt cannot be built yet); completion tokens: "
            f"max_tokens per request (? where it is not set){cost}",
        ] + reruns
    seconds = "; s/request: mean wall time of the requests sent" if "s/request" in shown else ""
    return [
        f"tokens as the server reported them (cached replies with their original usage; (+n ?): n replies without usage){cost}{seconds}",
        "every call once: a system made from another (a reranker's) counts its input's calls in results.json "
        "and MLflow, not here; details per query: usage.csv",
    ] + reruns


def write(usage: Usage, output_dir: Path) -> None:
    """``usage.csv`` of the job (every call once, a ``system`` column) and of each system with calls
    (its chain's included) in ``systems/<name>/``."""
    if usage.calls.empty:
        return
    write_atomically(output_dir / FILE, usage_csv(usage.calls, ("system", "stage", "qid")))
    for name in usage.inputs:
        own = system_calls(usage.calls, name, usage.inputs)
        if not own.empty:
            write_atomically(output_dir / "systems" / name / FILE, usage_csv(own))
