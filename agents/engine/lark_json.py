"""A Lark grammar's language written inside a JSON string: `json_string_grammar`.

A grammar-typed custom tool (Codex's `apply_patch`) constrains its raw input text, but a
tool call is written as JSON (`{"name": ..., "arguments": {"input": "..."}}`), so the input
appears JSON-escaped: a newline as `\\n`, a quote as `\\"`. llguidance nests a Lark grammar
(`%lark { ... }`) over raw text only and a JSON schema's strings take regular `pattern`s
only, so the grammar is rewritten here: every terminal (string literal, regex, imported
`common` terminal) is replaced by the same set of strings, each escaped the way `json.dumps`
(ensure_ascii off, as chat templates' `tojson`) writes it. Escaping is one code per
character and the codes are prefix-free, so the rewritten grammar accepts exactly the escaped
sentences of the original, lexemes split at the same places; the rules are untouched.

What cannot be rewritten faithfully is refused with `ValueError` naming it: case-insensitive
terminals (an escape's letters would fold), regex anchors, look-arounds and back-references,
special tokens, `%json` and nested `%lark` inside the grammar, and imports other than
`common`'s terminals listed in `COMMON`.
"""

from __future__ import annotations

import json
import re
from re import _constants as sre_c  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]

SPECIAL = (*(chr(c) for c in range(0x20)), '"', "\\")
"""The characters `json.dumps` escapes; every other one is written as itself."""

RAW_CLASS = r'[^"\\\x00-\x1F]'
"""The characters written as themselves, as a regex class."""

COMMON = {
    "LF": r"\n",
    "CR": r"\r",
    "NEWLINE": r"(\r?\n)+",
    "WS": r"[ \t\f\r\n]+",
    "WS_INLINE": r"[ \t]+",
    "DIGIT": r"[0-9]",
    "HEXDIGIT": r"[a-fA-F0-9]",
    "INT": r"[0-9]+",
    "SIGNED_INT": r"[+-]?[0-9]+",
    "LETTER": r"[A-Za-z]",
    "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]",
    "WORD": r"[A-Za-z]+",
    "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
}
"""Lark's `common` terminals a grammar may `%import` (their usual definitions)."""

_LEX = re.compile(
    r"""(?P<comment>(//|\#)[^\n]*)
      | (?P<string>"(\\.|[^"\\\n])*"(?P<sflags>i?))
      | (?P<regex>/(\\.|[^/\\\n])+/(?P<rflags>[imslux]*))
      | (?P<import>%import[ \t]+common\.(?P<name>[A-Z_][A-Z0-9_]*)([ \t]*->[ \t]*(?P<alias>\w+))?)
      | (?P<refused>%\w+|<[^<>\s]+>)
      | (?P<other>[^"/#%<]+|.)""",
    re.VERBOSE | re.DOTALL,
)


def escape_text(text: str) -> str:
    """`text` as it appears between the quotes of a JSON string (`json.dumps`, not ASCII)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def json_string_grammar(grammar: str) -> str:
    """`grammar` (Lark) rewritten to accept the JSON-escaped form of its sentences (see the
    module docstring), as one terminal `START` (a nested grammar: `%lark { ... }`);
    `ValueError` names what cannot be rewritten."""
    out: list[str] = []
    for m in _LEX.finditer(grammar):
        text = m.group(0)
        if m.group("comment"):
            continue
        if m.group("string"):
            if m.group("sflags"):
                raise ValueError(f"case-insensitive literal {text} cannot be JSON-escaped")
            out.append(_literal(escape_text(json.loads(text))))
        elif m.group("regex"):
            body, flags = text[1 : -1 - len(m.group("rflags"))], m.group("rflags")
            out.append("/" + _escaped_regex(body, flags) + "/")
        elif m.group("import"):
            name = m.group("name")
            if name not in COMMON:
                raise ValueError(f"%import common.{name} is not supported in a tool grammar")
            alias = _terminal(m.group("alias") or name)
            out.append(f"{alias}: /" + _escaped_regex(COMMON[name], "") + "/")
        elif m.group("refused"):
            raise ValueError(f"{text} cannot be used in a custom tool's grammar")
        else:
            out.append(_rename(text))
    return "start: START\n" + "".join(out) + "\n"


_NAME = re.compile(r"(?m)(^[ \t]*[?!])|->[ \t]*\w+|([A-Za-z_][A-Za-z0-9_\-]*)")


def _terminal(name: str) -> str:
    """The terminal a rule or terminal `name` becomes (`start` is `START`)."""
    return "START" if name == "start" else "G_" + name.upper().replace("-", "_")


def _rename(text: str) -> str:
    """Rule and terminal names as terminals; rule modifiers (`?`, `!`) and aliases dropped."""

    def sub(m: re.Match[str]) -> str:
        return _terminal(m.group(2)) if m.group(2) else ""

    return _NAME.sub(sub, text)


def _literal(text: str) -> str:
    """`text` as a Lark string literal (ASCII JSON, which llguidance reads)."""
    return json.dumps(text)


def _escaped_regex(pattern: str, flags: str) -> str:
    """A regex for the JSON-escaped forms of `pattern`'s matches."""
    if "i" in flags or "l" in flags:
        raise ValueError(f"regex /{pattern}/{flags}: flags i and l cannot be JSON-escaped")
    if "m" in flags:
        flags = flags.replace("m", "")  # anchors are refused, so multi-line changes nothing
    py_flags = (re.DOTALL if "s" in flags else 0) | (re.VERBOSE if "x" in flags else 0)
    try:
        tree = sre_parse.parse(pattern, py_flags)
    except re.error as e:
        raise ValueError(f"regex /{pattern}/: {e}") from None
    return _seq(tree, bool(py_flags & re.DOTALL), pattern)


def _seq(items: object, dotall: bool, where: str) -> str:
    return "".join(_node(op, av, dotall, where) for op, av in items)  # type: ignore[attr-defined]


def _node(op: object, av: object, dotall: bool, where: str) -> str:
    if op is sre_c.LITERAL:
        return _rx(escape_text(chr(av)))  # type: ignore[arg-type]
    if op is sre_c.NOT_LITERAL:
        return _char_set(f"[^{_class_char(av)}]")  # type: ignore[arg-type]
    if op is sre_c.ANY:
        return _char_set(r"[\x00-\U0010FFFF]" if dotall else r"[^\n]")
    if op is sre_c.IN:
        return _char_set(_class(av))  # type: ignore[arg-type]
    if op is sre_c.SUBPATTERN:
        _group, add, delete, inner = av  # type: ignore[misc]
        if delete or add & ~(re.DOTALL | re.UNICODE):
            raise ValueError(f"regex /{where}/: inline flags other than s are not supported")
        return "(?:" + _seq(inner, dotall or bool(add & re.DOTALL), where) + ")"
    if op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT):
        lo, hi, inner = av  # type: ignore[misc]
        count = f"{{{lo},}}" if hi is sre_c.MAXREPEAT else f"{{{lo},{hi}}}"
        return "(?:" + _seq(inner, dotall, where) + ")" + count
    if op is sre_c.BRANCH:
        _, alternatives = av  # type: ignore[misc]
        return "(?:" + "|".join(_seq(a, dotall, where) for a in alternatives) + ")"
    raise ValueError(f"regex /{where}/: {str(op).lower()} cannot be JSON-escaped")


def _rx(text: str) -> str:
    """`text` as a regex matching it literally (hex escapes for all but letters and digits,
    so neither a regex meta character nor the `/` that ends a Lark regex is left bare)."""
    return "".join(c if c.isascii() and c.isalnum() else f"\\x{{{ord(c):X}}}" for c in text)


def _class_char(code: int) -> str:
    return f"\\U{code:08X}"


def _class(items: list[tuple[object, object]]) -> str:
    """An `IN` node as a regex class text (Python and llguidance read it the same way)."""
    parts = []
    negate = False
    for op, av in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            parts.append(_class_char(av))  # type: ignore[arg-type]
        elif op is sre_c.RANGE:
            lo, hi = av  # type: ignore[misc]
            parts.append(f"{_class_char(lo)}-{_class_char(hi)}")
        elif op is sre_c.CATEGORY:
            parts.append(_CATEGORIES[av])  # type: ignore[index]
        else:
            raise ValueError(f"character class item {op} cannot be JSON-escaped")
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


_CATEGORIES = {
    sre_c.CATEGORY_DIGIT: r"\d",
    sre_c.CATEGORY_NOT_DIGIT: r"\D",
    sre_c.CATEGORY_SPACE: r"\s",
    sre_c.CATEGORY_NOT_SPACE: r"\S",
    sre_c.CATEGORY_WORD: r"\w",
    sre_c.CATEGORY_NOT_WORD: r"\W",
}


def _char_set(cls: str) -> str:
    """The escaped forms of the characters in class `cls`: those written as themselves
    (the class intersected with `RAW_CLASS`), or-ed with each escaped one it holds."""
    escaped = [_rx(escape_text(c)) for c in SPECIAL if re.fullmatch(cls, c)]
    raw = f"[{cls}&&{RAW_CLASS}]"
    return "(?:" + "|".join([raw, *escaped]) + ")"
