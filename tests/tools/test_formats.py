"""Tool-call formats: round trips (property-based), malformed input, hostile sizes."""

import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_sdk.tools import (
    CallPattern,
    HermesFormat,
    OpenAIFormat,
    ParseErrorKind,
    PatternFormat,
    ToolCall,
    ToolResult,
    XMLTagFormat,
)

XML = XMLTagFormat({"sql": "query", "answer": "answer"})
HERMES = HermesFormat()
OPENAI = OpenAIFormat()
PATTERN = PatternFormat(
    {
        "lookup": CallPattern(
            re.compile(r"lookup\(([a-z ]{0,40})\)", re.I), "item", "lookup({item})"
        ),
        "answer": CallPattern(re.compile(r"ANSWER:\s{0,3}(\d{1,9})", re.I), "n", "ANSWER: {n}"),
    }
)

names = st.from_regex(r"[a-z_][a-z0-9_]{0,15}", fullmatch=True)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=4)


@given(
    body=st.text().filter(lambda s: "</sql>" not in s and s == s.strip()),
    prefix=st.text().filter(lambda s: "<sql>" not in s and "<answer>" not in s),
)
@settings(max_examples=200, deadline=None)
def test_xml_round_trip(body, prefix):
    call = ToolCall("sql", {"query": body})
    parsed = XML.parse(prefix + XML.render_call(call))
    assert parsed.error is None
    assert parsed.tool_calls == [call]


@given(name=names, args=arguments, prefix=st.text().filter(lambda s: "<tool_call>" not in s))
@settings(max_examples=200, deadline=None)
def test_hermes_round_trip(name, args, prefix):
    call = ToolCall(name, args)
    parsed = HERMES.parse(prefix + HERMES.render_call(call))
    assert parsed.error is None
    assert parsed.tool_calls == [call]


@given(name=names, args=arguments, call_id=st.from_regex(r"call_[a-z0-9]{1,8}", fullmatch=True))
@settings(max_examples=200, deadline=None)
def test_openai_round_trip(name, args, call_id):
    call = ToolCall(name, args, call_id)
    parsed = OPENAI.parse(OPENAI.render_call(call))
    assert parsed.error is None
    assert parsed.tool_calls == [call]


@given(text=st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_no_format_ever_raises_on_arbitrary_text(text):
    for fmt in (XML, HERMES, OPENAI, PATTERN):
        parsed = fmt.parse(text)
        assert parsed.error is None or parsed.error.message


def test_xml_several_calls_in_order_and_content_outside():
    parsed = XML.parse("Let me look. <sql> SELECT 1 </sql> and then <answer>42</answer> done")
    assert [c.name for c in parsed.tool_calls] == ["sql", "answer"]
    assert parsed.tool_calls[0].arguments == {"query": "SELECT 1"}
    assert parsed.content == "Let me look.  and then  done"


@pytest.mark.parametrize(
    ("fmt", "text", "kind", "hint"),
    [
        (XML, "<sql>SELECT 1", ParseErrorKind.UNCLOSED_TAG, "<sql> is never closed"),
        (HERMES, '<tool_call>{"name": "a"', ParseErrorKind.UNCLOSED_TAG, "never closed"),
        (HERMES, "<tool_call>{name: a}</tool_call>", ParseErrorKind.INVALID_JSON, "not valid JSON"),
        (HERMES, "<tool_call>[1, 2]</tool_call>", ParseErrorKind.BAD_CALL_SHAPE, '"name"'),
        (
            HERMES,
            '<tool_call>{"name": "a", "arguments": [1]}</tool_call>',
            ParseErrorKind.BAD_CALL_SHAPE,
            "must be a JSON object",
        ),
        (
            HERMES,
            '<tool_call>{"name": "a", "arguments": "{bad"}</tool_call>',
            ParseErrorKind.INVALID_JSON,
            "arguments of 'a'",
        ),
        (OPENAI, '{"tool_calls": "nope"}', ParseErrorKind.BAD_CALL_SHAPE, "must be a list"),
        (
            OPENAI,
            '{"tool_calls": [{"function": {"arguments": "{}"}}]}',
            ParseErrorKind.BAD_CALL_SHAPE,
            '"name"',
        ),
    ],
)
def test_malformed_calls_give_typed_errors(fmt, text, kind, hint):
    parsed = fmt.parse(text)
    assert parsed.error is not None
    assert parsed.error.kind is kind
    assert hint in parsed.error.message
    assert fmt.error_message(parsed.error)["content"].startswith("Your reply could not be parsed")


def test_hermes_accepts_double_encoded_arguments_and_keeps_calls_before_an_error():
    text = (
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'
        "<tool_call>{oops}</tool_call>"
    )
    parsed = HERMES.parse(text)
    assert parsed.tool_calls == [ToolCall("a", {"x": 1})]
    assert parsed.error.kind is ParseErrorKind.INVALID_JSON


def test_openai_plain_text_is_a_reply_not_an_error():
    assert OPENAI.parse("The answer is 4.").tool_calls == []
    assert OPENAI.parse('{"not": "a message"}').error is None


def test_results_render_as_messages():
    call = ToolCall("sql", {"query": "SELECT 1"}, "call_7")
    assert XML.render_result(ToolResult(call, "1")) == {
        "role": "user",
        "content": "<observation>\n1\n</observation>",
    }
    assert HERMES.render_result(ToolResult(call, "1")) == {
        "role": "tool",
        "name": "sql",
        "content": "1",
    }
    assert OPENAI.render_result(ToolResult(call, "1")) == {
        "role": "tool",
        "tool_call_id": "call_7",
        "content": "1",
    }
    assert json.loads(OPENAI.render_call(call))["tool_calls"][0]["id"] == "call_7"


@pytest.mark.parametrize("fmt", [XML, HERMES, OPENAI, PATTERN])
def test_megabyte_replies_parse_quickly(fmt):
    hostile = [
        "lookup(" * 200_000,
        "ANSWER: " * 200_000,
        "<sql>" * 200_000,  # many opening tags, none closed
        "<tool_call>" + "{" * 500_000,
        "x" * (1 << 20),
        "{" + '"tool_calls": [' * 100_000,
        '{"tool_calls": ' + "[" * 200_000 + "]" * 200_000 + "}",  # valid JSON, absurdly deep
        "<tool_call>" + "[" * 200_000 + "]" * 200_000 + "</tool_call>",
    ]
    for text in hostile:
        started = time.perf_counter()
        fmt.parse(text)
        assert time.perf_counter() - started < 2.0


def test_xml_format_validates_its_configuration():
    with pytest.raises(ValueError, match="invalid tag name"):
        XMLTagFormat({"bad tag": "x"})
    with pytest.raises(ValueError, match="at least one tag"):
        XMLTagFormat({})


def test_xml_format_can_keep_the_body_whitespace():
    keep = XMLTagFormat({"sql": "query"}, strip=False)
    assert keep.parse("<sql>\n SELECT 1 \n</sql>").tool_calls == [
        ToolCall("sql", {"query": "\n SELECT 1 \n"})
    ]
    assert XML.parse("<sql>\n SELECT 1 \n</sql>").tool_calls[0].arguments == {"query": "SELECT 1"}


@given(item=st.from_regex(r"[a-z][a-z ]{0,20}[a-z]", fullmatch=True), prefix=st.text(max_size=30))
@settings(max_examples=200, deadline=None)
def test_pattern_round_trip(item, prefix):
    call = ToolCall("lookup", {"item": item})
    text = PATTERN.render_call(call)
    parsed = PATTERN.parse(prefix.replace("(", "") + " " + text)
    assert parsed.error is None
    # An earlier accidental match in the prefix may win; a clean prefix never does.
    if not re.search(r"lookup|answer", prefix, re.I):
        assert parsed.tool_calls == [call]


def test_pattern_earliest_call_wins_and_no_match_is_no_call():
    parsed = PATTERN.parse("I will say ANSWER: 12 after lookup(milk)")
    assert parsed.tool_calls == [ToolCall("answer", {"n": "12"})]
    assert parsed.content == "I will say  after lookup(milk)"
    assert PATTERN.parse("lookup(milk) then ANSWER: 3").tool_calls[0].name == "lookup"
    nothing = PATTERN.parse("  no idea ")
    assert nothing.tool_calls == [] and nothing.error is None and nothing.content == "no idea"
    assert PATTERN.render_result(ToolResult(ToolCall("lookup", {"item": "x"}), "7")) == {
        "role": "user",
        "content": "7",
    }


def test_pattern_format_validates_its_configuration():
    with pytest.raises(ValueError, match="at least one"):
        PatternFormat({})
    with pytest.raises(ValueError, match="needs a group"):
        PatternFormat({"x": CallPattern(re.compile("x"), "a", "x")})
