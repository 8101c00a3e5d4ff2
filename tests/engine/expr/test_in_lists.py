"""Long IN lists of plain literals skip sqlglot's parser (parse.py's ``compact_in_lists``).

The fast path must be invisible: for any list, the bound tree (or the error, class and message) is the
one sqlglot's parse of the whole text gives. Both paths are forced by setting ``FAST_IN_MIN``: 1 sends
every literal list through the fast path, a huge value none.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airflow_delta_provider_apps.engine.errors import InvalidPredicateError
from airflow_delta_provider_apps.engine.expr import nodes as n
from airflow_delta_provider_apps.engine.expr import parse
from airflow_delta_provider_apps.engine.expr.literals import extract_strings
from airflow_delta_provider_apps.engine.expr.parse import parse_over, parse_predicate
from airflow_delta_provider_apps.engine.schema import parse_ddl

SCHEMA = parse_ddl("s STRING, i INT, l BIGINT, d DOUBLE, m DECIMAL(10,2), dt DATE, `odd IN (1, 2)` INT")
COLUMNS = ["s", "i", "l", "d", "m", "dt"]
FAST, SLOW = 1, 10**9


@contextmanager
def _threshold(value: int):
    before = parse.FAST_IN_MIN
    parse.FAST_IN_MIN = value
    try:
        yield
    finally:
        parse.FAST_IN_MIN = before


def _outcome(text: str, fast: bool, bind=lambda text: parse_predicate(text, SCHEMA)):
    """What binding ``text`` gives: ("ok", tree, repr) or ("error", class, message)."""
    with _threshold(FAST if fast else SLOW):
        try:
            e = bind(text)
        except Exception as exc:  # any difference between the paths is the finding
            return ("error", type(exc), str(exc))
    return ("ok", e, repr(e))  # repr too: Decimal('1.50') == Decimal('1.5'), -0.0 == 0.0


def _compacted(text: str) -> dict:
    with _threshold(FAST):
        return parse.compact_in_lists(extract_strings(text).text)[1]


def _same_both_ways(text: str, bind=lambda text: parse_predicate(text, SCHEMA)):
    fast, slow = _outcome(text, True, bind), _outcome(text, False, bind)
    assert fast == slow, text
    return fast


# ---- literal texts

_BODY_PIECES = ["a", "Z", "é", "😀", "''", "\\'", "\\n", "\\u00e9", "\\\\", "\\%", " ", '"', ",", ")", "(", "--", "IN"]
_quoted = st.lists(st.sampled_from(_BODY_PIECES), max_size=6).map(lambda ps: "'" + "".join(ps) + "'")
_double_quoted = st.lists(st.sampled_from(["b", "'", '""', "\\t", "😀"]), max_size=4).map(
    lambda ps: '"' + "".join(ps) + '"'
)
_raw = st.lists(st.sampled_from(["r", "\\n", "\\", "x"]), max_size=4).map(lambda ps: "r'" + "".join(ps) + "'")
_typed_strings = st.sampled_from(["'2026-01-01'", "'2026-02-30'", "' 12 '", "'-3'", "'1.5'", "'1e3'", "''", "'x'"])
_strings = st.one_of(
    _quoted,
    _double_quoted,
    _raw,
    _typed_strings,
    st.tuples(_quoted, _raw).map(" ".join),  # adjacent: one literal
)
_ints = st.one_of(
    st.integers(-(2**31) - 2, 2**31 + 2),
    st.integers(-(2**64), 2**64),
    st.sampled_from([2**31, -(2**31), 2**63 - 1, -(2**63), 2**63, 10**38 - 1, 10**38, 10**40]),
).map(str)
_decimals = st.tuples(st.integers(0, 10**12), st.text("0123456789", max_size=4)).map(lambda p: f"{p[0]}.{p[1]}")
_doubles = st.tuples(
    st.integers(0, 999), st.sampled_from(["", ".5", ".", ".25"]), st.sampled_from("eE"), st.sampled_from(["", "+", "-"])
).flatmap(lambda p: st.integers(0, 400).map(lambda x: f"{p[0]}{p[1]}{p[2]}{p[3]}{x}"))
_numbers = st.tuples(st.sampled_from(["", "", "-", "- "]), st.one_of(_ints, _decimals, _doubles)).map(
    lambda p: p[0] + p[1] if not p[1].startswith("-") else p[1]
)
_keywords = st.sampled_from(["NULL", "null", "TRUE", "false", "True"])
_literal = st.one_of(_strings, _numbers, _keywords)
_lists = st.one_of(st.lists(_literal, max_size=60), st.lists(_literal, min_size=150, max_size=220))
_separators = st.sampled_from([", ", ",", " , ", ",\n  ", "\t,"])
_forms = st.sampled_from(["{c} IN ({items})", "NOT {c} IN ({items})", "{c} NOT IN ({items})", "{c} in({items})"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_lists, st.sampled_from(COLUMNS), _separators, _forms)
def test_the_fast_path_binds_exactly_as_the_parser_does(items, column, sep, form):
    text = form.format(c=column, items=sep.join(items))
    if items:
        assert _compacted(text), text  # the fast path was taken
    _same_both_ways(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_literal, min_size=1, max_size=40), st.sampled_from(COLUMNS), st.sampled_from(COLUMNS))
def test_several_lists_in_one_predicate(items, a, b):
    half = len(items) // 2
    text = f"({a} IN ({', '.join(items[:half] or ['1'])}) OR {b} NOT IN ({', '.join(items[half:])})) AND i = 1"
    _same_both_ways(text)


def test_lists_over_relations_bind_as_before():
    relations = {"t": parse_ddl("id BIGINT, name STRING"), "src": parse_ddl("id BIGINT, code STRING")}
    values = ", ".join(str(k) for k in range(40))
    for text in (
        f"t.id IN ({values}) AND t.id = src.id",
        f"src.code NOT IN ({', '.join(repr(str(k)) for k in range(40))})",
    ):
        kind, _, _ = _same_both_ways(text, lambda text: parse_over(text, relations, condition=True))
        assert kind == "ok" and _compacted(text)


# ---- what is left to sqlglot

_TWENTY = ", ".join(str(k) for k in range(20))

FALLBACKS = [
    f"i IN ({_TWENTY}, i + 1)",  # an expression: IN becomes an OR of equalities
    f"i IN ({_TWENTY}, l)",
    f"i IN ({_TWENTY}, (3))",  # a nested parenthesis
    f"i IN ({_TWENTY}, CAST('4' AS INT))",
    f"i IN ({_TWENTY}, 5L)",  # typed numbers are casts
    f"i IN ({_TWENTY}, 1Y, -128Y)",
    f"i IN ({_TWENTY}, .5)",  # sqlglot writes .5 as 0.5
    f"i IN ({_TWENTY}, +5)",
    f"i IN ({_TWENTY}, - -5)",
    f"i IN ({_TWENTY}, -(5))",
    f"i IN ({_TWENTY} /* a comment */, 7)",
    f"i IN ({_TWENTY}, -- a comment\n 7)",
    f"i IN ({_TWENTY}, 1e)",  # not a number sqlglot and we agree on
    f"i IN ({_TWENTY}, 0x1F)",
    f"i IN ({_TWENTY}, abs(-3))",
    f"i IN ({_TWENTY}, FALſE)",  # an identifier, not FALSE (case folding is ASCII only)
    f"i ıN ({_TWENTY})",
    f"i IN ({_TWENTY}, 7",  # syntax errors keep their message
    f"i IN ({_TWENTY}) AND",
    f"i IN ({_TWENTY}) AND (SELECT 1)",
    f"i IN ({_TWENTY}) AND nope = 1",
    f"i = 1 /* i IN ({_TWENTY}) */",  # a list inside a comment or a backquoted name is not a list
    f"`odd IN (1, 2)` IN ({_TWENTY}) -- i IN ({_TWENTY})",
    f"`i` IN ({_TWENTY}) AND `odd IN (1, 2)` = 1",
    f"i IN ({_TWENTY}) AND __delta_in_0__ = 1",  # a name that looks like a marker: no fast path
    f"'__delta_in_0__' IN ({_TWENTY})",
    f"position('a' IN ({_TWENTY}))",
]


@pytest.mark.parametrize("text", FALLBACKS)
def test_anything_unusual_binds_as_before(text):
    _same_both_ways(text)


@pytest.mark.parametrize(
    "text",
    [f"i IN ({_TWENTY}, i + 1)", f"i IN ({_TWENTY}, (3))", f"i IN ({_TWENTY}, 5L)", f"i IN ({_TWENTY} /* c */, 7)"],
)
def test_lists_that_are_not_plain_literals_reach_sqlglot_whole(text):
    assert not _compacted(text)


def test_an_expression_in_the_list_still_makes_an_or_of_equalities():
    e = parse_predicate(f"i IN ({_TWENTY}, i + 1)", SCHEMA)
    assert isinstance(e, n.Or) and len(e.items) == 21


def test_markers_in_comments_or_names_fall_back_to_the_whole_text():
    text = f"`odd IN (1, 2)` = 1 AND i = 1 /* i IN ({_TWENTY}) */"
    assert _compacted(text)  # the regex does not know comments: the parsed tree is checked instead
    with _threshold(FAST):
        tree, _, lists = parse.parse_sql(text, "predicate")
    assert lists == {}


def test_errors_name_the_value_and_show_the_list_as_written():
    text = "i IN ('x', " + _TWENTY + ")"
    fast = _outcome(text, True)
    assert fast == _outcome(text, False)
    kind, cls, message = fast
    assert cls is InvalidPredicateError and "Cannot use 'x' as an integer for 'i IN ('x', 0, 1, 2" in message
    big = "l NOT IN (" + ", ".join(str(k) for k in range(30)) + ", 123456789012345678901234567890123456789012)"
    assert _outcome(big, True) == _outcome(big, False)
    assert "Number 123456789012345678901234567890123456789012 is too large" in _outcome(big, True)[2]


# ---- the lexer takes a run of plain literals in one match; what ends or breaks a run


@pytest.mark.parametrize(
    "text, values",
    [
        ("s IN ('a', 'b' ,'c',\n'd')", ["a", "b", "c", "d"]),
        ("s IN ('a', 'b''c', 'd')", ["a", "b'c", "d"]),  # a doubled quote: not a plain literal
        ("s IN ('a', 'b\\'c', 'd')", ["a", "b'c", "d"]),  # an escape
        ("s IN ('a', 'b' 'c', 'd')", ["a", "bc", "d"]),  # adjacent literals still concatenate
        ("s IN ('a', 'b' -- note\n 'c', 'd')", ["a", "bc", "d"]),
        ("s IN ('a', 'b' r'\\n')", ["a", "b\\n"]),
        ("s IN ('a', \"b\", 'c')", ["a", "b", "c"]),
        ("s IN ('é', '😀', '')", ["é", "😀", ""]),
    ],
)
def test_runs_of_plain_literals_read_as_each_literal_alone(text, values):
    assert list(extract_strings(text).strings.values()) == values
    assert [v.value for v in parse_predicate(text, SCHEMA).values] == values


@pytest.mark.parametrize("text, at", [("s IN ('a', 'b', 'c''", 17), ("s IN ('a', 'b', 'c\\'", 17)])
def test_an_unterminated_literal_after_a_run_is_found_where_it_starts(text, at):
    with pytest.raises(InvalidPredicateError, match=f"unterminated string literal starting at character {at}"):
        parse_predicate(text, SCHEMA)


# ---- the GDPR case


@pytest.mark.parametrize("negated", [False, True])
def test_a_5000_value_list_never_reaches_sqlglot_item_by_item(negated):
    from sqlglot import exp

    ids = [f"cust-{k:06d}" for k in range(5000)]
    text = f"s {'NOT ' if negated else ''}IN (" + ", ".join(f"'{v}'" for v in ids) + ")"
    tree, _, lists = parse.parse_sql(text, "predicate")
    assert not list(tree.find_all(exp.Literal))  # sqlglot saw one marker, not 5,000 literals
    assert [len(items) for items in lists.values()] == [5000]
    e = parse_predicate(text, SCHEMA)
    assert isinstance(e, n.In) and e.negated is negated and [v.value for v in e.values] == ids


def test_a_5000_value_integer_list_binds_to_the_column_type():
    text = "l IN (" + ", ".join(str(k * 7919 - 10**6) for k in range(5000)) + ")"
    assert [len(items) for items in _compacted(text).values()] == [5000]
    e = parse_predicate(text, SCHEMA)
    assert {v.type for v in e.values} == {n.LONG} and e.values[0].value == -(10**6)
