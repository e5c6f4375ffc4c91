"""``ragtrack reproduce RUN_ID``: re-run a logged job from its resolved ``config.yaml`` artifact.

The dataset must hash to the logged ``ragtrack.dataset_hash``; the job runs again without MLflow
logging (outputs in a temporary folder, indexes from the shared cache) and every logged metric
``<system>/<metric>`` is compared with the new value for exact equality.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.layout import CONFIG_FILE, TAG_DATASET_HASH, TAG_PARENT, system_metric_key


@dataclass
class Reproduction:
    run_id: str
    table: pd.DataFrame  # system, metric, logged, reproduced, difference

    @property
    def identical(self) -> bool:
        return bool((self.table["difference"] == 0).all())

    @property
    def mismatches(self) -> pd.DataFrame:
        return self.table[self.table["difference"] != 0]


def reproduce(run_id: str, tracking_uri: str, cache_dir: str | None = None) -> Reproduction:
    """Re-run the job of ``run_id`` (a job or one of its system runs) and compare every metric."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from ragtrack.pipeline.compare import download_artifact
    from ragtrack.pipeline.experiment import run_experiment
    from ragtrack.pipeline.inputs import load_dataset

    client = MlflowClient(tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException:
        raise RagtrackError(f"no run {run_id!r} in {tracking_uri}") from None
    parent_id = run.data.tags.get(TAG_PARENT)
    job = client.get_run(parent_id) if parent_id else run
    with tempfile.TemporaryDirectory(prefix="ragtrack-reproduce-") as scratch:
        cfg = OmegaConf.load(download_artifact(client, job.info.run_id, CONFIG_FILE, Path(scratch) / "logged"))
        logged_hash = job.data.tags.get(TAG_DATASET_HASH)
        current_hash = load_dataset(cfg.dataset, check_documents=False).hash
        if logged_hash != current_hash:
            raise RagtrackError(f"dataset {cfg.dataset.path} changed since run {job.info.run_id}: hash {current_hash[:12]} != logged {str(logged_hash)[:12]}")
        cfg.paths.output_dir = str(Path(scratch) / "output")
        cfg.tracking = {"enabled": False}
        if cache_dir:
            cfg.paths.cache_dir = cache_dir
        results = run_experiment(cfg)
    rows = []
    for system, values in results["systems"].items():
        for metric, value in values.items():
            logged = job.data.metrics.get(system_metric_key(system, metric))
            if logged is None and (value is None or math.isnan(value)):
                continue
            logged = math.nan if logged is None else logged
            difference = 0.0 if logged == value else value - logged
            rows.append({"system": system, "metric": metric, "logged": logged, "reproduced": value, "difference": difference})
    return Reproduction(job.info.run_id, pd.DataFrame(rows))
