"""Which process owns a run or a half-built index: ``host:pid:start`` tags and a liveness check.

A job killed with SIGKILL cannot clean up. What it started carries the tag of its process, so the
next job on the same host can tell a builder that still runs from one that is gone. The start time
(clock ticks since boot, Linux) keeps a reused pid from passing for the dead process.
"""

from __future__ import annotations

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
