"""Answer metrics: compare each query's generated answer with its gold answers (max over the golds).

- ``answer_f1`` / ``exact_match``: SQuAD v1.1 (Rajpurkar et al., EMNLP 2016; ``evaluate-v1.1.py``).
  Normalization: lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace.
  F1 = 2·P·R / (P + R) over the multiset of normalized tokens (0 when nothing is shared, also when both
  are empty); EM = 1 if the normalized strings are equal. Reported in [0, 1] (the script prints ×100).
- ``answer_f1_tokenset``: the token-set F1 some RAG evaluations report: the same F1 over the *sets*
  of SQuAD-normalized tokens after removing NLTK's English stop words (:data:`STOP_WORDS`).
- ``rouge1`` / ``rouge2`` / ``rougeL`` (F-measure) and ``<type>_precision`` / ``<type>_recall``:
  unigram / bigram / longest-common-subsequence overlap (Lin 2004) from Google's ``rouge-score`` with
  its Porter stemmer; P = overlap / answer length, R = overlap / gold length, F = 2PR / (P + R), all
  three from the gold with the best F (``score_multi``).
- ``bleu``: sentence-level sacreBLEU (Papineni et al. 2002; Post 2018) with all golds as references,
  ``exp`` smoothing and effective n-gram order, divided by 100; the mean over queries is *not* corpus BLEU.
- ``bleu_p1`` .. ``bleu_p4`` and ``bleu_bp``: BLEU's parts for one answer (Papineni et al. 2002, eqs.
  1-2; sacreBLEU's ``precisions`` / 100 and ``bp`` without smoothing): the clipped ("modified")
  n-gram precision p_n = Σ_g min(count(g), max_ref count_ref(g)) / Σ_g count(g) over the answer's
  n-grams g (0 when it has none), and the brevity penalty BP = 1 if c ≥ r else exp(1 − r/c) (0 when
  c = 0), c = answer length, r = the gold length closest to c (the shorter on a tie); tokens from
  sacreBLEU's ``13a`` tokenizer, case kept.
- ``bertscore_precision`` / ``_recall`` / ``_f1`` (Zhang et al., ICLR 2020): greedy cosine matching of
  contextual token embeddings, P = mean over answer tokens of the best similarity to a gold token,
  R = the same from the gold side, F1 = 2PR / (P + R); no idf weighting, no baseline rescaling; the gold
  with the best F1 is kept. Default model: the shipped all-MiniLM-L6-v2, last (6th) transformer layer.
- ``context_recall@k``: 1 if one of the top-k retrieved passages contains a gold answer (SQuAD-normalized,
  on word boundaries) - the ceiling of any reader that sees those passages.
- ``context_precision_answer@k``: ragas' context precision (Es et al. 2024) with answer containment as
  relevance: Σ_{i ≤ k} P@i · rel_i / |relevant in top k|, rel_i = passage i contains a gold answer
  (``context_precision@k`` of the ranking evaluator takes relevance from the qrels instead).

Citation markers (``[1]``, ``[2, 3]``: ``evaluators.citations``) are taken out of an answer before
any of these metrics sees it, as ALCE does. Queries without gold answers are left out of every mean. A query whose answer could not be generated
(see ``ragtrack.retrievers.generation``) is scored on the empty answer, i.e. 0.
"""

from __future__ import annotations

import math
import re
import string
from abc import abstractmethod
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ragtrack.core.errors import RagtrackError
from ragtrack.core.llm import retrieved_passages, without_citations
from ragtrack.core.progress import Progress
from ragtrack.core.settings import Count, Integer, NameOrPath, validated
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings, parse_cutoff

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack metrics` lists this without pandas

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD v1.1 normalization: lower-case, strip punctuation, then articles, collapse whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def token_f1(prediction: str, gold: str) -> float:
    """SQuAD token F1 of one prediction against one gold answer."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    shared = sum((Counter(predicted) & Counter(expected)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


# NLTK's English stop-word list (nltk.corpus.stopwords, 179 words), SQuAD-normalized like the tokens
# it is removed from (so "don't" is "dont"); articles are already gone after normalization.
STOP_WORDS = frozenset(
    normalize_answer(word)
    for word in """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves he him his himself
she she's her hers herself it it's its itself they them their theirs themselves what which who whom this that that'll
these those am is are was were be been being have has had having do does did doing a an the and but if or because as
until while of at by for with about against between into through during before after above below to from up down in
out on off over under again further then once here there when where why how all any both each few more most other some
such no nor not only own same so than too very s t can will just don don't should should've now d ll m o re ve y ain
aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn hasn't haven haven't isn isn't ma mightn
mightn't mustn mustn't needn needn't shan shan't shouldn shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split()
) - {""}


def tokenset_f1(prediction: str, gold: str) -> float:
    """Token-set F1: 2·P·R / (P + R) with P = |A ∩ G| / |A|, R = |A ∩ G| / |G| over the sets A, G of
    SQuAD-normalized tokens without :data:`STOP_WORDS` (0 when nothing is shared)."""
    predicted = set(normalize_answer(prediction).split()) - STOP_WORDS
    expected = set(normalize_answer(gold).split()) - STOP_WORDS
    shared = len(predicted & expected)
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted), shared / len(expected)
    return 2 * precision * recall / (precision + recall)


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def contains_answer(normalized_passage: str, gold: str) -> bool:
    """Whether the normalized gold answer occurs in an already normalized passage on word boundaries."""
    answer = normalize_answer(gold)
    return bool(answer) and f" {answer} " in f" {normalized_passage} "


def best_over_golds(metric, prediction: str, golds: Sequence[str]) -> float:
    return max((metric(prediction, gold) for gold in golds), default=0.0)


def _ngrams(tokens: list[str], n: int) -> Counter:
    return Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1))


def bleu_parts(prediction: list[str], references: list[list[str]], max_order: int = 4) -> tuple[list[float], float]:
    """BLEU's clipped n-gram precisions p_1..p_max_order and brevity penalty of one tokenized answer
    against tokenized references (module docstring; Papineni et al. 2002, eqs. 1-2)."""
    precisions = []
    for n in range(1, max_order + 1):
        counts = _ngrams(prediction, n)
        most_in_a_reference = Counter()
        for reference in references:
            most_in_a_reference |= _ngrams(reference, n)
        total = sum(counts.values())
        precisions.append(sum((counts & most_in_a_reference).values()) / total if total else 0.0)
    length = len(prediction)
    closest = min((len(r) for r in references), key=lambda r: (abs(r - length), r))
    penalty = 1.0 if length >= closest else math.exp(1 - closest / length) if length else 0.0
    return precisions, penalty


ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")
BLEU_PARTS = ("bleu_p1", "bleu_p2", "bleu_p3", "bleu_p4", "bleu_bp")


class AnswerSettings(EvaluatorSettings, extra="forbid"):
    """Answer metrics against the gold answers (no keys of their own)."""


class BertScoreSettings(EvaluatorSettings, extra="forbid"):
    """BERTScore of answers."""

    model: NameOrPath = "all-MiniLM-L6-v2"
    layer: Integer = -1
    batch_size: Count = 64
    max_length: Count = 256


class GoldAnswerEvaluator(Evaluator):
    """Shared shape: one row per query, NaN for queries without gold answers, which are not counted."""

    needs_generated = True

    def applies_to(self, data: EvalInput) -> bool:
        return bool(data.answers) and (bool(data.generated) or not self.needs_generated)

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        import pandas as pd

        return pd.Series([bool(data.answers.get(qid)) for qid in per_query.index], index=per_query.index)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        import pandas as pd

        qids = list(data.queries or data.answers)
        scored = [qid for qid in qids if data.answers.get(qid)]
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        if scored:
            table.loc[scored, self.metrics] = self.score(data, scored)
        return table

    @abstractmethod
    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        """(len(qids), len(self.metrics)) scores of the queries that have gold answers."""


class AnswerEvaluator(GoldAnswerEvaluator):
    """Lexical answer metrics: SQuAD F1 and EM, token-set F1, ROUGE-1/2/L precision, recall and F,
    sentence BLEU and its parts (see module docstring)."""

    settings_schema = AnswerSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        rouge = {"rouge1": "ROUGE-1", "rouge2": "ROUGE-2", "rougeL": "ROUGE-L"}
        return (
            {
                "answer_f1": "SQuAD v1.1 token F1 against the best gold answer",
                "exact_match": "SQuAD v1.1 exact match (normalized) against any gold answer",
                "answer_f1_tokenset": "token-set F1 without stop words (SQuAD-normalized), best gold",
            }
            | {
                f"{name}{suffix}": f"{label} {part} (rouge-score, Porter stemmer), gold with the best F"
                for name, label in rouge.items()
                for suffix, part in (("", "F-measure"), ("_precision", "precision"), ("_recall", "recall"))
            }
            | {
                "bleu": "sentence sacreBLEU / 100 with every gold as a reference",
            }
            | {f"bleu_p{n}": f"BLEU clipped {n}-gram precision (every gold as a reference)" for n in range(1, 5)}
            | {
                "bleu_bp": "BLEU brevity penalty (closest gold length)",
            }
        )

    def default_metrics(self) -> list[str]:
        return ["answer_f1", "exact_match", "rouge1", "rouge2", "rougeL", "bleu"]

    def __init__(self, metrics: Sequence[str] | None = None):
        super().__init__(metrics)
        self._require_known_metrics("answer evaluator")

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        rouge_types = [name for name in ROUGE_TYPES if any(m.startswith(name) for m in self.metrics)]
        if rouge_types:
            from rouge_score.rouge_scorer import RougeScorer

            rouge = RougeScorer(rouge_types, use_stemmer=True)
        if "bleu" in self.metrics:
            from sacrebleu.metrics import BLEU

            bleu = BLEU(effective_order=True)
        if set(BLEU_PARTS) & set(self.metrics):
            from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

            tokenize_13a = Tokenizer13a()
        rows = []
        for qid in qids:
            answer, golds = without_citations(data.generated.get(qid, "")), data.answers[qid]
            values = {}
            if "answer_f1" in self.metrics:
                values["answer_f1"] = best_over_golds(token_f1, answer, golds)
            if "exact_match" in self.metrics:
                values["exact_match"] = best_over_golds(exact_match, answer, golds)
            if "answer_f1_tokenset" in self.metrics:
                values["answer_f1_tokenset"] = best_over_golds(tokenset_f1, answer, golds)
            if rouge_types:
                scores = rouge.score_multi(golds, answer)
                for name in rouge_types:
                    values |= {
                        name: scores[name].fmeasure,
                        f"{name}_precision": scores[name].precision,
                        f"{name}_recall": scores[name].recall,
                    }
            if "bleu" in self.metrics:
                values["bleu"] = min(bleu.sentence_score(answer, list(golds)).score / 100, 1.0)  # float noise above 1
            if set(BLEU_PARTS) & set(self.metrics):
                precisions, penalty = bleu_parts(
                    tokenize_13a(answer.rstrip()).split(), [tokenize_13a(g.rstrip()).split() for g in golds]
                )
                values |= dict(zip(BLEU_PARTS, [*precisions, penalty]))
            rows.append([values[m] for m in self.metrics])
        return np.asarray(rows, dtype=float)


class BertScoreEvaluator(GoldAnswerEvaluator):
    """BERTScore precision/recall/F1 from token embeddings of a local transformer (module docstring)."""

    settings_schema = BertScoreSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "bertscore_precision": "BERTScore precision (greedy cosine matching of token embeddings)",
            "bertscore_recall": "BERTScore recall",
            "bertscore_f1": "BERTScore F1 (the gold with the best F1 is kept)",
        }

    def __init__(self, **values):
        settings = validated(self.settings_schema, values, "bertscore evaluator")
        super().__init__(settings.metrics)
        self.model_name, self.layer, self.batch_size, self.max_length = (
            settings.model,
            settings.layer,
            settings.batch_size,
            settings.max_length,
        )
        self._loaded = None
        self._vectors: dict[str, np.ndarray] = {}  # embedded texts, reused across systems

    def _load(self):
        """(tokenizer, model), loaded once."""
        if self._loaded is None:
            from transformers import AutoModel, AutoTokenizer

            from ragtrack.core.models import quiet_model_loading, resolve_model

            location = resolve_model(self.model_name)
            quiet_model_loading()
            try:
                self._loaded = (
                    AutoTokenizer.from_pretrained(location),
                    AutoModel.from_pretrained(location, use_safetensors=True).train(False),
                )  # inference mode, safetensors only
            except Exception as exc:
                raise RagtrackError(
                    f"bertscore: cannot load model {self.model_name!r}: {str(exc).splitlines()[0]}"
                ) from None
        return self._loaded

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Unit-length embeddings of each text's tokens (without [CLS]/[SEP]) from layer ``layer``."""
        import torch

        todo = sorted(
            {t for t in texts if t not in self._vectors}, key=lambda t: (len(t), t)
        )  # similar lengths pad less; ties by text, not by the hash seed
        tokenizer, model = self._load() if todo else (None, None)
        with torch.inference_mode(), Progress("bertscore: embed", len(todo), "texts") as progress:
            for start in range(0, len(todo), self.batch_size):
                chunk = todo[start : start + self.batch_size]
                batch = tokenizer(
                    chunk,
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                    return_special_tokens_mask=True,
                )
                special = batch.pop("special_tokens_mask").bool()
                states = model(**batch, output_hidden_states=True).hidden_states[self.layer]
                states = torch.nn.functional.normalize(states, dim=-1)
                keep = batch["attention_mask"].bool() & ~special
                for row, text in enumerate(chunk):
                    self._vectors[text] = states[row][keep[row]].numpy()
                progress.update(len(chunk))
        return [self._vectors[t] for t in texts]

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        answers = {q: without_citations(data.generated.get(q, "")) for q in qids}
        texts = sorted(set(answers.values()) | {g for q in qids for g in data.answers[q]})
        vectors = dict(zip(texts, self.embed(texts)))
        rows = []
        for qid in qids:
            candidate = vectors[answers[qid]]
            best = (0.0, 0.0, 0.0)
            for gold in data.answers[qid]:
                reference = vectors[gold]
                if len(candidate) == 0 or len(reference) == 0:
                    continue
                similarity = candidate @ reference.T
                precision, recall = float(similarity.max(axis=1).mean()), float(similarity.max(axis=0).mean())
                f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
                best = max(best, (f1, precision, recall))
            values = {"bertscore_f1": best[0], "bertscore_precision": best[1], "bertscore_recall": best[2]}
            rows.append([values[m] for m in self.metrics])
        return np.asarray(rows, dtype=float)


def ragas_average_precision(relevant: Sequence[bool]) -> float:
    """ragas' context precision of a ranked list of verdicts: Σ_i P@i · rel_i / Σ_i rel_i (0 if none)."""
    hits, total = 0, 0.0
    for rank, verdict in enumerate(relevant, start=1):
        if verdict:
            hits += 1
            total += hits / rank
    return total / hits if hits else 0.0


class ContextRecallEvaluator(GoldAnswerEvaluator):
    """Context metrics with answer containment as relevance (needs no generator): whether the top-k
    passages contain a gold answer, and ragas' context precision over them. The passages are those a
    generator reads (``EvalInput.context``: chunks of a chunked corpus)."""

    settings_schema = AnswerSettings

    needs_generated = False

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "context_recall@k": "1 if a top-k passage contains a gold answer (SQuAD-normalized)",
            "context_precision_answer@k": "ragas context precision over the top k, relevant = contains a gold answer",
        }

    def default_metrics(self) -> list[str]:
        return ["context_recall@1", "context_recall@3", "context_recall@5"]

    def __init__(self, metrics: Sequence[str] | None = None):
        super().__init__(metrics)
        self._require_known_metrics("context_recall evaluator")
        self.cutoffs = [parse_cutoff(metric) for metric in self.metrics]

    def _require_known_metrics(self, label: str) -> None:
        unknown = [m for m in self.metrics if not self.handles(m)]
        if unknown:
            raise RagtrackError(
                f"{label}: metric {unknown[0]!r} must look like context_recall@5 or context_precision_answer@5"
            )

    def applies_to(self, data: EvalInput) -> bool:
        return super().applies_to(data) and data.corpus is not None

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        passages = retrieved_passages(data.context, data.corpus, qids, max(self.cutoffs), full=True)
        normalized: dict[str, str] = {}
        rows = []
        for qid in qids:
            for text in passages[qid]:
                if text not in normalized:
                    normalized[text] = normalize_answer(text)
            relevant = [
                any(contains_answer(normalized[text], gold) for gold in data.answers[qid]) for text in passages[qid]
            ]
            rows.append(
                [
                    float(any(relevant[:k]))
                    if metric.startswith("context_recall@")
                    else ragas_average_precision(relevant[:k])
                    for metric, k in zip(self.metrics, self.cutoffs)
                ]
            )
        return np.asarray(rows, dtype=float)
