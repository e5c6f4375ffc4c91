"""The commands and the Python API: the ``ragtrack`` command line (cli), the API ``ragtrack`` exports
(api, with the answer files it reads), the MLflow GenAI scorers behind ``ragtrack.mlflow`` (scorers),
``ragtrack regress``, ``ragtrack reproduce`` and ``ragtrack trec_eval``. The top room: it may import
every other."""
