"""Which process owns a run or a half-built index: ``host:pid:start`` tags and a liveness check; and
the cores a process may use (:func:`physical_cores`, the default of every ``threads`` setting).

A job killed with SIGKILL cannot clean up. What it started carries the tag of its process, so the
next job on the same host can tell a builder that still runs from one that is gone. The start time
(clock ticks since boot, Linux) keeps a reused pid from passing for the dead process.
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path


def _start_ticks(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_tag() -> str:
    """``host:pid:start`` of this process."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_ticks(os.getpid())}"


def process_alive(tag: str) -> bool:
    """Whether the process a :func:`process_tag` names still runs; processes on other hosts count as alive."""
    host, _, rest = tag.partition(":")
    pid_text, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid_text.isdigit():
        return True
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not start or _start_ticks(int(pid_text)) == start


@functools.cache
def physical_cores() -> int:
    """Cores this process may run on, each counted once however many hardware threads it has (from
    /proc/cpuinfo; elsewhere the logical CPUs)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    cores, fields = set(), {}
    info = Path("/proc/cpuinfo")
    for line in [*(info.read_text().splitlines() if info.exists() else []), ""]:
        key, _, value = line.partition(":")
        if key.strip():
            fields[key.strip()] = value.strip()
        elif fields:
            if int(fields.get("processor", -1)) in allowed:
                cores.add((fields.get("physical id"), fields.get("core id", fields.get("processor"))))
            fields = {}
    return len(cores) or len(allowed) or 1
