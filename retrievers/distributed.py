"""Encoding one corpus across a Ray cluster (``encoder.distributed=ray``).

Ray Data splits the texts into blocks and streams them through a pool of actors, each holding one copy
of the encoder (its model loaded once per actor). The cluster is the one ``RAY_ADDRESS`` names, else a
local one on this machine. Rows carry their position, so the embeddings come back in the corpus's order
whatever actor encoded them, and equal a single-process encode (to float rounding where a model batches
texts differently: within 1e-6). A worker that dies is restarted by Ray and its blocks are retried
(``max_restarts``/``max_task_retries``); the caller publishes the cache entry only when every row is back.

Every node needs ragtrack installed and, for model-backed encoders, the same cache path (a shared file
system) so the exported model files are found: docs/scale-out.md.
"""

from __future__ import annotations

import copy
import logging
import os

import numpy as np

from ragtrack.core.errors import RagtrackError
from ragtrack.core.progress import Progress

log = logging.getLogger(__name__)

ROWS_PER_BLOCK = 1024  # texts per Ray block: small enough to spread over actors, large enough to batch well
RETRIES = 3  # restarts of a dead actor and retries of its blocks


class _EncodeBlock:
    """A Ray Data actor: one encoder copy, encoding the ``text`` column of each batch it is given."""

    def __init__(self, encoder, kind: str) -> None:
        self.encoder, self.kind = encoder, kind

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {"row": batch["row"], "vector": self.encoder.encode(batch["text"].tolist(), kind=self.kind)}


def encode_on_ray(encoder, texts: list[str], kind: str, progress: Progress, actors: int | None = None) -> np.ndarray:
    """Unit-length embeddings of ``texts`` (row i for text i) by ``actors`` Ray actors (default: one per
    CPU of the cluster), each running a copy of ``encoder`` with ``distributed`` off; ``progress``
    counts the rows as they come back."""
    try:
        import pyarrow as pa
        import ray
    except ImportError as exc:
        raise RagtrackError(
            f"encoder.distributed=ray needs Ray: pip install 'ragtrack[scale]' ({exc.name} is missing)"
        ) from None
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(
            address=address,
            ignore_reinit_error=True,
            log_to_driver=False,
            configure_logging=False,
            **({} if address else {"include_dashboard": False}),
        )
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # Ray Data's progress lines: ragtrack logs its own
    pool = actors or max(1, int(ray.cluster_resources().get("CPU", 1)))
    local = copy.copy(encoder)
    local.distributed = "none"
    blocks = [
        pa.table(
            {
                "row": np.arange(start, min(start + ROWS_PER_BLOCK, len(texts))),
                "text": texts[start : start + ROWS_PER_BLOCK],
            }
        )
        for start in range(0, len(texts), ROWS_PER_BLOCK)
    ]
    log.info("encoding %d texts on Ray with %d actors (%d blocks)", len(texts), pool, len(blocks))
    dataset = ray.data.from_arrow(blocks).map_batches(
        _EncodeBlock,
        fn_constructor_args=(local, kind),
        batch_size=ROWS_PER_BLOCK,
        batch_format="numpy",
        concurrency=pool,
        num_cpus=1,
        max_restarts=RETRIES,
        max_task_retries=RETRIES,
    )
    vectors, filled = None, np.zeros(len(texts), dtype=bool)
    for batch in dataset.iter_batches(batch_format="numpy", batch_size=None):
        if vectors is None:
            vectors = np.empty((len(texts), batch["vector"].shape[1]), dtype=np.float32)
        vectors[batch["row"]] = batch["vector"]
        filled[batch["row"]] = True
        progress.update(len(batch["row"]))
    if vectors is None or not filled.all():
        raise RagtrackError(f"Ray returned {int(filled.sum())} of {len(texts)} embeddings")
    return vectors
