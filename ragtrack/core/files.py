"""Hardened file reading and atomic writing, shared by every input and output of ragtrack.

``read_lines`` is the one way input files are read: UTF-8 (a BOM and CRLF accepted), gzip when the
name ends in ``.gz``, and every defect (NUL bytes, invalid UTF-8, over-long lines, truncated gzip,
a missing file) raised as an :class:`~ragtrack.core.errors.InputError` naming the file and line.
``write_atomically`` writes through a temporary file and a rename, so readers never see half a file.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from ragtrack.core.errors import InputError

MAX_LINE_BYTES = 64 * 2**20  # longer lines are rejected before they are held in memory


def open_bytes(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def read_lines(path: Path, digest: "hashlib._Hash | None" = None) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without line ending) for non-blank lines of a UTF-8 file
    (gzip if it ends in ``.gz``); a BOM and CRLF are accepted; NUL bytes, invalid UTF-8, lines over
    :data:`MAX_LINE_BYTES` and truncated gzip streams are errors. ``digest`` is fed the raw bytes."""
    number = 0
    try:
        with open_bytes(path) as handle:
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(path, f"line longer than {MAX_LINE_BYTES:,} bytes", number)
                if digest is not None:
                    digest.update(raw)
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                elif number == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                    raise InputError(path, "UTF-16 text (byte-order mark): save the file as UTF-8", number)
                if b"\x00" in raw:
                    raise InputError(path, "NUL byte in line", number)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(path, f"not valid UTF-8 (byte {exc.start})", number) from None
                text = text.rstrip("\r\n")
                if text.strip():
                    yield number, text
    except FileNotFoundError:
        raise InputError(path, "file not found") from None
    except IsADirectoryError:
        raise InputError(path, "is a folder, not a file") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        where = f"after line {number}" if number else "at its start"
        raise InputError(path, f"corrupt or truncated gzip {where}: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc.strerror or exc}") from None


def write_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False, encoding="utf-8")
    try:
        with handle:
            handle.write(text)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise
    return path
