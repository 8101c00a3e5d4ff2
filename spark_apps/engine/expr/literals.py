"""Spark 4's string literals, read exactly as Spark's lexer and ``unescapeSQLString`` read them.

sqlglot's Spark dialect does not (``'O''Brien'`` becomes ``concat('O', 'Brien')``; ``'\\%'`` loses its
backslash), so :func:`extract_strings` lexes the literals itself, before sqlglot sees the text: every
string literal (and every run of adjacent ones, which Spark concatenates) is replaced by a placeholder
literal ``'__delta_str_<n>__'`` that sqlglot keeps verbatim, and the decoded values are returned for the
binder to put back. Backquoted names, comments and hex literals (``X'..'``) are skipped over untouched.
The same pass measures the parenthesis depth, so a deeply nested text is refused before any parser
recursion (see :data:`MAX_DEPTH` in :mod:`.parse`). The pass is linear and mostly in compiled regexes:
it jumps from one place where a literal, a backquoted name, a comment or a parenthesis may start to the
next, and takes a run of plain literals (``'a', 'b', ...``, a long IN list) in one match.

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
_QUOTED_PLACEHOLDER = re.compile(r"'(__delta_str_[0-9]+__)'")
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
        """``sql`` (rendered from the parsed tree, for a message) with the user's literals put back (one
        pass: linear however many literals there are)."""
        if not self.originals:
            return sql
        return _QUOTED_PLACEHOLDER.sub(lambda m: self.originals.get(m[1], m[0]), sql)


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


# The end of a literal's body, from just after its opening quote: a delimiter doubled or escaped does
# not close it, a backslash escapes any character (a newline too); raw literals and X'..' end at the
# first delimiter. Possessive: linear, no backtracking.
_BODY_END = {
    "'": re.compile(r"(?:[^'\\]++|\\[\s\S]|'')*+'"),
    '"': re.compile(r'(?:[^"\\]++|\\[\s\S]|"")*+"'),
}
# Where something other than text to copy as it is may start: a quote, a backquote, a comment, a
# parenthesis (depth), or the r/R of a raw literal and the X of a hex one when they begin a word.
# Everything between two such places is whitespace, words, numbers and operators, copied in one piece.
_SPECIAL = re.compile(r"""['"`()]|--|/\*|(?<!\w)(?:[rR](?=['"])|[xX](?='))""")
_COMMENT_MARK = re.compile(r"/\*|\*/")
# a comma, then a '...' literal whose text is its value (no backslash, no doubled quote, no surrogate)
_NEXT_PLAIN = re.compile(r"([ \t\r\n]*,[ \t\r\n]*)'([^'\\\ud800-\udfff]*)'(?!')")
_PLAIN_RUN = re.compile(rf"(?:{_NEXT_PLAIN.pattern})*+")


def _end_of_string(text: str, start: int, quote: str, raw: bool) -> int:
    """Index just after the literal whose opening quote is at ``start``."""
    if raw:
        end = text.find(quote, start + 1)
        if end >= 0:
            return end + 1
    else:
        m = _BODY_END[quote].match(text, start + 1)
        if m:
            return m.end()
    raise UnterminatedString("unterminated string literal", start)


def _end_of_comment(text: str, i: int) -> int:
    if text.startswith("--", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j + 1
    depth = 0
    for m in _COMMENT_MARK.finditer(text, i):  # Spark's bracketed comments nest
        depth += 1 if m.group() == "/*" else -1
        if depth == 0:
            return m.end()
    return len(text)


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
            key = f"__delta_str_{len(strings)}__"  # placeholder(), inlined: once per literal
            if len(pending) == 1:
                strings[key], originals[key] = pending[0]
            else:
                strings[key] = "".join(v for v, _ in pending)
                originals[key] = " ".join(o for _, o in pending)
            out.append(f"'{key}'")
            pending = []
        if gap:
            out.append(gap)
            gap = ""

    while i < n:
        m = _SPECIAL.search(text, i)
        j = m.start() if m else n
        if j > i:  # plain text: held in the gap if only whitespace after a literal, else copied
            chunk = text[i:j]
            if pending and chunk.isspace():
                gap += chunk
            else:
                flush()
                out.append(chunk)
            i = j
            if m is None:
                break
        c = text[i]
        if c in "'\"rR":  # a string literal (raw when r/R-prefixed)
            raw = c in "rR"
            q = i + 1 if raw else i
            end = _end_of_string(text, q, text[q], raw)
            body = text[q + 1 : end - 1]
            pending.append((body if raw else unescape(body, text[q]), text[i:end]))
            gap = ""
            i = end
            # then the rest of a list of plain literals ('a', 'b', ... as in a long IN), matched at once:
            # the comma before each ends the one before; the last stays pending (a literal may follow)
            run_end = _PLAIN_RUN.match(text, i).end()
            if run_end > i:
                flush()
                *done, (sep, body) = _NEXT_PLAIN.findall(text, i, run_end)
                for before, value in done:
                    key = f"__delta_str_{len(strings)}__"
                    strings[key], originals[key] = value, f"'{value}'"
                    out += (before, f"'{key}'")
                out.append(sep)
                pending.append((body, f"'{body}'"))
                i = run_end
        elif c in "-/":  # -- or /*
            j = _end_of_comment(text, i)
            if pending:
                gap += text[i:j]
            else:
                out.append(text[i:j])
            i = j
        else:
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
            elif c in "xX":
                end = _end_of_string(text, i + 1, "'", True)
                out.append(text[i:end])
                i = end
            else:
                if c == "(":
                    depth += 1
                    max_depth = max(max_depth, depth)
                else:
                    depth -= 1
                out.append(c)
                i += 1
    flush()
    return LexedText("".join(out), strings, originals, max_depth)
