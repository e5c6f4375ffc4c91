"""``ragtrack trec_eval`` against trec_eval 10.0 itself: every command of trec_eval's Makefile quicktest
(tests/data/trec_eval, SOURCE.md there), every line of its expected output; and
small cases checked against a trec_eval 10.0 build (-J, -M, -N, gains, parameters, errors)."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from ragtrack.core.runs import read_trec
from ragtrack.pipeline.commands.cli import main as cli_main

DATA = Path(__file__).parents[1] / "data" / "trec_eval"
QUICKTEST = {  # expected output -> trec_eval's arguments, as its Makefile's quicktest runs them
    "out.test": "qrels.test results.test",
    "out.test ": "qrels.test.with-comments results.test",
    "out.comment.test": "qrels.comment.test results.comment.test",
    "out.test.a": "-m all_trec qrels.test results.test",
    "out.test.aq": "-m all_trec -q qrels.test results.test",
    "out.test.aqc": "-m all_trec -q -c qrels.test results.trunc",
    "out.test.aqcM": "-m all_trec -q -c -M100 qrels.test results.trunc",
    "out.test.aql": "-m all_trec -mrelstring.20 -q -l2 qrels.rel_level results.test",
    "out.test.meas_params": "-q -miprec_at_recall..10,.20,.25,.75,.50 -m P.5,7,3 -m recall.20,2000 -m Rprec_mult.5.0,0.2,0.35 "
    "-mutility.2,-1,0,0 -m 11pt_avg..25,.5,.75 -mndcg.1=3,2=9,4=4.5 -mndcg_cut.10,20,23.4 -msuccess.2,5,20 "
    "qrels.test results.test",
    "out.test.aqZ": "-q -m all_trec -Z zscores_file qrels.test results.test",
    "out.test.qrels_jg": "-m qrels_jg -q -R qrels_jg qrels.123 results.test",
    "out.test.qrels_jg ": "-m qrels_jg -q -R qrels_jg qrels.comments.123 results.test",
    "out.test.prefs": "-m all_prefs -q -R prefs prefs.test prefs.results.test",
    "out.test.prefs ": "-m all_prefs -q -R prefs prefs.comment.test prefs.results.test",
    "out.test.qrels_prefs": "-m all_prefs -q -R qrels_prefs qrels.test results.test",
}


def shipped(argument: str) -> str:
    """A file argument as shipped here (large inputs gzip-compressed), anything else as it is."""
    for name in (argument, f"{argument}.gz"):
        if (DATA / name).is_file():
            return str(DATA / name)
    return argument


def trec_eval(capsys, *arguments: str) -> tuple[int, str, str]:
    code = cli_main(["trec_eval", *arguments])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("expected", list(QUICKTEST))
def test_quicktest_output_line_for_line(expected: str, capsys) -> None:
    code, out, err = trec_eval(capsys, *map(shipped, QUICKTEST[expected].split()))
    assert (code, err) == (0, "")
    assert out.splitlines() == (DATA / expected.strip()).read_text().splitlines()


def write(tmp_path: Path, qrels: str, run: str) -> tuple[str, str]:
    (tmp_path / "qrels").write_text(qrels)
    (tmp_path / "run").write_text(run)
    return str(tmp_path / "qrels"), str(tmp_path / "run")


QRELS = "q1 0 a 1\nq1 0 b 0\nq1 0 c 2\nq1 0 u -1\nq2 0 d 1\n"
RUN = (
    "q1 Q0 x 1 3.0 tagA\nq1 Q0 a 2 2.0 tagA\nq1 Q0 u 3 1.5 tagA\nq1 Q0 y 4 1.0 tagA\nq1 Q0 b 5 0.5 tagA\nq1 Q0 c 6 0.25 tagA\n"
    "q3 Q0 d 1 1 tagB\n"
)
# what trec_eval 10.0 (built from the commit in SOURCE.md) prints for these arguments on QRELS and RUN
ORACLE = {
    "-c -J -q -m num_ret -m map -m P.2 -m relstring -m utility.1,-1,0,2 -N 100 -m bpref": "num_ret q1 3|map q1 0.8333|bpref q1 0.5000|P_2 q1 0.5000|relstring q1 '102'|utility_1,-1,0,2 q1 195.0000|num_ret q2 0|"
    "map q2 0.0000|bpref q2 0.0000|P_2 q2 0.0000|relstring q2 ''|utility_1,-1,0,2 q2 198.0000|num_ret all 3|map all 0.4167|"
    "bpref all 0.2500|P_2 all 0.2500|utility_1,-1,0,2 all 196.5000",
    "-c -M3 -q -m num_ret -m recall.2 -m relstring -m unj.2 -m rbp_resid -m ndcg_rel -m Rndcg -m G": "num_ret q1 3|relstring q1 '-1.'|recall_2 q1 0.5000|G q1 0.1667|ndcg_rel q1 0.2398|Rndcg q1 0.1199|rbp_resid q1 0.9100|"
    "unj_2 q1 0.5000|num_ret q2 0|relstring q2 ''|recall_2 q2 0.0000|G q2 0.0000|ndcg_rel q2 0.0000|Rndcg q2 0.0000|"
    "rbp_resid q2 0.0000|unj_2 q2 0.0000|num_ret all 3|recall_2 all 0.2500|G all 0.0833|ndcg_rel all 0.1199|Rndcg all 0.0600|"
    "rbp_resid all 0.4550|unj_2 all 0.2500",
    "-c -q -l2 -m infAP -m ndcg.0=1,2=3 -m rbp.p=0.5 -m set_F.0.5 -m iprec_at_recall.0.5": "iprec_at_recall_0.50 q1 0.1667|infAP q1 0.1667|ndcg_0=1,2=3 q1 0.5051|set_F_0.5 q1 0.2308|rbp_p=0.5 q1 0.1406|"
    "iprec_at_recall_0.50 q2 0.0000|infAP q2 0.0000|ndcg_0=1,2=3 q2 0.0000|set_F_0.5 q2 0.0000|rbp_p=0.5 q2 0.0000|"
    "iprec_at_recall_0.50 all 0.0833|infAP all 0.0833|ndcg_0=1,2=3 all 0.2525|set_F_0.5 all 0.1154|rbp_p=0.5 all 0.0703",
    "-c -J -q -m iprec_at_recall.0,0.5 -m 11pt_avg -n":  # -J leaves q2's stand-in ranking empty: trec_eval's 0/0
    "iprec_at_recall_0.00 q1 1.0000|iprec_at_recall_0.50 q1 1.0000|11pt_avg q1 0.9091|iprec_at_recall_0.00 q2 -nan|"
    "iprec_at_recall_0.50 q2 0.0000|11pt_avg q2 -nan",
    "-c -q -m ndcg.1=3,2=0.5 -m G.2=0.5 -m Rndcg.1=3,2=0.5":  # gains 0.5 and 0 compare equal in trec_eval's sort
    "G_2=0.5 q1 0.8161|ndcg_1=3,2=0.5 q1 0.6903|Rndcg_1=3,2=0.5 q1 0.3451|G_2=0.5 q2 0.0000|ndcg_1=3,2=0.5 q2 0.0000|"
    "Rndcg_1=3,2=0.5 q2 0.0000|G_2=0.5 all 0.4080|ndcg_1=3,2=0.5 all 0.3451|Rndcg_1=3,2=0.5 all 0.1726",
}


@pytest.mark.parametrize("arguments", list(ORACLE))
def test_options_and_parameters_equal_trec_eval(arguments: str, tmp_path: Path, capsys) -> None:
    code, out, _ = trec_eval(capsys, *arguments.split(), *write(tmp_path, QRELS, RUN))
    assert code == 0
    assert "|".join(" ".join(line.split()) for line in out.splitlines()) == ORACLE[arguments]


def test_runid_is_the_last_line_tag_and_num_q_counts_judged_queries(tmp_path: Path, capsys) -> None:
    code, out, _ = trec_eval(capsys, "-c", "-m", "runid", "-m", "num_q", *write(tmp_path, QRELS, RUN))
    assert (code, out) == (0, "runid                 \tall\ttagB\nnum_q                 \tall\t2\n")


@pytest.mark.parametrize(
    "arguments, message",
    [
        (
            [],
            "judged query 'q2' of",
        ),  # trec_eval 10 stops too (exit 4) when a judged query has no results and -c is not given
        (["-m", "P.0"], "cutoffs must be positive"),
        (["-m", "ndcgg"], "no such trec_eval measure"),
        (["-m", "prefs_simp"], "-m prefs_simp needs -R prefs judgments"),
        (["-R", "prefs_jg"], "reads -R qrels or qrels_jg or prefs or qrels_prefs"),
        (["-m", "yaap"], "does not compute this measure"),
        (["-m", "map_avgjg"], "-m map_avgjg needs -R qrels_jg judgments"),
        (["-m", "utility.1,2"], "utility takes 4 coefficients"),
        (["-x"], "option -x not recognized"),
    ],
)
def test_mistakes_are_one_line(arguments: list[str], message: str, tmp_path: Path, capsys) -> None:
    code, out, err = trec_eval(capsys, *arguments, *write(tmp_path, QRELS, RUN))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_run_comments_and_extra_fields_are_read_as_trec_eval_reads_them(tmp_path: Path) -> None:
    """A ``#`` line is a comment in a run (after blanks too) and in qrels; a run line's fields after the
    sixth are ignored (trec_eval's results.trunc); fewer than six is still an error naming the line."""
    qrels, run = write(
        tmp_path, "# judged by\nq1 0 a 1\n", "# a comment\n  # another\nq1 Q0 a 1 2.0 tag more junk here\n"
    )
    assert read_trec(run).scores == {"q1": {"a": 2.0}}
    assert cli_main(["eval", qrels, run, "-m", "map"]) == 0
    (tmp_path / "short").write_text("q1 Q0 a 1 2.0\n")
    with pytest.raises(Exception, match=r"short:1: expected 6 columns"):
        read_trec(tmp_path / "short")


@pytest.mark.parametrize(
    "command",
    [
        ["eval", "{qrels}", "{run}"],
        ["eval", "{qrels}", "{run}", "-m", "P_5,map,infAP"],
        ["trec_eval", "-c", "-m", "all_trec", "{qrels}", "{run}"],
        ["metrics"],
        None,
    ],
)
def test_starts_without_pandas_hydra_mlflow_or_torch(command: list[str] | None, tmp_path: Path) -> None:
    """``ragtrack eval``, ``ragtrack trec_eval``, ``ragtrack metrics`` and ``import ragtrack`` import none
    of them, from the first line read to the last printed (small files are read without Arrow too, and
    scoring needs no pydantic, which only ``metrics`` loads, for the plugins' settings models)."""
    qrels, run = write(tmp_path, QRELS, RUN)
    arguments = [part.format(qrels=qrels, run=run) for part in command] if command else None
    heavy = ("pandas", "hydra", "omegaconf", "mlflow", "torch", "pyarrow") + (
        ("pydantic",) if command != ["metrics"] else ()
    )
    script = (
        "import contextlib, io, sys\nimport ragtrack\n"
        + (
            f"from ragtrack.pipeline.commands.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n    assert main({arguments!r}) == 0\n"
            if arguments
            else ""
        )
        + f"print(sorted(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_every_all_trec_measure_is_in_the_metric_registry() -> None:
    """trec_eval's all_trec (but runid, num_q and relstring, which are no per-query numbers) as registry
    names: jobs, compare, the API and the MLflow scorers take each."""
    from ragtrack.evaluators.ranking import RankingEvaluator, parse_metric
    from ragtrack.pipeline.commands.trec_eval import registry_names

    names = registry_names(["all_trec"])
    assert len(names) == 97 and all(RankingEvaluator.handles(name) and parse_metric(name) for name in names)


def test_eval_reads_trec_eval_names_and_options(capsys) -> None:
    """``ragtrack eval -q -l1 -c -m P.5,10 -m recip_rank,map -m iprec_at_recall_0.10``: the means trec_eval prints."""
    qrels, run = shipped("qrels.test"), shipped("results.test")
    assert (
        cli_main(
            [
                "eval",
                "-q",
                "-l1",
                "-c",
                "-m",
                "P.5,10",
                "-m",
                "recip_rank,map",
                "-m",
                "iprec_at_recall_0.10",
                qrels,
                run,
            ]
        )
        == 0
    )
    means = {line.split()[0]: line.split()[2] for line in capsys.readouterr().out.splitlines() if "\tall\t" in line}
    assert means == {
        "p@5": "0.2667",
        "p@10": "0.3000",
        "mrr": "0.4064",
        "map": "0.1785",
        "iprec_at_recall@0.1": "0.3885",
    }
    assert cli_main(["eval", "-m", "utility.2,-1,0,0", qrels, run]) == 2
    assert "ragtrack trec_eval -m utility.2,-1,0,0 computes it" in capsys.readouterr().err


@pytest.mark.parametrize(
    "arguments, expected",
    [
        ("-c -q -m qrels_jg -R qrels_jg qrels.123", "map_avgjg 303 0.0000|P_avgjg_5 303 0.0000"),
        (
            "-c -q -m prefs_simp -m prefs_num_prefs_poss -R qrels_prefs qrels.test",
            "prefs_num_prefs_poss 303 9020|prefs_simp 303 0.0000",
        ),
    ],
)
def test_judged_query_missing_from_the_run_with_c_in_the_other_formats(
    arguments: str, expected: str, tmp_path: Path, capsys
) -> None:
    """-R qrels_jg and -R qrels_prefs score a judged query the run lacks as trec_eval does under -c
    (its values checked against trec_eval 10.0's output for this run, results.test without topic 303)."""
    run = tmp_path / "run"
    run.write_text("".join(line for line in gzip.open(DATA / "results.test.gz", "rt") if not line.startswith("303")))
    *options, qrels = arguments.split()
    code, out, _ = trec_eval(capsys, *options, shipped(qrels), str(run))
    lines = [" ".join(line.split()) for line in out.splitlines() if "\t303\t" in line]
    assert code == 0 and "|".join(lines[:2]) == expected


def test_runid_read_from_the_tail_of_a_run(tmp_path: Path) -> None:
    """The run's last result line, from the file's tail where it holds that line whole, else from the whole file."""
    from ragtrack.core.runs import run_tag

    run = tmp_path / "run"
    run.write_text("q1 Q0 a 1 2.0 first\nq1 Q0 b 2 1.0 last\n# a comment at the end\n")
    assert {run_tag(run, tail_bytes) for tail_bytes in (1, 8, 30, 1000)} == {"last"}


def test_run_read_from_standard_input(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``trec_eval QRELS -``: the run from standard input, as trec_eval 10 reads it."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(gzip.open(DATA / "results.test.gz").read())))
    code, out, _ = trec_eval(capsys, shipped("qrels.test"), "-")
    assert code == 0 and out.splitlines() == (DATA / "out.test").read_text().splitlines()
