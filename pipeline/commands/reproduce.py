"""``ragtrack reproduce RUN_ID``: re-run a logged job from its resolved ``config.yaml`` artifact.

A downloaded config is data, not code (:func:`prepare`, before anything is built, downloaded
beyond the config or written): every ``_target_`` must be a registered component (the value of an
entry point of ``ragtrack.<group>`` or a shipped encoder class), no value may call a resolver (a logged
config is resolved; ``${oc.env:...}`` would read the reproducer's environment), its endpoints
(``base_url``, a Chroma server) are contacted only with ``allow_endpoints``, and the variable names it
gives (``api_key_env``, ``token_env``) are dropped unless the reproducer gives them again as
overrides, so the reproducer's keys go only to hosts the reproducer chose. Then the typed settings
are checked as ``ragtrack run`` checks them.

The dataset must hash to the logged ``ragtrack.dataset_hash``; the job runs again without MLflow
logging (outputs in a temporary folder, indexes from the shared cache) and every logged metric
``<system>/<metric>`` is compared with the new value for exact equality.

Then how close it came (``evaluators.reproduction``: :func:`measures_table`, :func:`rankings_table`, Breuer et al. 2020):
per system and metric against the original per-query values (the job's ``per_query.csv``), the RMSE over
queries and the equivalence test (TOST p within ±0.0005, ``reference.TOLERANCE``), and against a baseline row (as ``ragtrack compare --baseline``; default bm25, else the first
system) the effect ratio and the delta relative improvement; per system, KTU, Kendall's τ_b and RBO between the
original rankings (each system run's ``run.trec``) and the reproduced ones, averaged over queries.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import check_writable_folder, yaml_text
from ragtrack.core.secrets import is_variable_name_key
from ragtrack.pipeline.records.layout import (
    CONFIG_FILE,
    PER_QUERY_FILE,
    RUN_FILE,
    TAG_DATASET_HASH,
    TAG_PARENT,
    TAG_SYSTEM,
    system_metric_key,
)
from ragtrack.pipeline.records.tracking import reading_client, run_and_job

if TYPE_CHECKING:
    import pandas as pd

RESOLVER = re.compile(r"\$\{\s*([\w.\-]+)\s*:")  # ${name:...}: a resolver call (oc.env, oc.decode, cwd, ...)


@dataclass
class Reproduction:
    run_id: str
    table: pd.DataFrame  # system, metric, logged, reproduced, difference
    measures: (
        pd.DataFrame
    )  # system, metric, queries, rmse, effect_ratio, delta_ri (against ``baseline``), equivalence_p (within ±TOLERANCE)
    rankings: pd.DataFrame  # system, ktu, kendall_tau_b, rbo
    baseline: str

    @property
    def identical(self) -> bool:
        return bool((self.table["difference"] == 0).all())

    @property
    def mismatches(self) -> pd.DataFrame:
        return self.table[self.table["difference"] != 0]


def _entries(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every ``(dotted path, key, value)`` of a plain nested config, depth first."""
    items = node.items() if isinstance(node, Mapping) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        yield where, str(key), value
        yield from _entries(value, where)


def registered_targets() -> set[str]:
    """The ``_target_`` values a downloaded config may name: installed entry points and shipped encoders."""
    from ragtrack.pipeline import registry
    from ragtrack.pipeline.configuration.settings import shipped_encoders

    entry_points = {
        ep.value.replace(":", ".") for group in registry.GROUPS for ep in registry.installed(group).values()
    }
    return entry_points | {f"{encoder.__module__}.{encoder.__name__}" for encoder in shipped_encoders()}


def endpoints(config: Mapping) -> list[tuple[str, str]]:
    """The hosts a config would contact, as ``(dotted key, address)``: every ``base_url`` and every
    Chroma server (``mode: http``)."""
    found = []
    for path, key, value in _entries(config):
        if key == "base_url" and value is not None:
            found.append((path, str(value)))
        elif isinstance(value, Mapping) and value.get("mode") == "http":
            found.append((f"{path}.host", f"{value.get('host')}:{value.get('port')}"))
    return found


def parse_overrides(overrides: Sequence[str]) -> DictConfig:
    """The reproducer's ``KEY=VALUE`` overrides as a config; one that is not ``KEY=VALUE``, or a value
    that does not parse, raises :class:`RagtrackError`."""
    for override in overrides:
        if not override.partition("=")[0] or "=" not in override:
            raise RagtrackError(
                f"override {override!r}: reproduce takes KEY=VALUE, e.g. generator.api_key_env=OPENAI_API_KEY"
            )
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except (OmegaConfBaseException, yaml.YAMLError) as exc:
        raise RagtrackError(f"overrides {' '.join(overrides)!r}: {str(exc).splitlines()[0]}") from None


def check_arguments(overrides: Sequence[str] = (), output_dir: str | None = None, cache_dir: str | None = None) -> None:
    """The mistakes found without MLflow, told before it is imported (as ``ragtrack run`` checks its
    settings first): an override that is not ``KEY=VALUE`` or does not parse, an output or cache folder
    that cannot be made or written (checked without leaving a folder behind)."""
    parse_overrides(overrides)
    for option, folder in (("--output-dir", output_dir), ("--cache-dir", cache_dir)):
        if folder:
            check_writable_folder(Path(folder), f"the {option} folder", keep=False)


def prepare(
    cfg: DictConfig, overrides: Sequence[str] = (), allow_endpoints: bool = False
) -> tuple[DictConfig, list[str]]:
    """A downloaded config made safe to run, with the reproducer's ``KEY=VALUE`` overrides merged, and
    what was dropped (one line each). A ``_target_`` that is not registered, a resolver call, or an
    endpoint not given by an override (without ``allow_endpoints``) raises :class:`RagtrackError`."""
    given = parse_overrides(overrides)
    yours = {path for path, _, value in _entries(OmegaConf.to_container(given)) if not isinstance(value, Mapping)}
    plain = OmegaConf.to_container(cfg, resolve=False)
    targets = registered_targets()
    for path, key, value in _entries(plain):
        if key == "_target_" and str(value) not in targets:
            raise RagtrackError(
                f"refused {path}: {value!r} is not a registered component (an entry point of ragtrack.<group> "
                f"or a shipped encoder); a downloaded config may not name arbitrary code"
            )
        if isinstance(value, str) and (call := RESOLVER.search(value)):
            raise RagtrackError(
                f"refused {path}: a downloaded config may not call resolvers (${{{call.group(1)}:...}}); "
                f"it is never resolved on this machine"
            )
    foreign = [f"{path}={address}" for path, address in endpoints(plain) if path not in yours]
    if foreign and not allow_endpoints:
        raise RagtrackError(
            f"refused the downloaded config's endpoints {', '.join(foreign)}: contact them with --allow-endpoints, "
            f"or give your own as overrides (e.g. {foreign[0].split('=')[0]}=...)"
        )
    dropped = []
    for path, key, value in _entries(plain):
        if is_variable_name_key(key) and value is not None and path not in yours:
            OmegaConf.update(cfg, path, None)
            dropped.append(
                f"dropped {path} of the downloaded config (your keys go only to hosts you configure; give it again as an override)"
            )
    return OmegaConf.merge(cfg, given), dropped


def logged_job(client: Any, run_id: str, missing: str, baseline: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The job of ``run_id`` (a job or one of its system runs) and its system runs by name, from the
    runs' records alone (nothing is downloaded): a run that does not exist (``missing``: the line),
    one that is not a ragtrack job, or a ``baseline`` that is none of its systems raises :class:`RagtrackError`."""
    from ragtrack.pipeline.analysis.comparison import SystemRun, find_baseline

    _, job = run_and_job(client, run_id, missing)
    if TAG_DATASET_HASH not in job.data.tags:
        raise RagtrackError(
            f"run {run_id} is not a ragtrack job (no tag {TAG_DATASET_HASH}): give the run id of a job of "
            "`ragtrack run` or of one of its system runs"
        )
    children = client.search_runs(
        [job.info.experiment_id], f"tags.`{TAG_PARENT}` = '{job.info.run_id}'", order_by=["attribute.start_time ASC"]
    )  # the job's order of systems
    children = {c.data.tags[TAG_SYSTEM]: c for c in children if c.data.tags.get(TAG_SYSTEM)}
    if baseline is not None and children:  # a wrong --baseline fails before anything is downloaded
        find_baseline(
            [
                SystemRun(name, c.info.run_id, job.info.run_name, job.info.run_id, c.info.start_time, None, label=name)
                for name, c in children.items()
            ],
            baseline,
        )
    return job, children


def reproduce(
    run_id: str,
    tracking_uri: str,
    cache_dir: str | None = None,
    overrides: Sequence[str] = (),
    allow_endpoints: bool = False,
    baseline: str | None = None,
    output_dir: str | None = None,
) -> Reproduction:
    """Re-run the job of ``run_id`` (a job or one of its system runs) and compare every metric;
    ``overrides`` (``KEY=VALUE``) and ``allow_endpoints`` as in :func:`prepare`; ``baseline`` (a system
    name or run id) as in ``ragtrack compare``; ``output_dir``: where the re-run job's outputs stay
    (default: a temporary folder, removed at the end)."""
    check_arguments(overrides, output_dir, cache_dir)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # stderr holds one line per problem
    client = reading_client(tracking_uri)
    job, children = logged_job(client, run_id, f"no run {run_id!r} in {tracking_uri}", baseline)
    import pandas as pd  # the heavier modules once the run is found

    from ragtrack.core.runs import read_trec
    from ragtrack.evaluators.reproduction import MEASURE_COLUMNS, measures_table, rankings_table
    from ragtrack.pipeline.analysis.compare import download_artifact
    from ragtrack.pipeline.analysis.comparison import SystemRun, find_baseline
    from ragtrack.pipeline.analysis.reference import TOLERANCE, by_system
    from ragtrack.pipeline.configuration.inputs import load_dataset
    from ragtrack.pipeline.configuration.settings import validate
    from ragtrack.pipeline.execution.job import JobInfo
    from ragtrack.pipeline.records.csv_files import read_csv

    with tempfile.TemporaryDirectory(prefix="ragtrack-reproduce-") as scratch:
        logged = download_artifact(client, job.info.run_id, CONFIG_FILE, Path(scratch) / "logged")
        try:  # data, not code: checked for bombs before it is parsed
            downloaded = OmegaConf.create(yaml_text(logged, "logged config"))
        except InputError as exc:
            raise RagtrackError(f"refused {CONFIG_FILE} of run {job.info.run_id}: {exc.problem}") from None
        cfg, dropped = prepare(downloaded, overrides, allow_endpoints)
        cfg.paths.output_dir = str(Path(output_dir).absolute() if output_dir else Path(scratch) / "output")
        cfg.tracking = {"enabled": False}
        if cache_dir:
            cfg.paths.cache_dir = cache_dir
        validate(cfg)
        for line in dropped:
            print(f"ragtrack: {line}", file=sys.stderr)
        current = load_dataset(
            cfg.dataset, check_documents=False
        )  # as ``ragtrack run``: read before the stages are imported
        logged_hash = job.data.tags[TAG_DATASET_HASH]
        if logged_hash != current.hash:
            raise RagtrackError(
                f"dataset {current.source} changed since run {job.info.run_id}: hash {current.hash[:12]} != logged {logged_hash[:12]}"
            )
        try:
            logged_per_query = read_csv(
                download_artifact(client, job.info.run_id, PER_QUERY_FILE, Path(scratch) / "logged"), dtype={"qid": str}
            )
        except RagtrackError as exc:  # a run logged without its per-query values: the metrics are still compared
            print(f"ragtrack: {exc}: no reproduction measures", file=sys.stderr)
            logged_per_query = pd.DataFrame(columns=["system", "qid"])
        logged_tables = by_system(logged_per_query)
        logged = {
            name: SystemRun(
                name,
                children.get(name, job).info.run_id,
                job.info.run_name,
                job.info.run_id,
                job.info.start_time,
                table,
                label=name,
            )
            for name, table in logged_tables.items()
        }
        base = find_baseline(list(logged.values()), baseline) if logged else None
        from ragtrack.pipeline.execution.experiment import run_experiment

        results = run_experiment(cfg, JobInfo(report=False), current)
        reproduced_runs = {
            name: read_trec(Path(cfg.paths.output_dir) / "runs" / f"{name}.trec") for name in results["systems"]
        }
        original_runs = {
            name: read_trec(download_artifact(client, c.info.run_id, RUN_FILE, Path(scratch) / c.info.run_id))
            for name, c in children.items()
            if name in reproduced_runs
        }
    reproduced_tables = by_system(results["per_query_table"])
    originals = [logged[name] for name in results["systems"] if name in logged]
    metrics = [
        m
        for m in dict.fromkeys(m for values in results["systems"].values() for m in values)
        if m in logged_per_query.columns
    ]
    measures = (
        measures_table(
            [(s.label, s.per_query, reproduced_tables[s.system]) for s in originals], metrics, base.label, TOLERANCE
        )
        if base
        else pd.DataFrame(columns=MEASURE_COLUMNS)
    )
    rankings = rankings_table([(name, run, reproduced_runs[name]) for name, run in original_runs.items()])
    rows = []
    for system, values in results["systems"].items():
        for metric, value in values.items():
            logged = job.data.metrics.get(system_metric_key(system, metric))
            if logged is None and (value is None or math.isnan(value)):
                continue
            logged = math.nan if logged is None else logged
            difference = 0.0 if logged == value else value - logged
            rows.append(
                {"system": system, "metric": metric, "logged": logged, "reproduced": value, "difference": difference}
            )
    return Reproduction(job.info.run_id, pd.DataFrame(rows), measures, rankings, base.label if base else "")
