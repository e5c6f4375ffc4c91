"""The ``ragtrack`` command: ``run`` (the Hydra app), ``eval`` (trec_eval-style scoring of TREC
files), ``trec_eval`` (trec_eval 10.0 as a drop-in), ``metrics`` (every available metric), ``compare``
(systems side by side with paired tests), ``reproduce`` (re-run a logged job), ``regress`` (check the
regression fixtures), ``ui`` (the MLflow UI on the project's store).

Each command imports what it needs when it runs, so ``ragtrack eval``, ``ragtrack trec_eval`` and
``ragtrack metrics`` start without loading pandas, Hydra or MLflow."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from ragtrack.core.errors import RagtrackError, describe_fault
from ragtrack.core.files import check_writable_folder, json_text
from ragtrack.core.secrets import mask
from ragtrack.pipeline.records.layout import default_tracking_uri as store_under


def _columns_of_first_line(path: Path) -> int:
    """How many columns the first non-blank line of a file has (0 when it cannot be read)."""
    from ragtrack.core.errors import InputError
    from ragtrack.core.files import read_lines

    try:
        return len(next(read_lines(path), (0, ""))[1].split())
    except InputError:
        return 0


def _evaluate_answer_files(args: argparse.Namespace):
    """``eval --answers GOLD --predictions PRED``: predictions made anywhere, scored like run-time answers."""
    from ragtrack.pipeline.commands.api import evaluate_answers

    if args.qrels or args.run or not (args.answers and args.predictions):
        raise RagtrackError(
            "score answers with: ragtrack eval --answers GOLD --predictions PRED [-m answer_f1 ...] (no qrels or run file)"
        )
    result = evaluate_answers(Path(args.answers), Path(args.predictions), args.metric, args.seed)
    if result.missing:
        shown = ", ".join(result.missing[:5]) + (", ..." if len(result.missing) > 5 else "")
        print(
            f"ragtrack: note: {len(result.missing)} questions with gold answers have no prediction in {args.predictions} "
            f"(scored as the empty answer): {shown}",
            file=sys.stderr,
        )
    return result


class _CommaList(argparse.Action):
    """A repeatable option whose every value may be a comma list (``-m ndcg@10,map`` is ``-m ndcg@10
    -m map``, as in a config's ``metrics=[ndcg@10,map]``): ``-m`` of ``eval`` and ``compare``,
    ``compare --experiment`` and ``--run``."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str,
        option_string: str | None = None,
    ) -> None:
        names = [name.strip() for name in values.split(",")]
        if not all(names):
            parser.error(f"argument {'/'.join(self.option_strings)}: an empty name in {values!r}")
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or ()), *names])


class _MeasureList(_CommaList):
    """``eval -m``: a comma list, except that trec_eval's ``name.params`` stays whole (``-m P.5,10``)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str,
        option_string: str | None = None,
    ) -> None:
        if re.fullmatch(r"\w+\.[^@]+", values):
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or ()), values])
        else:
            super().__call__(parser, namespace, values, option_string)


def command_eval(args: argparse.Namespace) -> int:
    if args.answers or args.predictions:
        result, counted_as = _evaluate_answer_files(args), ""
    else:
        from ragtrack.evaluators.ranking import COUNTED_QUERIES

        result, counted_as = _evaluate_run_file(args), f" {COUNTED_QUERIES[args.without_relevant]}"
    if args.json:
        print(json_text(result.to_dict(per_query=args.per_query), indent=2))
        return 0
    summary = result.summary_rows()
    if args.per_query:
        for qid, row in result.per_query_rows().items():
            for metric in summary:
                print(f"{metric:<16}\t{qid}\t{row[metric]:.4f}")
    for metric, row in summary.items():
        print(
            f"{metric:<16}\tall\t{row['mean']:.4f}\t(std {row['std']:.4f}, 95% CI {row['ci_low']:.4f}-{row['ci_high']:.4f}, n={int(row['n'])}{counted_as})"
        )
    return 0


def _evaluate_run_file(args: argparse.Namespace):
    from ragtrack.core.words import counted
    from ragtrack.evaluators.ranking import checked_threshold
    from ragtrack.pipeline.run_files import evaluate_files

    if not (args.qrels and args.run):
        raise RagtrackError("use: ragtrack eval QRELS RUN, or ragtrack eval --answers GOLD --predictions PRED")
    if _columns_of_first_line(Path(args.qrels)) == 6 and _columns_of_first_line(Path(args.run)) in (3, 4):
        raise RagtrackError(
            f"the arguments look swapped: {args.qrels} is a run file and {args.run} a qrels file; "
            "use: ragtrack eval QRELS RUN"
        )
    threshold = checked_threshold(args.relevance_threshold, "--relevance-threshold")
    if args.metric:  # trec_eval's names too: P_5, P.5,10, recip_rank, official
        from ragtrack.pipeline.commands.trec_eval import registry_names

        args.metric = registry_names(args.metric)
    result = evaluate_files(Path(args.qrels), Path(args.run), args.metric, threshold, args.seed, args.without_relevant)
    if result.no_relevant:
        rule = (
            "left out of the means (--without-relevant exclude; trec_eval counts them)"
            if args.without_relevant == "exclude"
            else "counted in the means, as in trec_eval (--without-relevant exclude leaves them out)"
        )
        print(
            f"ragtrack: note: {counted(len(result.no_relevant), 'judged query', 'judged queries')} in {args.qrels} without a relevant "
            f"judgment (grade >= {threshold}): {rule}",
            file=sys.stderr,
        )
    if result.missing:
        print(
            f"ragtrack: note: {counted(len(result.missing), 'judged query', 'judged queries')} without results in {args.run} "
            "(they score 0)",
            file=sys.stderr,
        )
    return result


def command_metrics(args: argparse.Namespace) -> int:
    from ragtrack.pipeline import registry

    evaluators = registry.load_all("evaluators")
    width = max((len(metric) for cls in evaluators.values() for metric in cls.provides()), default=0)
    for name, cls in evaluators.items():
        print(f"[{name}] {cls.__module__}.{cls.__qualname__}")
        for metric, description in cls.provides().items():
            print(f"  {metric:<{width}}  {description}")
    return 0


def default_tracking_uri() -> str:
    """The store of the default tracking config: ``$MLFLOW_TRACKING_URI`` (MLflow's own convention), else
    the SQLite store under ``$RAGTRACK_ROOT`` or the current folder."""
    return os.environ.get("MLFLOW_TRACKING_URI") or store_under(os.environ.get("RAGTRACK_ROOT", os.getcwd()))


def command_ui(args: argparse.Namespace) -> int:
    """The MLflow server in its own process group, ended whole (server, uvicorn, workers) on Ctrl-C
    and on SIGTERM. The store's URI, which may hold a password, goes in the server's environment
    (MLflow's ``MLFLOW_BACKEND_STORE_URI``), never on its command line, which every user of the machine
    can read (``ps``)."""
    uri = args.tracking_uri
    url = f"http://{args.host}:{args.port}"
    print(mask(f"MLflow UI on {uri}: {url}  (Ctrl-C stops it)"), flush=True)
    command = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--host",
        args.host,
        "--port",
        str(args.port),
        "--workers",
        "1",
    ]
    server = subprocess.Popen(command, start_new_session=True, env={**os.environ, "MLFLOW_BACKEND_STORE_URI": uri})
    with sigterm_interrupts():
        try:
            return server.wait()
        except KeyboardInterrupt:
            return stop_process_group(server)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, as Ctrl-C does, so the same clean-up runs."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_process_group(process: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM the process group of ``process``, SIGKILL what is left after ``grace`` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):  # workers that outlive the server's own exit
            os.killpg(process.pid, signal.SIGKILL)
        break
    return 0


def command_compare(args: argparse.Namespace) -> int:
    if (
        args.reference_map or args.tolerance is not None
    ) and not args.reference:  # argument mistakes first: told at once
        raise RagtrackError(
            "--reference-map and --tolerance check against a reference: give it with --reference RUN_OR_TABLE"
        )
    if args.folds is not None and args.folds < 2:
        raise RagtrackError(f"--folds {args.folds}: give 2 or more folds")
    if args.folds is not None and args.tune_on is not None:
        raise RagtrackError(
            "--folds and --tune-on are two ways to tune: cross-validate over the reported queries, or choose on another split; give one"
        )
    if args.tune_on is not None and not args.tune_on.rpartition("=")[2].strip():
        raise RagtrackError(
            f"--tune-on {args.tune_on!r}: give the tuning split as VALUE or KEY=VALUE of a setting that differs between the jobs, e.g. --tune-on train"
        )
    if args.resamples < 1 or args.failures < 0:
        raise RagtrackError(
            f"--resamples {args.resamples}, --failures {args.failures}: give --resamples >= 1 and --failures >= 0"
        )
    if args.plot:
        check_writable_folder(Path(args.plot).absolute().parent, "the --plot folder", keep=False)
    from ragtrack.pipeline.analysis.compare import run_compare
    from ragtrack.pipeline.analysis.comparison_tables import TEXT_WIDTH
    from ragtrack.pipeline.analysis.reference import TOLERANCE

    uri = args.tracking_uri
    comparison, text = run_compare(
        uri,
        args.experiment,
        args.sweep,
        args.metric,
        args.baseline,
        args.format,
        args.plot,
        args.seed,
        args.resamples,
        args.failures,
        not args.no_log,
        width=None if args.wide else TEXT_WIDTH,
        allow_mixed=args.allow_mixed,
        reference=args.reference,
        reference_map=args.reference_map or (),
        tolerance=TOLERANCE if args.tolerance is None else args.tolerance,
        runs=args.run or (),
        labels=args.label or (),
        pooled=args.pooled,
        folds=args.folds,
        tune_on=args.tune_on,
    )
    print(text, end="")
    if comparison.reference and args.format == "csv":  # the other formats carry the notes in their text
        for note in comparison.reference.notes:
            print(
                textwrap.fill(
                    mask(f"ragtrack: reference: {note}"),
                    TEXT_WIDTH,
                    subsequent_indent="  ",
                    break_on_hyphens=False,
                    break_long_words=False,
                ),
                file=sys.stderr,
            )
    if args.plot:
        print(f"ragtrack: wrote the comparison plot to {args.plot}", file=sys.stderr)
    print(
        textwrap.fill(mask(f"ragtrack: compared {comparison.scope}"), TEXT_WIDTH, subsequent_indent="  "),
        file=sys.stderr,
    )
    if comparison.logged:
        print(
            textwrap.fill(mask(f"MLflow run:  {comparison.logged}"), TEXT_WIDTH, subsequent_indent=" " * 13),
            file=sys.stderr,
        )
        for name, link in comparison.links.items():  # links whole, however long
            print(mask(f"{name + ':':<13}{link}"), file=sys.stderr)
    return 0


def command_reproduce(args: argparse.Namespace) -> int:
    from ragtrack.pipeline.commands.reproduce import reproduce

    result = reproduce(
        args.run_id,
        args.tracking_uri,
        args.cache_dir,
        args.overrides,
        args.allow_endpoints,
        args.baseline,
        args.output_dir,
    )
    if args.output_dir:
        print(f"reproduced job's outputs: {Path(args.output_dir).absolute()}")
    if result.identical:
        print(f"reproduced run {result.run_id}: all {len(result.table)} metrics identical")
    else:
        print(f"run {result.run_id} did NOT reproduce: {len(result.mismatches)} of {len(result.table)} metrics differ")
        print(result.mismatches.to_string(index=False, float_format=lambda v: f"{v:.17g}"))
    if not result.measures.empty:
        print(
            f"\nreproduction measures (docs/metrics.md): RMSE over queries; effect ratio and ΔRI against {result.baseline}"
        )
        print(
            result.measures.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.6g}")
        )  # blank: not computable (the baseline's ER)
    if not result.rankings.empty:
        print(
            "\nrankings: KTU (repro_eval's Kendall's tau union), Kendall's tau_b and RBO (p=0.95) between original and reproduced, mean over queries"
        )
        print(result.rankings.to_string(index=False, na_rep="", float_format=lambda v: f"{v:.6g}"))
    return 0 if result.identical else 1


def command_regress(args: argparse.Namespace) -> int:
    from ragtrack.pipeline.commands.regress import list_conditions, load_conditions, run_regressions, select

    conditions = load_conditions(args.file)
    if args.list:
        list_conditions(conditions)
        return 0
    chosen, skipped = select(conditions, args.only or (), args.slow)
    checks = run_regressions(chosen, skipped, args.overrides)
    return 1 if any(not check.ok for check in checks) else 0


def run_hydra(overrides: list[str]) -> int:
    from ragtrack.pipeline.app import run_app
    from ragtrack.pipeline.configuration.config import check_sweep, composition_errors_explained
    from ragtrack.pipeline.redaction import check_run_arguments, config_dirs, remember_argument_secrets

    remember_argument_secrets(overrides)  # a sweep's log lists its jobs' overrides before any job runs
    try:  # Hydra writes .hydra/ and the log before the job runs: a key given as a variable name stops here
        check_run_arguments(overrides)
        folders = config_dirs(overrides)
        with (
            sigterm_interrupts(),
            composition_errors_explained(folders),
        ):  # an unknown key or group option: one line with a did-you-mean
            if {"-m", "--multirun"} & set(overrides):  # every job's settings before the first job runs
                check_sweep(options_and_overrides(overrides)[1], folders[0] if folders else None)
            run_app(overrides)
    except RagtrackError as exc:
        print(f"ragtrack: error: {mask(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except (
        KeyboardInterrupt
    ):  # Ctrl-C or SIGTERM: the job's runs ended KILLED and its folder marked FAILED (pipeline.app)
        print("ragtrack: interrupted (the cache keeps what was finished: run it again to go on)", file=sys.stderr)
        return INTERRUPTED
    return 0


def add_tuning_arguments(compare: argparse.ArgumentParser) -> None:
    """``compare --folds K`` and ``--tune-on SPLIT``: a sweep's setting chosen without the reported queries."""
    compare.add_argument(
        "--folds",
        type=int,
        metavar="K",
        help="a sweep's setting tuned by K-fold cross-validation on the first metric "
        "(each fold scored by the setting chosen on the others), against the default (docs/ablations.md)",
    )
    compare.add_argument(
        "--tune-on",
        metavar="SPLIT",
        help="a sweep's setting chosen on the first metric over the jobs of this split (a value, "
        "or KEY=VALUE, of a setting the jobs differ in: train for dataset.split=train) and reported on the other jobs, "
        "against the default (docs/ablations.md)",
    )


def build_parser() -> argparse.ArgumentParser:
    from typing import get_args

    from ragtrack.evaluators.ranking import COUNT_WITHOUT_RELEVANT, WithoutRelevant

    parser = argparse.ArgumentParser(prog="ragtrack", description="Tracked retrieval experiments for RAG.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser(
        "run", help="run an experiment (Hydra overrides follow, e.g. retriever=[bm25] fusion=[])", add_help=False
    )
    evaluate = commands.add_parser(
        "eval", help="score a TREC run against qrels (trec_eval style), or predicted answers against gold answers"
    )
    evaluate.add_argument("qrels", nargs="?", help="BEIR (query-id corpus-id score) or TREC (qid 0 docid rel) qrels")
    evaluate.add_argument("run", nargs="?", help="TREC run file (qid Q0 docid rank score tag)")
    evaluate.add_argument(
        "--answers",
        metavar="GOLD",
        help="gold answers: JSON lines with _id/id and answers (queries.jsonl), or a SQuAD dataset .json",
    )
    evaluate.add_argument(
        "--predictions",
        metavar="PRED",
        help="answers to score: SQuAD {id: answer} .json, or JSON lines with id and answer",
    )
    evaluate.add_argument(
        "-m",
        "--metric",
        action=_MeasureList,
        help="metric such as ndcg@10 (repeatable, or a comma list: -m ndcg@10,map; default: the standard set); "
        "trec_eval's names too: P_5, P.5,10, ndcg_cut.10, recip_rank, official, all_trec",
    )
    evaluate.add_argument(
        "-q", "--per-query", action="store_true", help="also print every query's values (trec_eval -q)"
    )
    evaluate.add_argument("--json", action="store_true", help="print JSON: aggregate, std, ci95, per_query")
    evaluate.add_argument(
        "-l",
        "--relevance-threshold",
        type=int,
        default=1,
        help="grade >= N is relevant, N >= 0 (trec_eval -l; default 1)",
    )
    evaluate.add_argument(
        "-c",
        action="store_true",
        help="trec_eval's -c, what ragtrack eval always does: a judged query missing from the run scores 0 and counts",
    )
    evaluate.add_argument(
        "--without-relevant",
        choices=get_args(WithoutRelevant),
        default=COUNT_WITHOUT_RELEVANT,
        help="judged queries without a relevant judgment: count them in the means, as trec_eval does (default), "
        "or exclude them, as some BEIR scripts do",
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of the bootstrap confidence intervals")
    commands.add_parser(
        "trec_eval", help="trec_eval 10.0 as a drop-in: its options (-q -c -m all_trec ...), its output", add_help=False
    )
    commands.add_parser("metrics", help="list every available metric")
    compare = commands.add_parser(
        "compare", help="systems/runs from MLflow side by side: CIs, paired tests, Holm, W/T/L, plots"
    )
    compare.add_argument(
        "--tracking-uri",
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///$RAGTRACK_ROOT/mlruns/mlflow.db (or ./mlruns)",
    )
    compare.add_argument(
        "--experiment",
        action=_CommaList,
        help="MLflow experiment name (repeatable, or a comma list: their jobs together; jobs of several datasets make a "
        "benchmark table; default: the most recently updated)",
    )
    compare.add_argument(
        "--run",
        action=_CommaList,
        metavar="RUN_ID",
        help="pick jobs by run id (a job's or one of its system runs'; repeatable, or a comma list) instead of an experiment",
    )
    compare.add_argument(
        "--label", action="append", metavar="ROW=NAME", help="show a row (label or system name) as NAME (repeatable)"
    )
    compare.add_argument(
        "--pooled", action="store_true", help="a benchmark's paired tests also over every dataset's queries together"
    )
    add_tuning_arguments(compare)
    compare.add_argument(
        "--sweep",
        help="only the jobs of this sweep (its tag, the sweep folder name, or 'latest'; without --experiment: "
        "in every experiment, so a sweep over datasets is one benchmark)",
    )
    compare.add_argument(
        "-m",
        "--metric",
        action=_CommaList,
        help="metric such as ndcg@10 (repeatable, or a comma list: -m ndcg@10,mrr; default ndcg@10, recall@100)",
    )
    compare.add_argument("--baseline", help="row label, system name or run id (default: bm25, else the first row)")
    compare.add_argument("--format", default="table", choices=["table", "markdown", "csv", "json", "latex"])
    compare.add_argument(
        "--wide", action="store_true", help="--format table as one wide table (default: blocks of 100 columns)"
    )
    compare.add_argument(
        "--plot", help="also write the comparison figure to this file: .png, .pdf or .svg (its folder is made)"
    )
    compare.add_argument("--seed", type=int, default=0, help="seed of the randomization test and the bootstrap CIs")
    compare.add_argument(
        "--resamples", type=int, default=10_000, help="randomization test resamples (exact when 2^n is fewer)"
    )
    compare.add_argument("--failures", type=int, default=10, help="queries per system in the failure analysis artifact")
    compare.add_argument("--no-log", action="store_true", help="do not log the comparison to MLflow")
    compare.add_argument(
        "--allow-mixed",
        action="store_true",
        help="keep jobs whose qrels, relevance threshold or query set differ (refused by default); rows are labelled with their threshold",
    )
    compare.add_argument(
        "--reference",
        metavar="RUN_OR_TABLE",
        help="check the rows against an original job (MLflow run id, output folder or results.json), a published "
        "table (.csv/.tsv/.yaml of system, metric, value, optionally dataset) or 'beir' (the shipped published BEIR "
        "figures): differences, RMSE, effect ratio, ΔRI, Kendall's tau, RBO",
    )
    compare.add_argument(
        "--reference-map",
        action="append",
        metavar="ROW=REFERENCE",
        help="pair a row (label or system name) with a reference system of another name (repeatable)",
    )
    compare.add_argument(
        "--tolerance", type=float, help="largest |difference| to the reference that passes (default: Pyserini's 0.0005)"
    )
    reproduce = commands.add_parser("reproduce", help="re-run a logged job from its config.yaml and check every metric")
    reproduce.add_argument("run_id", help="an MLflow run id (the job or one of its system runs)")
    reproduce.add_argument(
        "--tracking-uri",
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///$RAGTRACK_ROOT/mlruns/mlflow.db (or ./mlruns)",
    )
    reproduce.add_argument("--cache-dir", help="index/embedding cache to use (default: the logged paths.cache_dir)")
    reproduce.add_argument(
        "--output-dir",
        metavar="DIR",
        help="keep the re-run job's outputs (runs, per_query.csv, report.html) in DIR "
        "(default: a temporary folder, removed at the end)",
    )
    reproduce.add_argument(
        "--baseline",
        help="system name or run id the effect ratio and ΔRI compare against (default: bm25, else the first)",
    )
    reproduce.add_argument(
        "--allow-endpoints",
        action="store_true",
        help="contact the hosts the downloaded config names (base_url, a Chroma server); your keys still go only where you give api_key_env/token_env",
    )
    reproduce.add_argument(
        "overrides",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="your own settings, e.g. generator.api_key_env=OPENAI_API_KEY or generator.base_url=...",
    )
    regress = commands.add_parser(
        "regress", help="re-run the regression conditions (regressions.yaml) and check their figures"
    )
    regress.add_argument(
        "--only",
        action="append",
        metavar="PATTERN",
        help="conditions whose name matches (fnmatch; repeatable or comma list)",
    )
    regress.add_argument("--slow", action="store_true", help="also run the slow conditions (the real dense encoder)")
    regress.add_argument("--file", metavar="PATH", help="a regressions YAML file (default: the shipped one)")
    regress.add_argument("--list", action="store_true", help="list the conditions and exit")
    regress.add_argument(
        "overrides", nargs="*", help="extra overrides for every condition, e.g. paths.cache_dir=/data/cache"
    )
    ui = commands.add_parser("ui", help="start the MLflow UI on the project's store (127.0.0.1)")
    ui.add_argument(
        "--tracking-uri",
        help="default: $MLFLOW_TRACKING_URI, else sqlite:///$RAGTRACK_ROOT/mlruns/mlflow.db (or ./mlruns)",
    )
    ui.add_argument("--host", default="127.0.0.1")
    ui.add_argument("--port", type=int, default=5000)
    return parser


RUN_USAGE = """usage: ragtrack run [-m] [--dry-run] [--config-dir DIR] [OVERRIDE ...]

Run an experiment: the default preset compares bm25, dense and hybrid (RRF) on SciFact, scores
them and logs everything to MLflow. Overrides are Hydra's: GROUP=OPTION picks a config,
KEY=VALUE sets a value, -m sweeps over comma-separated values.

examples:
  ragtrack run                                          the default experiment (SciFact)
  ragtrack run retriever=[bm25] fusion=[]               BM25 only
  ragtrack run dataset=beir dataset.path=/data/nfcorpus your own BEIR folder
  ragtrack run --config-dir ~/myconf dataset=mine       your own configs
  ragtrack run -m experiment=rrf_k                      a sweep: one MLflow run per RRF k
  ragtrack run fusion.rrf.k=30 depth=1000 tracking=none a value, and no MLflow
  ragtrack run --dry-run generator=openai ...           LLM calls and tokens it would spend

config groups (GROUP=OPTION):
{groups}

the full composed config: ragtrack run --cfg job [OVERRIDE ...]
Hydra's own help: ragtrack run --hydra-help; docs: docs/configuration.md in the ragtrack repository"""


INTERRUPTED = 130  # the exit code of a command stopped by Ctrl-C or SIGTERM (128 + SIGINT)

# Hydra's command-line options that take a value (``--info`` takes one of INFO_TOPICS where one follows)
HYDRA_VALUE_OPTIONS = {
    "--config-dir",
    "-cd",
    "--config-path",
    "-cp",
    "--config-name",
    "-cn",
    "--cfg",
    "-c",
    "--package",
    "-p",
    "--experimental-rerun",
}
INFO_TOPICS = {"all", "config", "defaults", "defaults-tree", "plugins", "searchpath"}


def options_first(arguments: list[str]) -> list[str]:
    """``ragtrack run``'s arguments with Hydra's options (and their values) ahead of the overrides, in
    their given order otherwise: Hydra's parser reads overrides at one place only, so
    ``run dataset=mine --config-dir my encoder=hashing`` would leave ``encoder=hashing`` unread."""
    options, overrides = options_and_overrides(arguments)
    return options + overrides


def options_and_overrides(arguments: list[str]) -> tuple[list[str], list[str]]:
    """Hydra's options with their values, and the overrides, of ``ragtrack run``'s arguments."""
    options, overrides = [], []
    position = 0
    while position < len(arguments):
        given = arguments[position]
        if given.startswith("-"):
            name, has_value, _ = given.partition("=")
            takes = (
                name in HYDRA_VALUE_OPTIONS
                or name in ("--info", "-i")
                and arguments[position + 1 : position + 2]
                and arguments[position + 1] in INFO_TOPICS
            )
            options.append(given)
            if takes and not has_value and position + 1 < len(arguments):
                position += 1
                options.append(arguments[position])
        else:
            overrides.append(given)
        position += 1
    return options, overrides


def run_help() -> str:
    """``ragtrack run --help``: usage, examples and every config group with its options, read from
    the installed configs without starting Hydra (it answers at once)."""
    from importlib.resources import files

    conf = files("ragtrack.conf")
    groups = sorted(
        entry.name for entry in conf.iterdir() if entry.is_dir() and entry.name not in ("hydra", "__pycache__")
    )
    lines = []
    for group in groups:
        options = sorted(
            item.name.removesuffix(".yaml") for item in conf.joinpath(group).iterdir() if item.name.endswith(".yaml")
        )
        lines.append(
            textwrap.fill(", ".join(options), width=100, initial_indent=f"  {group:<15} ", subsequent_indent=" " * 18)
        )
    return RUN_USAGE.format(groups="\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    """The ``ragtrack`` command; a reader that closes the pipe early (``ragtrack metrics | head``) ends it
    quietly, with exit code 0."""
    try:
        code = run_command(sys.argv[1:] if argv is None else argv)
        sys.stdout.flush()
        return code
    except BrokenPipeError:
        os.dup2(
            os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno()
        )  # the interpreter's last flush finds no closed pipe
        return 0


def command_trec_eval(arguments: list[str]) -> int:
    """``ragtrack trec_eval``: trec_eval 10.0's options and output (pipeline/commands/trec_eval.py)."""
    from ragtrack.pipeline.commands.trec_eval import run

    sys.stdout.write(run(arguments))
    return 0


def _user_error(exc: Exception) -> int:
    """A user mistake or fault (describe_fault) as one line, exit 2; a bug keeps its traceback."""
    message = describe_fault(exc)
    if message is None:
        raise exc
    print(f"ragtrack: error: {mask(message)}", file=sys.stderr)
    return RagtrackError.exit_code


def run_command(argv: list[str]) -> int:
    if argv and argv[0] == "trec_eval":  # trec_eval's own getopt options: argparse never sees them
        try:
            return command_trec_eval(argv[1:])
        except Exception as exc:
            return _user_error(exc)
    if argv and argv[0] == "run":
        if {"-h", "--help"} & set(argv[1:]):
            print(run_help())
            return 0
        return run_hydra(
            options_first([{"--hydra-help": "--help", "--dry-run": "dry_run=true"}.get(a, a) for a in argv[1:]])
        )
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and "overrides" in args and not any(a.startswith("-") for a in extra):
        args.overrides += extra  # KEY=VALUE after the options (argparse fills a positional list at one place only)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    handler = {
        "eval": command_eval,
        "metrics": command_metrics,
        "compare": command_compare,
        "reproduce": command_reproduce,
        "regress": command_regress,
        "ui": command_ui,
    }[args.command]
    try:
        if "tracking_uri" in args:
            from ragtrack.pipeline.records.tracking import check_store_exists, prepare_connection, use_credentials

            uri = args.tracking_uri or default_tracking_uri()
            if (
                args.command != "ui"
            ):  # compare and reproduce read the store: a missing one is told before MLflow is imported
                check_store_exists(uri)
            # an unreachable tracking server fails in seconds, with one line; the URI is given to MLflow without credentials
            args.tracking_uri = use_credentials(uri) if args.command == "ui" else prepare_connection(uri)
        return handler(args)
    except Exception as exc:
        return _user_error(exc)


if __name__ == "__main__":
    sys.exit(main())
