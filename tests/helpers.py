"""Test helpers for scale-out and fault tests: the CLI in a subprocess, servers in their own process
group (stopped by the test, whole group), and a CLI that stalls in a chosen phase so a test can
SIGKILL it there deterministically."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

TOY_JOB = ("run", "dataset=toy", "encoder=hashing")  # the toy dataset with the model-free encoder
PYTHON_CLI = [sys.executable, "-c", "import sys; from pipeline.cli import main; sys.exit(main())"]
STALLING_CLI = [sys.executable, "-c", "import sys; from tests.helpers import stalling_main; sys.exit(stalling_main())"]


def ragtrack(root: Path, *args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``ragtrack <args>`` in ``root`` with RAGTRACK_ROOT=root."""
    full_env = {**os.environ, "RAGTRACK_ROOT": str(root), "RAY_AUTH_MODE": "disabled", **(env or {})}
    return subprocess.run([*PYTHON_CLI, *args], cwd=root, env=full_env, capture_output=True, text=True, timeout=timeout)


def systems(output_dir: Path) -> dict[str, dict[str, float]]:
    """Mean metrics per system from a job's ``results.json``."""
    return json.loads((output_dir / "results.json").read_text())["systems"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def stop_group(process: subprocess.Popen) -> None:
    """SIGTERM the process group of ``process``, SIGKILL it if it lingers."""
    for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def server(command: list[str], health_url: str, log: Path, env: dict | None = None, timeout: float = 120):
    """Start ``command`` in its own process group, wait until ``health_url`` answers, stop the group on exit."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(health_url, timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"server did not answer {health_url} within {timeout} s: {log.read_text()[-2000:]}")
                time.sleep(0.3)
        yield process
    finally:
        stop_group(process)


def _stall_points() -> dict:
    """Phase -> (owner, method): after the method's first call the job writes the phase into
    $RAGTRACK_TEST_STALL_FILE and sleeps, holding whatever it has half-written."""
    from chromadb.api.models.Collection import Collection

    from retrievers.encoders import HashingEncoder

    return {"encode": (HashingEncoder, "_encode"),       # the corpus is being encoded
            "index": (Collection, "add")}                # vectors are being added to Chroma


def stalling_main() -> int:
    """``ragtrack`` that stalls in phase $RAGTRACK_TEST_STALL (see :func:`_stall_points`)."""
    from pipeline.cli import main

    phase, marker = os.environ["RAGTRACK_TEST_STALL"], Path(os.environ["RAGTRACK_TEST_STALL_FILE"])
    owner, name = _stall_points()[phase]
    original = getattr(owner, name)

    def stalled(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        marker.write_text(phase)
        time.sleep(600)
        return result

    setattr(owner, name, stalled)
    return main()


def run_until_stalled(root: Path, phase: str, *args: str, timeout: float = 120) -> None:
    """Start ``ragtrack <args>`` stalling in ``phase``, wait until it gets there, SIGKILL its process group."""
    marker = root / f"stalled-{phase}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent), "RAGTRACK_ROOT": str(root), "RAGTRACK_TEST_STALL": phase, "RAGTRACK_TEST_STALL_FILE": str(marker)}
    with open(root / f"stalled-{phase}.log", "wb") as log:
        process = subprocess.Popen([*STALLING_CLI, *args], cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while not marker.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"job did not reach {phase!r}: {(root / f'stalled-{phase}.log').read_text()[-3000:]}")
            time.sleep(0.1)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
