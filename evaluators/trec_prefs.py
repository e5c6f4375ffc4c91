"""trec_eval 10's preference measures (``-R prefs`` and ``-R qrels_prefs``; ``form_prefs_counts.c`` and
``m_prefs_*.c``), per query on numpy matrices of the judged documents.

Preference judgments are lines ``qid group subgroup docid level``: within a judgment group (one user's
information need), a document is preferred to every document of the same subgroup with a lower level,
transitively across subgroups; a level of 0 means non-relevant, above 0 relevant. Each judged
document gets a rank: the judged retrieved ones 0 .. r − 1 in the order of the ranking (the run cut
at ``-M``), the judged ones not retrieved r .. n − 1 in document id order. A preference "a over b"
is *fulfilled* when a's rank is lower; it is *retrieved* when both are retrieved, *implied* when only
one is, *not occurring* when neither is. A group with one subgroup keeps its equivalence classes
(documents by level, levels descending: trec_eval's EC form); the ``Rnonrel`` measures recount those
its own way, reproduced here as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ragtrack.core.errors import RagtrackError

Preference = tuple[str, str, str, float]  # group, subgroup, document id, level


@dataclass(frozen=True)
class Group:
    """One judgment group of one query: ``prefers[a, b]`` when document rank a is preferred to rank b;
    ``levels[a]`` the level of rank a in this group (NaN where not judged here); ``classes`` the
    equivalence classes (level, ranks ascending), levels descending, for a group with one subgroup."""

    prefers: np.ndarray
    levels: np.ndarray
    classes: list[tuple[float, np.ndarray]] | None


@dataclass(frozen=True)
class QueryPreferences:
    groups: list[Group]
    judged: int  # n: documents judged in any group
    retrieved: int  # r: of them, retrieved (ranks 0 .. r - 1)

    @property
    def counts(self) -> np.ndarray:
        """(n, n) how many groups prefer rank a to rank b (trec_eval's counts array)."""
        return sum(
            (group.prefers.astype(np.int64) for group in self.groups),
            np.zeros((self.judged, self.judged), dtype=np.int64),
        )


def judged_ranks(
    preferences: Sequence[Preference], scores: Mapping[str, float], depth: int
) -> tuple[dict[str, int], int]:
    """Each judged document's rank (form_prefs_and_ranks): retrieved ones in ranking order, then the
    others in document id order; and how many were retrieved. Here trec_eval breaks ties of score by
    document id *ascending* (its ``comp_sim_docno`` in form_prefs_counts.c), unlike everywhere else."""
    judged = {doc for _, _, doc, _ in preferences}
    ranking = sorted(scores, key=lambda doc: (-scores[doc], doc))
    retrieved = [doc for doc in ranking[: max(depth, 0)] if doc in judged]
    ranks = {doc: rank for rank, doc in enumerate(retrieved)}
    for doc in sorted(judged - ranks.keys()):
        ranks[doc] = len(ranks)
    return ranks, len(retrieved)


def _closure(prefers: np.ndarray) -> np.ndarray:
    """The transitive closure of a preference matrix (add_transitives: squared until it no longer changes)."""
    reach = prefers | np.eye(len(prefers), dtype=bool)
    while True:
        grown = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
        if (grown == reach).all():
            break
        reach = grown
    np.fill_diagonal(reach, False)
    if (reach & reach.T).any():
        raise RagtrackError(
            "preference judgments contradict each other within a judgment group (trec_eval: 'Pref inconsistency')"
        )
    return reach


def _group(entries: list[tuple[str, float, int]], judged: int) -> Group:
    """One group from its (subgroup, level, rank) entries, sorted by subgroup, level descending, rank."""
    levels = np.full(judged, np.nan)
    if len({subgroup for subgroup, _, _ in entries}) == 1:
        classes: dict[float, list[int]] = {}
        for _, level, rank in entries:
            classes.setdefault(level, []).append(rank)
        for level, ranks in classes.items():
            if not np.isnan(levels[ranks]).all():
                raise RagtrackError("a document has two levels in one judgment subgroup of the preference judgments")
            levels[ranks] = level
        prefers = levels[:, None] > levels[None, :]
        return Group(prefers, levels, [(level, np.array(ranks)) for level, ranks in classes.items()])
    prefers = np.zeros((judged, judged), dtype=bool)
    for index, (subgroup, level, rank) in enumerate(entries):
        if levels[rank] > 0 and level == 0 or levels[rank] == 0 and level > 0:
            raise RagtrackError(
                "a document has both level 0 and a level above 0 in one judgment group of the preference judgments"
            )
        levels[rank] = level
        lower = [other for sub, other_level, other in entries[index + 1 :] if sub == subgroup and other_level < level]
        prefers[rank, lower] = True
    return Group(_closure(prefers), levels, None)


def query_preferences(preferences: Sequence[Preference], scores: Mapping[str, float], depth: int) -> QueryPreferences:
    """A query's groups, its judged documents' ranks laid out as trec_eval lays them."""
    ranks, retrieved = judged_ranks(preferences, scores, depth)
    entries: dict[str, list[tuple[str, float, int]]] = {}
    for group, subgroup, doc, level in sorted(
        preferences, key=lambda entry: (entry[0], entry[1], -entry[3], ranks[entry[2]])
    ):
        entries.setdefault(group, []).append((subgroup, level, ranks[doc]))
    return QueryPreferences([_group(group, len(ranks)) for group in entries.values()], len(ranks), retrieved)


@dataclass(frozen=True)
class GroupCounts:
    """A group's preference counts by area (add_*_pref_to_jg), fulfilled and possible (possible includes
    fulfilled), and its relevant and non-relevant documents, retrieved and in all."""

    fulfilled_retrieved: int
    possible_retrieved: int
    fulfilled_implied: int
    possible_implied: int
    not_occurring: int
    relevant: int
    relevant_retrieved: int
    nonrelevant: int
    nonrelevant_retrieved: int


def group_counts(group: Group, retrieved: int) -> GroupCounts:
    prefers, r = group.prefers, retrieved
    both = prefers[:r, :r]
    fulfilled_retrieved, unfulfilled_retrieved = int(np.triu(both, 1).sum()), int(np.tril(both, -1).sum())
    fulfilled_implied, unfulfilled_implied = int(prefers[:r, r:].sum()), int(prefers[r:, :r].sum())
    levels = group.levels
    relevant = levels > 0
    nonrelevant = levels <= 0 if group.classes is not None else levels == 0  # the EC form counts any level not above 0
    return GroupCounts(
        fulfilled_retrieved,
        fulfilled_retrieved + unfulfilled_retrieved,
        fulfilled_implied,
        fulfilled_implied + unfulfilled_implied,
        int(prefers[r:, r:].sum()),
        int(relevant.sum()),
        int(relevant[:r].sum()),
        int(nonrelevant.sum()),
        int(nonrelevant[:r].sum()),
    )


# --- the measures: one value per query -----------------------------------------------------------

AREAS = {  # which counts a measure reads: fulfilled, possible
    "all": (("fulfilled_retrieved", "fulfilled_implied"), ("possible_retrieved", "possible_implied", "not_occurring")),
    "retrieved": (("fulfilled_retrieved",), ("possible_retrieved",)),
    "implied": (("fulfilled_retrieved", "fulfilled_implied"), ("possible_retrieved", "possible_implied")),
}


def _ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator`` in C's arithmetic: 0/0 is NaN (with the sign bit, as x86 gives it)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(numerator) / np.float64(denominator))


def _area_totals(query: QueryPreferences, area: str) -> tuple[int, int]:
    counts = [group_counts(group, query.retrieved) for group in query.groups]
    fulfilled, possible = AREAS[area]
    return (
        sum(getattr(c, name) for c in counts for name in fulfilled),
        sum(getattr(c, name) for c in counts for name in possible),
    )


def num_possible(query: QueryPreferences) -> float:
    """prefs_num_prefs_poss: the preferences of every group, fulfilled or not."""
    return float(_area_totals(query, "all")[1])


def num_fulfilled(query: QueryPreferences, area: str = "all") -> float:
    """prefs_num_prefs_ful (``all``) and prefs_num_prefs_ful_ret (``retrieved``): preferences fulfilled."""
    return float(_area_totals(query, area)[0])


def simple(query: QueryPreferences, area: str) -> float:
    """prefs_simp[_ret|_imp]: fulfilled / possible over all groups' preferences of the area."""
    fulfilled, possible = _area_totals(query, area)
    return fulfilled / possible if possible else 0.0


def average_over_groups(query: QueryPreferences, area: str) -> float:
    """prefs_avgjg[_ret|_imp]: fulfilled / possible per group (where possible), averaged over groups."""
    total = 0.0
    fulfilled, possible = AREAS[area]
    for counts in (group_counts(group, query.retrieved) for group in query.groups):
        ful, poss = sum(getattr(counts, name) for name in fulfilled), sum(getattr(counts, name) for name in possible)
        total += ful / poss if poss else 0.0
    return total / len(query.groups) if total > 0 else 0.0


def pairs(query: QueryPreferences, area: str) -> float:
    """prefs_pair[_ret|_imp]: over pairs of documents some group orders, the share of the groups'
    preferences between the two that the ranking fulfils, averaged over pairs (pairs of documents
    neither retrieved count with 0 in ``all``)."""
    counts, r = query.counts, query.retrieved
    rows, columns = np.triu_indices(r, 1)
    blocks = [(counts[rows, columns], counts[columns, rows]), (counts[:r, r:].ravel(), counts[r:, :r].T.ravel())]
    values = []
    for forward, backward in blocks[:1] if area == "retrieved" else blocks:
        ordered = (forward + backward) > 0
        values.append(forward[ordered] / (forward[ordered] + backward[ordered]))
    values = np.concatenate(values)
    found = len(values)
    if area == "all":
        unretrieved = counts[r:, r:]
        found += int(np.triu((unretrieved + unretrieved.T) > 0, 1).sum())
    return float(np.cumsum(values)[-1]) / found if len(values) else 0.0


def _recount_classes(group: Group, keep: int, retrieved: int, retrieved_only: bool) -> tuple[int, int]:
    """The Rnonrel recount of a group in EC form (m_prefs_avgjg_Rnonrel*.c ``recalculate``): the pairs
    of classes but the last, then every class against the first ``keep`` documents of the last (the
    non-relevant) class; fulfilled when the first ranks higher (and, over all documents, is retrieved)."""
    classes = [ranks[ranks < retrieved] if retrieved_only else ranks for _, ranks in group.classes]
    kept = group.classes[-1][1][:keep]
    kept = kept[kept < retrieved] if retrieved_only else kept
    fulfilled = possible = 0
    pairs_of = [(first, second) for index, first in enumerate(classes) for second in classes[index + 1 : -1]] + [
        (first, kept) for first in classes
    ]
    for first, second in pairs_of:
        higher = first[:, None] < second[None, :]
        won = int((higher if retrieved_only else higher & (first[:, None] < retrieved)).sum())
        fulfilled, possible = fulfilled + won, possible + first.size * second.size - won
    return fulfilled, possible + fulfilled


def _recount_matrix(group: Group, relevant: int, retrieved: int, retrieved_only: bool) -> tuple[int, int]:
    """The Rnonrel recount of a group in preference-array form: without the non-relevant documents after
    the first ``relevant`` ones (in rank order; over the retrieved ones only for ``_ret``)."""
    judged = len(group.levels)
    zeros = np.flatnonzero(group.levels[: retrieved if retrieved_only else judged] == 0)
    first_dropped = zeros[relevant] if len(zeros) > relevant else (retrieved if retrieved_only else judged)
    kept = ~((np.arange(judged) >= first_dropped) & (group.levels == 0))
    prefers = group.prefers & kept[:, None] & kept[None, :]
    both = prefers[:retrieved, :retrieved]
    fulfilled, possible = int(np.triu(both, 1).sum()), int(np.tril(both, -1).sum())
    if not retrieved_only:
        fulfilled += int(prefers[:retrieved, retrieved:].sum())
        possible += int(prefers[retrieved:, :].sum())
    return fulfilled, possible + fulfilled


def average_over_groups_rnonrel(query: QueryPreferences, retrieved_only: bool) -> float:
    """prefs_avgjg_Rnonrel[_ret]: prefs_avgjg[_ret] as if each group had as many non-relevant documents as
    relevant ones: with R relevant and N non-relevant (retrieved ones for ``_ret``), R − N non-relevant
    successes are added for each relevant document when R >= N, else the group is recounted without
    the non-relevant documents past the first R."""
    total = 0.0
    for group in query.groups:
        counts = group_counts(group, query.retrieved)
        relevant, nonrelevant = (
            (counts.relevant_retrieved, counts.nonrelevant_retrieved)
            if retrieved_only
            else (counts.relevant, counts.nonrelevant)
        )
        fulfilled, possible = AREAS["retrieved" if retrieved_only else "all"]
        if relevant >= nonrelevant:
            ful = sum(getattr(counts, name) for name in fulfilled) + counts.relevant_retrieved * (
                relevant - nonrelevant
            )
            poss = sum(getattr(counts, name) for name in possible) + counts.relevant * (relevant - nonrelevant)
        elif group.classes is not None:
            ful, poss = _recount_classes(group, relevant, query.retrieved, retrieved_only)
        else:
            ful, poss = _recount_matrix(group, counts.relevant, query.retrieved, retrieved_only)
        total += _ratio(ful, poss)
    return total / len(query.groups) if total > 0 else 0.0
