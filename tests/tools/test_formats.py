"""Tool-call formats: round trips (property-based), malformed input, hostile sizes, and
the XML tag format's child tags for tools of several arguments."""

import json
import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skyrl_sdk.tools import (
    FORMATS,
    CallPattern,
    HermesFormat,
    Llama3JSONFormat,
    MistralFormat,
    OpenAIFormat,
    ParseErrorKind,
    PatternFormat,
    ToolCall,
    ToolResult,
    XMLTagFormat,
    tool,
)

XML = XMLTagFormat({"sql": "query", "answer": "answer"})
HERMES = HermesFormat()
OPENAI = OpenAIFormat()
MISTRAL = MistralFormat()
LLAMA3 = Llama3JSONFormat()
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


@given(
    name=names,
    args=arguments,
    call_id=st.none() | st.from_regex(r"[A-Za-z0-9]{9}", fullmatch=True),
    prefix=st.text().filter(lambda s: "[TOOL_CALLS]" not in s),
)
@settings(max_examples=200, deadline=None)
def test_mistral_round_trip(name, args, call_id, prefix):
    call = ToolCall(name, args, call_id)
    parsed = MISTRAL.parse(prefix + MISTRAL.render_call(call))
    assert parsed.error is None
    assert parsed.tool_calls == [call]
    assert parsed.content == prefix.strip()


@given(calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=3), tag=st.booleans())
@settings(max_examples=200, deadline=None)
def test_llama3_round_trip_one_or_several_calls(calls, tag):
    wanted = [ToolCall(name, args) for name, args in calls]
    text = "; ".join(LLAMA3.render_call(c) for c in wanted)
    parsed = LLAMA3.parse(("<|python_tag|>" if tag else "") + text)
    assert parsed.error is None
    assert parsed.tool_calls == wanted
    assert parsed.content == ""


@given(text=st.text(max_size=300))
@settings(max_examples=300, deadline=None)
def test_no_format_ever_raises_on_arbitrary_text(text):
    for fmt in (XML, HERMES, MISTRAL, LLAMA3, OPENAI, PATTERN):
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
        (MISTRAL, "[TOOL_CALLS] [{name: a}]", ParseErrorKind.INVALID_JSON, "not valid JSON"),
        (MISTRAL, "[TOOL_CALLS]", ParseErrorKind.INVALID_JSON, "after [TOOL_CALLS]"),
        (MISTRAL, '[TOOL_CALLS] [{"arguments": {}}]', ParseErrorKind.BAD_CALL_SHAPE, '"name"'),
        (MISTRAL, "[TOOL_CALLS] [1]", ParseErrorKind.BAD_CALL_SHAPE, '"name"'),
        (
            MISTRAL,
            '[TOOL_CALLS] [{"name": "a", "arguments": [1]}]',
            ParseErrorKind.BAD_CALL_SHAPE,
            "must be a JSON object",
        ),
        (
            MISTRAL,
            '[TOOL_CALLS] [{"name": "a", "arguments": {}}] and more',
            ParseErrorKind.INVALID_JSON,
            "Extra data",
        ),
        (LLAMA3, '{"name": "a", "parameters": {', ParseErrorKind.INVALID_JSON, "not valid JSON"),
        (LLAMA3, "<|python_tag|>calc(1)", ParseErrorKind.INVALID_JSON, "not valid JSON"),
        (
            LLAMA3,
            '{"name": 3, "parameters": {}}',
            ParseErrorKind.BAD_CALL_SHAPE,
            '"parameters"',
        ),
        (
            LLAMA3,
            '{"name": "a", "parameters": "not json"}',
            ParseErrorKind.INVALID_JSON,
            "arguments of 'a'",
        ),
        (
            LLAMA3,
            '{"name": "a", "parameters": [1]}',
            ParseErrorKind.BAD_CALL_SHAPE,
            "\"parameters\" of 'a' must be a JSON object",
        ),
        (
            LLAMA3,
            '{"name": "a", "parameters": {}} and then some prose',
            ParseErrorKind.INVALID_JSON,
            "not valid JSON",
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


def test_mistral_and_llama3_keep_calls_before_an_error_and_plain_text_is_a_reply():
    mistral = MISTRAL.parse('Sure. [TOOL_CALLS] [{"name": "a", "arguments": {}}, {"x": 1}]')
    assert mistral.content == "Sure."
    assert mistral.tool_calls == [ToolCall("a", {})]
    assert mistral.error.kind is ParseErrorKind.BAD_CALL_SHAPE
    llama = LLAMA3.parse('{"name": "a", "parameters": {"x": 1}}; {"name": 2}')
    assert llama.tool_calls == [ToolCall("a", {"x": 1})]
    assert llama.error.kind is ParseErrorKind.BAD_CALL_SHAPE
    for fmt in (MISTRAL, LLAMA3):
        plain = fmt.parse("  The answer is {4}. ")
        assert (plain.content, plain.tool_calls, plain.error) == ("The answer is {4}.", [], None)


def test_mistral_and_llama3_accept_each_others_argument_key_and_a_single_object():
    assert MISTRAL.parse('[TOOL_CALLS] {"name": "a", "parameters": {"x": 1}}').tool_calls == [
        ToolCall("a", {"x": 1})
    ]
    assert LLAMA3.parse('{"name": "a", "arguments": "{\\"x\\": 1}"}').tool_calls == [
        ToolCall("a", {"x": 1})
    ]
    # Only a string id is a call id; anything else is ignored, not carried into a trajectory.
    assert MISTRAL.parse('[TOOL_CALLS] [{"name": "a", "arguments": {}, "id": 7}]').tool_calls == [
        ToolCall("a", {})
    ]


def test_formats_are_registered_by_name():
    assert {"hermes", "mistral", "llama3", "openai"} <= set(FORMATS)
    for name, cls in FORMATS.items():
        assert cls.name == name
        call = ToolCall("calc", {"expr": "6*7"})
        assert cls().parse(cls().render_call(call)).tool_calls[0].arguments == call.arguments


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
    for fmt in (MISTRAL, LLAMA3):
        assert fmt.render_result(ToolResult(call, "1")) == {
            "role": "tool",
            "name": "sql",
            "content": "1",
            "tool_call_id": "call_7",
        }
        no_id = ToolResult(ToolCall("sql", {}), "1")
        assert fmt.render_result(no_id) == {"role": "tool", "name": "sql", "content": "1"}


def test_instructions_list_the_tools_and_show_the_call_syntax():
    from skyrl_sdk.tools import tool

    @tool
    def calc(expr: str) -> str:
        """Evaluate an arithmetic expression."""
        return expr

    for fmt, syntax in ((MISTRAL, "[TOOL_CALLS] ["), (LLAMA3, '"parameters"')):
        text = fmt.instructions([calc])
        assert "Evaluate an arithmetic expression." in text and '"calc"' in text
        assert syntax in text


@pytest.mark.parametrize("fmt", [XML, HERMES, MISTRAL, LLAMA3, OPENAI, PATTERN])
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
        "[TOOL_CALLS]" * 80_000,  # many markers, one partition
        "[TOOL_CALLS] " + "[" * 200_000 + "]" * 200_000,
        "[TOOL_CALLS] [" + '{"name": "a", "arguments": {}}, ' * 30_000 + "{",
        "<|python_tag|>" + '{"name": "a", "parameters": {}};' * 30_000 + "{",
        '{"name": "a", "parameters": ' + "{" * 300_000,
        '{"name"' + " " * (1 << 20),
        "<|python_tag|>" + "[" * 200_000 + "]" * 200_000,
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


# -- the default XML tag format with tools of several arguments: each is a child tag -------


@tool
def move(x: int, y: int, label: str) -> str:
    """Move a point.

    Args:
        x: Column.
        y: Row.
        label: Its name.
    """
    return f"{label} at {x},{y}"


@tool
def lookup(item: str) -> str:
    """Look up an item.

    Args:
        item: The item.
    """
    return item


FMT = XMLTagFormat.for_tools([move, lookup])


def test_children_are_arguments_typed_by_the_schema():
    parsed = FMT.parse(
        "go <move><x>3</x> <y>-4</y><label> a b </label></move> then <lookup>pen</lookup>"
    )
    assert parsed.tool_calls == [
        ToolCall("move", {"x": 3, "y": -4, "label": "a b"}),
        ToolCall("lookup", {"item": "pen"}),
    ]
    assert parsed.error is None


def test_a_child_that_does_not_parse_as_its_type_stays_text_and_a_missing_one_is_absent():
    (call,) = FMT.parse("<move><x>three</x><label>p</label></move>").tool_calls
    assert call.arguments == {"x": "three", "label": "p"}  # the schema check reports both


def test_round_trip_and_instructions():
    call = ToolCall("move", {"x": 1, "y": 2, "label": "p"})
    assert FMT.parse(FMT.render_call(call)).tool_calls == [call]
    text = FMT.instructions([move, lookup])
    assert "<move><x>x</x><y>y</y><label>label</label></move>" in text
    assert "<lookup>item</lookup>" in text
