"""The Hydra app behind ``ragtrack run``: a thin shell over ``run_experiment``.

Configs come from the installed package ``ragtrack.conf``; ``--config-dir DIR`` and ``hydra.searchpath``
add the user's own (docs/configuration.md). The app registers the config resolvers before Hydra composes.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import textwrap
from pathlib import Path

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ragtrack.core.errors import RagtrackError, describe_fault
from ragtrack.core.files import check_writable_folder
from ragtrack.core.progress import step
from ragtrack.core.secrets import mask
from ragtrack.pipeline.configuration.config import CONFIG_NAME, config_path, register_resolvers
from ragtrack.pipeline.configuration.inputs import load_dataset
from ragtrack.pipeline.configuration.settings import absolute_inputs, discard_job_folder, validate
from ragtrack.pipeline.execution.job import JobInfo
from ragtrack.pipeline.records.layout import KEY_METRICS, RESULTS_FILE
from ragtrack.pipeline.redaction import redact_hydra_files, redact_overrides, remember_config_secrets

log = logging.getLogger("ragtrack")


@hydra.main(version_base="1.3", config_path=config_path(), config_name=CONFIG_NAME)
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    remember_config_secrets(cfg)  # before any message: a settings error may quote a secret value
    try:  # settings first: a bad value stops the job before anything is built, logged or left behind
        absolute_inputs(cfg, validate(cfg))  # the logged config names the same files from any folder
    except RagtrackError as exc:
        log_dir = OmegaConf.select(cfg, "paths.log_dir", default=None, throw_on_resolution_failure=False)
        discard_job_folder(Path(hydra_cfg.runtime.output_dir), hydra_cfg.job.name, log_dir)
        fail(str(exc))
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun:  # a sweep's terminal shows a line per job at its end; each job's ragtrack.log keeps every stage
        for handler in logging.getLogger().handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.setLevel(logging.WARNING)
    job = JobInfo(
        choices=dict(hydra_cfg.runtime.choices),
        overrides=list(hydra_cfg.overrides.task),
        sweep=hydra_cfg.sweep.dir if multirun else None,
        hydra_dir=None
        if hydra_cfg.output_subdir is None
        else Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir,
    )
    before = existing_paths(Path(hydra_cfg.runtime.output_dir))
    try:  # the dataset is read before the stages' modules are imported: a data mistake too is told in about a second
        redact_hydra_files(job.hydra_records)
        with step("load dataset", log):
            dataset = load_dataset(cfg.dataset, check_documents=False)
        job.default_choices = default_choices()  # a second composition: after the data are checked
        if cfg.get("dry_run"):
            from ragtrack.pipeline.execution.dryrun import dry_run, print_dry_run

            print_dry_run(dry_run(cfg, dataset), Path(cfg.paths.output_dir))
            return None
        from ragtrack.pipeline.execution.experiment import run_experiment

        results = run_experiment(cfg, job, dataset)
        return objective(results, cfg.get("optimize_metric"))
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (pipeline.commands.cli): no half results, the folder says why
        mark_failed(Path(hydra_cfg.runtime.output_dir), "interrupted (Ctrl-C or SIGTERM)", before)
        raise
    except Exception as exc:  # user mistakes and faults (describe_fault): one line, exit 2; bugs keep their traceback
        message = describe_fault(exc) or (one_line(exc) if isinstance(exc, OmegaConfBaseException) else None)
        if message is None:
            raise
        mark_failed(Path(hydra_cfg.runtime.output_dir), message, before)
        fail(message)


@functools.cache
def default_choices() -> dict:
    """The config groups' choices with no override (``hydra.runtime.choices`` of the bare config),
    composed once per process with the job's search path."""
    return dict(hydra.compose(config_name=CONFIG_NAME, return_hydra_config=True).hydra.runtime.choices)


FAILED_MARKER = "FAILED"


def one_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def existing_paths(folder: Path) -> set[Path]:
    """Every file and folder under ``folder`` now (none when it does not exist), links not followed."""
    if not folder.is_dir():
        return set()
    return {folder, *folder.rglob("*")}


def mark_failed(output_dir: Path, message: str, before: set[Path]) -> None:
    """A job that stops on a mistake or a fault keeps no half results: the files and folders it made in
    ``output_dir`` (those not in ``before``, what was there when it started) are removed, nothing else:
    a user's own files, and what Hydra wrote before the job, stay. ``FAILED`` holds the error (as far as
    the folder can still be written: it may be the fault)."""
    with contextlib.suppress(OSError):
        made = sorted(
            existing_paths(output_dir) - before, key=lambda path: len(path.parts), reverse=True
        )  # deepest first
        for path in made:
            if path.is_symlink() or not path.is_dir():
                path.unlink(missing_ok=True)
            elif not any(path.iterdir()):
                path.rmdir()
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / FAILED_MARKER).write_text(mask(message) + "\n", encoding="utf-8")


def fail(message: str) -> None:
    """One line on stderr, exit 2; the job's log file records it too, the console shows it once.
    Known secret values are masked."""
    message = mask(message)
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(f"ragtrack: error: {message}", file=sys.stderr)
    sys.exit(RagtrackError.exit_code)


def run_app(overrides: list[str]) -> None:
    """``ragtrack run OVERRIDES``: Hydra parses the command line (``-m``, ``--config-dir``, ``--help``...)."""
    register_resolvers()
    sys.argv = ["ragtrack", *overrides]
    main()


def objective(results: dict, optimize_metric: str | None) -> float | None:
    """The value an optimizing sweeper maximizes or minimizes: ``<system>/<metric>`` of this job."""
    if not optimize_metric:
        return None
    system, _, metric = str(optimize_metric).partition("/")
    systems = results["systems"]
    if system not in systems or metric not in systems[system]:
        known = ", ".join(f"{s}/{m}" for s in systems for m in list(systems[s])[:3])
        raise RagtrackError(f"optimize_metric {optimize_metric!r} is not a result of this job; e.g. {known}, ...")
    return float(systems[system][metric])


class OutputFolderCheck(Callback):
    """Hydra callback (``conf/hydra/default.yaml``): before Hydra creates the job's output folder (or a
    sweep's), check that it can be created and written; a read-only or full disk, or a file in the way,
    stops the command with one line and exit code 2 instead of Hydra's error."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        check_output_folder(Path(config.hydra.run.dir))

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        check_output_folder(Path(config.hydra.sweep.dir))


def check_output_folder(folder: Path) -> None:
    try:
        check_writable_folder(folder, "the output folder")
    except RagtrackError as exc:
        fail(str(exc))


class SweepSummary(Callback):
    """Hydra callback (``conf/hydra/default.yaml``): when a sweep ends, one table of its jobs, each row
    labeled by the values that job swept, with every system's key metrics, the best marked ``*``; with
    MLflow tracking, the sweep's page (:func:`sweep_page`)."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        folder = Path(config.hydra.sweep.dir)
        key_metrics = list(config.get("tracking", {}).get("key_metrics") or KEY_METRICS)
        text = sweep_summary(folder, key_metrics)
        if text:
            print(mask(f"\nSweep summary ({folder}):\n{text}"))
        if text and config.tracking.get("enabled"):
            try:
                print(
                    mask(
                        "\n".join(
                            sweep_page(
                                config.tracking,
                                str(config.hydra.sweep.dir),
                                key_metrics,
                                lambda key: OmegaConf.select(
                                    config, key, default=None, throw_on_resolution_failure=False
                                ),
                            )
                        )
                    )
                )
            except RagtrackError as exc:
                print(mask(f"ragtrack: no sweep page: {exc}"), file=sys.stderr)


def sweep_page(tracking: DictConfig, sweep: str, key_metrics: list[str], default_of=None) -> list[str]:
    """The sweep compared as ``ragtrack compare --sweep`` does, against its default row (a setting's
    default: ``default_of(key)``, the sweep's own config), its setting chosen on the split of its
    ``tune_on`` where it sets one (``--tune-on``) (logged as its comparison run: tables,
    report.html, the key metrics against each swept numeric setting), then a line per job (its swept
    settings, the first key metric of a system that varies with its CI, its run page) and a runs view of
    the sweep's jobs with the swept settings (job params) and those systems' key metrics as columns."""
    import pandas as pd
    from mlflow.tracking import MlflowClient

    from ragtrack.pipeline.analysis.compare import run_compare, short_settings
    from ragtrack.pipeline.records.layout import TAG_SWEEP, run_page, runs_table_page, system_metric_key
    from ragtrack.pipeline.records.tracking import share_view, tracking_target, ui_base, use_credentials

    uri, experiment, *_ = tracking_target(tracking)
    uri = use_credentials(uri)  # MLflow gets the URI's credentials as its variables, never in a URI it prints
    tune_on = default_of("tune_on") if default_of else None
    comparison, _ = run_compare(uri, experiment, sweep, key_metrics, default_of=default_of, tune_on=tune_on)
    name = Path(sweep).name
    counts = pd.Series([s.system for s in comparison.systems]).value_counts()
    swept = [s for s in comparison.systems if counts[s.system] > 1] or comparison.systems
    metric = comparison.metrics[0]
    rows = comparison.table[comparison.table["metric"] == metric].set_index("system")
    experiment_id = MlflowClient(uri).get_experiment_by_name(experiment).experiment_id
    base = ui_base(uri)
    lines = [
        f"{short_settings(s.params) or s.label}  {s.system} {metric} {rows.at[s.label, 'mean']:.4f} "
        f"[{rows.at[s.label, 'ci_low']:.4f}, {rows.at[s.label, 'ci_high']:.4f}]  {base}/{run_page(experiment_id, s.job_id)}"
        for s in swept
    ]
    systems = list(dict.fromkeys(s.system for s in swept))
    swept_keys = dict.fromkeys(key for s in comparison.systems for key in s.params)
    metric_columns = [f"metrics.`{system_metric_key(system, m)}`" for system in systems for m in comparison.metrics]
    share_view(
        MlflowClient(uri),
        experiment_id,
        name,
        f"tags.`{TAG_SWEEP}` = '{sweep}'",
        [*(f"params.`{key}`" for key in swept_keys), *metric_columns],
        order_by=metric_columns[0],
    )
    return [
        "",
        *lines,
        f"Sweep runs:   {base}/{runs_table_page(experiment_id, name)}",
        f"Sweep report: {comparison.links['report.html']}",
        f"Next:         ragtrack compare --sweep {name}" + (f" --tune-on {tune_on}" if tune_on else ""),
    ]


def sweep_summary(folder: Path, key_metrics: list[str]) -> str:
    """The table of :class:`SweepSummary` from the jobs' ``results.json`` and ``.hydra/overrides.yaml``
    under a sweep folder ("" when no job left results there, e.g. jobs run on other machines)."""
    import pandas as pd

    from ragtrack.pipeline.analysis.comparison import is_best
    from ragtrack.pipeline.analysis.comparison_tables import TEXT_WIDTH

    jobs = []
    for results_file in sorted(
        folder.glob(f"*/{RESULTS_FILE}"), key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0
    ):
        overrides_file = results_file.parent / ".hydra" / "overrides.yaml"
        swept = redact_overrides(yaml.safe_load(overrides_file.read_text()) or []) if overrides_file.is_file() else []
        systems = json.loads(results_file.read_text())["systems"]
        jobs.append(
            (
                swept,
                {
                    f"{system} {metric}": values[metric]
                    for system, values in systems.items()
                    for metric in key_metrics
                    if metric in values
                },
            )
        )
    if not jobs:
        return ""
    shared = set.intersection(*(set(swept) for swept, _ in jobs))
    table = pd.DataFrame(
        [values for _, values in jobs],
        index=[" ".join(o for o in swept if o not in shared) or "(same)" for swept, _ in jobs],
    )
    varying = [
        column for column in table if not is_best(table[column].astype(float)).all()
    ]  # one rule: means that tie are the same
    notes = [f"{len(jobs)} jobs; * marks the best value of each column"]
    if not varying:
        same = ", ".join(f"{c} {table[c].iloc[0]:.4f}" for c in table)
        notes = [f"{len(jobs)} jobs, all with the same key metrics: {same}" if len(jobs) > 1 else f"1 job: {same}"]
        notes += [f"every job: {' '.join(o for o in jobs[0][0] if o in shared)}"] if shared else []
        return "\n".join(textwrap.fill(note, TEXT_WIDTH, subsequent_indent="  ") for note in notes)
    if len(varying) < len(table.columns):
        notes.append(
            f"the same in every job: {', '.join(f'{c} {table[c].iloc[0]:.4f}' for c in table if c not in varying)}"
        )
        table = table[varying]
    if shared:
        notes.append(f"every job: {' '.join(o for o in jobs[0][0] if o in shared)}")
    cells = table.apply(
        lambda column: [
            ("" if pd.isna(v) else f"{v:.4f}") + ("*" if best else " ")
            for v, best in zip(column, is_best(column.astype(float)))
        ]
    )
    cells.index.name = "job"
    return (
        cells.to_string() + "\n" + "\n".join(textwrap.fill(note, TEXT_WIDTH, subsequent_indent="  ") for note in notes)
    )
