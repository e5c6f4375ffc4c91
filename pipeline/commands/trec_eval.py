"""``ragtrack trec_eval``: trec_eval 10.0 as a drop-in, its options as it spells them and its output
line for line (``measure<TAB>qid<TAB>value``, the name padded to 22 columns, ``%6.4f`` and ``%ld``).

The measures are the metric registry's (``evaluators/ranking.py`` and ``evaluators/trec_measures.py``);
this module reads trec_eval's command line (getopt, as trec_eval parses it), picks and parameterises the
measures as ``-m`` names them, and accumulates and prints as trec_eval's ``meas_*.c`` do: queries are
the judged ones in ``strcmp`` order, a mean is the sum in that order divided by ``num_q``, the counts
(``num_ret``, ``num_rel_ret``, ...) are summed, ``gm_map`` and ``gm_bpref`` are exp(mean of logs).

Where trec_eval 10 stops, so does this, with one line: a judged query missing from the run without
``-c`` (trec_eval prints "result qid not found in qrels" and exits 4). ``-c`` scores such a query as
trec_eval does, on a ranking of one unjudged document, ``num_ret``, ``utility``, ``relstring``,
``unj_*`` and ``rbp_resid`` then set to 0. ``-R qrels_jg`` scores each judgment group on its own row
of the grade matrix; ``-R prefs`` and ``-R qrels_prefs`` read preference judgments
(``evaluators/trec_prefs.py``). Not done: ``-D`` (debug output), ``-T`` other than ``trec_results``,
``yaap`` and ``ndcg_p`` (in none of trec_eval's nicknames). A run file ``-`` is read from standard input.
"""

from __future__ import annotations

import functools
import getopt
import math
import operator
import re
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from ragtrack.core.data import load_preferences, load_qrels, load_qrels_groups
from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.files import read_lines
from ragtrack.core.runs import RunColumns, read_run_scores, run_tag
from ragtrack.evaluators import ranking
from ragtrack.evaluators import trec_measures as trec
from ragtrack.evaluators import trec_prefs as prefs
from ragtrack.evaluators.ranking import RankedGrades

SHORT_OPTIONS = "hvqm:cl:nD:JN:M:R:T:oZ:"
LONG_OPTIONS = [
    "help",
    "version",
    "query_eval_wanted",
    "measure=",
    "complete_rel_info_wanted",
    "level_for_rel=",
    "nosummary",
    "Debug_level=",
    "Judged_docs_only",
    "Number_docs_in_coll=",
    "Max_retrieved_per_topic=",
    "Rel_info_format=",
    "Results_format=",
    "Output_old_results_format",
    "Zscore=",
]
LONG_TO_SHORT = {
    "--help": "-h",
    "--version": "-v",
    "--query_eval_wanted": "-q",
    "--measure": "-m",
    "--complete_rel_info_wanted": "-c",
    "--level_for_rel": "-l",
    "--nosummary": "-n",
    "--Debug_level": "-D",
    "--Judged_docs_only": "-J",
    "--Number_docs_in_coll": "-N",
    "--Max_retrieved_per_topic": "-M",
    "--Rel_info_format": "-R",
    "--Results_format": "-T",
    "--Output_old_results_format": "-o",
    "--Zscore": "-Z",
}
USAGE = "usage: ragtrack trec_eval [-q] [-c] [-n] [-J] [-l N] [-M N] [-N N] [-Z FILE] {-m measure[.params]}* QRELS RUN"
MISSING_ZSCORE = -1000000.0
NAN = -math.nan  # what 0.0 / 0.0 gives in C on x86: a NaN with the sign bit, printed "-nan"
LONG_MAX = 2**63 - 1


def c_long(text: str) -> int:
    """C's ``atol``: the leading integer of ``text`` (after blanks), 0 if none."""
    match = re.match(r"\s*([+-]?\d+)", text)
    return int(match.group(1)) if match else 0


def c_double(text: str) -> float:
    """C's ``atof`` for decimal numbers: the leading number of ``text``, 0.0 if none."""
    match = re.match(r"\s*([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)", text)
    return float(match.group(1)) if match else 0.0


# --- the measures, in trec_eval's order (measures.c) ---------------------------------------------


@dataclass(frozen=True)
class Measure:
    """One trec_eval measure: ``style`` says how it is printed and summed (``mean``, ``sum``: a count
    printed as an integer, ``geometric``: exp(mean), never per query, ``text``: relstring, ``runid``,
    ``num_q``); ``params``: how ``-m name.params`` is read (``cutoffs``, ``fractions``, ``numbers``,
    ``pairs`` or ``none``) and ``default`` its default; ``compute(m, params, context)`` -> values."""

    name: str
    style: str
    params: str
    compute: Callable[..., np.ndarray | list]
    default: tuple = ()


def _fixed(function: Callable[[RankedGrades], np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda m, params, context: function(m, None)


def _per_cutoff(function: Callable[[RankedGrades, int], np.ndarray]) -> Callable[..., list]:
    return lambda m, params, context: [function(m, k) for k in params]


def _gains(pairs: Sequence[tuple[str, float]]) -> dict[int, float]:
    """The ``level=gain`` pairs whose name is an integer (gain_init.c's ``valid_int``)."""
    return {int(name): value for name, value in pairs if re.fullmatch(r"[+-]?\d+", name)}


def _persistence(pairs: Sequence[tuple[str, float]]) -> float:
    return next((value for name, value in reversed(pairs) if name == "p"), 0.9)


def _with_gains(function: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    return lambda m, params, context: function(m, None, _gains(params))


def _group_mean(values: np.ndarray, groups: list[np.ndarray]) -> np.ndarray:
    """Per query the values of its rows (one per judgment group) summed in group order, divided by their
    number (m_*_avgjg.c)."""
    return np.array([functools.reduce(operator.add, values[rows].tolist(), 0.0) / max(len(rows), 1) for rows in groups])


def _per_group(compute: Callable[..., np.ndarray | list]) -> Callable[..., np.ndarray | list]:
    """A measure over judgment groups (``-R qrels_jg``): ``compute`` per query and group, averaged per query."""

    def averaged(m: RankedGrades, params: tuple, context: Context) -> np.ndarray | list:
        values = compute(m, params, context)
        return (
            [_group_mean(column, context.groups) for column in values]
            if isinstance(values, list)
            else _group_mean(values, context.groups)
        )

    return averaged


def _preferences(function: Callable[..., float], *arguments: object) -> Callable[..., np.ndarray]:
    """A preference measure (``-R prefs``): ``function(query, *arguments)`` for each query's preferences."""
    return lambda m, params, context: np.array([function(query, *arguments) for query in context.preferences])


CUTOFFS = (5, 10, 15, 20, 30, 100, 200, 500, 1000)
MEASURES: tuple[Measure, ...] = (
    Measure("runid", "runid", "none", lambda m, params, context: np.zeros(context.queries)),
    Measure("num_q", "num_q", "none", lambda m, params, context: np.ones(context.queries)),
    Measure("num_ret", "sum", "none", _fixed(trec.num_ret)),
    Measure("num_rel", "sum", "none", _fixed(trec.num_rel)),
    Measure("num_rel_ret", "sum", "none", _fixed(ranking.num_rel_ret)),
    Measure("map", "mean", "none", _fixed(ranking.average_precision)),
    Measure("gm_map", "geometric", "none", _fixed(ranking.log_average_precision)),
    Measure("Rprec", "mean", "none", _fixed(ranking.r_precision)),
    Measure("bpref", "mean", "none", _fixed(ranking.bpref)),
    Measure("recip_rank", "mean", "none", _fixed(ranking.reciprocal_rank)),
    Measure(
        "iprec_at_recall",
        "mean",
        "fractions",
        lambda m, params, context: list(trec.interpolated_precision(m, params, NAN).T),
        trec.ELEVEN_POINTS,
    ),
    Measure("P", "mean", "cutoffs", _per_cutoff(ranking.precision), CUTOFFS),
    Measure(
        "relstring", "text", "numbers", lambda m, params, context: trec.relevance_strings(m, int(params[0])), (10,)
    ),
    Measure("recall", "mean", "cutoffs", _per_cutoff(ranking.recall), CUTOFFS),
    Measure("infAP", "mean", "none", _fixed(trec.infap)),
    Measure("gm_bpref", "geometric", "none", _fixed(ranking.log_bpref)),
    Measure(
        "Rprec_mult",
        "mean",
        "fractions",
        _per_cutoff(trec.r_precision_multiple),
        (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
    ),
    Measure(
        "utility",
        "mean",
        "numbers",
        lambda m, params, context: trec.utility(m, None, params, context.collection),
        (1.0, -1.0, 0.0, 0.0),
    ),
    Measure(
        "11pt_avg",
        "mean",
        "numbers",
        lambda m, params, context: trec.eleven_point_average(m, None, params, NAN),
        trec.ELEVEN_POINTS,
    ),
    Measure("binG", "mean", "none", _fixed(trec.binary_g)),
    Measure("G", "mean", "pairs", _with_gains(trec.g_measure)),
    Measure("dcg", "mean", "pairs", _with_gains(trec.gain_dcg)),
    Measure("ideal_dcg", "mean", "pairs", _with_gains(trec.ideal_dcg)),
    Measure("ndcg", "mean", "pairs", _with_gains(trec.gain_ndcg)),
    Measure("ndcg_rel", "mean", "pairs", _with_gains(trec.ndcg_at_relevant)),
    Measure("Rndcg", "mean", "pairs", _with_gains(trec.r_ndcg)),
    Measure("ndcg_cut", "mean", "cutoffs", _per_cutoff(ranking.ndcg), CUTOFFS),
    Measure("map_cut", "mean", "cutoffs", _per_cutoff(ranking.average_precision), CUTOFFS),
    Measure("relative_P", "mean", "cutoffs", _per_cutoff(trec.relative_precision), CUTOFFS),
    Measure("success", "mean", "cutoffs", _per_cutoff(ranking.hit), (1, 5, 10)),
    Measure("set_P", "mean", "none", _fixed(trec.set_precision)),
    Measure("set_relative_P", "mean", "none", _fixed(trec.set_relative_precision)),
    Measure("set_recall", "mean", "none", _fixed(trec.set_recall)),
    Measure("set_map", "mean", "none", _fixed(trec.set_map)),
    Measure("set_F", "mean", "numbers", lambda m, params, context: trec.set_f(m, None, params[0]), (1.0,)),
    Measure("num_nonrel_judged_ret", "sum", "none", _fixed(trec.num_nonrel_judged_ret)),
    Measure("prefs_num_prefs_poss", "sum", "none", _preferences(prefs.num_possible)),
    Measure("prefs_num_prefs_ful", "sum", "none", _preferences(prefs.num_fulfilled)),
    Measure("prefs_num_prefs_ful_ret", "sum", "none", _preferences(prefs.num_fulfilled, "retrieved")),
    Measure("prefs_simp", "mean", "none", _preferences(prefs.simple, "all")),
    Measure("prefs_pair", "mean", "none", _preferences(prefs.pairs, "all")),
    Measure("prefs_avgjg", "mean", "none", _preferences(prefs.average_over_groups, "all")),
    Measure("prefs_avgjg_Rnonrel", "mean", "none", _preferences(prefs.average_over_groups_rnonrel, False)),
    Measure("prefs_simp_ret", "mean", "none", _preferences(prefs.simple, "retrieved")),
    Measure("prefs_pair_ret", "mean", "none", _preferences(prefs.pairs, "retrieved")),
    Measure("prefs_avgjg_ret", "mean", "none", _preferences(prefs.average_over_groups, "retrieved")),
    Measure("prefs_avgjg_Rnonrel_ret", "mean", "none", _preferences(prefs.average_over_groups_rnonrel, True)),
    Measure("prefs_simp_imp", "mean", "none", _preferences(prefs.simple, "implied")),
    Measure("prefs_pair_imp", "mean", "none", _preferences(prefs.pairs, "implied")),
    Measure("prefs_avgjg_imp", "mean", "none", _preferences(prefs.average_over_groups, "implied")),
    Measure("map_avgjg", "mean", "none", _per_group(_fixed(ranking.average_precision))),
    Measure("P_avgjg", "mean", "cutoffs", _per_group(_per_cutoff(ranking.precision)), CUTOFFS),
    Measure(
        "Rprec_mult_avgjg",
        "mean",
        "fractions",
        _per_group(_per_cutoff(trec.r_precision_multiple)),
        (0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0),
    ),
    Measure("rbp", "mean", "pairs", lambda m, params, context: trec.rbp(m, None, _persistence(params), _gains(params))),
    Measure("rbp_resid", "mean", "pairs", lambda m, params, context: trec.rbp_residual(m, None, _persistence(params))),
    Measure("unj", "mean", "cutoffs", _per_cutoff(trec.unjudged), (5, 10, 20)),
)
BY_NAME = {measure.name: measure for measure in MEASURES}
NICKNAMES = {
    "official": (
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
        "gm_map",
        "Rprec",
        "bpref",
        "recip_rank",
        "iprec_at_recall",
        "P",
    ),
    "all_trec": (
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "map",
        "gm_map",
        "Rprec",
        "bpref",
        "recip_rank",
        "iprec_at_recall",
        "P",
        "relstring",
        "recall",
        "unj",
        "rbp",
        "rbp_resid",
        "infAP",
        "gm_bpref",
        "utility",
        "11pt_avg",
        "ndcg",
        "relative_P",
        "Rprec_mult",
        "success",
        "map_cut",
        "ndcg_cut",
        "ndcg_rel",
        "Rndcg",
        "binG",
        "G",
        "set_P",
        "set_recall",
        "set_relative_P",
        "set_map",
        "set_F",
        "num_nonrel_judged_ret",
    ),
    "set": (
        "runid",
        "num_q",
        "num_ret",
        "num_rel",
        "num_rel_ret",
        "utility",
        "set_P",
        "set_recall",
        "set_relative_P",
        "set_map",
        "set_F",
    ),
    "qrels_jg": ("runid", "num_q", "map_avgjg", "P_avgjg", "Rprec_mult_avgjg"),
    "all_prefs": (
        "runid",
        "num_q",
        "prefs_num_prefs_poss",
        "prefs_num_prefs_ful",
        "prefs_num_prefs_ful_ret",
        "prefs_simp",
        "prefs_pair",
        "prefs_avgjg",
        "prefs_avgjg_Rnonrel",
        "prefs_simp_ret",
        "prefs_pair_ret",
        "prefs_avgjg_ret",
        "prefs_avgjg_Rnonrel_ret",
        "prefs_simp_imp",
        "prefs_pair_imp",
        "prefs_avgjg_imp",
    ),
    "prefs": (
        "runid",
        "num_q",
        "prefs_num_prefs_poss",
        "prefs_num_prefs_ful",
        "prefs_num_prefs_ful_ret",
        "prefs_simp",
        "prefs_pair",
        "prefs_avgjg",
    ),
}
FORMAT_MEASURES = {
    "qrels_jg": ("map_avgjg", "P_avgjg", "Rprec_mult_avgjg"),  # the measures each -R format gives (qrels: the others;
    "prefs": NICKNAMES["all_prefs"][2:],
}  # qrels_prefs: those of prefs)
NOT_READ = {"yaap", "ndcg_p"}  # in trec_eval's table, in none of its nicknames


# --- the command line ---------------------------------------------------------------------------


@dataclass
class Options:
    """trec_eval's options (trec_eval.c), with the measures marked by ``-m`` and each one's parameters."""

    query: bool = False
    complete: bool = False
    summary: bool = True
    judged_only: bool = False
    level: int = 1
    collection: int = 0
    max_docs: int = LONG_MAX
    zscores: str | None = None
    rel_format: str = "qrels"  # -R: qrels, or qrels_jg (a judgment group in the second column)
    marked: set[str] = field(default_factory=set)
    params: dict[str, str] = field(default_factory=dict)  # the first ``-m name.params`` of each name
    files: list[str] = field(default_factory=list)


def parse_options(argv: Sequence[str]) -> Options | str:
    """The options of ``argv`` as trec_eval's getopt reads them, or the text ``-h``/``-v`` asks for."""
    try:
        given, files = getopt.gnu_getopt(list(argv), SHORT_OPTIONS, LONG_OPTIONS)
    except getopt.GetoptError as exc:
        raise RagtrackError(f"{exc.msg}; {USAGE}") from None
    options = Options(files=files)
    setters = {
        "-q": lambda value: setattr(options, "query", True),
        "-c": lambda value: setattr(options, "complete", True),
        "-n": lambda value: setattr(options, "summary", False),
        "-J": lambda value: setattr(options, "judged_only", True),
        "-l": lambda value: setattr(options, "level", c_long(value)),
        "-N": lambda value: setattr(options, "collection", c_long(value)),
        "-M": lambda value: setattr(options, "max_docs", c_long(value)),
        "-Z": lambda value: setattr(options, "zscores", value),
        "-m": lambda value: mark_measure(options, value),
        "-o": lambda value: None,
        "-R": lambda value: setattr(
            options, "rel_format", _supported("-R", value, "qrels", "qrels_jg", "prefs", "qrels_prefs")
        ),
        "-T": lambda value: _supported("-T", value, "trec_results"),
        "-D": lambda value: _supported("-D", value, "0"),
    }
    for flag, value in given:
        flag = LONG_TO_SHORT.get(flag, flag)
        if flag in ("-h", "-v"):
            return help_text() if flag == "-h" else "ragtrack trec_eval: trec_eval version 10.0's measures and options"
        setters[flag](value)
    if len(files) != 2:
        raise RagtrackError(f"give the qrels and the run file; {USAGE}")
    if not options.marked:
        mark_measure(options, "official")
    return options


def _supported(flag: str, value: str, *read: str) -> str:
    """``value`` if ragtrack trec_eval reads it for ``flag``, else a one-line error."""
    if value not in read:
        raise RagtrackError(
            f"{flag} {value}: ragtrack trec_eval reads {flag} {' or '.join(read)} (trec_eval's debug output is not "
            "written)"
        )
    return value


def mark_measure(options: Options, given: str) -> None:
    """``-m name[.params]``: mark a measure or a nickname's measures (trec_eval.c's ``mark_measure``)."""
    name, dot, params = given.partition(".")
    if dot and not params:
        raise RagtrackError(f"-m {given}: a '.' with no parameters after it")
    if dot:
        options.params.setdefault(name, params)
    if name in NICKNAMES:
        options.marked.update(NICKNAMES[name])
    elif name in BY_NAME:
        options.marked.add(name)
    elif name in NOT_READ:
        raise RagtrackError(
            f"-m {given}: ragtrack trec_eval does not compute this measure of trec_eval's (in none of its nicknames)"
        )
    else:
        raise RagtrackError(f"-m {given}: no such trec_eval measure{did_you_mean(name, [*BY_NAME, *NICKNAMES])}")


def help_text() -> str:
    nicknames = "; ".join(f"{name}: {' '.join(names)}" for name, names in NICKNAMES.items())
    return f"{USAGE}\n\nmeasures: {' '.join(BY_NAME)}\nnicknames: {nicknames}\n(docs/metrics.md: trec_eval's options and measures)"


# --- parameters and measure names ---------------------------------------------------------------


def measure_params(measure: Measure, text: str | None) -> tuple[list[str], tuple]:
    """The names of the values ``measure`` prints and its parameters, from ``-m name.text`` or its default
    (meas_init.c: cutoffs sorted and unique, fractions printed ``%3.2f``, the text as given otherwise)."""
    name = measure.name
    if measure.params == "cutoffs":
        values = tuple(sorted(c_long(part) for part in text.split(","))) if text else measure.default
        if values[0] <= 0 or len(set(values)) < len(values):
            raise RagtrackError(f"-m {name}.{text}: cutoffs must be positive and distinct")
        return [f"{name}_{k}" for k in values], values
    if measure.params == "fractions":
        values = tuple(sorted(c_double(part) for part in text.split(","))) if text else measure.default
        if len(set(values)) < len(values):
            raise RagtrackError(f"-m {name}.{text}: duplicate cutoffs")
        return [f"{name}_{x:3.2f}" for x in values], values
    if measure.params == "numbers":
        values = tuple(c_double(part) for part in text.split(",")) if text else measure.default
        if name == "utility" and len(values) != 4:
            raise RagtrackError(f"-m {name}.{text}: utility takes 4 coefficients")
        return [f"{name}_{text}" if text else name], values
    if measure.params == "pairs" and text:
        if not re.fullmatch(r"[^,=]*=[^,=]*(?:,[^,=]*=[^,=]*)*", text):
            raise RagtrackError(f"-m {name}.{text}: malformed pair parameters (level=gain,...)")
        return [f"{name}_{text}"], tuple(
            (key, c_double(value)) for key, value in (part.split("=") for part in text.split(","))
        )
    return [name], measure.default


# --- evaluation ---------------------------------------------------------------------------------


def at_most(m: RankedGrades, depth: int) -> RankedGrades:
    """``-M depth``: each ranking cut after ``depth`` documents."""
    width = max(min(depth, m.grades.shape[1]), 1)
    kept = m.ranks[:width] <= depth
    return replace(
        m,
        grades=np.where(kept, m.grades[:, :width], 0.0),
        judged=m.judged[:, :width] & kept,
        retrieved=np.minimum(m.retrieved, depth),
        pooled=None,
    )


def judged_only(m: RankedGrades) -> RankedGrades:
    """``-J``: each ranking with only its documents judged with a grade >= 0, in their order."""
    kept = m.judged & (m.grades >= 0)
    counts = kept.sum(axis=1)
    rows, columns = np.nonzero(kept)
    ranks = np.arange(len(rows)) - (np.cumsum(counts) - counts)[rows]
    shape = (len(m.qids), max(int(counts.max(initial=0)), 1))
    grades, judged = np.zeros(shape), np.zeros(shape, dtype=bool)
    grades[rows, ranks], judged[rows, ranks] = m.grades[rows, columns], True
    return replace(m, grades=grades, judged=judged, retrieved=counts, pooled=None)


@dataclass(frozen=True)
class Evaluated:
    """The values trec_eval prints: per measure its value names and per query values (rows in qrels
    order), the queries' print order, which queries had no results (``-c``), the run's tag."""

    qids: list[str]
    columns: list[tuple[Measure, list[tuple[str, np.ndarray | list]]]]
    order: list[int]
    missing: np.ndarray
    tag: str
    judged_relevant: int  # judgments with a grade > 0 over all queries (num_rel's ``all`` under -c)


@dataclass(frozen=True)
class Context:
    """What a measure reads besides the grade matrix: the number of judged queries, ``-N``; with
    ``-R qrels_jg`` per judged query the rows of the matrix, one per judgment group (in ``strcmp``
    order); with ``-R prefs`` or ``-R qrels_prefs`` per judged query its preferences."""

    queries: int
    collection: int = 0
    groups: list[np.ndarray] | None = None
    preferences: list[prefs.QueryPreferences] | None = None


def read_grades(options: Options) -> tuple[RankedGrades, list[str], Context, int]:
    """The grade matrix of the run against the qrels (a row per judged query, or with ``-R qrels_jg``
    per query and judgment group), the judged queries, the context and the judgments with a grade > 0."""
    qrels_path, run_path = map(Path, options.files)
    threshold = ranking.checked_threshold(options.level, "-l")
    if options.rel_format == "qrels":
        qrels = load_qrels(qrels_path)[0]
        m = ranking.rank_grades(read_run_scores(run_path), qrels, threshold)
        return (
            m,
            m.qids,
            Context(len(m.qids), options.collection),
            sum(grade > 0 for judged in qrels.values() for grade in judged.values()),
        )
    run = read_run_scores(run_path)
    run = run.to_run("run").scores if isinstance(run, RunColumns) else run
    if options.rel_format in ("prefs", "qrels_prefs"):
        preferences = load_preferences(qrels_path, options.rel_format == "qrels_prefs")
        queries = [prefs.query_preferences(preferences[qid], run.get(qid, {}), options.max_docs) for qid in preferences]
        m = ranking.rank_grades(run, dict.fromkeys(preferences, {}), threshold)  # what the run retrieved per query
        return m, list(preferences), Context(len(queries), options.collection, preferences=queries), 0
    judgments = load_qrels_groups(qrels_path)
    rows = {
        f"{qid}\t{group}": (qid, judged)
        for qid, groups in judgments.items()
        for group, judged in sorted(groups.items())
    }
    m = ranking.rank_grades(
        {row: run[qid] for row, (qid, _) in rows.items() if qid in run},
        {row: judged for row, (_, judged) in rows.items()},
        threshold,
    )
    owners = np.array([list(judgments).index(qid) for qid, _ in rows.values()])
    groups = [np.flatnonzero(owners == index) for index in range(len(judgments))]
    return (
        m,
        list(judgments),
        Context(len(groups), options.collection, groups),
        sum(grade > 0 for _, judged in rows.values() for grade in judged.values()),
    )


def evaluate(options: Options) -> Evaluated:
    """Read the two files and compute every marked measure per judged query, as trec_eval does."""
    chosen = [
        (measure, *measure_params(measure, options.params.get(measure.name)))
        for measure in MEASURES
        if measure.name in options.marked
    ]
    for measure, _, _ in chosen:
        needs = next((form for form, names in FORMAT_MEASURES.items() if measure.name in names), "qrels")
        if measure.style not in ("runid", "num_q") and options.rel_format not in (
            needs,
            *(("qrels_prefs",) if needs == "prefs" else ()),
        ):
            raise RagtrackError(f"-m {measure.name} needs -R {needs} judgments")
    m, qids, context, judged_relevant = read_grades(options)
    missing = (
        m.retrieved == 0
        if context.groups is None
        else np.array([m.retrieved[rows[0]] == 0 for rows in context.groups], dtype=bool)
    )
    order = sorted(range(len(qids)), key=qids.__getitem__)
    if missing.any() and not options.complete:
        qid = qids[next(row for row in order if missing[row])]
        raise RagtrackError(
            f"judged query {qid!r} of {options.files[0]} has no results in {options.files[1]}; trec_eval 10 stops there "
            "too (exit 4); -c scores such queries (on an empty ranking)"
        )
    m = replace(m, retrieved=np.where(m.retrieved == 0, 1, m.retrieved))  # trec_eval's one-document stand-in ranking
    m = at_most(m, options.max_docs) if options.max_docs < m.grades.shape[1] else m
    m = judged_only(m) if options.judged_only else m
    columns = []
    for measure, names, params in chosen:
        values = measure.compute(m, params, context)
        columns.append((measure, list(zip(names, values if measure.params in ("cutoffs", "fractions") else [values]))))
    _clear_stand_ins(columns, missing)
    return Evaluated(qids, columns, order, missing, run_tag(options.files[1]), judged_relevant)


def _clear_stand_ins(columns: list, missing: np.ndarray) -> None:
    """The values trec_eval resets for a query scored on its stand-in ranking (trec_eval.c): exactly
    ``num_ret``, ``utility``, ``relstring`` and ``rbp_resid`` by name, every ``unj*``."""
    if not missing.any():
        return
    for _, values in columns:
        for name, column in values:
            if name in ("num_ret", "utility", "rbp_resid") or name.startswith("unj"):
                column[missing] = 0.0
            elif name == "relstring":
                for row in np.flatnonzero(missing):
                    column[row] = ""


def read_zscores(path: Path) -> dict[tuple[str, str], tuple[float, float]]:
    """``-Z``: per (query, value name) the mean and standard deviation (lines ``qid measure mean std``)."""
    table = {}
    for number, text in read_lines(path):
        parts = text.split()
        if len(parts) != 4 or not all(
            re.fullmatch(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", part) for part in parts[2:]
        ):
            raise RagtrackError(f"{path}:{number}: expected 'qid measure mean stddev'")
        table[parts[0], parts[1]] = (float(parts[2]), float(parts[3]))
    return table


def to_zscores(evaluated: Evaluated, table: dict[tuple[str, str], tuple[float, float]]) -> None:
    """Each per-query value as (value − mean) / std from the table (convert_zscores.c): −1000000 where
    the query or the value is missing, or the std is 0 and the value is not the mean."""
    for measure, values in evaluated.columns:
        if measure.style in ("runid", "text"):
            continue
        for name, column in values:
            for row, qid in enumerate(evaluated.qids):
                mean, std = table.get((qid, name), (math.nan, math.nan))
                if std:
                    column[row] = (column[row] - mean) / std if not math.isnan(std) else MISSING_ZSCORE
                else:
                    column[row] = 0.0 if column[row] == mean else MISSING_ZSCORE


# --- output -------------------------------------------------------------------------------------


def c_fixed(value: float) -> str:
    """``printf("%6.4f", value)`` as glibc prints it (a NaN as ``nan`` or ``-nan`` by its sign bit)."""
    if math.isnan(value):
        return f"{'-nan' if math.copysign(1.0, value) < 0 else 'nan':>6}"
    return f"{value:6.4f}"


def _line(name: str, qid: str, value: float, integer: bool, zscores: bool) -> str:
    """One output line as meas_print_*.c writes it: ``%-22s\t%s\t%6.4f`` (``%ld`` for a count), with a
    ``Z`` before the name when printing z-scores."""
    if zscores:
        return f"Z{name:<22}\t{qid}\t{c_fixed(value)}"
    return f"{name:<22}\t{qid}\t{int(value)}" if integer else f"{name:<22}\t{qid}\t{c_fixed(value)}"


def query_lines(evaluated: Evaluated, zscores: bool) -> list[str]:
    """``-q``: every query's values, queries in ``strcmp`` order, measures in trec_eval's order."""
    lines = []
    for row in evaluated.order:
        qid = evaluated.qids[row]
        for measure, values in evaluated.columns:
            for name, column in values if measure.style not in ("runid", "num_q", "geometric") else ():
                if measure.style == "text":
                    lines.append(f"{name:<22}\t{qid}\t'{column[row]}'")
                else:
                    lines.append(_line(name, qid, float(column[row]), measure.style == "sum", zscores))
    return lines


def summary(measure: Measure, column: np.ndarray, evaluated: Evaluated, complete: bool) -> float:
    """The ``all`` value of one column: a sum in query order (meas_acc.c), then as meas_avg.c ends it."""
    total = float(np.cumsum(np.asarray(column, dtype=float)[evaluated.order])[-1])
    count = len(evaluated.order)
    if measure.style == "num_q":
        return float(count)
    if measure.style == "sum":
        return float(evaluated.judged_relevant) if measure.name == "num_rel" and complete else total
    return math.exp(total / count) if measure.style == "geometric" else total / count


def summary_lines(evaluated: Evaluated, complete: bool, zscores: bool) -> list[str]:
    lines = []
    for measure, values in evaluated.columns:
        if measure.style == "runid":
            lines.append(f"{'runid':<22}\tall\t{evaluated.tag}")
        elif measure.style != "text":
            lines += [
                _line(
                    name,
                    "all",
                    summary(measure, column, evaluated, complete),
                    measure.style in ("sum", "num_q"),
                    zscores,
                )
                for name, column in values
            ]
    return lines


def run(argv: Sequence[str]) -> str:
    """What ``trec_eval argv`` prints, as one text; a run file ``-`` is read from standard input."""
    options = parse_options(argv)
    if isinstance(options, str):
        return options + "\n"
    zscores = read_zscores(Path(options.zscores)) if options.zscores else None
    if options.files[1] != "-":
        evaluated = evaluate(options)
    else:
        with tempfile.TemporaryDirectory(prefix="ragtrack-trec_eval-") as folder:
            options.files[1] = str(Path(folder) / "stdin")
            Path(options.files[1]).write_bytes(sys.stdin.buffer.read())
            evaluated = evaluate(options)
    if zscores is not None:
        to_zscores(evaluated, zscores)
    lines = query_lines(evaluated, zscores is not None) if options.query else []
    lines += summary_lines(evaluated, options.complete, zscores is not None) if options.summary else []
    return "".join(f"{line}\n" for line in lines)


# --- trec_eval's names in ragtrack eval -----------------------------------------------------------

REGISTRY_NAMES = {
    "P": "p",
    "recall": "recall",
    "ndcg_cut": "ndcg",
    "map_cut": "map",
    "success": "hit",
    "recip_rank": "mrr",
    "Rprec": "r-precision",
}  # trec_eval's name -> the registry's, where they differ


def registry_names(names: Sequence[str]) -> list[str]:
    """trec_eval's spellings of measures as the metric registry's names, for ``ragtrack eval -m``:
    ``P_5`` and ``P.5,10`` are ``p@5`` (and ``p@10``), ``P`` is P at trec_eval's default cutoffs,
    ``iprec_at_recall_0.10`` is ``iprec_at_recall@0.1``, ``recip_rank`` is ``mrr``, ``official`` and
    ``all_trec`` their measures. Any other name is returned as it is."""
    result = []
    for given in names:
        name, dot, text = given.partition(".")
        printed = re.fullmatch(
            r"(.+)_(\d+(?:\.\d*)?)", given
        )  # P_5, iprec_at_recall_0.10: a name as trec_eval prints it
        if printed and printed[1] in BY_NAME and BY_NAME[printed[1]].params in ("cutoffs", "fractions"):
            name, text = printed[1], printed[2]
        measure = BY_NAME.get(name)
        if name in NICKNAMES:
            result += registry_names(
                [part for part in NICKNAMES[name] if BY_NAME[part].style in ("mean", "sum", "geometric")]
            )
        elif measure is None or "@" in given or not (dot or text or measure.params != "none" or name in REGISTRY_NAMES):
            result.append(given)
        elif measure.params in ("cutoffs", "fractions"):
            values = measure_params(measure, text or None)[1]
            result += [f"{REGISTRY_NAMES.get(name, name)}@{value:g}" for value in values]
        elif text and measure.params != "none":
            raise RagtrackError(
                f"-m {given}: ragtrack eval takes trec_eval's cutoffs and recall levels, not other parameters; "
                f"ragtrack trec_eval -m {given} computes it"
            )
        else:
            result.append(REGISTRY_NAMES.get(name, name))
    return list(dict.fromkeys(result))
