"""Build data/xquad_en_unanswerable from data/xquad_en (see SOURCE.md): the gold paragraphs of a seeded
20% of the questions are removed from the corpus, which leaves every question of a removed paragraph
unanswerable.

    python data/xquad_en_unanswerable/build.py [OUTPUT_FOLDER]     (default: this folder)

1. Shuffle the 1,190 questions (``qa.jsonl`` order) with ``random.Random(SEED)``.
2. Walk the shuffled questions; remove each one's gold paragraph from the corpus (if not yet removed)
   until at least 20% of the questions (238) have lost their gold paragraph. Every question of a
   removed paragraph is unanswerable: its ``answers`` become ``[]``.
3. Qrels: answerable questions keep their line (gold paragraph, 1); an unanswerable question's line is
   replaced by grade-0 judgments of the paragraphs of its article left in the corpus, so the question
   stays in the test split (ragtrack runs the queries its qrels judge) and counts in no ranking mean.
Unchanged lines are copied byte for byte; the output is the same on every run.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

SEED = 13
SHARE = 0.2
HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent / "xquad_en"


def article(passage_id: str) -> str:
    """``Super_Bowl_50_3`` -> ``Super_Bowl_50``: corpus ids are ``<article title>_<paragraph index>``."""
    return passage_id.rsplit("_", 1)[0]


def build(output: Path, source: Path = SOURCE, seed: int = SEED) -> dict:
    """Write corpus.jsonl, queries.jsonl and qrels/test.tsv into ``output``; returns the counts."""
    corpus_lines = source.joinpath("corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    query_lines = source.joinpath("queries.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    questions = [json.loads(line) for line in source.joinpath("qa.jsonl").read_text(encoding="utf-8").splitlines()]
    gold = {q["_id"]: q["passage_ids"][0] for q in questions}
    order = list(range(len(questions)))
    random.Random(seed).shuffle(order)
    target = round(SHARE * len(questions))
    removed: list[str] = []
    unanswerable: set[str] = set()
    for index in order:
        if len(unanswerable) >= target:
            break
        passage = gold[questions[index]["_id"]]
        if passage not in removed:
            removed.append(passage)
            unanswerable |= {qid for qid, p in gold.items() if p == passage}
    kept = [line for line in corpus_lines if json.loads(line)["_id"] not in removed]
    kept_ids = [json.loads(line)["_id"] for line in kept]
    queries = []
    for line in query_lines:
        record = json.loads(line)
        queries.append(
            json.dumps({**record, "answers": []}, ensure_ascii=False) + "\n" if record["_id"] in unanswerable else line
        )
    qrels = ["query-id\tcorpus-id\tscore\n"]
    for question in questions:
        qid = question["_id"]
        if qid not in unanswerable:
            qrels.append(f"{qid}\t{gold[qid]}\t1\n")
            continue
        siblings = [pid for pid in kept_ids if article(pid) == article(gold[qid])]
        if not siblings:
            raise SystemExit(f"seed {seed}: every paragraph of {article(gold[qid])} was removed; choose another seed")
        qrels += [f"{qid}\t{pid}\t0\n" for pid in siblings]
    (output / "qrels").mkdir(parents=True, exist_ok=True)
    (output / "corpus.jsonl").write_text("".join(kept), encoding="utf-8")
    (output / "queries.jsonl").write_text("".join(queries), encoding="utf-8")
    (output / "qrels" / "test.tsv").write_text("".join(qrels), encoding="utf-8")
    return {
        "seed": seed,
        "passages": len(kept),
        "passages_removed": len(removed),
        "questions": len(questions),
        "unanswerable": len(unanswerable),
        "answerable": len(questions) - len(unanswerable),
    }


if __name__ == "__main__":
    print(json.dumps(build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)))
