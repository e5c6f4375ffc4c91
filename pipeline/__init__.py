"""Orchestration, the top layer, in rooms by concern (imports point down this list; import-linter keeps it):
``commands`` (the CLI, the Python API, the MLflow scorers, regress, reproduce) with ``run_files`` (run
files scored for ``ragtrack eval``), then ``app`` (the Hydra app and its callbacks), ``execution`` (the
executor and its steps), ``analysis`` (comparison, compare, reference, tuning, benchmark, slices),
``configuration`` (settings, config, systems, inputs), then ``records`` (tracking, layout, provenance),
``registry`` (the plugins) and ``redaction`` (secrets out of logs and records). ``regressions.yaml`` holds
the regression conditions. Importing it has no side effects."""
