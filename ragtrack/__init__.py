"""ragtrack: tracked retrieval experiments for RAG.

Layers (imports point down only; checked by import-linter, see docs/development.md):

- ``ragtrack.core``: data types (Corpus, Dataset, Run), errors, file reading and writing, the cache;
- components, each importing only the core: ``ragtrack.retrievers`` (the system under test: retrievers,
  rewriters, fusions, rerankers, chunkers, generators), ``ragtrack.evaluators`` (what measures it:
  evaluators, dataset providers, query perturbations);
- ``ragtrack.pipeline``: orchestration (experiment, MLflow tracking, compare, CLI, Hydra app).

``ragtrack.conf`` holds the Hydra configs, ``ragtrack.datasets`` the shipped datasets.

The Python API (docs/api.md) is exported here: :func:`evaluate`, :func:`evaluate_answers`,
:func:`compare`, :func:`benchmark`, :func:`run_experiment`; ``ragtrack.mlflow.scorers`` gives MLflow GenAI scorers. The
names load on first use, so ``import ragtrack`` stays cheap and imports none of the layers.
"""

API = ("evaluate", "evaluate_answers", "compare", "benchmark", "run_experiment", "Evaluation", "ExperimentResult")
__all__ = ["__version__", *API]


def __getattr__(name: str):
    if name == "__version__":  # read on use: importlib.metadata costs ~40 ms at every start
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("ragtrack")
        except PackageNotFoundError:  # imported from a source tree that was never installed
            return "0+unknown"
    if name in API:
        from ragtrack.pipeline.commands import api

        return getattr(api, name)
    raise AttributeError(f"module 'ragtrack' has no attribute {name!r}")
