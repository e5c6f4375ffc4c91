"""The machine line every benchmark prints with its figures (machines here differ: some AVX2 only,
some AVX-512 with VNNI), the CPU's measured float32 peak, and the best-of-N timer they share."""

from __future__ import annotations

import os
import time
from pathlib import Path

ISA = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")  # the flags that pick kernels


def best_of(step, repeats: int) -> float:
    """The fewest seconds of ``repeats`` calls of ``step`` (a busy spell of a shared machine slows some)."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - started)
    return min(seconds)


def cpu_model() -> str:
    """The CPU's model name, its vector extensions and its core count, from /proc/cpuinfo, e.g.
    ``AMD EPYC (avx2, avx512f, avx512_vnni), 2 cores``."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next(
        (line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "unknown CPU"
    )
    flags = next((line.split(":", 1)[1].split() for line in info.splitlines() if line.startswith("flags")), [])
    return f"{model} ({', '.join(f for f in ISA if f in flags) or 'no AVX2'}), {os.cpu_count()} cores"


def matmul_peak(size: int = 4096, repeats: int = 3) -> float:
    """GFLOP/s of numpy's float32 matrix product (its BLAS, every core), the best of ``repeats``: the
    float32 peak this machine reaches now."""
    import numpy as np

    left, right = (np.random.default_rng(seed).random((size, size), dtype=np.float32) for seed in (0, 1))
    left @ right  # warm up
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        left @ right
        best = min(best, time.perf_counter() - started)
    return 2 * size**3 / best / 1e9
