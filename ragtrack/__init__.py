"""ragtrack: tracked retrieval experiments for RAG.

Layers (imports point down only; checked by import-linter, see docs/development.md):

- ``ragtrack.core``: data types (Corpus, Dataset, Run), errors, file reading and writing, the cache;
- components, each importing only the core: ``ragtrack.retrievers``, ``ragtrack.evaluators``,
  ``ragtrack.chunking``, ``ragtrack.generation``;
- ``ragtrack.pipeline``: orchestration (experiment, MLflow tracking, compare, CLI, Hydra app).

``ragtrack.conf`` holds the Hydra configs, ``ragtrack.datasets`` the shipped datasets.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("ragtrack")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
