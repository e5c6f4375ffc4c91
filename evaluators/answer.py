"""Answer metrics: compare each query's generated answer with its gold answers (max over the golds).

- ``answer_f1`` / ``exact_match``: SQuAD v1.1 (Rajpurkar et al., EMNLP 2016; ``evaluate-v1.1.py``).
  Normalization: lower-case, drop ASCII punctuation, drop the articles a/an/the, collapse whitespace.
  F1 = 2·P·R / (P + R) over the multiset of normalized tokens (0 when nothing is shared, also when both
  are empty); EM = 1 if the normalized strings are equal. Reported in [0, 1] (the script prints ×100).
- ``rouge1`` / ``rouge2`` / ``rougeL``: F-measure of unigram / bigram / longest-common-subsequence
  overlap (Lin 2004) from Google's ``rouge-score`` with its Porter stemmer.
- ``bleu``: sentence-level sacreBLEU (Papineni et al. 2002; Post 2018) with all golds as references,
  ``exp`` smoothing and effective n-gram order, divided by 100; the mean over queries is *not* corpus BLEU.
- ``bertscore_precision`` / ``_recall`` / ``_f1`` (Zhang et al., ICLR 2020): greedy cosine matching of
  contextual token embeddings, P = mean over answer tokens of the best similarity to a gold token,
  R = the same from the gold side, F1 = 2PR / (P + R); no idf weighting, no baseline rescaling; the gold
  with the best F1 is kept. Default model: the shipped all-MiniLM-L6-v2, last (6th) transformer layer.
- ``context_recall@k``: 1 if one of the top-k retrieved passages contains a gold answer (SQuAD-normalized,
  on word boundaries) - the ceiling of any reader that sees those passages.

Queries without gold answers are left out of every mean. A query whose answer could not be generated
(see ``ragtrack.generation``) is scored on the empty answer, i.e. 0.
"""

from __future__ import annotations

import re
import string
from abc import abstractmethod
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ragtrack.evaluators.base import EvalInput, Evaluator
from ragtrack.core.errors import RagtrackError

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


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def contains_answer(normalized_passage: str, gold: str) -> bool:
    """Whether the normalized gold answer occurs in an already normalized passage on word boundaries."""
    answer = normalize_answer(gold)
    return bool(answer) and f" {answer} " in f" {normalized_passage} "


def best_over_golds(metric, prediction: str, golds: Sequence[str]) -> float:
    return max((metric(prediction, gold) for gold in golds), default=0.0)


class _GoldAnswerEvaluator(Evaluator):
    """Shared shape: one row per query, NaN for queries without gold answers, which are not counted."""

    needs_generated = True

    def applies_to(self, data: EvalInput) -> bool:
        return bool(data.answers) and (bool(data.generated) or not self.needs_generated)

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        return pd.Series([bool(data.answers.get(qid)) for qid in per_query.index], index=per_query.index)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        qids = list(data.queries or data.answers)
        scored = [qid for qid in qids if data.answers.get(qid)]
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        if scored:
            table.loc[scored, self.metrics] = self.score(data, scored)
        return table

    @abstractmethod
    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        """(len(qids), len(self.metrics)) scores of the queries that have gold answers."""


class AnswerEvaluator(_GoldAnswerEvaluator):
    """Lexical answer metrics: SQuAD F1 and EM, ROUGE-1/2/L, sentence BLEU (see module docstring)."""

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "answer_f1": "SQuAD v1.1 token F1 against the best gold answer",
            "exact_match": "SQuAD v1.1 exact match (normalized) against any gold answer",
            "rouge1": "ROUGE-1 F-measure (rouge-score, Porter stemmer), best gold",
            "rouge2": "ROUGE-2 F-measure (rouge-score, Porter stemmer), best gold",
            "rougeL": "ROUGE-L F-measure (rouge-score, Porter stemmer), best gold",
            "bleu": "sentence sacreBLEU / 100 with every gold as a reference",
        }

    def __init__(self, metrics: Sequence[str] | None = None):
        super().__init__(metrics)
        self._require_known_metrics("answer evaluator")

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        rouge_types = [m for m in self.metrics if m.startswith("rouge")]
        if rouge_types:
            from rouge_score.rouge_scorer import RougeScorer

            rouge = RougeScorer(rouge_types, use_stemmer=True)
        if "bleu" in self.metrics:
            from sacrebleu.metrics import BLEU

            bleu = BLEU(effective_order=True)
        rows = []
        for qid in qids:
            answer, golds = data.generated.get(qid, ""), data.answers[qid]
            values = {}
            if "answer_f1" in self.metrics:
                values["answer_f1"] = best_over_golds(token_f1, answer, golds)
            if "exact_match" in self.metrics:
                values["exact_match"] = best_over_golds(exact_match, answer, golds)
            if rouge_types:
                scores = rouge.score_multi(golds, answer)
                values |= {name: scores[name].fmeasure for name in rouge_types}
            if "bleu" in self.metrics:
                values["bleu"] = min(bleu.sentence_score(answer, list(golds)).score / 100, 1.0)  # float noise above 1
            rows.append([values[m] for m in self.metrics])
        return np.asarray(rows, dtype=float)


class BertScoreEvaluator(_GoldAnswerEvaluator):
    """BERTScore precision/recall/F1 from token embeddings of a local transformer (module docstring)."""

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "bertscore_precision": "BERTScore precision (greedy cosine matching of token embeddings)",
            "bertscore_recall": "BERTScore recall",
            "bertscore_f1": "BERTScore F1 (the gold with the best F1 is kept)",
        }

    def __init__(self, metrics: Sequence[str] | None = None, model: str = "all-MiniLM-L6-v2", layer: int = -1,
                 batch_size: int = 64, max_length: int = 256):
        super().__init__(metrics)
        self.model_name, self.layer, self.batch_size, self.max_length = model, layer, batch_size, max_length
        self._loaded = None
        self._vectors: dict[str, np.ndarray] = {}  # embedded texts, reused across systems

    def _load(self):
        """(tokenizer, model), loaded once."""
        if self._loaded is None:
            from transformers import AutoModel, AutoTokenizer

            from ragtrack.core.models import resolve_model

            location = resolve_model(self.model_name)
            try:
                self._loaded = AutoTokenizer.from_pretrained(location), AutoModel.from_pretrained(location, use_safetensors=True).train(False)  # inference mode, safetensors only
            except Exception as exc:
                raise RagtrackError(f"bertscore: cannot load model {self.model_name!r}: {str(exc).splitlines()[0]}") from None
        return self._loaded

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        """Unit-length embeddings of each text's tokens (without [CLS]/[SEP]) from layer ``layer``."""
        import torch

        todo = sorted({t for t in texts if t not in self._vectors}, key=len)  # similar lengths pad less
        tokenizer, model = self._load() if todo else (None, None)
        with torch.inference_mode():
            for start in tqdm(range(0, len(todo), self.batch_size), desc="bertscore", unit="batch", leave=False, delay=1):
                batch = tokenizer(todo[start:start + self.batch_size], padding=True, truncation=True,
                                  max_length=self.max_length, return_tensors="pt", return_special_tokens_mask=True)
                special = batch.pop("special_tokens_mask").bool()
                states = model(**batch, output_hidden_states=True).hidden_states[self.layer]
                states = torch.nn.functional.normalize(states, dim=-1)
                keep = batch["attention_mask"].bool() & ~special
                for row, text in enumerate(todo[start:start + self.batch_size]):
                    self._vectors[text] = states[row][keep[row]].numpy()
        return [self._vectors[t] for t in texts]

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        texts = sorted({data.generated.get(q, "") for q in qids} | {g for q in qids for g in data.answers[q]})
        vectors = dict(zip(texts, self.embed(texts)))
        rows = []
        for qid in qids:
            candidate = vectors[data.generated.get(qid, "")]
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


class ContextRecallEvaluator(_GoldAnswerEvaluator):
    """Share of queries whose top-k retrieved passages contain a gold answer (needs no generator); the
    passages are those a generator reads (``EvalInput.context``: chunks of a chunked corpus)."""

    needs_generated = False

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {"context_recall@k": "1 if a top-k passage contains a gold answer (SQuAD-normalized)"}

    def default_metrics(self) -> list[str]:
        return ["context_recall@1", "context_recall@3", "context_recall@5"]

    def __init__(self, metrics: Sequence[str] | None = None):
        super().__init__(metrics)
        self.cutoffs = []
        for metric in self.metrics:
            base, _, cutoff = metric.partition("@")
            if base != "context_recall" or not cutoff.isdigit() or int(cutoff) < 1:
                raise RagtrackError(f"context_recall evaluator: metric {metric!r} must look like context_recall@5")
            self.cutoffs.append(int(cutoff))

    def applies_to(self, data: EvalInput) -> bool:
        return super().applies_to(data) and data.corpus is not None

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        texts = dict(zip(data.corpus.ids, data.corpus.full_texts()))
        normalized: dict[str, str] = {}
        rows = []
        for qid in qids:
            ranked = [doc_id for doc_id, _ in data.context.ranking(qid)[:max(self.cutoffs)]]
            for doc_id in ranked:
                if doc_id not in normalized:
                    normalized[doc_id] = normalize_answer(texts[doc_id])
            first = next((rank for rank, doc_id in enumerate(ranked, start=1)
                          if any(contains_answer(normalized[doc_id], gold) for gold in data.answers[qid])), None)
            rows.append([float(first is not None and first <= k) for k in self.cutoffs])
        return np.asarray(rows, dtype=float)
