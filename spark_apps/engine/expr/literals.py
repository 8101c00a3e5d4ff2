"""Spark 4's string literals, read exactly as Spark's lexer and ``unescapeSQLString`` read them.

sqlglot's Spark dialect does not (``'O''Brien'`` becomes ``concat('O', 'Brien')``; ``'\\%'`` loses its
backslash), so :func:`extract_strings` lexes the literals itself, before sqlglot sees the text: every
string literal (and every run of adjacent ones, which Spark concatenates) is replaced by a placeholder
literal ``'__delta_str_<n>__'`` that sqlglot keeps verbatim, and the decoded values are returned for the
binder to put back. Backquoted names, comments and hex literals (``X'..'``) are skipped over untouched.
The same pass measures the parenthesis depth, so a deeply nested text is refused before any parser
recursion (see :data:`MAX_DEPTH` in :mod:`.parse`).

Spark's rules (checked against Spark 4 itself, tests/engine/expr/test_literals.py):

* ``'...'`` and ``"..."`` are strings (``"`` quotes identifiers only under ANSI double-quoted
  identifiers, off by default); inside, the delimiter is written doubled (``'O''Brien'``) or escaped
  (``'it\\'s'``);
* ``r'...'`` / ``R"..."`` are raw: every character literal, no escapes and no doubling;
* escapes: ``\\0`` NUL, ``\\b``, ``\\n``, ``\\r``, ``\\t``, ``\\Z`` (U+001A), ``\\uXXXX`` (UTF-16 unit; pairs
  combine), ``\\UXXXXXXXX``, ``\\[01][0-7][0-7]`` octal, ``\\%`` and ``\\_`` keep their backslash (LIKE
  escapes), any other ``\\c`` is ``c`` (so an incomplete ``\\u00`` is ``u00``); a lone surrogate reads as ``?``;
* adjacent literals concatenate: ``'a' 'b'`` is ``'ab'``.
"""

from __future__ import annotations

import re

__all__ = ["extract_strings", "unescape", "placeholder", "LexedText"]

_PLACEHOLDER = "__delta_str_{}__"
_HEX4 = re.compile(r"[0-9A-Fa-f]{4}")
_HEX8 = re.compile(r"[0-9A-Fa-f]{8}")
_SIMPLE = {"0": "\x00", "b": "\b", "n": "\n", "r": "\r", "t": "\t", "Z": "\x1a", "%": "\\%", "_": "\\_"}


def placeholder(n: int) -> str:
    return _PLACEHOLDER.format(n)


class LexedText:
    """The text with its string literals replaced (``text``), their values by placeholder
    (``strings``), the originals for messages (``originals``) and the deepest parenthesis nesting."""

    __slots__ = ("text", "strings", "originals", "depth")

    def __init__(self, text: str, strings: dict[str, str], originals: dict[str, str], depth: int):
        self.text, self.strings, self.originals, self.depth = text, strings, originals, depth

    def restore(self, sql: str) -> str:
        """``sql`` (rendered from the parsed tree, for a message) with the user's literals put back."""
        for key, original in self.originals.items():
            sql = sql.replace(f"'{key}'", original)
        return sql


class UnterminatedString(ValueError):
    """A quote that is never closed (position in ``args[1]``)."""


_SURROGATES = re.compile("[\ud800-\udfff]")


def unescape(body: str, quote: str) -> str:
    """The value of a non-raw literal whose text between the quotes is ``body``."""
    if "\\" not in body and quote not in body and (body.isascii() or not _SURROGATES.search(body)):
        return body  # nothing to unescape (most literals): the text is the value
    units: list[int] = []  # UTF-16 code units, as Spark builds a Java string

    def add(s: str) -> None:
        for ch in s:
            cp = ord(ch)
            if cp > 0xFFFF:
                cp -= 0x10000
                units.extend((0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)))
            else:
                units.append(cp)

    i, n = 0, len(body)
    while i < n:
        c = body[i]
        if c == quote:  # the lexer only lets doubled delimiters through
            add(quote)
            i += 2
            continue
        if c != "\\" or i + 1 >= n:
            add(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt == "u" and _HEX4.fullmatch(body, i + 2, i + 6):
            units.append(int(body[i + 2 : i + 6], 16))
            i += 6
        elif nxt == "U" and _HEX8.fullmatch(body, i + 2, i + 10):
            cp = int(body[i + 2 : i + 10], 16)
            if cp <= 0x10FFFF:
                add(chr(cp))
            else:
                units.extend((0xD800, 0xD800))  # what Spark makes of it: two unpaired units, "??"
            i += 10
        elif nxt in "01" and i + 3 < n and body[i + 2] in "01234567" and body[i + 3] in "01234567":
            units.append(int(body[i + 1 : i + 4], 8))
            i += 4
        else:
            add(_SIMPLE.get(nxt, nxt))
            i += 2
    return _from_units(units)


def _from_units(units: list[int]) -> str:
    """UTF-16 units -> str; pairs combine, a lone surrogate becomes ``?`` (Spark's UTF-8 encoding of it)."""
    out: list[str] = []
    i = 0
    while i < len(units):
        u = units[i]
        if 0xD800 <= u < 0xDC00 and i + 1 < len(units) and 0xDC00 <= units[i + 1] < 0xE000:
            out.append(chr(0x10000 + ((u - 0xD800) << 10) + (units[i + 1] - 0xDC00)))
            i += 2
            continue
        out.append("?" if 0xD800 <= u < 0xE000 else chr(u))
        i += 1
    return "".join(out)


def _end_of_string(text: str, start: int, quote: str, raw: bool) -> int:
    """Index just after the literal whose opening quote is at ``start``."""
    i, n = start + 1, len(text)
    while i < n:
        c = text[i]
        if c == "\\" and not raw:
            i += 2
        elif c == quote:
            if not raw and i + 1 < n and text[i + 1] == quote:
                i += 2
            else:
                return i + 1
        else:
            i += 1
    raise UnterminatedString("unterminated string literal", start)


def _end_of_comment(text: str, i: int) -> int:
    if text.startswith("--", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j + 1
    depth, j = 0, i
    while j < len(text):  # Spark's bracketed comments nest
        if text.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif text.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return len(text)


def _word_end(text: str, i: int) -> int:
    while i < len(text) and (text[i].isalnum() or text[i] == "_"):
        i += 1
    return i


def extract_strings(text: str) -> LexedText:
    """Replace every string literal of ``text`` by a placeholder (see the module docstring).

    :raises UnterminatedString: a string literal or backquoted name is not closed
    """
    out: list[str] = []
    strings: dict[str, str] = {}
    originals: dict[str, str] = {}
    pending: list[tuple[str, str]] = []  # (value, original text) of adjacent literals not yet emitted
    gap = ""  # whitespace/comments seen after a pending literal (kept if no literal follows)
    depth = max_depth = 0
    i, n = 0, len(text)

    def flush() -> None:
        nonlocal pending, gap
        if pending:
            key = placeholder(len(strings))
            strings[key] = "".join(v for v, _ in pending)
            originals[key] = " ".join(o for _, o in pending)
            out.append(f"'{key}'")
            pending = []
        out.append(gap)
        gap = ""

    while i < n:
        c = text[i]
        if pending and (c.isspace() or text.startswith("--", i) or text.startswith("/*", i)):
            j = i + 1 if c.isspace() else _end_of_comment(text, i)
            gap += text[i:j]
            i = j
            continue
        raw = c in "rR" and i + 1 < n and text[i + 1] in "'\"" and (i == 0 or not _is_word(text[i - 1]))
        if c in "'\"" or raw:
            q = i + 1 if raw else i
            end = _end_of_string(text, q, text[q], raw)
            body = text[q + 1 : end - 1]
            pending.append((body if raw else unescape(body, text[q]), text[i:end]))
            gap = ""
            i = end
            continue
        flush()
        if c == "`":
            j = i + 1
            while True:
                j = text.find("`", j)
                if j < 0:
                    raise UnterminatedString("unterminated backquoted name", i)
                if text.startswith("``", j):
                    j += 2
                    continue
                break
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("--", i) or text.startswith("/*", i):
            j = _end_of_comment(text, i)
            out.append(text[i:j])
            i = j
        elif c in "xX" and i + 1 < n and text[i + 1] == "'" and (i == 0 or not _is_word(text[i - 1])):
            end = _end_of_string(text, i + 1, "'", True)
            out.append(text[i:end])
            i = end
        elif _is_word(c):
            j = _word_end(text, i)
            out.append(text[i:j])
            i = j
        else:
            if c == "(":
                depth += 1
                max_depth = max(max_depth, depth)
            elif c == ")":
                depth -= 1
            out.append(c)
            i += 1
    flush()
    return LexedText("".join(out), strings, originals, max_depth)


def _is_word(c: str) -> bool:
    return c.isalnum() or c == "_"
