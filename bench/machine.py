"""The machine line every benchmark prints with its figures (machines here differ: some AVX2 only,
some AVX-512 with VNNI)."""

from __future__ import annotations

import os
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name, its vector extensions and its core count, from /proc/cpuinfo, e.g.
    ``AMD EPYC (AVX-512, VNNI), 2 cores``."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown CPU")
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model} ({vector}{', VNNI' if 'avx512_vnni' in flags else ''}), {os.cpu_count()} cores"
