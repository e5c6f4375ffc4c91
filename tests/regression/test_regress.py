"""``ragtrack regress``: the regression-fixture runner (pipeline/commands/regress.py) and the shipped conditions
(pipeline/regressions.yaml). The runner tests use the toy dataset and the model-free hashing encoder."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.commands import regress
from ragtrack.pipeline.commands.cli import main
from ragtrack.pipeline.configuration.config import compose

# Toy dataset (12 documents, 7 queries), hashing encoder: bm25 nDCG@10 0.92006, dense and hybrid 0.96170.
TOY_CONDITIONS = """\
tolerance:
  default: 0.00005
conditions:
  - name: toy-default
    description: toy, bm25 + dense (hashing) + hybrid
    overrides: [dataset=toy, encoder=hashing]
    slow: false
    expected: {bm25/ndcg@10: 0.9201, dense/ndcg@10: 0.9617, hybrid/ndcg@10: 0.9617}
  - name: toy-wrong
    description: toy bm25 with one wrong figure
    overrides: [dataset=toy, "retriever=[bm25]", "fusion=[]"]
    slow: false
    expected: {bm25/ndcg@10: 0.9301, bm25/mrr: 1.0}
  - name: toy-tolerant
    description: toy bm25, 0.0005 off but within its tolerance
    overrides: [dataset=toy, "retriever=[bm25]", "fusion=[]"]
    slow: false
    tolerance: {"bm25/*": 0.001}
    expected: {bm25/ndcg@10: 0.9206}
  - name: toy-dense
    description: toy dense only, marked slow
    overrides: [dataset=toy, encoder=hashing, "retriever=[dense]", "fusion=[]"]
    slow: true
    expected: {dense/ndcg@10: 0.9617}
"""

LINE = re.compile(
    r"^(OK|FAIL) +(\S+) +(\S+) +(\d\.\d{4})  \(expected (\d\.\d{4}), delta ([+-]\d\.\d{4})(, tolerance \S+)?\)$"
)


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    """A fresh project root: caches and outputs under tmp_path."""
    monkeypatch.setenv("RAGTRACK_ROOT", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def toy_file(root: Path) -> Path:
    path = root / "regressions.yaml"
    path.write_text(TOY_CONDITIONS)
    return path


def error_line(err: str) -> str:
    """The last line of stderr without the progress bars before it on the same line."""
    return err.splitlines()[-1].split("\r")[-1]


def figure_lines(out: str) -> dict[tuple[str, str], tuple]:
    """(condition, figure) -> (status, measured, expected, delta) of every OK/FAIL line."""
    found = {}
    for line in out.splitlines():
        if match := LINE.match(line):
            status, name, figure, measured, expected, delta, _ = match.groups()
            found[name, figure] = (status, measured, expected, delta)
    return found


def test_passing_and_failing_figures(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file)]) == 1
    out = capsys.readouterr().out
    lines = figure_lines(out)
    assert lines == {
        ("toy-default", "bm25/ndcg@10"): ("OK", "0.9201", "0.9201", "+0.0000"),
        ("toy-default", "dense/ndcg@10"): ("OK", "0.9617", "0.9617", "+0.0000"),
        ("toy-default", "hybrid/ndcg@10"): ("OK", "0.9617", "0.9617", "+0.0000"),
        ("toy-wrong", "bm25/ndcg@10"): ("FAIL", "0.9201", "0.9301", "-0.0100"),
        ("toy-wrong", "bm25/mrr"): ("OK", "1.0000", "1.0000", "+0.0000"),
        ("toy-tolerant", "bm25/ndcg@10"): ("OK", "0.9201", "0.9206", "-0.0005"),
    }
    assert "FAIL toy-wrong     bm25/ndcg@10    0.9201  (expected 0.9301, delta -0.0100, tolerance 5e-05)" in out
    assert out.splitlines()[-2].startswith("SKIP toy-dense")  # slow, not run
    assert re.match(r"FAILED: 5 OK, 1 FAIL in 3 condition\(s\), 1 skipped as slow \(\d+\.\d s\)$", out.splitlines()[-1])


def test_all_passing_returns_zero(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file), "--only", "toy-default,toy-tolerant"]) == 0
    out = capsys.readouterr().out
    assert [status for status, *_ in figure_lines(out).values()] == ["OK"] * 4
    assert out.splitlines()[-1].startswith("PASSED: 4 OK, 0 FAIL in 2 condition(s) (")


def test_selection_by_pattern_and_slow_flag(toy_file: Path) -> None:
    conditions = regress.load_conditions(toy_file)

    def names(patterns=(), slow=False):
        run, skipped = regress.select(conditions, patterns, slow)
        return [c.name for c in run], [c.name for c in skipped]

    assert names() == (["toy-default", "toy-wrong", "toy-tolerant"], ["toy-dense"])
    assert names(slow=True) == (["toy-default", "toy-wrong", "toy-tolerant", "toy-dense"], [])
    assert names(["toy-t*"]) == (["toy-tolerant"], [])
    assert (
        names(["toy-wrong", "toy-tolerant"]) == names(["toy-wrong,toy-tolerant"]) == (["toy-wrong", "toy-tolerant"], [])
    )
    assert names(["*dense*"]) == ([], ["toy-dense"])  # a pattern does not run a slow condition...
    assert names(["toy-dense"]) == (["toy-dense"], [])  # ...its exact name does
    with pytest.raises(
        RagtrackError,
        match=r"no regression condition matches 'nope'; conditions: toy-default, toy-wrong, toy-tolerant, toy-dense",
    ):
        regress.select(conditions, ["toy-*", "nope"])


def test_slow_condition_runs_when_named(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file), "--only", "toy-dense"]) == 0
    out = capsys.readouterr().out
    assert figure_lines(out) == {("toy-dense", "dense/ndcg@10"): ("OK", "0.9617", "0.9617", "+0.0000")}
    assert "SKIP" not in out


def test_only_skipped_conditions_run_nothing(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file), "--only", "*dense*"]) == 0
    out = capsys.readouterr().out
    assert figure_lines(out) == {}
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0] == "SKIP toy-dense  (slow: run with --slow or name it in --only)"
    assert lines[1].startswith("PASSED: 0 OK, 0 FAIL in 0 condition(s), 1 skipped as slow")


def test_unknown_pattern_is_a_user_error(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file), "--only", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == (
        "ragtrack: error: no regression condition matches 'nope'; "
        "conditions: toy-default, toy-wrong, toy-tolerant, toy-dense"
    )


def test_list(toy_file: Path, capsys) -> None:
    assert main(["regress", "--file", str(toy_file), "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:4] for line in lines] == [
        ["toy-default", "fast", "3", "figures"],
        ["toy-wrong", "fast", "2", "figures"],
        ["toy-tolerant", "fast", "1", "figures"],
        ["toy-dense", "slow", "1", "figures"],
    ]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("conditions: [name: x\n", r"regressions.yaml:\d+: invalid YAML: "),
        ("- name: x\n", r"regressions.yaml: expected a mapping with a 'conditions' list"),
        ("conditions:\n  - overrides: []\n", r"regressions.yaml: condition #1 must be a mapping with a 'name'"),
        (
            "conditions:\n  - {name: x, overrides: []}\n",
            r"condition 'x': 'expected' must map \"<system>/<metric>\" to numbers",
        ),
        ("conditions:\n  - {name: x, expected: {ndcg@10: 0.5}}\n", r"condition 'x': 'expected' must map"),
        ("conditions:\n  - {name: x, expected: {bm25/ndcg@10: high}}\n", r"condition 'x': 'expected' must map"),
        (
            "conditions:\n  - {name: x, overrides: dataset=toy, expected: {bm25/mrr: 1}}\n",
            r"condition 'x': 'overrides' must be a list",
        ),
        (
            "conditions:\n  - {name: x, slow: maybe, expected: {bm25/mrr: 1}}\n",
            r"condition 'x': 'slow' must be true or false",
        ),
        ("conditions:\n  - {name: x, expect: {bm25/mrr: 1}}\n", r"condition 'x': unknown key\(s\) expect"),
        (
            "conditions:\n  - {name: x, expected: {bm25/mrr: 1}}\n  - {name: x, expected: {bm25/mrr: 1}}\n",
            r"condition 'x' is defined twice",
        ),
        ("tolerance: 0.1\nconditions: []\n", r"'tolerance' must be a mapping with a numeric 'default'"),
    ],
)
def test_malformed_file_names_file_and_problem(root: Path, capsys, text: str, problem: str) -> None:
    path = root / "regressions.yaml"
    path.write_text(text)
    assert main(["regress", "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ragtrack: error: {path}") and re.search(problem, err), err


def test_missing_file(root: Path, capsys) -> None:
    assert main(["regress", "--file", str(root / "absent.yaml")]) == 2
    assert capsys.readouterr().err.startswith(f"ragtrack: error: {root / 'absent.yaml'}: regressions file not found")


@pytest.mark.parametrize(
    ("figure", "problem"),
    [
        ("bm25/nosuch@10", "condition 'toy-bm25': metric 'nosuch@10' was not produced for bm25 (metrics: ndcg@1, "),
        ("dense/ndcg@10", "condition 'toy-bm25': no system 'dense' is configured (systems: bm25)"),
    ],
)
def test_figure_not_produced(root: Path, capsys, figure: str, problem: str) -> None:
    path = root / "regressions.yaml"
    path.write_text(
        textwrap.dedent(f"""\
        conditions:
          - name: toy-bm25
            overrides: [dataset=toy, "retriever=[bm25]", "fusion=[]"]
            expected: {{bm25/ndcg@10: 0.9201, {figure}: 0.5}}
        """)
    )
    assert main(["regress", "--file", str(path)]) == 2
    assert error_line(capsys.readouterr().err).startswith(f"ragtrack: error: {problem}")


def test_bad_override_names_the_condition(root: Path, capsys) -> None:
    path = root / "regressions.yaml"
    path.write_text(
        'conditions:\n  - {name: toy-typo, overrides: [dataset=toy, "retriever=[bm52]"], expected: {bm25/mrr: 1}}\n'
    )
    assert main(["regress", "--file", str(path)]) == 2
    assert error_line(capsys.readouterr().err).startswith(
        "ragtrack: error: condition 'toy-typo': retriever: 'bm52' is not allowed: one of bm25, bm25_multifield, dense, run_file; did you mean 'bm25'?"
    )


def test_shipped_conditions_are_marked_slow_exactly_when_dense(root: Path) -> None:
    conditions = regress.load_conditions()
    assert {"scifact-bm25", "xquad-bm25", "scifact-default", "xquad-qa"} <= {c.name for c in conditions}
    for condition in conditions:
        cfg = compose([*condition.overrides, "tracking=none", f"paths.output_dir={root}"])
        assert condition.slow == ("dense" in cfg.retriever), condition.name
        assert {f.split("/")[0] for f in condition.expected} <= {
            *cfg.retriever,
            *(f.system for f in (cfg.get("fusion") or {}).values()),
        }
        assert all(round(v, 4) == v for v in condition.expected.values()), condition.name
    bm25 = next(c for c in conditions if c.name == "scifact-bm25")
    assert bm25.expected["bm25/ndcg@10"] == 0.6789 and bm25.tolerance_for("bm25/ndcg@10") == 0  # Anserini's BM25 flat


def test_shipped_bm25_conditions_pass(root: Path, capsys) -> None:
    assert main(["regress", "--only", "*bm25*"]) == 0
    out = capsys.readouterr().out
    lines = figure_lines(out)
    assert lines[("scifact-bm25", "bm25/ndcg@10")] == ("OK", "0.6789", "0.6789", "+0.0000")
    assert lines[("scifact-bm25-multifield", "bm25_multifield/recall@1000")] == ("OK", "0.9800", "0.9800", "+0.0000")
    assert {name for name, _ in lines} == {"scifact-bm25", "scifact-bm25-multifield", "xquad-bm25"}
    assert ("xquad-bm25", "bm25/answer_f1") in lines and ("xquad-bm25", "bm25/exact_match") in lines
    assert all(status == "OK" for status, *_ in lines.values())
    assert out.splitlines()[-1].startswith(f"PASSED: {len(lines)} OK, 0 FAIL in 3 condition(s) (")


@pytest.mark.slow  # the real MiniLM encoder: ~10 min cold on 2 cores (SciFact), seconds with a warm cache
def test_shipped_dense_conditions_pass(capsys) -> None:
    """Runs in the usual project root (cwd or $RAGTRACK_ROOT) so the embedding cache of `make run` is reused."""
    slow = [c.name for c in regress.load_conditions() if c.slow]
    assert slow
    assert main(["regress", "--only", ",".join(slow)]) == 0
    out = capsys.readouterr().out
    lines = figure_lines(out)
    assert {name for name, _ in lines} == set(slow)
    assert {figure.split("/")[0] for _, figure in lines} == {"bm25", "dense", "hybrid"}
    assert all(status == "OK" for status, *_ in lines.values()), out
