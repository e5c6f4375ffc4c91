"""The fusion methods of the literature, after ranx (Bassani & Romelli, CIKM 2022): one scoring core.

Per query, each member's top ``depth`` list (trec_eval order, rank p = 1, 2, ...) is normalized,
s' = norm(s), then every method is a value per member and document, v_r(d), and a combination of the
values of the members that retrieved d (M(d), |M(d)| of them), with one weight w_r per member
(default 1; ``weighted sum``, weighted Borda and weighted Condorcet are CombSUM, Borda and Condorcet
with ``weights``). A method with a fill gives a document missing from member r that value instead.

Normalizations (per member list of n scores; Lee, SIGIR 1997; Montague & Aslam, CIKM 2001; ranx):

- ``none``: s;  ``max``: s / max(max s, 1e-9);  ``zscore``: (s − mean) / std, 0 when std = 0
- ``minmax``: (s − min) / (max − min), 1 when all equal;  ``minmax-inverted``: minmax(−s), re-ranked
  (for distances: the lowest score first)
- ``sum``: (s − min) / max(Σ s − n·min, 1e-9);  ``rank``: 1 − (p − 1) / n
- ``borda``: 1 − (p − 1) / N, N the candidates (documents of any member) of the query; a document the
  member did not retrieve gets 0.5 − (n − 1) / (2N), so every member then holds every candidate

Score methods (v_r = w_r · s'_r unless said; Fox & Shaw, TREC-2 1994; Lee 1997; Wu & Crestani, CIKM 2002):

- CombSUM Σ_{M(d)} v;  CombMNZ |M(d)| · Σ v;  CombGMNZ |M(d)|^γ · Σ v;  CombANZ Σ v / |M(d)|
- CombMIN min_{M(d)} v;  CombMAX max_{M(d)} v;  CombMED the median of {v_r : r ∈ M(d)}
- WMNZ Σ_{M(d)} s' · Σ_{M(d)} w;  Mixed |M(d)|^½ · Σ_{M(d)} w · s' (ranx's ``mixed``)

Rank methods (the member's order only; v_r = w_r · f(p)):

- RRF 1 / (k + p) (Cormack et al., SIGIR 2009), combined by CombSUM
- ISR 1 / p², by CombMNZ; log-ISR 1 / p², Σ v · ln |M(d)|; logN-ISR Σ v · ln(|M(d)| + σ)
  (Mourão, Martins & Magalhães, CMIG 2015)
- RBC (1 − φ) · φ^(p−1), by CombSUM (Bailey et al., SIGIR 2017)
- Borda N − p + 1, fill (N − n + 1) / 2, by CombSUM (Aslam & Montague, SIGIR 2001)
- Condorcet (Montague & Aslam, CIKM 2002): candidates sorted by pairwise majority, d before e when
  Σ w over the members ranking d above e exceeds Σ w over those ranking e above d (a member that
  ranked neither votes for neither), by Python's stable sort (a merge sort) starting from the Borda
  order (the sum of ranks, a missing one counted N + 1; ties in trec_eval order), which equal votes
  keep; the i-th (from 0) scores N − i. ranx's ``condorcet`` differs (a documented bug here): its
  candidates start in a Python set's order, which changes with PYTHONHASHSEED, and a member that
  ranked neither d nor e votes for whichever is compared second, so its output is not reproducible; on
  judgments without ties or cycles both are the unique Condorcet order (tested).

  Computed without comparing pairs in Python where the order has a closed form (equal to the sort, tested
  against it): (1) when each vote outweighs all lighter ones together (w_(1) > w_(2) + ... + w_(m), and
  so on down; two members of unequal weights), the majority is lexicographic: by the heaviest member's
  rank, then the next's, a stable O(n log n) sort; (2) otherwise, when no candidate beats the one before
  it in the Borda order, the sort keeps that order (it finds one ascending run): always so for two
  members of equal weights, since d beating e then means no member prefers e, so d's rank sum is
  smaller. Else (three or more members whose majorities disagree with the Borda order) that query is
  sorted with the comparator, O(m · n log n) per query in Python. No O(n log n) formulation exists
  there: the majority relation can hold cycles (d > e > f > d), and then the result is the sort's own
  sequence of comparisons, which only running that sort reproduces.

Learned methods (fitted on training queries only: :class:`Trained`; h_q(p) = 1 if the document at rank
p of query q is relevant, T the training queries):

- PosFuse: v = P(p), P(p) = mean over q ∈ T with a rank p of h_q(p) (Lillis et al., SIGIR 2006)
- ProbFuse: S segments of ⌈n/S⌉ ranks; v = P_k / k for rank p in segment k (from 1), P_k the mean
  over T of the relevant fraction of segment k (Lillis et al., SIGIR 2006)
- SegFuse: segments with bounds 0, 5, 15, 35, 75, ... (10 · 2^(k−1) − 5, ranx's reading of
  Shokouhi, ECIR 2007); v = P_k · (s' + 1), P_k the mean over T of hits in segment k / its size; 0
  below rank 5115
- SlideFuse: v = mean of P over ranks max(p − w, 1) .. min(p + w, n) (Lillis et al., ECIR 2008)
- BayesFuse: v = ln(P_k / (1 − P_k)) on the segments 0-5-10-15-20-30-100-200-500-1000, P_k the mean
  precision over T of segment k (0 and 1 moved 0.001 inward); fill ln(0.001 / 0.999), which also
  scores ranks past 1000 (ranx reads past its array there) (Aslam & Montague, SIGIR 2001)
- MAPFuse: v = MAP_r / p, MAP_r the member's mean average precision over T (Lillis et al., 2010)

All learned methods combine by CombSUM, BayesFuse over every member (with the fill). Equal fused
scores are ranked in trec_eval order, and the fused run keeps the top ``depth``.

Every query is fused at once, on arrays (:func:`fuse_queries`): each member's lists laid end to end
(:class:`Lists`; normalizations reduce per list with ``np.ufunc.reduceat``), the documents coded in id
order (one dictionary lookup per entry), the candidates found by one sort of the (query, document) keys,
a members × candidates matrix of values combined column-wise, and the fused run ordered by two stable
sorts (:func:`trec_order`). bench/fusion.py times it against ranx.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, cmp_to_key
from itertools import chain, count

import numpy as np

from ragtrack.core.data import Qrels
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run


# ----------------------------------------------------------------------------- ranked lists laid end to end
@dataclass(frozen=True)
class Lists:
    """Ranked lists laid end to end, each contiguous and in rank order; ``sizes``: each list's length
    (0: empty). Per entry: ``of`` (its list), ``rank`` p (1-based) and ``size`` n (its list's)."""

    sizes: np.ndarray

    @cached_property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.sizes) - self.sizes

    @cached_property
    def of(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.sizes)), self.sizes)

    @cached_property
    def rank(self) -> np.ndarray:
        return np.arange(1, len(self.of) + 1) - self.starts[self.of]

    @cached_property
    def size(self) -> np.ndarray:
        return self.sizes[self.of]

    def per_list(self, ufunc: np.ufunc, values: np.ndarray, empty: float = 0.0) -> np.ndarray:
        """Per list, ``ufunc`` reduced over its entries' ``values`` (np.add: Σ; ``empty`` for an empty list)."""
        reduced, filled = np.full(len(self.sizes), empty), self.sizes > 0
        if filled.any():
            reduced[filled] = ufunc.reduceat(values, self.starts[filled])
        return reduced

    def over_list(self, ufunc: np.ufunc, values: np.ndarray) -> np.ndarray:
        """Per entry, ``ufunc`` reduced over its list (:meth:`per_list`)."""
        return self.per_list(ufunc, values)[self.of]


# ----------------------------------------------------------------------------- normalizations
MAX_NORM_FLOOR = 1e-9  # ranx's: the least ``max``, ``sum`` and the inverted min-max divide by


def _minmax(s: np.ndarray, lists: Lists) -> np.ndarray:
    low = lists.over_list(np.minimum, s)
    span = lists.over_list(np.maximum, s) - low
    return np.where(span == 0, 1.0, (s - low) / np.where(span == 0, 1.0, span))


def _zscore(s: np.ndarray, lists: Lists) -> np.ndarray:
    deviation = s - lists.over_list(np.add, s) / lists.size
    std = np.sqrt(lists.over_list(np.add, deviation**2) / lists.size)
    return np.where(std == 0, 0.0, deviation / np.where(std == 0, 1.0, std))


def _sum(s: np.ndarray, lists: Lists) -> np.ndarray:
    low = lists.over_list(np.minimum, s)
    return (s - low) / np.maximum(lists.over_list(np.add, s) - low * lists.size, MAX_NORM_FLOOR)


Normalization = Callable[[np.ndarray, Lists], np.ndarray]  # (scores of lists laid end to end, their layout) -> s'
NORMALIZATIONS: dict[str, Normalization] = {
    "none": lambda s, lists: s,
    "minmax": _minmax,
    "zscore": _zscore,
    "max": lambda s, lists: s / np.maximum(lists.over_list(np.maximum, s), MAX_NORM_FLOOR),
    "sum": _sum,
    "rank": lambda s, lists: 1 - (lists.rank - 1) / lists.size,
    "minmax-inverted": lambda s, lists: _minmax(-s, lists),
    "borda": lambda s, lists: s,  # needs the query's candidates: set in :func:`candidates`
}


def check_normalization(method: str) -> None:
    if method not in NORMALIZATIONS:
        raise RagtrackError(f"unknown score normalization {method!r}; known: {', '.join(NORMALIZATIONS)}")


def normalize(ranked: Sequence[tuple[str, float]], method: str) -> dict[str, float]:
    """Normalized scores of one ranked list (see the module docstring for the formulas)."""
    check_normalization(method)
    if method == "borda":
        raise RagtrackError(
            "the borda normalization reads every member's documents: a fusion method applies it, not a single list"
        )
    values = NORMALIZATIONS[method](np.array([s for _, s in ranked], dtype=float), Lists(np.array([len(ranked)])))
    return dict(zip([doc_id for doc_id, _ in ranked], values.tolist()))


# ----------------------------------------------------------------------------- the members' lists and the candidates
@dataclass
class Member:
    """One member's top-``depth`` list of every fused query, laid end to end in the queries' order: per
    entry its document (a code) and normalized score; ``fill``, per query, the value of a document the
    member did not retrieve (NaN: none; the ``borda`` normalization sets one)."""

    lists: Lists
    docs: np.ndarray
    scores: np.ndarray
    fill: np.ndarray


@dataclass
class Layout:
    """What a fusion reads: the fused queries (of any member, in first-seen order), the document ids
    (sorted: a document's code orders it as its id does), the members' lists and their weights."""

    qids: list[str]
    names: np.ndarray  # of str
    members: list[Member]
    weights: np.ndarray


def members_of(
    runs: Mapping[str, Run], members: Sequence[str], weights: Sequence[float] | None
) -> list[tuple[Run, float]]:
    missing = [name for name in members if name not in runs]
    if missing:
        raise RagtrackError(f"fusion members {missing} are not among the systems of this job ({', '.join(runs)})")
    if weights is not None and len(weights) != len(members):
        raise RagtrackError(f"fusion has {len(members)} members but {len(weights)} weights")
    return [
        (runs[name], 1.0 if weights is None else float(w)) for name, w in zip(members, weights or [None] * len(members))
    ]


def trec_order(group: np.ndarray, scores: np.ndarray, docs: np.ndarray, by_id: np.ndarray | None = None) -> np.ndarray:
    """The permutation that orders entries by ``group``, then trec_eval's order (score descending, then
    id descending: ``docs`` are codes in id order); no sort where they already are in it, else three
    stable sorts (by id, by score, by group; ``by_id``: an id-descending order the caller knows)."""
    same = group[1:] == group[:-1]
    ordered = (group[1:] > group[:-1]) | same & (
        (scores[1:] < scores[:-1]) | (scores[1:] == scores[:-1]) & (docs[1:] < docs[:-1])
    )
    if ordered.all():
        return np.arange(len(scores))
    by_id = np.argsort(-docs, kind="stable") if by_id is None else by_id
    by_score = by_id[np.argsort(-scores[by_id], kind="stable")]
    return by_score[
        np.argsort(group[by_score].astype(np.min_scalar_type(group.max())), kind="stable")
    ]  # radix below 2^16 groups


def lay_out(
    runs: Mapping[str, Run], members: Sequence[str], weights: Sequence[float] | None, depth: int, normalization: str
) -> Layout:
    """Each member's normalized top ``depth`` of every query of any member. The runs are read in their
    dictionaries' order (memory order: one pass, one dictionary lookup per entry, its id's first
    occurrence), then ordered by numpy (no sort where a run's dictionaries are in trec_eval order)."""
    check_normalization(normalization)
    chosen = members_of(runs, members, weights)
    qids = list(dict.fromkeys(qid for run, _ in chosen for qid in run.scores))
    lists = [[run.scores.get(qid, {}) for qid in qids] for run, _ in chosen]
    sizes = [np.fromiter(map(len, scores), np.intp, len(qids)) for scores in lists]
    first: dict[str, int] = {}
    seen = np.fromiter(
        map(first.setdefault, chain.from_iterable(chain.from_iterable(lists)), count()),
        np.intp,
        sum(s.sum() for s in sizes),
    )
    names = sorted(first)
    code = np.empty(len(seen), np.intp)
    code[np.fromiter(map(first.__getitem__, names), np.intp, len(names))] = np.arange(len(names))
    docs = np.split(code[seen], np.cumsum([s.sum() for s in sizes])[:-1])
    members = [
        _member(
            Lists(n), d, np.fromiter(chain.from_iterable(map(dict.values, scores)), float, len(d)), depth, normalization
        )
        for n, d, scores in zip(sizes, docs, lists)
    ]
    return Layout(qids, np.array(names, dtype=object), members, np.array([w for _, w in chosen]))


def _member(every: Lists, docs: np.ndarray, scores: np.ndarray, depth: int, normalization: str) -> Member:
    """A member from its entries (``every``: its whole lists), ranked, cut at ``depth`` and normalized."""
    order = trec_order(every.of, scores, docs)
    top = every.rank <= depth
    lists = Lists(np.minimum(every.sizes, depth))
    docs, scores = docs[order][top], NORMALIZATIONS[normalization](scores[order][top], lists)
    if normalization == "minmax-inverted":  # re-ranked (distances: the lowest first)
        again = trec_order(lists.of, scores, docs)
        docs, scores = docs[again], scores[again]
    return Member(lists, docs, scores, np.full(len(every.sizes), math.nan))


@dataclass
class Candidates:
    """The (query, document) pairs that any member retrieved, sorted by query, then document: per pair
    its ``query`` and ``docs`` (codes); ``columns[r]``: per entry of member r, its pair; ``count``: per
    query its candidates N."""

    query: np.ndarray
    docs: np.ndarray
    columns: list[np.ndarray]
    count: np.ndarray

    @cached_property
    def starts(self) -> np.ndarray:
        return np.cumsum(self.count) - self.count


def candidates(layout: Layout, normalization: str) -> Candidates:
    """The candidates of every query at once (one sort of the members' (query, document) keys); sets
    the ``borda`` normalization: s' = 1 − (p − 1) / N, fill 0.5 − (n − 1) / (2N)."""
    width = max(len(layout.names), 1)
    keys = [m.lists.of * width + m.docs for m in layout.members]
    pairs, inverse = np.unique(np.concatenate(keys), return_inverse=True)
    query = pairs // width
    found = Candidates(
        query,
        pairs % width,
        np.split(inverse.ravel(), np.cumsum([len(k) for k in keys])[:-1]),
        np.bincount(query, minlength=len(layout.qids)),
    )
    if normalization == "borda":
        n = np.maximum(found.count, 1)
        for m in layout.members:
            m.scores, m.fill = 1 - (m.lists.rank - 1) / n[m.lists.of], 0.5 - (m.lists.sizes - 1) / (2 * n)
    return found


def ranked_run(system: str, layout: Layout, pairs: Candidates, fused: np.ndarray, depth: int) -> Run:
    """The run ``system``: per query its top ``depth`` candidates by ``fused`` in trec_eval order (equal
    scores: id descending), all queries sorted at once."""
    order = trec_order(
        pairs.query, fused, pairs.docs, by_id=np.arange(len(fused) - 1, -1, -1)
    )  # pairs: by query, then id
    kept = order[np.arange(len(order)) - pairs.starts[pairs.query] < depth]
    ranked = list(zip(layout.names[pairs.docs[kept]].tolist(), fused[kept].tolist()))
    sizes = np.minimum(pairs.count, depth).tolist()
    ends = np.cumsum(sizes).tolist()
    return Run.from_rankings(
        system, {qid: ranked[end - size : end] for qid, size, end in zip(layout.qids, sizes, ends)}
    )


# ----------------------------------------------------------------------------- the scoring core
Values = Callable[[Member, int, np.ndarray], np.ndarray]  # (member, its index, N per query) -> a value per entry
Fill = Callable[
    [Member, int, np.ndarray], np.ndarray
]  # (member, its index, N per query) -> per query, a missing document's value
Combine = Callable[
    [np.ndarray, np.ndarray, np.ndarray], np.ndarray
]  # (values m × pairs, present m × pairs, weights) -> fused


@dataclass(frozen=True)
class Method:
    """A fusion method: each member's values, the value of a missing document (``fill``; None: the
    normalization's) and how the values of one document combine."""

    values: Values
    combine: Combine
    fill: Fill | None = None


def scores_of(member: Member, index: int, n: np.ndarray) -> np.ndarray:
    return member.scores


def _masked(values: np.ndarray, present: np.ndarray, absent: float) -> np.ndarray:
    return np.where(present, values, absent)


def weighted_sum(values, present, w):
    return (w[:, None] * values * present).sum(axis=0)


def _times_hits(power: float) -> Combine:
    return lambda values, present, w: weighted_sum(values, present, w) * present.sum(axis=0) ** power


def _times_log_hits(sigma: float) -> Combine:
    return lambda values, present, w: weighted_sum(values, present, w) * np.log(present.sum(axis=0) + sigma)


COMBINE: dict[str, Combine] = {
    "sum": weighted_sum,
    "mnz": _times_hits(1.0),
    "anz": _times_hits(-1.0),
    "min": lambda values, present, w: _masked(w[:, None] * values, present, math.inf).min(axis=0),
    "max": lambda values, present, w: _masked(w[:, None] * values, present, -math.inf).max(axis=0),
    "med": lambda values, present, w: np.nanmedian(_masked(w[:, None] * values, present, math.nan), axis=0),
    "wmnz": lambda values, present, w: (values * present).sum(axis=0) * (w[:, None] * present).sum(axis=0),
    "mixed": _times_hits(0.5),
}
# linear fusion (ragtrack.retrievers.fusion.linear_fusion; weights α_r = w_r / Σ w): CombSUM over every
# member, a document missing from member r valued at r's lowest normalized score for the query (0: none)
LINEAR = Method(scores_of, weighted_sum, fill=lambda member, index, n: member.lists.per_list(np.minimum, member.scores))


def fuse_queries(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str,
    depth: int,
    weights: Sequence[float] | None,
    normalization: str,
    method: Method,
) -> Run:
    """The run ``system``: ``method`` over the members' normalized top ``depth`` lists, every query at
    once (a members × candidates matrix of values)."""
    layout = lay_out(runs, members, weights, depth, normalization)
    pairs = candidates(layout, normalization)
    values, present = (
        np.zeros((len(layout.members), len(pairs.query))),
        np.zeros((len(layout.members), len(pairs.query)), dtype=bool),
    )
    for i, (member, column) in enumerate(zip(layout.members, pairs.columns)):
        fill = (member.fill if method.fill is None else method.fill(member, i, pairs.count))[pairs.query]
        present[i] = ~np.isnan(fill)
        values[i] = np.where(present[i], fill, 0.0)
        values[i, column], present[i, column] = method.values(member, i, pairs.count), True
    return ranked_run(system, layout, pairs, method.combine(values, present, layout.weights), depth)


# ----------------------------------------------------------------------------- the methods
def score_method(combine: str | Combine) -> Method:
    return Method(scores_of, COMBINE[combine] if isinstance(combine, str) else combine)


def rank_method(value: Callable[[np.ndarray], np.ndarray], combine: str | Combine = "sum") -> Method:
    return Method(
        lambda member, index, n: value(member.lists.rank), COMBINE[combine] if isinstance(combine, str) else combine
    )


def rank_methods(k: float = 60, gamma: float = 1.0, sigma: float = 0.01, phi: float = 0.8) -> dict[str, Method]:
    """Every unsupervised method by name, with its parameters."""
    return {
        "rrf": rank_method(lambda p: 1 / (k + p)),
        "combsum": score_method("sum"),
        "combmnz": score_method("mnz"),
        "combanz": score_method("anz"),
        "combgmnz": score_method(_times_hits(gamma)),
        "combmin": score_method("min"),
        "combmax": score_method("max"),
        "combmed": score_method("med"),
        "wmnz": score_method("wmnz"),
        "mixed": score_method("mixed"),
        "isr": rank_method(lambda p: 1 / p**2, "mnz"),
        "log_isr": rank_method(lambda p: 1 / p**2, _times_log_hits(0.0)),
        "logn_isr": rank_method(lambda p: 1 / p**2, _times_log_hits(sigma)),
        "rbc": rank_method(lambda p: (1 - phi) * phi ** (p - 1)),
        "borda": Method(
            lambda member, index, n: n[member.lists.of] - member.lists.rank + 1,
            weighted_sum,
            fill=lambda member, index, n: (n - member.lists.sizes + 1) / 2,
        ),
    }


def fuse(
    runs: Mapping[str, Run],
    members: Sequence[str],
    method: str,
    system: str | None = None,
    depth: int = 100,
    weights: Sequence[float] | None = None,
    normalization: str = "none",
    **parameters: float,
) -> Run:
    """Fuse ``members`` of ``runs`` by the unsupervised ``method`` (a key of :func:`rank_methods`, or
    ``condorcet``) with its ``parameters`` (k, gamma, sigma, phi)."""
    if method == "condorcet":
        return condorcet(runs, members, system or method, depth, weights)
    methods = rank_methods(**parameters)
    if method not in methods:
        raise RagtrackError(f"unknown fusion method {method!r}; known: {', '.join([*methods, 'condorcet'])}")
    return fuse_queries(runs, members, system or method, depth, weights, normalization, methods[method])


# ----------------------------------------------------------------------------- Condorcet
def _majority(weights: Sequence[float], positions: list[tuple[float, ...]]) -> Callable[[int, int], int]:
    def compare(x: int, y: int) -> int:
        margin = 0.0
        for w, a, b in zip(weights, positions[x], positions[y]):
            margin += w if a < b else -w if b < a else 0.0
        return -1 if margin > 0 else 1 if margin < 0 else 0

    return compare


def _majority_order(position: np.ndarray, weights: np.ndarray, start: np.ndarray, pairs: Candidates) -> np.ndarray:
    """The candidates sorted by pairwise majority from the order ``start`` (every query's contiguous; see
    the module docstring: lexicographic when each vote outweighs all lighter ones; else ``start`` where
    no candidate beats the one before it; else Python's stable sort of that query's)."""
    voting = np.flatnonzero(weights > 0)
    heaviest_first = voting[np.argsort(-weights[voting], kind="stable")]
    heavy = weights[heaviest_first]
    lighter = np.cumsum(heavy[::-1])[::-1] - heavy  # Σ of the lighter votes
    if np.all(heavy > lighter * (1 + 1e-9)):  # the margin: no rounding of a sum of votes can change its sign
        return start[np.lexsort((*position[heaviest_first[::-1]][:, start], pairs.query[start]))]
    before, after = start[:-1], start[1:]
    beaten = (weights[:, None] * np.sign(position[:, before] - position[:, after])).sum(axis=0) > 0
    order = start.copy()
    for q in np.unique(pairs.query[before][beaten & (pairs.query[before] == pairs.query[after])]).tolist():
        begin, end = pairs.starts[q], pairs.starts[q] + pairs.count[q]  # the query's pairs, in ``start`` too
        compare = cmp_to_key(_majority(weights.tolist(), position[:, begin:end].T.tolist()))
        order[begin:end] = begin + np.array(sorted((order[begin:end] - begin).tolist(), key=compare))
    return order


def condorcet(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str = "condorcet",
    depth: int = 100,
    weights: Sequence[float] | None = None,
) -> Run:
    """Condorcet fusion (see the module docstring): a stable sort by pairwise weighted majority."""
    layout = lay_out(runs, members, weights, depth, "none")
    pairs = candidates(layout, "none")
    n = pairs.count[pairs.query]
    position = np.tile(n + 1.0, (len(layout.members), 1))  # a member that did not retrieve d: N + 1
    for i, (member, column) in enumerate(zip(layout.members, pairs.columns)):
        position[i, column] = member.lists.rank
    start = trec_order(pairs.query, -position.sum(axis=0), pairs.docs, np.arange(len(n) - 1, -1, -1))  # the Borda order
    order = _majority_order(position, layout.weights, start, pairs)
    fused = np.empty(len(order))
    fused[order] = n[order] - (np.arange(len(order)) - pairs.starts[pairs.query[order]])  # the i-th (from 0): N − i
    return ranked_run(system, layout, pairs, fused, depth)


# ----------------------------------------------------------------------------- learned methods
def hit_lists(run: Run, qrels: Qrels, depth: int, threshold: int = 1) -> list[np.ndarray]:
    """Per judged query of ``qrels``: 1.0 where the run's document at that rank (to ``depth``) is relevant."""
    return [
        np.array([float(judged.get(d, 0) >= threshold) for d, _ in run.ranking(qid)[:depth]])
        for qid, judged in qrels.items()
    ]


def position_probabilities(hits: list[np.ndarray]) -> np.ndarray:
    """P(p): the mean of h_q(p) over the training queries with a rank p."""
    longest = max((len(h) for h in hits), default=0)
    numerators, counts = np.zeros(longest), np.zeros(longest)
    for h in hits:
        numerators[: len(h)] += h
        counts[: len(h)] += 1
    return numerators / np.maximum(counts, 1)


def _segment_means(hits: list[np.ndarray], bounds: Callable[[int], list[int]], divide_by_size: bool) -> np.ndarray:
    """Per segment, the mean over training queries of its relevant fraction (``bounds(n)``: a query's
    segment boundaries; ``divide_by_size``: by the nominal size, else by the ranks it has)."""
    total: np.ndarray | None = None
    for h in hits:
        edges = bounds(len(h))
        part = np.array(
            [h[a:b].sum() / ((b - a) if divide_by_size else max(len(h[a:b]), 1)) for a, b in zip(edges, edges[1:])]
        )
        total = part if total is None else total + part
    return np.zeros(len(bounds(0)) - 1) if total is None else total / len(hits)


SEGFUSE_BOUNDS = [0] + [10 * 2 ** (k - 1) - 5 for k in range(1, 11)]
BAYESFUSE_BOUNDS = [0, 5, 10, 15, 20, 30, 100, 200, 500, 1000]
MIN_LOG_ODDS = math.log(0.001 / 0.999)


def _probfuse_bounds(segments: int) -> Callable[[int], list[int]]:
    return lambda n: [k * math.ceil(n / segments) for k in range(segments + 1)]


def _in_segments(bounds: list[int], per_segment: np.ndarray, p: np.ndarray, beyond: float = 0.0) -> np.ndarray:
    """The value of the segment of each rank p (1-based), ``beyond`` past the last bound."""
    segment = np.searchsorted(bounds, p - 1, side="right") - 1
    return np.where(p <= bounds[-1], per_segment[np.minimum(segment, len(per_segment) - 1)], beyond)


def average_precision(run: Run, qrels: Qrels, depth: int, threshold: int = 1) -> float:
    """MAP over the judged queries of ``qrels`` (trec_eval's AP: Σ P@p over relevant ranks / relevant judged)."""
    total = 0.0
    for h, judged in zip(hit_lists(run, qrels, depth, threshold), qrels.values()):
        relevant = sum(grade >= threshold for grade in judged.values())
        total += float((np.cumsum(h) / np.arange(1, len(h) + 1) * h).sum() / relevant) if relevant else 0.0
    return total / max(len(qrels), 1)


@dataclass
class Trained:
    """A learned fusion: ``fit(train_runs, train_qrels)`` on training queries, then ``fuse(runs)`` on others.

    ``method``: posfuse, probfuse, segfuse, slidefuse, bayesfuse or mapfuse; ``segments`` (ProbFuse),
    ``window`` (SlideFuse); what ``fit`` learned is ``learned`` (one array or number per member)."""

    method: str
    members: Sequence[str]
    system: str | None = None
    depth: int = 100
    weights: Sequence[float] | None = None
    normalization: str = "minmax"
    segments: int = 10
    window: int = 5
    threshold: int = 1
    learned: list = field(default_factory=list)
    trained_on: frozenset[str] = frozenset()

    def fit(self, runs: Mapping[str, Run], qrels: Qrels) -> "Trained":
        if self.method not in LEARNERS:
            raise RagtrackError(f"unknown learned fusion {self.method!r}; known: {', '.join(LEARNERS)}")
        if not qrels:
            raise RagtrackError(f"{self.method}: no judged training queries to learn from")
        members_of(runs, self.members, self.weights)
        self.learned = [LEARNERS[self.method](self, runs[name], qrels) for name in self.members]
        self.trained_on = frozenset(qrels)
        return self

    def fuse(self, runs: Mapping[str, Run]) -> Run:
        if not self.learned:
            raise RagtrackError(f"{self.method}: fit it on training queries before fusing")
        reported = {qid for name in self.members if name in runs for qid in runs[name].scores}
        if reported & self.trained_on:
            raise RagtrackError(
                f"{self.method} was trained on {len(reported & self.trained_on)} of the queries it would fuse "
                f"(e.g. {min(reported & self.trained_on)!r}): train on other queries than the reported ones"
            )
        return fuse_queries(
            runs,
            self.members,
            self.system or self.method,
            self.depth,
            self.weights,
            self.normalization,
            APPLIERS[self.method](self),
        )


LEARNERS: dict[str, Callable[[Trained, Run, Qrels], object]] = {
    "posfuse": lambda t, run, qrels: position_probabilities(hit_lists(run, qrels, t.depth, t.threshold)),
    "slidefuse": lambda t, run, qrels: position_probabilities(hit_lists(run, qrels, t.depth, t.threshold)),
    "probfuse": lambda t, run, qrels: _segment_means(
        hit_lists(run, qrels, t.depth, t.threshold), _probfuse_bounds(t.segments), False
    ),
    "segfuse": lambda t, run, qrels: _segment_means(
        hit_lists(run, qrels, t.depth, t.threshold), lambda n: SEGFUSE_BOUNDS, True
    ),
    "bayesfuse": lambda t, run, qrels: _log_odds(
        _segment_means(hit_lists(run, qrels, t.depth, t.threshold), lambda n: BAYESFUSE_BOUNDS, True)
    ),
    "mapfuse": lambda t, run, qrels: average_precision(run, qrels, t.depth, t.threshold),
}


def _log_odds(precision: np.ndarray) -> np.ndarray:
    precision = np.where(precision == 0, 0.001, precision)
    return np.log(precision / np.where(precision == 1, 0.001, 1 - precision))


def _probfuse_values(t: Trained) -> Values:
    def values(member: Member, index: int, n: np.ndarray) -> np.ndarray:  # segments of ⌈n/S⌉ ranks
        segment = np.minimum((member.lists.rank - 1) // np.ceil(member.lists.size / t.segments), t.segments - 1).astype(
            np.intp
        )
        return t.learned[index][segment] / (segment + 1)

    return values


def _slidefuse_values(t: Trained) -> Values:
    def values(member: Member, index: int, n: np.ndarray) -> np.ndarray:
        probabilities = t.learned[index]
        cumulative = np.concatenate([[0.0], np.cumsum(probabilities)])
        p = member.lists.rank - 1
        a, b = np.maximum(p - t.window, 0), np.minimum(p + t.window, member.lists.size - 1)
        return (cumulative[np.minimum(b + 1, len(probabilities))] - cumulative[np.minimum(a, len(probabilities))]) / (
            b - a + 1
        )

    return values


def _posfuse_values(t: Trained) -> Values:
    def values(member: Member, index: int, n: np.ndarray) -> np.ndarray:  # P(p), 0 past the ranks learned
        return np.append(t.learned[index], 0.0)[np.minimum(member.lists.rank - 1, len(t.learned[index]))]

    return values


APPLIERS: dict[str, Callable[[Trained], Method]] = {
    "posfuse": lambda t: Method(_posfuse_values(t), weighted_sum),
    "slidefuse": lambda t: Method(_slidefuse_values(t), weighted_sum),
    "probfuse": lambda t: Method(_probfuse_values(t), weighted_sum),
    "segfuse": lambda t: Method(
        lambda m, i, n: _in_segments(SEGFUSE_BOUNDS, t.learned[i], m.lists.rank) * (m.scores + 1), weighted_sum
    ),
    "bayesfuse": lambda t: Method(
        lambda m, i, n: _in_segments(BAYESFUSE_BOUNDS, t.learned[i], m.lists.rank, MIN_LOG_ODDS),
        weighted_sum,
        fill=lambda m, i, n: np.full(len(n), MIN_LOG_ODDS),
    ),
    "mapfuse": lambda t: Method(lambda m, i, n: t.learned[i] / m.lists.rank, weighted_sum),
}
