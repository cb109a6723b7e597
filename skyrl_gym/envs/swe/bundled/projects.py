"""Source of the bundled SWE-bench-style projects: small Python libraries written for this SDK.

Each `Project` is a git history (`commits`, each a {path: content} overlay on the previous
one). Each `Task` picks a commit as `base_commit`, carries the fix (`fix`: files after the
fix) and the tests that prove it (`tests`: test files after the test patch), and names the
tests that fail before the fix and pass after it (FAIL_TO_PASS). All other tests of the
touched test files are PASS_TO_PASS.
"""

from __future__ import annotations

from dataclasses import dataclass

OWNER = "skyrl-bench"


def _pyproject(name: str) -> str:
    return (
        "[project]\n"
        f'name = "{name}"\n'
        'version = "0.1.0"\n'
        'requires-python = ">=3.9"\n\n'
        "[tool.pytest.ini_options]\n"
        'testpaths = ["tests"]\n'
    )


@dataclass(frozen=True)
class Project:
    """A small repository with its history."""

    name: str
    """Repository name (the owner is `skyrl-bench`)."""
    commits: tuple[tuple[str, dict[str, str]], ...]
    """(message, files changed by the commit), oldest first."""


@dataclass(frozen=True)
class Task:
    """One instance built on a project."""

    project: str
    """The project's name."""
    number: int
    """Pull-request-like number (the instance id is `skyrl-bench__<project>-<number>`)."""
    base: int
    """Index of the commit the instance starts from."""
    problem_statement: str
    """The issue text."""
    fix: dict[str, str]
    """Source files after the fix (their diff is the gold `patch`)."""
    tests: dict[str, str]
    """Test files after the test patch (their diff is `test_patch`)."""
    fail_to_pass: tuple[str, ...]
    """Tests the fix makes pass."""


# ---- intervals --------------------------------------------------------------------------

_INTERVALS = '''"""Operations on closed integer intervals given as (start, end) pairs."""


def merge(intervals):
    """Merge overlapping intervals; the result is sorted and disjoint."""
    result = []
    for start, end in sorted(intervals):
        if result and start < result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result


def total_length(intervals):
    """Length covered by the union of the intervals."""
    return sum(end - start for start, end in merge(intervals))
'''

_INTERVALS_TESTS = """from intervals.core import merge, total_length


def test_merge_overlapping():
    assert merge([(1, 3), (2, 5)]) == [(1, 5)]


def test_merge_disjoint():
    assert merge([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]


def test_merge_empty():
    assert merge([]) == []


def test_total_length_overlapping():
    assert total_length([(0, 4), (2, 6)]) == 6
"""

_INTERVALS_NEW_TESTS = """

def test_merge_touching():
    assert merge([(1, 2), (2, 3)]) == [(1, 3)]


def test_merge_touching_chain():
    assert merge([(3, 4), (1, 2), (2, 3)]) == [(1, 4)]
"""

# ---- textkit (two instances at two commits) ----------------------------------------------

_SLUG = '''"""URL slugs."""

import re


def slugify(text, sep="-"):
    """Lower-case words of `text` joined by `sep`; anything else is dropped."""
    text = text.strip().lower()
    return re.sub(r"[^a-z0-9]+", sep, text)
'''

_SLUG_FIXED = _SLUG.replace(
    '    return re.sub(r"[^a-z0-9]+", sep, text)\n',
    '    return re.sub(r"[^a-z0-9]+", sep, text).strip(sep)\n',
)

_SLUG_TESTS = """from textkit.slug import slugify


def test_spaces():
    assert slugify("Hello World") == "hello-world"


def test_runs_collapse():
    assert slugify("a   b") == "a-b"


def test_custom_separator():
    assert slugify("a b", sep="_") == "a_b"
"""

_SLUG_NEW_TESTS = """

def test_punctuation_at_ends():
    assert slugify("Hello, World!") == "hello-world"


def test_leading_separators():
    assert slugify("  --Leading") == "leading"
"""

_WRAP = '''"""Greedy word wrapping."""


def wrap(text, width):
    """Split `text` into lines of at most `width` characters, breaking between words."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) >= width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return lines
'''

_WRAP_TESTS = """from textkit.wrap import wrap


def test_one_word_per_line():
    assert wrap("aa bb cc", 4) == ["aa", "bb", "cc"]


def test_empty():
    assert wrap("", 10) == []
"""

_WRAP_NEW_TESTS = """

def test_line_of_exact_width():
    assert wrap("aa bb", 5) == ["aa bb"]


def test_paragraph():
    assert wrap("the quick brown fox", 9) == ["the quick", "brown fox"]
"""

# ---- roman ------------------------------------------------------------------------------

_ROMAN = '''"""Roman numerals."""

_SYMBOLS = [
    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (50, "L"),
    (10, "X"),
    (5, "V"),
    (1, "I"),
]


def to_roman(number):
    """The Roman numeral for 1 <= number <= 3999."""
    if not 0 < number < 4000:
        raise ValueError(f"{number} is out of range")
    out = []
    for value, symbol in _SYMBOLS:
        count, number = divmod(number, value)
        out.append(symbol * count)
    return "".join(out)


def from_roman(text):
    """The integer a Roman numeral stands for."""
    values = {symbol: value for value, symbol in _SYMBOLS if len(symbol) == 1}
    total = 0
    for i, ch in enumerate(text):
        value = values[ch]
        if i + 1 < len(text) and values[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
'''

_ROMAN_FIXED = _ROMAN.replace(
    """    (1000, "M"),
    (500, "D"),
    (100, "C"),
    (50, "L"),
    (10, "X"),
    (5, "V"),
    (1, "I"),""",
    """    (1000, "M"),
    (900, "CM"),
    (500, "D"),
    (400, "CD"),
    (100, "C"),
    (90, "XC"),
    (50, "L"),
    (40, "XL"),
    (10, "X"),
    (9, "IX"),
    (5, "V"),
    (4, "IV"),
    (1, "I"),""",
)

_ROMAN_TESTS = """import pytest

from roman.numerals import from_roman, to_roman


def test_additive():
    assert to_roman(2023) == "MMXXIII"


def test_parse_subtractive():
    assert from_roman("XIV") == 14


def test_out_of_range():
    with pytest.raises(ValueError):
        to_roman(0)
"""

_ROMAN_NEW_TESTS = """

def test_four():
    assert to_roman(4) == "IV"


def test_1994():
    assert to_roman(1994) == "MCMXCIV"


def test_canonical_round_trip():
    for text in ("IX", "XL", "XC", "CD", "CM", "XLIX"):
        assert to_roman(from_roman(text)) == text
"""

# ---- statkit ----------------------------------------------------------------------------

_STATS = '''"""Descriptive statistics."""


def mean(values):
    """Arithmetic mean."""
    if not values:
        raise ValueError("mean of empty data")
    return sum(values) / len(values)


def median(values):
    """Middle value of the sorted data."""
    if not values:
        raise ValueError("median of empty data")
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
'''

_STATS_FIXED = _STATS.replace(
    "    return ordered[len(ordered) // 2]\n",
    "    mid = len(ordered) // 2\n"
    "    if len(ordered) % 2:\n"
    "        return ordered[mid]\n"
    "    return (ordered[mid - 1] + ordered[mid]) / 2\n",
)

_STATS_TESTS = """import pytest

from statkit.stats import mean, median


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_median_empty():
    with pytest.raises(ValueError):
        median([])
"""

_STATS_NEW_TESTS = """

def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_pair():
    assert median([5, 1]) == 3
"""

# ---- lrucache ---------------------------------------------------------------------------

_LRU = '''"""A least-recently-used cache."""

from collections import OrderedDict


class LRUCache:
    """Keeps at most `capacity` items; adding one more evicts the least recently used."""

    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._data = OrderedDict()

    def get(self, key, default=None):
        """The value for `key` (marks it as recently used), or `default`."""
        if key in self._data:
            return self._data[key]
        return default

    def put(self, key, value):
        """Store `value` under `key`, evicting the least recently used item if full."""
        if key in self._data:
            self._data.move_to_end(key)
        self._data[key] = value
        if len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def __len__(self):
        return len(self._data)

    def __contains__(self, key):
        return key in self._data
'''

_LRU_FIXED = _LRU.replace(
    "        if key in self._data:\n            return self._data[key]\n",
    "        if key in self._data:\n"
    "            self._data.move_to_end(key)\n"
    "            return self._data[key]\n",
)

_LRU_TESTS = """import pytest

from lrucache.cache import LRUCache


def test_put_get():
    cache = LRUCache(2)
    cache.put("a", 1)
    assert cache.get("a") == 1
    assert cache.get("missing", 0) == 0


def test_evicts_oldest():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert "a" not in cache and len(cache) == 2


def test_bad_capacity():
    with pytest.raises(ValueError):
        LRUCache(0)
"""

_LRU_NEW_TESTS = """

def test_get_refreshes_recency():
    cache = LRUCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")
    cache.put("c", 3)
    assert "a" in cache
    assert "b" not in cache
"""

# ---- semver -----------------------------------------------------------------------------

_SEMVER = '''"""Dotted version numbers."""


def parse(version):
    """The components of a version such as "1.10.2"."""
    return tuple(version.split("."))


def compare(a, b):
    """-1, 0 or 1 as version `a` is older than, equal to, or newer than `b`."""
    pa, pb = parse(a), parse(b)
    return (pa > pb) - (pa < pb)


def latest(versions):
    """The newest of some versions."""
    return max(versions, key=parse)
'''

_SEMVER_FIXED = _SEMVER.replace(
    '    return tuple(version.split("."))\n',
    '    return tuple(int(part) for part in version.split("."))\n',
)

_SEMVER_TESTS = """from semver.version import compare, latest


def test_equal():
    assert compare("1.2.0", "1.2.0") == 0


def test_older():
    assert compare("1.2.0", "1.3.0") == -1


def test_latest_simple():
    assert latest(["0.1", "0.3", "0.2"]) == "0.3"
"""

_SEMVER_NEW_TESTS = """

def test_numeric_components():
    assert compare("1.10.0", "1.9.0") == 1


def test_latest_numeric():
    assert latest(["1.2", "1.10", "1.9"]) == "1.10"
"""


def _lib(name: str, module: str, source: str, test: str, tests: str) -> dict[str, str]:
    return {
        "pyproject.toml": _pyproject(name),
        "README.md": f"# {name}\n\nA small library (a bundled SWE-bench-style project).\n",
        f"{name}/__init__.py": "",
        f"{name}/{module}.py": source,
        f"tests/{test}": tests,
    }


PROJECTS: tuple[Project, ...] = (
    Project(
        "intervals",
        (
            (
                "Add interval merging",
                _lib("intervals", "core", _INTERVALS, "test_core.py", _INTERVALS_TESTS),
            ),
        ),
    ),
    Project(
        "textkit",
        (
            ("Add slugify", _lib("textkit", "slug", _SLUG, "test_slug.py", _SLUG_TESTS)),
            ("Add word wrapping", {"textkit/wrap.py": _WRAP, "tests/test_wrap.py": _WRAP_TESTS}),
        ),
    ),
    Project(
        "roman",
        (("Roman numerals", _lib("roman", "numerals", _ROMAN, "test_numerals.py", _ROMAN_TESTS)),),
    ),
    Project(
        "statkit",
        (("Mean and median", _lib("statkit", "stats", _STATS, "test_stats.py", _STATS_TESTS)),),
    ),
    Project(
        "lrucache",
        (("LRU cache", _lib("lrucache", "cache", _LRU, "test_cache.py", _LRU_TESTS)),),
    ),
    Project(
        "semver",
        (
            (
                "Version comparison",
                _lib("semver", "version", _SEMVER, "test_version.py", _SEMVER_TESTS),
            ),
        ),
    ),
)

TASKS: tuple[Task, ...] = (
    Task(
        "intervals",
        1,
        0,
        "`merge` does not merge intervals that touch.\n\n"
        "`merge([(1, 2), (2, 3)])` returns `[(1, 2), (2, 3)]`, but the intervals are closed, "
        "so they share the point 2 and should become `[(1, 3)]`.",
        {"intervals/core.py": _INTERVALS.replace("start < result", "start <= result")},
        {"tests/test_core.py": _INTERVALS_TESTS + _INTERVALS_NEW_TESTS},
        (
            "tests/test_core.py::test_merge_touching",
            "tests/test_core.py::test_merge_touching_chain",
        ),
    ),
    Task(
        "textkit",
        2,
        0,
        "`slugify` leaves separators at the ends.\n\n"
        '`slugify("Hello, World!")` gives `"hello-world-"` instead of `"hello-world"`; '
        "leading punctuation or spaces likewise produce a leading `-`.",
        {"textkit/slug.py": _SLUG_FIXED},
        {"tests/test_slug.py": _SLUG_TESTS + _SLUG_NEW_TESTS},
        (
            "tests/test_slug.py::test_punctuation_at_ends",
            "tests/test_slug.py::test_leading_separators",
        ),
    ),
    Task(
        "textkit",
        5,
        1,
        "`wrap` breaks lines that would fit exactly.\n\n"
        '`wrap("aa bb", 5)` returns `["aa", "bb"]`, although `"aa bb"` is 5 characters and '
        "fits in a width of 5.",
        {"textkit/wrap.py": _WRAP.replace(">= width", "> width")},
        {"tests/test_wrap.py": _WRAP_TESTS + _WRAP_NEW_TESTS},
        ("tests/test_wrap.py::test_line_of_exact_width", "tests/test_wrap.py::test_paragraph"),
    ),
    Task(
        "roman",
        3,
        0,
        "`to_roman` writes 4 as `IIII`.\n\n"
        "Numbers that need subtractive notation come out wrong: `to_roman(4)` is `IIII` (should "
        "be `IV`) and `to_roman(1994)` is `MDCCCCLXXXXIIII` (should be `MCMXCIV`).",
        {"roman/numerals.py": _ROMAN_FIXED},
        {"tests/test_numerals.py": _ROMAN_TESTS + _ROMAN_NEW_TESTS},
        (
            "tests/test_numerals.py::test_four",
            "tests/test_numerals.py::test_1994",
            "tests/test_numerals.py::test_canonical_round_trip",
        ),
    ),
    Task(
        "statkit",
        4,
        0,
        "`median` is wrong for an even number of values.\n\n"
        "`median([4, 1, 3, 2])` returns 3; the median of an even-sized sample is the mean of the "
        "two middle values, 2.5.",
        {"statkit/stats.py": _STATS_FIXED},
        {"tests/test_stats.py": _STATS_TESTS + _STATS_NEW_TESTS},
        ("tests/test_stats.py::test_median_even", "tests/test_stats.py::test_median_pair"),
    ),
    Task(
        "lrucache",
        6,
        0,
        "`LRUCache.get` does not count as a use.\n\n"
        "After `put('a')`, `put('b')`, `get('a')`, adding `c` to a cache of capacity 2 evicts "
        "`a`, although `b` is the least recently used item.",
        {"lrucache/cache.py": _LRU_FIXED},
        {"tests/test_cache.py": _LRU_TESTS + _LRU_NEW_TESTS},
        ("tests/test_cache.py::test_get_refreshes_recency",),
    ),
    Task(
        "semver",
        7,
        0,
        "Versions compare as text.\n\n"
        '`compare("1.10.0", "1.9.0")` returns -1 and `latest(["1.2", "1.10", "1.9"])` returns '
        '`"1.9"`: components are compared as strings, not numbers.',
        {"semver/version.py": _SEMVER_FIXED},
        {"tests/test_version.py": _SEMVER_TESTS + _SEMVER_NEW_TESTS},
        (
            "tests/test_version.py::test_numeric_components",
            "tests/test_version.py::test_latest_numeric",
        ),
    ),
)
