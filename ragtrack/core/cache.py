"""A shared on-disk cache for indexes and embeddings, safe against crashes and concurrent builders.

An entry lives at ``<root>/<kind>/<key>`` where ``key = sha256(schema version, kind, parts)`` and the
parts name everything that changes the entry (corpus hash, retriever class, settings). A build writes
into a private temporary folder, writes ``entry.json`` last and renames the folder into place, so a
folder at the final path is always complete; a killed build leaves only a temporary folder, which the
next build of the key removes. Builders of one key serialize on a file lock: the first builds, the
others wait and reuse its entry.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from filelock import FileLock

from ragtrack.core.errors import RagtrackError, describe_fault

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MANIFEST = "entry.json"


def cache_key(kind: str, parts: dict) -> str:
    """sha256 over the schema version, the entry kind and the canonical JSON of ``parts``."""
    payload = json.dumps({"schema": SCHEMA_VERSION, "kind": kind, "parts": parts}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class Cache:
    """Entries under ``root``; ``builds`` counts the entries this process built (for tests and logs)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.builds: list[str] = []
        self._check_writable()

    def _check_writable(self) -> None:
        """Fail at once, with one line, when the cache folder cannot be created or written (read-only
        disk, no permission, a file in the way): before a job has built or logged anything."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=self.root).close()
        except OSError as exc:
            raise RagtrackError(f"the cache folder cannot be written: {describe_fault(exc) or exc}") from None

    def entry(self, kind: str, parts: dict, build: Callable[[Path], None], label: str | None = None) -> Path:
        """Return the folder of a complete entry, building it with ``build(folder)`` if needed."""
        key = cache_key(kind, parts)
        final = self.root / kind / key
        if (final / MANIFEST).exists():
            log.info("cache hit: %s %s", label or kind, key[:12])
            return final
        final.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(final) + ".lock"):
            if (final / MANIFEST).exists():
                log.info("cache hit (built by another job): %s %s", label or kind, key[:12])
                return final
            for stale in final.parent.glob(f".{key}.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
            if final.exists():  # a folder without manifest cannot be trusted
                shutil.rmtree(final)
            scratch = final.parent / f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            scratch.mkdir()
            started = time.perf_counter()
            try:
                build(scratch)
                manifest = {"kind": kind, "parts": parts, "schema": SCHEMA_VERSION, "built_seconds": time.perf_counter() - started}
                (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
                os.rename(scratch, final)
            except BaseException as exc:
                shutil.rmtree(scratch, ignore_errors=True)
                fault = None if isinstance(exc, RagtrackError) else describe_fault(exc)
                if fault:  # e.g. the disk filled up: one line naming the entry; nothing of it is left
                    raise RagtrackError(f"cannot build the {label or kind} cache entry in {final.parent}: {fault}") from exc
                raise
        self.builds.append(f"{kind}/{key}")
        log.info("cache build: %s %s (%.1f s)", label or kind, key[:12], time.perf_counter() - started)
        return final


def folder_size(path: Path) -> int:
    """Bytes on disk of every file under ``path``."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


class IdentityMemo:
    """Values derived from objects a process never changes (runs read from the cache, the loaded
    dataset), keyed by those objects' identity plus plain settings, so the jobs of a multirun compute
    them once. Each entry holds its objects, so no id is reused while the entry lives; the least
    recently used entries beyond ``size`` are dropped."""

    def __init__(self, size: int = 16):
        self.size = size
        self._entries: OrderedDict[tuple, tuple[tuple, Any]] = OrderedDict()

    def get(self, objects: tuple, settings: Hashable, compute: Callable[[], Any]) -> Any:
        key = (tuple(map(id, objects)), settings)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key][1]
        value = compute()
        self._entries[key] = (objects, value)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
        return value
