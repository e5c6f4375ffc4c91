"""A shared on-disk cache for indexes and embeddings, safe against crashes and concurrent builders.

An entry lives at ``<root>/<kind>/<key>`` where ``key = sha256(schema version, kind, parts)`` and the
parts name everything that changes the entry (corpus hash, retriever class, settings). A build writes
into a private temporary folder, writes ``entry.json`` last and renames the folder into place, so a
folder at the final path is always complete; a killed build leaves only a temporary folder, which the
next build of the key removes. Builders of one key serialize on a file lock: the first builds, the
others wait and reuse its entry.

The manifest records the sha256, size and mtime of every file of the entry. A hit checks the sizes
and mtimes (a ``stat`` per file) and hashes a file only when its mtime moved; an entry whose files are
missing, cut short or changed is rebuilt with one warning line. An entry that its reader rewrites in
place (a Chroma database: a client rewrites its files when it opens them) is opened through
:meth:`Cache.opened`, under the entry's lock, and its checksums are taken again once it is open, so
the next reader checks what the last one left. A symbolic link at an entry's path, or a folder whose
manifest is not ragtrack's for that key, is refused with one line: never followed, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock

from ragtrack.core.checksums import file_sha256, sha256_of
from ragtrack.core.errors import RagtrackError, describe_fault
from ragtrack.core.files import check_writable_folder, write_atomically

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
MANIFEST = "entry.json"
T = TypeVar("T")


def cache_key(kind: str, parts: dict) -> str:
    """sha256 over the schema version, the entry kind and the canonical JSON of ``parts``."""
    payload = json.dumps({"schema": SCHEMA_VERSION, "kind": kind, "parts": parts}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


class Cache:
    """Entries under ``root``; ``builds`` counts the entries this process built (for tests and logs)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.builds: list[str] = []
        check_writable_folder(self.root, "the cache folder")  # at once: before a job has built or logged anything

    def entry(self, kind: str, parts: dict, build: Callable[[Path], None], label: str | None = None) -> Path:
        """Return the folder of a complete, intact entry, building it with ``build(folder)`` if needed
        (or rebuilding it, with one warning line, when its files no longer match its manifest)."""
        final = self._final(kind, parts)
        if _damage(final, kind) is None:
            log.info("cache hit: %s %s", label or kind, final.name[:12])
            return final
        with self._lock(final):
            self._ensure(final, kind, parts, build, label)
        return final

    def opened(
        self,
        kind: str,
        parts: dict,
        build: Callable[[Path], None],
        open_entry: Callable[[Path], T],
        label: str | None = None,
    ) -> T:
        """``open_entry(folder)`` of the intact entry (built as :meth:`entry` builds it), for an entry
        that its reader rewrites in place: it is opened under the entry's lock, and the checksums of
        the files it rewrote are taken again before the lock is released."""
        final = self._final(kind, parts)
        with self._lock(final):
            self._ensure(final, kind, parts, build, label)
            opened = open_entry(final)
            _record_checksums(final)
        return opened

    def path(self, *parts: str) -> Path:
        """The path ``root/parts...`` (:func:`inside`): refused when it, or a folder on the way below the root, is a symbolic link."""
        return inside(self.root, *parts)

    def _final(self, kind: str, parts: dict) -> Path:
        return self.path(kind, cache_key(kind, parts))

    def _lock(self, final: Path) -> FileLock:
        final.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(_not_a_link(final.with_name(f"{final.name}.lock"))))

    def _ensure(self, final: Path, kind: str, parts: dict, build: Callable[[Path], None], label: str | None) -> None:
        """Under the entry's lock: keep the intact entry at ``final``, or build it (again)."""
        damage = _damage(final, kind)
        if damage is None:
            log.info("cache hit: %s %s", label or kind, final.name[:12])
            return
        if damage:
            log.warning("cache entry %s is damaged (%s): rebuilding it", final, damage)
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if final.exists():  # incomplete or damaged: moved aside at once, then removed
            aside = _scratch(final)
            os.rename(final, aside)
            shutil.rmtree(aside, ignore_errors=True)
        scratch = _scratch(final)
        scratch.mkdir()
        started = time.perf_counter()
        try:
            build(scratch)
            manifest = {
                "kind": kind,
                "parts": parts,
                "schema": SCHEMA_VERSION,
                "built_seconds": time.perf_counter() - started,
                "files": _checksums(scratch),
            }
            (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
            os.rename(scratch, final)
        except BaseException as exc:
            shutil.rmtree(scratch, ignore_errors=True)
            fault = None if isinstance(exc, RagtrackError) else describe_fault(exc)
            if fault:  # e.g. the disk filled up: one line naming the entry; nothing of it is left
                raise RagtrackError(f"cannot build the {label or kind} cache entry in {final.parent}: {fault}") from exc
            raise
        self.builds.append(f"{kind}/{final.name}")
        log.info("cache build: %s %s (%.1f s)", label or kind, final.name[:12], time.perf_counter() - started)


def _damage(final: Path, kind: str) -> str | None:
    """``None`` for an intact entry; ``""`` for none (no folder, or one without manifest: a crashed
    build); else what is wrong with its files. A symbolic link, or a folder or file that is not
    ragtrack's, is refused with a :class:`RagtrackError`: never followed, never deleted."""
    if not _not_a_link(final).exists() or final.is_dir() and not os.path.lexists(final / MANIFEST):
        return ""
    manifest = _manifest(final, kind)
    if not manifest.get("files"):  # every build writes files; a Chroma entry of an older ragtrack recorded none
        return "built by an older ragtrack, without checksums"
    for name, recorded in sorted(manifest["files"].items()):
        path = final / name
        if path.resolve() != final.resolve() / name:  # a link on the way
            raise RagtrackError(
                f"{path}: a symbolic link in the cache is not used (nor followed nor deleted); remove {final}"
            )
        try:
            info = path.stat()
        except FileNotFoundError:
            return f"{name} is missing"
        if info.st_size != recorded["size"]:
            return f"{name} has {info.st_size} bytes, {recorded['size']} when built"
        if info.st_mtime_ns != recorded["mtime_ns"] and file_sha256(path) != recorded["sha256"]:
            return f"{name} changed since it was built (its sha256 differs)"
    return None


def inside(root: str | Path, *parts: str) -> Path:
    """``root/parts...``, refused in one line when it, or a folder between ``root`` and it, is a
    symbolic link: nothing in a cache is reached through one (the root itself is the user's to choose)."""
    path = Path(root)
    for part in parts:
        path = _not_a_link(path / part)
    return path


def _not_a_link(path: Path) -> Path:
    """``path``, refused in one line when it is a symbolic link: the cache neither follows nor deletes one."""
    if path.is_symlink():
        raise RagtrackError(f"{path}: a symbolic link in the cache is not used (nor followed nor deleted); remove it")
    return path


def _scratch(final: Path) -> Path:
    """A private name beside ``final`` that the next build of its key removes if it is left behind."""
    return final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _checksums(folder: Path, known: dict | None = None) -> dict[str, dict[str, int | str]]:
    """sha256, size and mtime of every file under ``folder`` but the manifest, by relative path; a
    file whose size and mtime are those ``known`` records keeps its recorded sha256 (not memoized: a
    build's scratch folder is about to be renamed)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name, info = path.relative_to(folder).as_posix(), path.stat()
        if name == MANIFEST:
            continue
        recorded = (known or {}).get(name, {})
        same = recorded.get("size") == info.st_size and recorded.get("mtime_ns") == info.st_mtime_ns
        files[name] = {
            "sha256": recorded["sha256"] if same else sha256_of(path),
            "size": info.st_size,
            "mtime_ns": info.st_mtime_ns,
        }
    return files


def _record_checksums(final: Path) -> None:
    """The manifest of the entry at ``final`` with the checksums of its files as they are now."""
    manifest = json.loads((final / MANIFEST).read_text())
    manifest["files"] = _checksums(final, manifest["files"])
    write_atomically(final / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True, default=str))


def _manifest(final: Path, kind: str) -> dict:
    """The manifest of the entry at ``final``, if it is ragtrack's for that path; else one line."""
    try:
        if (final / MANIFEST).is_symlink():
            raise ValueError("its manifest is a symbolic link")
        manifest = json.loads((final / MANIFEST).read_text())
        if not isinstance(manifest, dict) or not {"kind", "parts", "schema"} <= manifest.keys():
            raise ValueError("its manifest lacks kind, parts or schema")
        if (
            manifest["schema"] != SCHEMA_VERSION
            or manifest["kind"] != kind
            or cache_key(kind, manifest["parts"]) != final.name
        ):
            raise ValueError(
                f"its manifest (schema {manifest['schema']!r}, kind {manifest['kind']!r}) is not the one of this key"
            )
        files = manifest.get("files", {})
        if not isinstance(files, dict) or not all(
            isinstance(f, dict) and {"sha256", "size", "mtime_ns"} <= f.keys() for f in files.values()
        ):
            raise ValueError("its manifest's files are not a table of sha256, size and mtime_ns")
    except (OSError, ValueError, UnicodeError, RecursionError) as exc:
        raise RagtrackError(
            f"{final}: not a ragtrack cache entry ({exc}); it is left as it is: remove it or use another cache_dir"
        ) from None
    return manifest


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
