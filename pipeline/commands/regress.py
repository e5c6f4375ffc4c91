"""Regression fixtures in the style of Pyserini's "2cr" pages: named conditions (``ragtrack run``
overrides) with the figures they must reproduce, checked by ``ragtrack regress``.

The conditions live in ``regressions.yaml`` next to this module (or a file the user names). Each one
runs in-process (no MLflow, outputs in a temporary folder, the shared index/embedding cache), then
every expected ``"<system>/<metric>"`` figure is compared with the measured one:
``|measured - expected| <= tolerance + ROUNDING`` (expected values are rounded to 4 decimals).
"""

from __future__ import annotations

import contextlib
import fnmatch
import io
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any, TextIO

from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import read_yaml

ROUNDING = 0.00005  # half a unit of the 4th decimal: the expected values are rounded to 4 decimals
_EPSILON = 1e-12  # binary floating point at the rounding boundary


@dataclass(frozen=True)
class Condition:
    """One regression condition: overrides to run and the figures they must give."""

    name: str
    description: str
    overrides: list[str]
    slow: bool
    expected: dict[str, float]
    tolerance: dict[str, float]  # fnmatch pattern on "<system>/<metric>" -> tolerance
    default_tolerance: float

    def tolerance_for(self, figure: str) -> float:
        return next(
            (t for pattern, t in self.tolerance.items() if fnmatch.fnmatchcase(figure, pattern)), self.default_tolerance
        )


@dataclass(frozen=True)
class Check:
    """One expected figure against its measured value."""

    condition: str
    figure: str
    measured: float
    expected: float
    tolerance: float

    @property
    def delta(self) -> float:
        return self.measured - self.expected

    @property
    def ok(self) -> bool:
        return abs(self.delta) <= self.tolerance + ROUNDING + _EPSILON  # False for NaN

    def line(self, name_width: int = 0, figure_width: int = 0) -> str:
        status, note = ("OK", "") if self.ok else ("FAIL", f", tolerance {self.tolerance:g}")
        return (
            f"{status:<4} {self.condition:<{name_width}}  {self.figure:<{figure_width}}  {self.measured:.4f}  "
            f"(expected {self.expected:.4f}, delta {round(self.delta, 4) + 0.0:+.4f}{note})"
        )  # + 0.0: no "-0.0000"


def default_file() -> Path:
    """The shipped ``regressions.yaml`` (package data of ``ragtrack.pipeline``)."""
    return Path(str(files("ragtrack.pipeline").joinpath("regressions.yaml")))


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_conditions(path: str | Path | None = None) -> list[Condition]:
    """The conditions of a regressions file (default: the shipped one), checked for shape."""
    path = Path(path) if path is not None else default_file()
    data = read_yaml(path, "regressions file")
    if not isinstance(data, dict) or not isinstance(data.get("conditions"), list):
        raise InputError(path, "expected a mapping with a 'conditions' list (and an optional 'tolerance' block)")
    tolerance = data.get("tolerance") or {}
    if not isinstance(tolerance, dict) or not _number(tolerance.get("default", ROUNDING)):
        raise InputError(path, "'tolerance' must be a mapping with a numeric 'default'")
    default = float(tolerance.get("default", ROUNDING))
    conditions, names = [], set()
    for number, entry in enumerate(data["conditions"], 1):
        conditions.append(_condition(path, number, entry, default))
        if conditions[-1].name in names:
            raise InputError(path, f"condition {conditions[-1].name!r} is defined twice")
        names.add(conditions[-1].name)
    return conditions


def _condition(path: Path, number: int, entry: Any, default: float) -> Condition:
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
        raise InputError(path, f"condition #{number} must be a mapping with a 'name'")
    name = entry["name"]

    def bad(problem: str) -> InputError:
        return InputError(path, f"condition {name!r}: {problem}")

    unknown = set(entry) - {"name", "description", "overrides", "slow", "expected", "tolerance"}
    if unknown:
        raise bad(f"unknown key(s) {', '.join(sorted(map(str, unknown)))}")
    overrides = entry.get("overrides", [])
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        raise bad("'overrides' must be a list of strings such as retriever=[bm25]")
    if not isinstance(entry.get("slow", False), bool):
        raise bad("'slow' must be true or false")
    expected = entry.get("expected")
    if (
        not isinstance(expected, dict)
        or not expected
        or not all(isinstance(k, str) and k.count("/") == 1 and _number(v) for k, v in expected.items())
    ):
        raise bad("'expected' must map \"<system>/<metric>\" to numbers, e.g. bm25/ndcg@10: 0.6789")
    tolerance = entry.get("tolerance", {})
    if _number(tolerance):
        tolerance = {"*": tolerance}
    if not isinstance(tolerance, dict) or not all(isinstance(k, str) and _number(v) for k, v in tolerance.items()):
        raise bad("'tolerance' must be a number or map \"<system>/<metric>\" patterns to numbers")
    return Condition(
        name,
        str(entry.get("description", "")),
        list(overrides),
        entry.get("slow", False),
        {k: float(v) for k, v in expected.items()},
        {k: float(v) for k, v in tolerance.items()},
        default,
    )


def select(
    conditions: Sequence[Condition], patterns: Iterable[str] = (), slow: bool = False
) -> tuple[list[Condition], list[Condition]]:
    """``(to run, skipped as slow)``: the conditions matching any pattern (all without patterns);
    slow ones run with ``slow`` or when a pattern is exactly their name."""
    patterns = [p.strip() for item in patterns for p in item.split(",") if p.strip()]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(c.name, pattern) for c in conditions):
            raise RagtrackError(
                f"no regression condition matches {pattern!r}; conditions: {', '.join(c.name for c in conditions)}"
            )
    chosen = [c for c in conditions if not patterns or any(fnmatch.fnmatchcase(c.name, p) for p in patterns)]
    runs = [c for c in chosen if slow or not c.slow or c.name in patterns]
    return runs, [c for c in chosen if c not in runs]


def measure(condition: Condition, extra_overrides: Sequence[str] = ()) -> dict[str, dict[str, float]]:
    """Run the condition in-process; its ``results["systems"]`` (system -> metric -> mean)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ragtrack.pipeline.configuration.config import compose
    from ragtrack.pipeline.execution.experiment import run_experiment

    with tempfile.TemporaryDirectory(prefix="ragtrack-regress-") as folder:
        try:  # later overrides win: ours come last
            cfg = compose([*condition.overrides, *extra_overrides, "tracking=none", f"paths.output_dir={folder}"])
            configured = [*(cfg.get("retriever") or {}), *(f.system for f in (cfg.get("fusion") or {}).values())]
            unknown = sorted({figure.split("/")[0] for figure in condition.expected} - set(configured))
            if unknown:  # before a possibly long run
                raise RagtrackError(f"no system {unknown[0]!r} is configured (systems: {', '.join(configured)})")
            with contextlib.redirect_stdout(io.StringIO()):  # the job's own result table
                return run_experiment(cfg)["systems"]
        except (RagtrackError, HydraException, OmegaConfBaseException) as exc:  # e.g. a mistake in the overrides
            raise RagtrackError(
                f"condition {condition.name!r}: {(str(exc) or type(exc).__name__).splitlines()[0]}"
            ) from None


def check(condition: Condition, systems: dict[str, dict[str, float]]) -> list[Check]:
    """Every expected figure of ``condition`` against the measured ``systems``."""
    checks = []
    for figure, expected in condition.expected.items():
        system, metric = figure.split("/")
        if system not in systems:
            raise RagtrackError(
                f"condition {condition.name!r}: no system {system!r} was run (systems: {', '.join(systems)})"
            )
        if metric not in systems[system]:
            raise RagtrackError(
                f"condition {condition.name!r}: metric {metric!r} was not produced for {system} "
                f"(metrics: {', '.join(systems[system])})"
            )
        checks.append(
            Check(condition.name, figure, float(systems[system][metric]), expected, condition.tolerance_for(figure))
        )
    return checks


def run_regressions(
    conditions: Sequence[Condition],
    skipped: Sequence[Condition] = (),
    extra_overrides: Sequence[str] = (),
    out: TextIO | None = None,
) -> list[Check]:
    """Run and check ``conditions``, printing one line per figure and a summary line."""
    out = out or sys.stdout
    started = time.perf_counter()
    name_width = max((len(c.name) for c in [*conditions, *skipped]), default=0)
    figure_width = max((len(f) for c in conditions for f in c.expected), default=0)
    checks = []
    for condition in conditions:
        for result in check(condition, measure(condition, extra_overrides)):
            print(result.line(name_width, figure_width), file=out, flush=True)
            checks.append(result)
    for condition in skipped:
        print(f"SKIP {condition.name:<{name_width}}  (slow: run with --slow or name it in --only)", file=out)
    failed = sum(not c.ok for c in checks)
    skip_note = f", {len(skipped)} skipped as slow" if skipped else ""
    print(
        f"{'FAILED' if failed else 'PASSED'}: {len(checks) - failed} OK, {failed} FAIL in {len(conditions)} condition(s)"
        f"{skip_note} ({time.perf_counter() - started:.1f} s)",
        file=out,
    )
    return checks


def list_conditions(conditions: Sequence[Condition], out: TextIO | None = None) -> None:
    """One line per condition: name, slow marker, number of figures, description."""
    width = max((len(c.name) for c in conditions), default=0)
    for c in conditions:
        print(
            f"{c.name:<{width}}  {'slow' if c.slow else 'fast'}  {len(c.expected):>2} figures  {c.description}",
            file=out or sys.stdout,
        )
