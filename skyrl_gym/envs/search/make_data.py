"""Regenerate the bundled search corpus and question set from Python's own docstrings.

Run `python -m skyrl_gym.envs.search.make_data`. It imports a fixed list of standard-library
modules and writes, next to this file:

- `corpus.jsonl`: one document per module, public function, public class and
  public method
  (`id`, `title`, `text`; the text is the signature plus the docstring, capped in length);
- `tasks.jsonl`: questions whose answers appear in the corpus (`task_id`, `question`,
  `answers`, `kind`, `doc_id`: the document that holds the answer);
- `corpus_manifest.json`: the Python version that produced them and the counts.

Nothing is downloaded: the text ships with the Python installation. The output is deterministic
for a given Python build (fixed module list, sorted members, seeded sampling), and the files are
committed, so the env never depends on the interpreter it runs under.
"""

from __future__ import annotations

import importlib
import inspect
import json
import platform
import random
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

if TYPE_CHECKING:  # a standalone script: nothing of the SDK is imported to run it
    from skyrl_gym.tasks import TaskRow


class CorpusRow(TypedDict):
    """One line of `corpus.jsonl` (`{"id", "title", "text"}`, as `read_corpus` reads it)."""

    id: str
    """The document's stable id (its dotted name)."""
    title: str
    """Its title."""
    text: str
    """Its text."""


DATA_DIR = Path(__file__).parent
SEED = 8
MAX_TEXT_CHARS = 1200

MODULES = [
    "abc",
    "argparse",
    "array",
    "ast",
    "asyncio",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "calendar",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "configparser",
    "contextlib",
    "copy",
    "copyreg",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "dis",
    "doctest",
    "enum",
    "errno",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "functools",
    "gc",
    "getopt",
    "gettext",
    "glob",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "math",
    "mimetypes",
    "operator",
    "optparse",
    "os",
    "pathlib",
    "pickle",
    "pickletools",
    "pkgutil",
    "platform",
    "plistlib",
    "pprint",
    "queue",
    "quopri",
    "random",
    "re",
    "reprlib",
    "sched",
    "secrets",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "stat",
    "statistics",
    "string",
    "struct",
    "subprocess",
    "symtable",
    "sys",
    "sysconfig",
    "tabnanny",
    "tarfile",
    "tempfile",
    "textwrap",
    "threading",
    "time",
    "timeit",
    "token",
    "tokenize",
    "traceback",
    "types",
    "typing",
    "unicodedata",
    "uuid",
    "warnings",
    "weakref",
    "zipfile",
    "zlib",
]

QUOTAS = {"function": 60, "class": 15, "default": 30, "module": 25}
"""How many questions of each kind to sample."""


@dataclass(frozen=True)
class Doc:
    """One corpus document, plus what question generation needs to know about it."""

    id: str
    """Stable id: the dotted name (`textwrap.dedent`)."""
    title: str
    """Shown to the model as the passage title (the dotted name)."""
    text: str
    """Signature and docstring, capped at `MAX_TEXT_CHARS`."""
    kind: str
    """`module`, `function`, `class` or `method`."""
    module: str
    """The module it comes from."""
    name: str
    """The member's own name (the module name for module documents)."""
    summary: str
    """First paragraph of the docstring, on one line."""
    defaults: tuple[tuple[str, Any], ...]
    """(parameter, default) pairs from the signature, for default-value questions."""


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _cap(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    text = _ADDRESS.sub("", text)  # `<object object at 0x7f..>` differs on every run
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    return text[: cut if cut > limit // 2 else limit].rstrip()


def _summary(doc: str) -> str:
    return " ".join(doc.split("\n\n", 1)[0].split())


def _signature(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def _public_members(module: Any) -> list[tuple[str, Any]]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in vars(module) if not n.startswith("_")]
    members = []
    for name in sorted(set(names)):
        obj = getattr(module, name, None)
        if not (inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.isclass(obj)):
            continue
        if getattr(obj, "__module__", None) not in (module.__name__, None) and (
            module.__name__ != "builtins"
        ):
            continue  # re-exported from elsewhere: documented under its own module
        members.append((name, obj))
    return members


def collect_docs() -> list[Doc]:
    """Every document of the corpus, in a deterministic order."""
    docs: list[Doc] = []
    for module_name in MODULES:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = importlib.import_module(module_name)
        except ImportError:
            continue
        doc = inspect.getdoc(module) or ""
        if doc:
            text = _cap(f"Module {module_name}.\n\n{doc}")
            docs.append(
                Doc(module_name, module_name, text, "module", module_name, module_name,
                    _summary(doc), ())
            )  # fmt: skip
        for name, obj in _public_members(module):
            member_doc = inspect.getdoc(obj) or ""
            if not member_doc or (inspect.isclass(obj) and member_doc == inspect.getdoc(object)):
                continue
            dotted = f"{module_name}.{name}"
            sig = _signature(obj)
            kind = "class" if inspect.isclass(obj) else "function"
            head = f"{'class ' if kind == 'class' else ''}{dotted}{sig if sig else ''}"
            defaults = ()
            if sig is not None and kind == "function":
                defaults = tuple(
                    (p.name, p.default)
                    for p in sig.parameters.values()
                    if p.default is not inspect.Parameter.empty
                )
            docs.append(
                Doc(dotted, dotted, _cap(f"{head}\n\n{member_doc}"), kind, module_name, name,
                    _summary(member_doc), defaults)
            )  # fmt: skip
            if kind == "class":
                docs.extend(_method_docs(obj, dotted, module_name))
    return docs


def _method_docs(cls: type, dotted: str, module_name: str) -> list[Doc]:
    """Documents for the public methods a class defines itself (inherited ones are skipped)."""
    docs = []
    for name in sorted(vars(cls)):
        obj = vars(cls)[name]
        if name.startswith("_") or not callable(obj):
            continue
        doc = inspect.getdoc(obj) or ""
        base_doc = next((inspect.getdoc(getattr(b, name, None)) for b in cls.__mro__[1:]), None)
        if not doc or doc == base_doc:
            continue
        sig = _signature(obj)
        text = _cap(f"{dotted}.{name}{sig if sig else ''}\n\n{doc}")
        docs.append(
            Doc(f"{dotted}.{name}", f"{dotted}.{name}", text, "method", module_name, name,
                _summary(doc), ())
        )  # fmt: skip
    return docs


_GOOD_SUMMARY = re.compile(r"^[A-Z][^\n]{24,170}\.$")


def _usable_summary(doc: Doc, counts: dict[str, int]) -> bool:
    s = doc.summary
    return (
        bool(_GOOD_SUMMARY.match(s))
        and counts[s] == 1
        and len(s.split()) >= 5
        and doc.name.lower() not in s.lower()
        and "(" not in s.split()[0]
    )


def _default_answer(value: Any) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float) and value not in (0, 1, -1):
        return repr(value)
    if isinstance(value, str) and 1 <= len(value) <= 20 and value.strip() == value and value:
        return value
    return None


def make_tasks(docs: list[Doc]) -> list[TaskRow]:
    """Questions over `docs`; each one's answer is written in its `doc_id` document."""
    rng = random.Random(SEED)
    counts: dict[str, int] = {}
    for d in docs:
        counts[d.summary] = counts.get(d.summary, 0) + 1
    pools: dict[str, list[dict[str, Any]]] = {k: [] for k in QUOTAS}
    for d in docs:
        quoted = d.summary.replace('"', "'")
        if d.kind == "function" and _usable_summary(d, counts):
            pools["function"].append(
                {
                    "question": f"Which function of the Python `{d.module}` module is documented "
                    f'as: "{quoted}"? Give just its name.',
                    "answers": [d.name, d.id],
                    "doc_id": d.id,
                }
            )
        if d.kind == "class" and _usable_summary(d, counts):
            pools["class"].append(
                {
                    "question": f"Which class of the Python `{d.module}` module is documented "
                    f'as: "{quoted}"? Give just its name.',
                    "answers": [d.name, d.id],
                    "doc_id": d.id,
                }
            )
        if d.kind == "module" and _usable_summary(d, counts):
            pools["module"].append(
                {
                    "question": "Which module of the Python standard library has this docstring "
                    f'summary: "{quoted}"? Give just the module name.',
                    "answers": [d.name],
                    "doc_id": d.id,
                }
            )
        for param, value in d.defaults:
            answer = _default_answer(value)
            if answer is not None and f"{param}={value!r}" in d.text:
                pools["default"].append(
                    {
                        "question": f"What is the default value of the `{param}` parameter of "
                        f"the Python function `{d.id}`?",
                        "answers": [answer, repr(value)] if answer != repr(value) else [answer],
                        "doc_id": d.id,
                    }
                )
    tasks: list[TaskRow] = []
    for kind, quota in QUOTAS.items():
        pool = pools[kind]
        if len(pool) < quota:
            raise SystemExit(f"only {len(pool)} candidate {kind} questions (need {quota})")
        for i, row in enumerate(sorted(rng.sample(pool, quota), key=lambda r: r["doc_id"])):
            tasks.append({"task_id": f"{kind}-{i:03d}", "kind": kind, **row})
    by_id = {d.id: d for d in docs}
    for row in tasks:  # every answer must be readable in the corpus
        d = by_id[row["doc_id"]]
        assert any(a in d.title or a in d.text for a in row["answers"]), row
    return tasks


def write_jsonl(path: Path, rows: Sequence[TaskRow] | Sequence[CorpusRow]) -> None:
    """Write `rows` to `path`, one JSON object a line."""
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def main() -> None:
    docs = collect_docs()
    tasks = make_tasks(docs)
    write_jsonl(
        DATA_DIR / "corpus.jsonl", [{"id": d.id, "title": d.title, "text": d.text} for d in docs]
    )
    write_jsonl(DATA_DIR / "tasks.jsonl", tasks)
    manifest = {
        "source": "docstrings of the Python standard library (inspect.getdoc)",
        "python": platform.python_version(),
        "modules": len({d.module for d in docs}),
        "documents": len(docs),
        "tasks": len(tasks),
        "tasks_by_kind": dict(QUOTAS),
        "seed": SEED,
    }
    (DATA_DIR / "corpus_manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    size = (DATA_DIR / "corpus.jsonl").stat().st_size
    print(f"{len(docs)} documents ({size / 1e6:.2f} MB), {len(tasks)} questions -> {DATA_DIR}")


if __name__ == "__main__":
    main()
