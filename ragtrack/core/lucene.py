"""Lucene's English analysis, as Anserini indexes BEIR corpora (``DefaultEnglishAnalyzer``):
StandardTokenizer → EnglishPossessiveFilter → LowerCaseFilter → StopFilter → PorterStemFilter.

- **StandardTokenizer** (``StandardTokenizerImpl.jflex``): Unicode word segmentation (UAX #29). A
  token is a run of letters and digits joined as UAX #29 joins them: ``1,000`` and ``3.14`` (digits
  around ``, ; . '``), ``e.g`` and ``don't`` (letters around ``: . '``), ``a_b`` (``_`` joins
  anything), letters next to digits (``5mg``); ``X-Rays`` is ``X``, ``Rays``. Also one token each: a
  run of South-East Asian letters, a Han or Hiragana character, an emoji sequence (``©`` and ``®``
  included). Punctuation and spaces are dropped; tokens of one character are kept. A token longer
  than 255 UTF-16 code units is cut into pieces of 255 (``maxTokenLength``). The patterns here are
  that grammar, alternative for alternative (see :data:`LONGEST_TOKEN` for how its longest match is
  kept); Unicode properties are those of the ``regex`` module (Lucene's grammar is Unicode 9, its
  emoji data 11: characters added since can differ).
- **EnglishPossessiveFilter**: a trailing ``'s``, ``’s`` or ``＇s`` (either case) is removed.
- **LowerCaseFilter**: Java's ``Character.toLowerCase`` per code point (the simple mapping: no
  final-sigma rule, ``İ`` → ``i``, no NFKC, no case folding: ``ß`` stays ``ß``).
- **StopFilter**: :data:`STOPWORDS`, Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words).
- **PorterStemFilter**: :mod:`ragtrack.core.porter`.
"""

from __future__ import annotations

import re

import regex

STOPWORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they this "
    "to was will with".split()
)
MAX_TOKEN_UNITS = 255  # StandardTokenizer's default maxTokenLength, in UTF-16 code units

_EXT = r"[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]*"  # UAX #29 WB4: X (Extend | Format | ZWJ)* -> X
_EXT_SANS_PRESENTATION = r"[[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]--[\uFE0E\uFE0F]]*"
_AHLETTER = rf"(?:[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]{_EXT})"
_NUMERIC = rf"(?:[\p{{WB=Numeric}}[\p{{Block=Halfwidth_And_Fullwidth_Forms}}&&\p{{Nd}}]]{_EXT})"
_KATAKANA = rf"(?:\p{{WB=Katakana}}{_EXT})"
_MID_LETTER = rf"(?:[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_EXT})"
_MID_NUMERIC = rf"(?:[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{_EXT})"
_EXTEND_NUM_LET = rf"(?:\p{{WB=ExtendNumLet}}{_EXT})"
_HEBREW = rf"(?:\p{{WB=Hebrew_Letter}}{_EXT})"
_SINGLE_QUOTE = rf"(?:\p{{WB=Single_Quote}}{_EXT})"
_DOUBLE_QUOTE = rf"(?:\p{{WB=Double_Quote}}{_EXT})"

# WB5-WB13b: letters, digits, katakana and Hebrew joined by the UAX #29 rules (the grammar's WORD_TYPE
# rule, which also covers its NUMERIC_TYPE, HANGUL_TYPE and KATAKANA_TYPE rules)
_UNIT = (
    rf"(?:{_KATAKANA}(?:{_EXTEND_NUM_LET}*{_KATAKANA})*"
    rf"|(?:{_HEBREW}(?:{_SINGLE_QUOTE}|{_DOUBLE_QUOTE}{_HEBREW})"
    rf"|{_NUMERIC}(?:(?:{_EXTEND_NUM_LET}*|{_MID_NUMERIC}){_NUMERIC})*"
    rf"|{_AHLETTER}(?:(?:{_EXTEND_NUM_LET}*|{_MID_LETTER}){_AHLETTER})*)+)"
)
_WORD = rf"{_EXTEND_NUM_LET}*{_UNIT}(?:{_EXTEND_NUM_LET}+{_UNIT})*{_EXTEND_NUM_LET}*"

# Emoji sequences (UTS #51 emoji_sequence, as the grammar's EMOJI_TYPE rule spells it)
_KEYCAP_BASE = "[0-9#*]"
_EMOJI_CHAR = (
    r"(?:\p{Extended_Pictographic}"
    r"|[\p{Emoji}--[\p{WB=Regional_Indicator}0-9#*©®™\u3030\u303D\p{Emoji_Modifier}]])"
)
_EMOJI_ELEMENT = (
    rf"(?:\p{{WB=ZWJ}}*{_EMOJI_CHAR}{_EXT_SANS_PRESENTATION}\uFE0F?"
    rf"|(?:\p{{WB=ZWJ}}*\p{{Emoji_Modifier_Base}}{_EXT_SANS_PRESENTATION})?\p{{Emoji_Modifier}}{_EXT_SANS_PRESENTATION})"
)
_EMOJI = (
    rf"{_EMOJI_ELEMENT}(?:(?:\p{{WB=ZWJ}}{_EMOJI_ELEMENT})*|[\U000E0020-\U000E007E]+\U000E007F)"
    rf"|{_KEYCAP_BASE}{_EXT_SANS_PRESENTATION}\uFE0F?\u20E3{_EXT_SANS_PRESENTATION}"
    rf"|(?:\p{{WB=Regional_Indicator}}{_EXT}){{2}}"
)

TOKEN_ALTERNATIVES = (  # the grammar's token rules (the Emoji rule after the word rule: see TOKEN)
    _WORD,
    _EMOJI,
    rf"(?:\p{{LB=Complex_Context}}{_EXT})+",  # South-East Asian scripts: one token per run
    rf"\p{{Script=Han}}{_EXT}",
    rf"\p{{Script=Hiragana}}{_EXT}",
)
# JFlex takes the longest match among the rules. LONGEST_TOKEN does so too (leftmost-longest), but is
# slow; TOKEN takes the first alternative that matches, greedily, which gives the same tokens unless a
# ZWJ joins emoji (an emoji's trailing Extend/ZWJ run would keep the joiner from the next element) or
# a Hebrew letter takes a quote (WB7a-c, which a greedy run of letters passes by): texts with U+200D or
# a Hebrew letter take LONGEST_TOKEN (NEEDS_LONGEST). Without those, where the word and the Emoji rule both match,
# the word is at least as long (Extend characters, U+FE0F and U+20E3 among them, extend words too).
# TOKEN starts with a shortcut for the common token, ASCII letters and digits followed by nothing
# that could extend it (possessive: no shorter match is tried).
LONGEST_TOKEN = regex.compile(
    "|".join(f"(?:{alternative})" for alternative in TOKEN_ALTERNATIVES), regex.V1 | regex.POSIX
)
NEEDS_LONGEST = regex.compile(r"[\u200d\p{WB=Hebrew_Letter}]")
TOKEN = regex.compile(
    "|".join(
        [r"[A-Za-z0-9]++(?![_:.',;\x80-\U0010FFFF])"] + [f"(?:{alternative})" for alternative in TOKEN_ALTERNATIVES]
    ),
    regex.V1,
)
_ASCII_UNIT = r"(?:[A-Za-z](?:(?:_*|[:.'])[A-Za-z])*|[0-9](?:(?:_*|[,;.'])[0-9])*)+"
ASCII_TOKEN = re.compile(rf"[A-Za-z0-9]++(?![_:.',;])|_*{_ASCII_UNIT}(?:_+{_ASCII_UNIT})*_*")  # TOKEN on ASCII text
_POSSESSIVE_APOSTROPHES = ("'", "\u2019", "\uff07")


def standard_tokens(text: str) -> list[str]:
    """The tokens of Lucene's StandardTokenizer in ``text``, in order (module docstring)."""
    scanner = LONGEST_TOKEN if NEEDS_LONGEST.search(text) else TOKEN
    tokens = scanner.findall(text)
    if max(map(len, tokens), default=0) > MAX_TOKEN_UNITS // 2:  # may exceed 255 UTF-16 code units
        return _cut_long_tokens(text, scanner)
    return tokens


def _cut_long_tokens(text: str, scanner) -> list[str]:
    """The tokens of ``scanner`` (:data:`TOKEN`, :data:`LONGEST_TOKEN` or :data:`ASCII_TOKEN`) in ``text`` where a token may
    exceed :data:`MAX_TOKEN_UNITS`: its first 255 UTF-16 code units are a token, and scanning starts
    again after them."""
    tokens, position = [], 0
    while (match := scanner.search(text, position)) is not None:
        start, end = match.span()
        units = 0
        for cut in range(start, end):
            units += 2 if text[cut] > "\uffff" else 1
            if units > MAX_TOKEN_UNITS:
                end = cut
                break
        tokens.append(text[start:end])
        position = end
    return tokens


def java_lower(token: str) -> str:
    """``token`` lower-cased as Java's ``Character.toLowerCase`` does, code point by code point."""
    if token.isascii():
        return token.lower()
    if "\u03a3" in token or "\u0130" in token:  # str.lower's final-sigma rule; İ's full mapping (i + U+0307)
        return "".join("i" if char == "\u0130" else char.lower() for char in token)
    return token.lower()


_NON_ASCII = re.compile(r"[^\x00-\x7f]+")
SPARSE_NON_ASCII = (
    32  # english_words scans the words with non-ASCII characters apart when at most one per 32 characters
)
_SPACE = re.compile(r"[ \t\n\r\f\v]")  # in no token (WB Other, WSegSpace, CR, LF, Newline): tokens end there


def _non_ascii_words(text: str) -> list[tuple[int, int]] | None:
    """The spans of ``text``'s space-delimited words holding a non-ASCII character, in order; None
    when there are more than one per :data:`SPARSE_NON_ASCII` characters. Every token lies inside one
    word (no token takes an ASCII space), so the text between them is ASCII and scans as ASCII text.
    Linear: each step looks back only to the previous span's end."""
    spans, done, most = [], 0, len(text) // SPARSE_NON_ASCII
    for match in _NON_ASCII.finditer(text):
        if len(spans) > most:
            return None
        start, end = match.span()
        if start < done:
            continue
        start = max(done, *(text.rfind(space, done, start) + 1 for space in " \t\n\r\f\v"))
        following = _SPACE.search(text, end)
        done = following.start() if following else len(text)
        spans.append((start, done))
    return spans


def _ascii_words(text: str, lowercase: bool) -> list[str]:
    """:func:`english_words` of ASCII ``text``: lower-cased first and split by :data:`ASCII_TOKEN`
    (the same tokens: lower-casing ASCII changes no character's word-break class)."""
    if lowercase:
        text = text.lower()
    words = ASCII_TOKEN.findall(text)
    if max(map(len, words), default=0) > MAX_TOKEN_UNITS:
        words = _cut_long_tokens(text, ASCII_TOKEN)
    if "'" in text:
        words = [word[:-2] if word.endswith(("'s", "'S")) else word for word in words]
    return words


def _standard_words(text: str, lowercase: bool) -> list[str]:
    """:func:`english_words` by :func:`standard_tokens`: any text."""
    words = []
    for token in standard_tokens(text):
        if len(token) >= 2 and token[-1] in "sS" and token[-2] in _POSSESSIVE_APOSTROPHES:
            token = token[:-2]
        words.append(java_lower(token) if lowercase else token)
    return words


def english_words(text: str, lowercase: bool = True) -> list[str]:
    """``text``'s tokens after the tokenizer, the possessive filter and (``lowercase``) lower-casing:
    the words that stopwords and stemming apply to. Where non-ASCII words are rare (English text with
    a few symbols), only they take :func:`standard_tokens` and the ASCII text around them the faster
    :func:`_ascii_words`; the same words either way."""
    spans = [] if text.isascii() else _non_ascii_words(text)
    if spans is None:
        return _standard_words(text, lowercase)
    words, done = [], 0
    for start, end in spans:
        words += _ascii_words(text[done:start], lowercase)
        words += _standard_words(text[start:end], lowercase)
        done = end
    return words + _ascii_words(text[done:], lowercase)
