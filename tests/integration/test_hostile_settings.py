"""``ragtrack run`` with hostile settings, as a user types them: exit code 2, exactly one line on
stderr, no traceback, and nothing written (no output folder, no MLflow store or run, no cache entry).
The full table of messages is tests/unit/test_settings.py; this runs a representative subset end to end."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import ragtrack

TOY = ["dataset=toy", "encoder=hashing"]

CASES = {
    "depth text": (["depth=abc"], "depth: 'abc' is not allowed: an integer >= 1"),
    "depth zero": (["depth=0"], "depth: 0 is not allowed: an integer >= 1"),
    "negative seed": (["seed=-1"], "seed: -1 is not allowed: an integer >= 0"),
    "encoder dim zero": (["encoder.dim=0"], "encoder.dim: 0 is not allowed: an integer >= 1"),
    "bm25 k1 negative": (["retriever.bm25.k1=-3"], "retriever.bm25.k1: -3 is not allowed: a finite number >= 0"),
    "fusion weight nan": (
        ["fusion.rrf.weights=[nan,1.0]"],
        "fusion.rrf.weights[0]: nan is not allowed: a finite number >= 0",
    ),
    "misspelled key": (["fusion.rrf.kk=3"], "fusion.rrf.kk: no such key; did you mean 'fusion.rrf.k'?"),
    "misspelled option": (
        ["retriever=bm52"],
        "retriever: 'bm52' is not allowed: one of bm25, bm25_multifield, dense, run_file; did you mean 'bm25'?",
    ),
    "misspelled encoder": (
        ["encoder=minilmm"],
        "encoder: 'minilmm' is not allowed: one of hashing, minilm, minilm_onnx, minilm_onnx_int8; did you mean 'minilm'?",
    ),
    "sweep with a bad value": (
        ["-m", "fusion.rrf.k=-1,60"],
        "the sweep's job fusion.rrf.k=-1: fusion.rrf.k: -1 is not allowed: a finite number >= 0",
    ),
    # every job is checked before the first runs: a bad value in the last job leaves nothing either
    "sweep with a bad last value": (
        ["-m", "fusion.rrf.k=60,20", "retriever.bm25.b=0.4,1.5"],
        "the sweep's job fusion.rrf.k=60 retriever.bm25.b=1.5: retriever.bm25.b: 1.5 is not allowed: a finite number in [0, 1]",
    ),
    "preset sweep with a bad value": (
        ["-m", "experiment=rrf_k", "retriever.bm25.k1=0.9,-2"],
        "the sweep's job fusion.rrf.k=1 retriever.bm25.k1=-2: retriever.bm25.k1: -2 is not allowed: a finite number >= 0",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_hostile_setting_stops_the_job_in_one_line_leaving_nothing(tmp_path: Path, case: str) -> None:
    overrides, message = CASES[case]
    flags = [o for o in overrides if o.startswith("-")]
    done = ragtrack(tmp_path, "run", *flags, *TOY, *[o for o in overrides if not o.startswith("-")])
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.splitlines() == [f"ragtrack: error: {message}"]
    assert "Traceback" not in done.stdout + done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no outputs/, no mlruns/, no .cache/


def test_an_output_folder_that_cannot_be_made_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    done = ragtrack(tmp_path, "run", *TOY, f"paths.output_dir={tmp_path}/afile/job")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert (
        done.stderr.splitlines()[-1]
        == f"ragtrack: error: paths.output_dir: the folder {tmp_path}/afile/job cannot be made: Not a directory"
    )


def test_a_misspelled_option_of_the_users_own_configs(tmp_path: Path) -> None:
    mine = tmp_path / "myconf" / "dataset"
    mine.mkdir(parents=True)
    (mine / "mine.yaml").write_text("type: beir\nname: mine\npath: /data/mine\nsplit: test\nqrels_file: null\n")
    done = ragtrack(tmp_path, "run", "--config-dir", str(tmp_path / "myconf"), "dataset=mnie", "encoder=hashing")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "ragtrack: error: dataset: 'mnie' is not allowed: one of beir, irds, mine, scifact, toy, trec, xquad_en, xquad_en_unanswerable; did you mean 'mine'?"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["myconf"]
