"""Citation recall and precision (evaluators/citations.py): ALCE's definitions against an independent
re-statement of ALCE's evaluation loop on random answers, constructed cases in the lexical and the LLM
mode (through a fake chat server), replies that cannot be read, and the extractive generator's
citations."""

from __future__ import annotations

import json
import logging
import random
import re
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.citations import (
    CitationEvaluator,
    CitationSettings,
    Statement,
    alce_scores,
    cited_statements,
    parse_support,
)
from ragtrack.retrievers.generation import ExtractiveGenerator
from tests.support import ChatServer


def alce_reference(sentences: list[tuple[str, list[int]]], passages: int, phi, at_most: int = 3) -> tuple[float, float]:
    """ALCE's ``compute_autoais`` with citations (Gao et al. 2023, eval.py), restated for one answer:
    ``sentences`` are (statement, cited numbers as written); ``phi(numbers, statement)`` is the support
    check. Numbers are made distinct first (ragtrack's one departure: ``[1][1]`` is one citation)."""
    entail, entail_prec, total_citations = 0, 0, 0
    for text, written in sentences:
        ref = list(dict.fromkeys(written))
        if not ref or any(not 1 <= r <= passages for r in ref):
            flag = 0
        else:
            ref = ref[:at_most]
            total_citations += len(ref)
            flag = int(phi(ref, text))
        entail += flag
        if flag and len(ref) > 1:
            for psg in ref:
                if phi([psg], text):
                    entail_prec += 1
                elif not phi([r for r in ref if r != psg], text):
                    entail_prec += 1
        elif flag:
            entail_prec += flag
    return entail / len(sentences), entail_prec / total_citations if total_citations else 0.0


def ours(statements: list[Statement], phi) -> tuple[float, float, set]:
    """alce_scores asked round by round, as the evaluator does; also the checks it asked."""
    known, asked = {}, set()
    while True:
        outcome, missing = alce_scores(statements, known)
        if outcome is not None:
            return outcome.recall, outcome.precision, asked
        for numbers, text in missing:
            asked.add((frozenset(numbers), text))
            known[numbers, text] = phi(list(numbers), text)


def test_alce_scores_equal_the_reference_on_random_answers() -> None:
    rng = random.Random(11)
    for trial in range(1500):
        passages = rng.randint(1, 5)
        sentences = [
            (
                f"statement {trial} {k} words",
                [rng.randint(0, passages + 1) for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))],
            )
            for k in range(rng.randint(1, 5))
        ]
        answer = " ".join(f"{text}{''.join(f'[{n}]' for n in numbers)}." for text, numbers in sentences)
        truth = {}

        def phi(numbers: list[int], text: str) -> bool:
            key = (frozenset(numbers), text)
            if key not in truth:
                truth[key] = rng.random() < 0.6
            return truth[key]

        calls = set()

        def counted_phi(numbers: list[int], text: str) -> bool:
            calls.add((frozenset(numbers), text))
            return phi(numbers, text)

        statements = cited_statements(answer, passages)
        assert [s.text for s in statements] == [f"{text}." for text, _ in sentences]
        expected = alce_reference([(f"{text}.", numbers) for text, numbers in sentences], passages, counted_phi)
        recall, precision, asked = ours(statements, phi)
        assert (recall, precision) == pytest.approx(expected, abs=1e-12)
        assert asked == calls  # exactly the checks ALCE makes, none it would skip


def test_sentences_and_their_citations() -> None:
    answer = "Paris is the capital [1]. It has 2 million people.[2][3] Berlin [9] is big. Rome [1, 2]\n- a list item [2][2]\n[3]"
    assert cited_statements(answer, 3) == [
        Statement("Paris is the capital.", (1,)),
        Statement("It has 2 million people.", (2, 3)),
        Statement("Berlin is big.", (9,), out_of_range=True),
        Statement("Rome", (1, 2)),
        Statement("- a list item", (2,)),
    ]
    assert cited_statements("One [1][2][3][4].", 4, max_citations=2) == [Statement("One.", (1, 2))]
    assert cited_statements("Zero [0].", 4)[0].out_of_range


@pytest.mark.parametrize(
    "reply, verdict",
    [
        ("yes", True),
        ("No.", False),
        ('{"supported": true}', True),
        ('{"supported": "no"}', False),
        ("Supported: no", False),
        ("not supported", False),
        ("**Yes**, the passage says so.", True),
        ("Answer: yes", True),
        ('The statement reads {"supported": true}; but {"supported": false}', False),
        ("Supported: yes? No.\nSupported: no", False),
    ],
)
def test_parse_support(reply: str, verdict: bool) -> None:
    assert parse_support(reply) is verdict
    with pytest.raises(ValueError, match="no yes/no verdict in the reply 'perhaps'"):
        parse_support("perhaps")


PASSAGES = ["The Eiffel Tower is in Paris", "Paris is the capital of France", "Berlin is in Germany"]
ANSWER = "The Eiffel Tower is in Paris [1][3]. Paris is the capital of France [2]. Berlin is big [9]. It is tall."


def data_for(generated: dict[str, str]) -> EvalInput:
    corpus = Corpus([f"p{i}" for i in range(3)], [""] * 3, PASSAGES, "h")
    run = Run("bm25", {qid: {"p0": 3.0, "p1": 2.0, "p2": 1.0} for qid in generated})
    return EvalInput(
        qrels={}, run=run, queries={qid: f"question {qid}" for qid in generated}, generated=generated, corpus=corpus
    )


def test_lexical_mode_on_a_constructed_answer(tmp_path: Path) -> None:
    """Sentence 1 cites [1][3]: jointly supported, [1] alone too, [3] alone covers 2/5 tokens and [1]
    supports it without [3], so [3] is irrelevant; sentence 2 cites [2], supported; sentence 3 cites a
    passage not shown (unsupported, not in the precision); sentence 4 cites nothing.
    Recall 2/4, precision (1 + 0 + 1) / 3."""
    evaluator = CitationEvaluator(top_k=3, output_dir=str(tmp_path), no_answer="unanswerable")
    table = evaluator.evaluate(data_for({"q": ANSWER, "abstains": "Unanswerable.", "empty": ""}))
    assert (
        table.loc["q"].tolist() == pytest.approx([0.5, 2 / 3]) and table.loc[["abstains", "empty"]].isna().all().all()
    )
    records = {
        r["qid"]: r
        for r in map(json.loads, (tmp_path / "systems" / "bm25" / "citations.jsonl").read_text().splitlines())
    }
    assert [s["precise"] for s in records["q"]["statements"]] == [[1], [2], [], []]
    assert records["q"]["statements"][2]["out_of_range"] and records["abstains"]["skipped"] == "abstained"
    assert records["empty"]["error"] == "no generated answer"


class SupportServer(ChatServer):
    """Says yes when every word of the STATEMENT occurs in the PASSAGES (case-folded); a statement with
    "garbled" gets "perhaps", one with "exploding" HTTP 500."""

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        prompt = json.loads(body)["messages"][-1]["content"]
        with self.lock:
            self.requests.append({"body": json.loads(body)})
        statement = re.search(r"STATEMENT: (.*)", prompt).group(1)
        if "exploding" in statement:
            return self.send(handler, 500, b'{"error": "internal"}')
        shown = prompt.split("PASSAGES:")[1].split("STATEMENT:")[0].lower()
        content = (
            "perhaps"
            if "garbled" in statement
            else "yes"
            if set(re.findall(r"\w+", statement.lower())) <= set(re.findall(r"\w+", shown))
            else "no"
        )
        self.send(
            handler, 200, json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]}).encode()
        )


def test_llm_mode_asks_only_what_alce_needs_and_reports_unreadable_replies(tmp_path: Path, caplog) -> None:
    server = SupportServer()
    try:
        prompt = "Q: {question}\nPASSAGES:\n{passages}\nSTATEMENT: {statement}\nyes or no?"
        evaluator = CitationEvaluator(
            mode="llm",
            prompt=prompt,
            top_k=3,
            output_dir=str(tmp_path),
            base_url=server.url,
            model="m",
            timeout=5,
            max_retries=0,
        )
        answers = {
            "q": ANSWER.replace("It is tall.", "It is the capital."),
            "odd": "A garbled claim [1].",
            "down": "An exploding claim [2].",
        }
        with caplog.at_level(logging.WARNING):
            table = evaluator.evaluate(data_for(answers))
        prompts = [
            r["body"]["messages"][-1]["content"]
            for r in server.requests
            if "Eiffel" in r["body"]["messages"][-1]["content"].split("STATEMENT:")[1]
        ]
        assert len(prompts) == 3  # (1, 3) jointly, then 1 alone and 3 alone; "without 3" is "1 alone", already known
        assert any("[1] The Eiffel Tower is in Paris\n[3] Berlin is in Germany" in p for p in prompts)
        assert table.loc["q"].tolist() == pytest.approx([0.5, 2 / 3]) and table.loc[["odd", "down"]].isna().all().all()
        records = {
            r["qid"]: r
            for r in map(json.loads, (tmp_path / "systems" / "bm25" / "citations.jsonl").read_text().splitlines())
        }
        assert records["odd"]["error"] == "unparseable reply: no yes/no verdict in the reply 'perhaps'"
        assert "HTTP 500" in records["down"]["error"] and records["q"]["error"] == ""
        assert "citations bm25: 2 of 3 queries not scored" in caplog.text
        assert {call.prompt_id[0] for call in evaluator.client.take_calls()} == {
            "q",
            "odd",
        }  # keyed by query (usage.csv's rows)
    finally:
        server.stop()


def test_the_extractive_generator_cites_its_passage() -> None:
    generator = ExtractiveGenerator(top_k=3, unit="sentence", cite=True)
    answers = generator.generate({"q": "Where is the Eiffel Tower?"}, {"q": PASSAGES[::-1]})
    assert answers == {"q": "The Eiffel Tower is in Paris [3]"}
    plain = ExtractiveGenerator(top_k=3, unit="sentence").generate(
        {"q": "Where is the Eiffel Tower?"}, {"q": PASSAGES[::-1]}
    )
    assert plain == {"q": "The Eiffel Tower is in Paris"}


def test_a_dry_run_of_llm_citations_bounds_the_later_rounds() -> None:
    """Offline, the joint checks failed as not sent and the single-passage checks after them went
    uncounted: 2 planned where the real run asks 4 (ANSWER: [1][3] jointly, then each alone)."""
    server = SupportServer()
    try:
        settings = {
            "mode": "llm",
            "prompt": "Q: {question}\nPASSAGES:\n{passages}\nSTATEMENT: {statement}\nyes or no?",
            "top_k": 3,
            "base_url": server.url,
            "model": "m",
            "timeout": 5,
            "max_retries": 0,
        }
        dry, real = CitationEvaluator(**settings), CitationEvaluator(**settings)
        dry.client.offline = True
        dry.evaluate(data_for({"q": ANSWER}))
        planned = dry.client.take_calls()
        assert (
            len(planned) == 2 and dry.unsent_followups() == 4
        )  # (1, 3) and (2) jointly; then ≤ 2 checks per citation of (1, 3)
        real.evaluate(data_for({"q": ANSWER}))
        assert len(server.requests) == 4 <= len(planned) + dry.unsent_followups()
    finally:
        server.stop()


def test_the_constructor_takes_the_models_settings_and_needs_an_endpoint_in_llm_mode_only() -> None:
    """Lexical mode needs no endpoint; llm mode names what it lacks; an unknown key is refused; the
    defaults are the model's (the shipped prompt, the local endpoint)."""
    assert CitationEvaluator().client is None
    with pytest.raises(
        RagtrackError, match="citations evaluator: llm mode needs model: give evaluator.citations.model"
    ):
        CitationEvaluator(mode="llm")
    with pytest.raises(RagtrackError, match="citations evaluator: tp_k: no such key"):
        CitationEvaluator(tp_k=3)
    evaluator = CitationEvaluator(mode="llm", model="m")
    assert evaluator.prompt == CitationSettings().prompt and evaluator.client.base_url == "http://127.0.0.1:8000/v1"
