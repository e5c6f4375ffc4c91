"""The default experiment (`ragtrack run`: SciFact, bm25 + dense + RRF, MLflow) cold (empty cache
and store) and warm, a 10-job RRF-k multirun against one warm job, peak memory of each (the child
process's maximum resident set, os.wait4) and the import time of the entry point.

    python bench/end_to_end.py [--skip-cold] [--root DIR] [override ...]     (e.g. encoder=minilm)
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
from machine import cpu_model  # bench/ scripts share the machine line

TARGETS = {"cold": 180.0, "warm": 15.0}
SWEEP_RATIO_TARGET = 2.5  # a 10-job sweep on warm caches, against one warm job
RRF_KS = ",".join(str(k) for k in range(10, 101, 10))


def timed(command: list[str], env: dict) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system: less sensitive to a shared machine's load) and peak
    resident MB of one child process (its output goes to a log)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as log:
        child = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            log.seek(0)
            sys.exit(f"failed: {' '.join(command)}\n{log.read().decode()[-3000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def import_seconds(module: str) -> tuple[float, list[str]]:
    """Cumulative import time of ``module`` and its five heaviest direct dependencies (-X importtime)."""
    report = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True
    ).stderr
    rows = [(int(m[1]), m[2]) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \|( *\S+)", report)]
    total = next(us for us, name in reversed(rows) if name.strip() == module)
    heaviest = sorted(((us, name) for us, name in rows if len(name) - len(name.lstrip()) == 3), reverse=True)[
        :5
    ]  # direct imports
    return total / 1e6, [f"{name.strip()} {us / 1e6:.2f} s" for us, name in heaviest]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-cold", action="store_true", help="reuse --root's cache (warm and sweep only)")
    parser.add_argument("--root", help="RAGTRACK_ROOT (default: a new empty folder)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for every job")
    args = parser.parse_args()
    root = Path(args.root or tempfile.mkdtemp(prefix="ragtrack-bench-"))
    env = {**os.environ, "RAGTRACK_ROOT": str(root)}
    run = [sys.executable, "-m", "ragtrack", "run", *args.overrides]
    total, heaviest = import_seconds("ragtrack.pipeline.app")
    print(f"import ragtrack.pipeline.app: {total:.2f} s (heaviest: {', '.join(heaviest)})")
    rows = {}
    if not args.skip_cold:
        rows["cold"] = timed([*run, f"hydra.run.dir={root}/outputs/cold"], env)
        print(f"  cold: {rows['cold'][0]:.1f} s", flush=True)
    rows["warm"] = timed([*run, f"hydra.run.dir={root}/outputs/warm"], env)
    print(f"  warm: {rows['warm'][0]:.1f} s", flush=True)
    rows["sweep 10 x rrf k"] = timed(
        [
            sys.executable,
            "-m",
            "ragtrack",
            "run",
            "--multirun",
            *args.overrides,
            f"fusion.rrf.k={RRF_KS}",
            f"hydra.sweep.dir={root}/multirun",
        ],
        env,
    )
    table = pd.DataFrame(rows, index=["seconds", "cpu seconds", "peak MB"]).T
    warm = table.loc["warm", "seconds"]
    table["x warm job"] = table["seconds"] / warm
    table["cpu x warm job"] = table["cpu seconds"] / table.loc["warm", "cpu seconds"]
    table["target"] = [
        f"<= {TARGETS[n]:.0f} s" if n in TARGETS else f"<= {SWEEP_RATIO_TARGET} x warm" for n in table.index
    ]
    table["met"] = [
        table.loc[n, "seconds"] <= TARGETS[n] if n in TARGETS else table.loc[n, "x warm job"] <= SWEEP_RATIO_TARGET
        for n in table.index
    ]
    print(
        f"\nDefault experiment ({' '.join(args.overrides) or 'no overrides'}), RAGTRACK_ROOT={root}, load {os.getloadavg()[0]:.1f}"
    )
    print(f"CPU: {cpu_model()}")
    print(table.to_string(float_format=lambda v: f"{v:,.2f}"))


if __name__ == "__main__":
    main()
