"""Compact text columns: ``Strings`` holds texts as one UTF-8 buffer and an array of offsets.

A million Python strings cost their characters plus ~50 bytes each and a pointer in a list; in a
``Strings`` a text costs its UTF-8 bytes and one 8-byte offset, and it becomes a ``str`` only when
read. Like every :class:`TextSequence`, indexing returns a ``str``, slicing a ``list[str]``, and it
equals any sequence of the same texts in the same order (a list, say), so code written for
``list[str]`` reads it unchanged. :class:`JoinedTexts` is a computed column (title + text).
"""

from __future__ import annotations

from abc import abstractmethod
from array import array
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice

import numpy as np

BLOCK = 65_536  # texts decoded per batch of offsets


class TextSequence(Sequence[str]):
    """A read-only sequence of texts: subclasses give ``__len__``, ``_text(i)`` and ``_texts(start, stop)``."""

    __slots__ = ()

    @abstractmethod
    def _text(self, index: int) -> str:
        """Text ``index`` (0 <= index < len)."""

    def _texts(self, start: int, stop: int) -> Iterator[str]:
        return map(self._text, range(start, stop))

    def __getitem__(self, index):
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return [self._text(i) for i in range(start, stop, step)]
            return list(self._texts(start, max(start, stop)))
        count = len(self)
        if not -count <= index < count:
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._text(int(index) % count)

    def __iter__(self) -> Iterator[str]:
        return self._texts(0, len(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, (str, bytes, bytearray)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __repr__(self) -> str:
        shown = ", ".join(map(repr, self[:3]))
        return f"{type(self).__name__}([{shown}{', ...' if len(self) > 3 else ''}]; {len(self)} texts)"


class Strings(TextSequence):
    """Texts back to back in one UTF-8 buffer; text ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    __slots__ = ("_data", "_offsets")

    def __init__(self, values: Iterable[str] = ()):
        if isinstance(values, Strings):
            self._data, self._offsets = values._data, values._offsets
            return
        builder = StringsBuilder()
        for value in values:
            builder.append(value)
        self._data, self._offsets = builder.freeze()

    @classmethod
    def from_builder(cls, builder: "StringsBuilder") -> "Strings":
        strings = cls.__new__(cls)
        strings._data, strings._offsets = builder.freeze()
        return strings

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def _text(self, index: int) -> str:
        return self._data[self._offsets[index] : self._offsets[index + 1]].decode("utf-8")

    def _texts(self, start: int, stop: int) -> Iterator[str]:
        data = self._data
        for first in range(start, stop, BLOCK):  # offsets become Python ints a block at a time
            bounds = self._offsets[first : min(first + BLOCK, stop) + 1].tolist()
            for begin, end in zip(bounds[:-1], bounds[1:]):
                yield data[begin:end].decode("utf-8")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Strings):
            return np.array_equal(self._offsets, other._offsets) and self._data == other._data
        return super().__eq__(other)

    @property
    def nbytes(self) -> int:
        """Bytes held: the UTF-8 buffer and the offsets."""
        return len(self._data) + self._offsets.nbytes


class StringsBuilder:
    """Appends texts to one growing UTF-8 buffer, for :meth:`Strings.from_builder`."""

    def __init__(self) -> None:
        self._data = bytearray()
        self._ends = array("q", [0])

    def append(self, value: str) -> None:
        self._data += value.encode("utf-8")
        self._ends.append(len(self._data))

    def freeze(self) -> tuple[bytes | bytearray, np.ndarray]:
        """The buffer and the offsets; the builder is empty afterwards (the buffer is handed over, not copied)."""
        data, ends = self._data, np.frombuffer(self._ends, dtype=np.int64).copy()
        self.__init__()
        return data, ends


class JoinedTexts(TextSequence):
    """``f"{first[i]} {second[i]}".strip()``, computed as read (a corpus's title + text)."""

    __slots__ = ("_first", "_second")

    def __init__(self, first: Sequence[str], second: Sequence[str]):
        self._first, self._second = first, second

    def __len__(self) -> int:
        return len(self._second)

    def _text(self, index: int) -> str:
        return f"{self._first[index]} {self._second[index]}".strip()

    def _texts(self, start: int, stop: int) -> Iterator[str]:
        for first, second in zip(_window(self._first, start, stop), _window(self._second, start, stop)):
            yield f"{first} {second}".strip()


def _window(texts: Sequence[str], start: int, stop: int) -> Iterator[str]:
    """``texts[start:stop]`` one at a time (no list of them all)."""
    return texts._texts(start, stop) if isinstance(texts, TextSequence) else islice(texts, start, stop)
