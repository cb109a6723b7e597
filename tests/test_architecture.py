"""The architecture as a ratchet: the installed packages' source, parsed, against the rules of
docs/architecture.md and issue 26 ("one home per concept").

`scan(root)` parses every module of the packages under `root` (the repository: one folder per
package) and measures each violation of:

- a function (or method) over `MAX_FUNCTION_LINES` lines, a class over `MAX_CLASS_LINES`;
- an upward import: a package importing one above it on the ladder (`LAYERS`), lazily too;
- an import circle: modules that import each other, directly or round a loop (imports under
  `if TYPE_CHECKING:` do not run, so they do not count; lazy imports in functions do);
- a second definition of a one-home concept (`HOMES`: `load_policy`, `run_episodes`, each
  policy loss) anywhere but its home;
- a call of `areset`/`astep` outside `skyrl_sdk.agents` and outside the env classes that define
  them (wrappers delegate to the env they wrap) and the checker (`CONTRACT_CHECKERS`);

and counts the public signatures (a public function's or method's parameters and return)
that mention a bare `dict[str, Any]`.

Known violations are listed in `ALLOWED` (none since issue 26), each with its measured size (lines; import
statements; modules in the circle; definitions; calls), so: a new violation fails, a listed
one that grows fails, and a listed one that shrank or is gone fails until its entry is
lowered or removed: the list only shrinks. The `dict[str, Any]` count must equal
`DICT_ANY_CEILING`, which only goes down. `python tests/test_architecture.py` prints the
measurements in the allow-list's format.
"""

from __future__ import annotations

import ast
import enum
import shutil
import sys
import textwrap
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import skyrl_gym

ROOT = Path(__file__).resolve().parents[1]
"""The repository the packages are installed from (an editable install: one folder each;
`test_the_scanner_reads_the_installed_packages` checks that the imports resolve there)."""

LAYERS: tuple[tuple[str, str, int], ...] = (
    ("skyrl_sdk", "skyrl_sdk", -1),  # leaves any layer may use: http_guard, fast_frozen, ...
    ("sandboxes", "skyrl_sdk.sandboxes", 0),
    ("tools", "skyrl_sdk.tools", 1),
    ("skyrl_gym", "skyrl_gym", 2),
    ("agents", "skyrl_sdk.agents", 3),
    ("trainer", "skyrl_sdk.trainer", 4),
    ("benchmarks", "skyrl_sdk.benchmarks", 5),
)
"""(folder, import name, rung) of docs/architecture.md's ladder: a module imports only rungs
below its own (the `skyrl_sdk` leaves, rung -1, import none). The ladder test of
tests/skyrl_gym/test_cli_entry_points.py checks the same order."""

MAX_FUNCTION_LINES = 80
MAX_CLASS_LINES = 300
AGENTS = "skyrl_sdk.agents"
"""The one package that plays envs: outside it (and the env classes) no `areset`/`astep`."""
ENV_METHODS = frozenset({"areset", "astep"})
CONTRACT_CHECKERS = frozenset({"skyrl_gym.checker"})
"""Modules that call `areset`/`astep` to test an env's own async contract (`check_env`), not
to play it: the one place outside the agents where the calls belong."""
LOSSES = ("cross_entropy", "importance_sampling", "ppo", "cispo", "dro", "gspo", "policy_loss")
"""The policy losses (Tinker's names, plus the trainer's dispatcher), at home in one module."""
HOMES: Mapping[str, str] = {
    "load_policy": "skyrl_sdk.agents.policy_spec:load_policy",
    "run_episodes": "skyrl_sdk.agents.rollout:run_episodes",
    **{loss: f"skyrl_sdk.trainer.losses:{loss}" for loss in LOSSES},
}
"""One-home concepts: name -> the one "module:qualname" allowed to define it. A definition
named `NAME`, `_NAME` or (for losses) `NAME_loss` anywhere else is a second definition."""


class Rule(enum.Enum):
    """What a violation breaks."""

    LONG_FUNCTION = "function over 80 lines"
    LONG_CLASS = "class over 300 lines"
    UPWARD_IMPORT = "upward import"
    IMPORT_CIRCLE = "import circle"
    SECOND_DEFINITION = "second definition of a one-home concept"
    ENV_CALL = "areset/astep called outside the agents"


# -- today's violations -----------------------------------------------------------------------
# Each entry: (rule, key, measured size). Keys are "module:qualname" (functions, classes, the
# function an env call is in, a second definition), "module -> imported module" (upward
# imports) and "a <-> b <-> ..." (the modules of a circle, sorted). Lower or remove entries as
# the code gets better; never add one.

ALLOWED: frozenset[tuple[Rule, str, int]] = frozenset()
"""Empty since issue 26: every rule holds in every module. Keep it so."""

DICT_ANY_CEILING = 110
"""Public functions and methods (of public classes, in public modules) whose parameters or
return mention a bare `dict[str, Any]` anywhere in the annotation (`dict[str, Any] | None`,
`list[dict[str, Any]]`): what `scan` counts. Issue 26 counted 150 another way."""


# -- the scanner ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Module:
    """One parsed module of a package."""

    name: str
    """Its import name, e.g. `skyrl_sdk.agents.rollout`."""
    path: Path
    """Its file."""
    rung: int
    """Its package's rung on the ladder."""
    tree: ast.Module
    """The parsed source."""


@dataclass
class Scan:
    """What `scan` measured (filled in as it walks): every violation by rule, and the
    `dict[str, Any]` signatures."""

    violations: dict[Rule, Counter[str]] = field(
        default_factory=lambda: {rule: Counter() for rule in Rule}
    )
    """rule -> key -> size."""
    dict_any: list[str] = field(default_factory=list)
    """The public "module:qualname"s whose signature mentions `dict[str, Any]`."""


def modules(root: Path) -> Iterator[Module]:
    """Every importable module of the packages under `root` (folders with an `__init__.py`
    all the way down, as setup.py's `find_packages` installs them; task data is not code)."""
    for folder, package, rung in LAYERS:
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if not all(
                (base.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(len(parts))
            ):
                continue
            if folder == "skyrl_sdk" and len(parts) > 1:
                continue  # skyrl_sdk's own folder holds only its leaves
            name = ".".join((package, *parts)).removesuffix(".__init__")
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            yield Module(name, path, rung, tree)


def _rung(name: str) -> int | None:
    best: tuple[int, int] | None = None  # (length of the matched package, rung)
    for _, package, rung in LAYERS:
        if (name == package or name.startswith(package + ".")) and (
            best is None or len(package) > best[0]
        ):
            best = (len(package), rung)
    return None if best is None else best[1]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_dict_str_any(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "dict"
        and isinstance(node.slice, ast.Tuple)
        and len(node.slice.elts) == 2
        and isinstance(node.slice.elts[0], ast.Name)
        and node.slice.elts[0].id == "str"
        and isinstance(node.slice.elts[1], ast.Name)
        and node.slice.elts[1].id == "Any"
    )


def _mentions_dict_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        try:
            annotation = ast.parse(annotation.value, mode="eval").body
        except SyntaxError:
            return False
    return any(_is_dict_str_any(node) for node in ast.walk(annotation))


def _signature_annotations(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
) -> Iterator[ast.expr | None]:
    a = node.args
    for arg in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg):
        if arg is not None:
            yield arg.annotation
    yield node.returns


def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _concept(name: str) -> str | None:
    """The one-home concept a definition named `name` is, if any."""
    base = name.lstrip("_")
    if base in HOMES:
        return base
    if base.endswith("_loss") and base.removesuffix("_loss") in LOSSES:
        return base.removesuffix("_loss")
    return None


class ScopeKind(enum.Enum):
    """What encloses a definition or a call."""

    CLASS = "class"
    FUNCTION = "function"


@dataclass(frozen=True)
class _Scope:
    """One enclosing class or function, innermost last."""

    name: str
    """Its name."""
    kind: ScopeKind
    """A class or a function."""
    defines_env_methods: bool = False
    """A class that defines `areset` or `astep` (an env or wrapper: it may call them)."""


class _Visitor(ast.NodeVisitor):
    """Walks one module, recording sizes, definitions, imports and env calls with scopes."""

    def __init__(self, module: Module, scan: Scan, known: frozenset[str]):
        self.module = module
        self.scan = scan
        self.known = known
        self.scopes: list[_Scope] = []
        self.type_checking = 0
        self.edges: set[str] = set()
        """Modules this one imports at run time (for circles)."""

    # scopes ---------------------------------------------------------------------------------

    def _qualname(self, name: str) -> str:
        return ".".join([*(s.name for s in self.scopes), name])

    def _key(self, name: str) -> str:
        return f"{self.module.name}:{self._qualname(name)}"

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        size = node.end_lineno - node.lineno + 1
        if size > MAX_CLASS_LINES:
            self.scan.violations[Rule.LONG_CLASS][self._key(node.name)] = size
        defines = any(
            isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef) and b.name in ENV_METHODS
            for b in node.body
        )
        self.scopes.append(_Scope(node.name, ScopeKind.CLASS, defines))
        self.generic_visit(node)
        self.scopes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        key = self._key(node.name)
        size = node.end_lineno - node.lineno + 1
        if size > MAX_FUNCTION_LINES:
            self.scan.violations[Rule.LONG_FUNCTION][key] = size
        concept = _concept(node.name)
        if concept is not None and HOMES[concept] != key:
            self.scan.violations[Rule.SECOND_DEFINITION][key] += 1
        public = all(s.kind is ScopeKind.CLASS and _is_public(s.name) for s in self.scopes)
        module_public = all(_is_public(p) for p in self.module.name.split("."))
        if (
            public
            and module_public
            and _is_public(node.name)
            and any(_mentions_dict_any(a) for a in _signature_annotations(node))
        ):
            self.scan.dict_any.append(key)
        self.scopes.append(_Scope(node.name, ScopeKind.FUNCTION))
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking += 1
        for child in node.body:
            self.visit(child)
        self.type_checking -= 1
        for child in node.orelse:
            self.visit(child)

    # imports --------------------------------------------------------------------------------

    def _resolve(self, name: str) -> str | None:
        """The deepest known module `name` is or is inside of (None: not ours)."""
        while name and name not in self.known:
            name = name.rpartition(".")[0]
        return name or None

    def _imported(self, names: list[str]) -> None:
        """Record one import statement naming `names` (most specific first)."""
        target = next((t for n in names if (t := self._resolve(n))), None)
        raw = names[-1]
        rung = _rung(target or raw)
        if rung is not None and rung > self.module.rung:
            self.scan.violations[Rule.UPWARD_IMPORT][f"{self.module.name} -> {target or raw}"] += 1
        if target is not None and target != self.module.name and not self.type_checking:
            self.edges.add(target)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._imported([alias.name])

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            package = self.module.name.split(".")
            is_package = self.module.path.name == "__init__.py"
            package = package[: len(package) - node.level + (1 if is_package else 0)]
            base = ".".join([*package, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        for alias in node.names:
            self._imported([f"{base}.{alias.name}", base])

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = getattr(func, "attr", getattr(func, "id", None))
        if (
            name == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            self._imported([node.args[0].value])
        if isinstance(func, ast.Attribute) and func.attr in ENV_METHODS:
            in_agents = self.module.name == AGENTS or self.module.name.startswith(AGENTS + ".")
            in_agents = in_agents or self.module.name in CONTRACT_CHECKERS
            classes = [s for s in self.scopes if s.kind is ScopeKind.CLASS]
            in_env_class = bool(classes) and classes[-1].defines_env_methods
            if not in_agents and not in_env_class:
                where = ".".join(s.name for s in self.scopes) or "<module>"
                self.scan.violations[Rule.ENV_CALL][f"{self.module.name}:{where}"] += 1
        self.generic_visit(node)


def _circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def scan(root: Path) -> Scan:
    """Measure every rule over the packages under `root` (see the module docstring)."""
    parsed = list(modules(root))
    known = frozenset(m.name for m in parsed)
    result = Scan()
    graph: dict[str, set[str]] = {}
    for module in parsed:
        visitor = _Visitor(module, result, known)
        visitor.visit(module.tree)
        graph[module.name] = visitor.edges
    for component in _circles(graph):
        result.violations[Rule.IMPORT_CIRCLE][" <-> ".join(component)] = len(component)
    return result


def problems(
    measured: Scan,
    allowed: frozenset[tuple[Rule, str, int]] = ALLOWED,
    ceiling: int = DICT_ANY_CEILING,
) -> list[str]:
    """Each way `measured` breaks the ratchet: a violation not allowed, one grown past its
    entry, an entry that shrank or is gone (lower or remove it), the `dict[str, Any]` count
    off its ceiling. Empty when the code keeps the architecture."""
    allowed_sizes: dict[tuple[Rule, str], int] = {}
    out: list[str] = []
    for rule, key, size in sorted(allowed, key=lambda e: (e[0].name, e[1])):
        if (rule, key) in allowed_sizes:
            out.append(f"{rule.value}: {key} is listed twice in ALLOWED")
        allowed_sizes[(rule, key)] = size
    for rule, found in measured.violations.items():
        for key, size in sorted(found.items()):
            limit = allowed_sizes.get((rule, key))
            if limit is None:
                out.append(f"{rule.value}: new violation {key} ({size})")
            elif size > limit:
                out.append(f"{rule.value}: {key} grew from {limit} to {size}")
            elif size < limit:
                out.append(
                    f"{rule.value}: {key} shrank to {size}: lower its ALLOWED entry ({limit})"
                )
    for (rule, key), limit in sorted(allowed_sizes.items(), key=lambda e: (e[0][0].name, e[0][1])):
        if key not in measured.violations[rule]:
            out.append(f"{rule.value}: {key} is gone: remove its ALLOWED entry ({limit})")
    count = len(measured.dict_any)
    if count > ceiling:
        out.append(
            f"public signatures with a bare dict[str, Any]: {count}, over the ceiling {ceiling} "
            "(type the new one: a TypedDict, a dataclass, a Mapping of a named type)"
        )
    elif count < ceiling:
        out.append(
            f"public signatures with a bare dict[str, Any]: {count}: lower DICT_ANY_CEILING to it"
        )
    return out


def render(measured: Scan) -> str:
    """The measurements as `ALLOWED` and `DICT_ANY_CEILING` source."""
    lines = ["ALLOWED: frozenset[tuple[Rule, str, int]] = frozenset(", "    {"]
    for rule in Rule:
        found = sorted(measured.violations[rule].items())
        lines.append(f"        # {rule.value}: {len(found)}")
        lines += [f'        (Rule.{rule.name}, "{key}", {size}),' for key, size in found]
    lines += ["    }", ")", "", f"DICT_ANY_CEILING = {len(measured.dict_any)}"]
    return "\n".join(lines)


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def today() -> Scan:
    return scan(ROOT)


def test_the_scanner_reads_the_installed_packages(today: Scan) -> None:
    import skyrl_sdk.agents
    import skyrl_sdk.benchmarks
    import skyrl_sdk.sandboxes
    import skyrl_sdk.tools
    import skyrl_sdk.trainer

    assert Path(skyrl_gym.__file__).resolve().parent.parent == ROOT
    for package in (
        skyrl_sdk.agents,
        skyrl_sdk.sandboxes,
        skyrl_sdk.tools,
        skyrl_sdk.trainer,
        skyrl_sdk.benchmarks,
    ):
        assert Path(package.__file__).resolve().parent.parent == ROOT
    names = {m.name for m in modules(ROOT)}
    assert {"skyrl_gym.registry", "skyrl_sdk.agents.rollout", "skyrl_sdk.http_guard"} <= names
    assert not any(".tasks." in n and n.startswith("skyrl_gym.envs.harbor") for n in names)


def test_the_architecture_keeps_its_ratchet(today: Scan) -> None:
    """No new violation, none grown, no stale entry, the dict[str, Any] count at its ceiling."""
    assert problems(today) == [], render(today)


def test_the_registry_circle_is_gone(today: Scan) -> None:
    assert not any("skyrl_gym.registry" in key for key in today.violations[Rule.IMPORT_CIRCLE])


def _copy(root: Path, into: Path) -> Path:
    """The packages' modules (only `.py` files and the folders holding them) under `into`."""
    for folder, _, _ in LAYERS:
        shutil.copytree(
            root / folder,
            into / folder,
            ignore=lambda d, names: (
                [n for n in names if not n.endswith(".py") and not (Path(d) / n).is_dir()]
                + [n for n in names if n == "__pycache__"]
            ),
        )
    return into


BAD_MODULE = '''
"""A module breaking every rule."""
from typing import Any

from skyrl_sdk.trainer import losses
import skyrl_gym.envs.bad_partner
import skyrl_gym.envs.bad_typing


def load_policy(spec: str) -> Any:
    return spec


def ppo_loss(x: float) -> float:
    return x


async def play(env: Any) -> None:
    await env.areset()
    await env.astep("hi")


class Wrapper:  # an env class delegating to the env it wraps: allowed
    async def astep(self, action: str) -> Any:
        return await self.env.astep(action)


def leaky(config: dict[str, Any]) -> None:
    pass


def _private(config: dict[str, Any]) -> None:  # not public: not counted
    pass


def long_one() -> int:
    x = 0
{body}
    return x


class Big:
{methods}
'''


END_TO_END = "e2e"
"""The tests folder for features that cross packages (the red-team suite, the wheel)."""


def folders_without_their_package(root: Path) -> list[str]:
    """Test folders (packages holding `test_*.py`) under `root/tests` whose path names no
    package folder of `root`: tests mirror the packages, apart from the end-to-end folder."""
    tests = root / "tests"
    stray = []
    for init in sorted(tests.rglob("__init__.py")):
        folder = init.parent
        rel = folder.relative_to(tests)
        if not rel.parts or rel.parts[0] == END_TO_END or not any(folder.glob("test_*.py")):
            continue
        if not (root.joinpath(*rel.parts) / "__init__.py").is_file():
            stray.append(str(rel))
    return stray


def test_tests_mirror_the_packages() -> None:
    assert folders_without_their_package(ROOT) == []


def test_a_test_folder_without_its_package_is_found(tmp_path: Path) -> None:
    for folder in ("agents/engine", "tests/agents/engine", "tests/agents/feature", "tests/e2e/x"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    for folder in ("tests/agents/engine", "tests/agents/feature", "tests/e2e/x"):
        (tmp_path / folder / "test_it.py").write_text("")
    (tmp_path / "agents" / "__init__.py").write_text("")
    (tmp_path / "tests" / "agents" / "__init__.py").write_text("")
    assert folders_without_their_package(tmp_path) == ["agents/feature"]


def test_the_ratchet_fails_on_a_bad_module_and_on_stale_entries(
    today: Scan, tmp_path: Path
) -> None:
    """A copy of the packages plus a module breaking every rule: each break is named (against
    an allow-list of what the real packages measure, so only the bad module's breaks count);
    an import back under `if TYPE_CHECKING:` makes no circle; and an allow-list whose entries
    no longer match the code fails too."""
    root = _copy(ROOT, tmp_path / "repo")
    body = "\n".join(f"    x += {i}" for i in range(MAX_FUNCTION_LINES))
    methods = "\n".join(f"    def m{i}(self) -> int:\n        return {i}\n" for i in range(110))
    envs = root / "skyrl_gym" / "envs"
    (envs / "bad.py").write_text(textwrap.dedent(BAD_MODULE).format(body=body, methods=methods))
    (envs / "bad_partner.py").write_text("def f():\n    from skyrl_gym.envs import bad\n")
    (envs / "bad_typing.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from skyrl_gym.envs import bad\n"
    )
    measured = scan(root)
    baseline = frozenset(
        (rule, key, size) for rule, found in today.violations.items() for key, size in found.items()
    )
    found = problems(measured, baseline, len(today.dict_any))
    expected = [
        "upward import: new violation skyrl_gym.envs.bad -> skyrl_sdk.trainer.losses (1)",
        "import circle: new violation skyrl_gym.envs.bad <-> skyrl_gym.envs.bad_partner (2)",
        "second definition of a one-home concept: new violation skyrl_gym.envs.bad:load_policy (1)",
        "second definition of a one-home concept: new violation skyrl_gym.envs.bad:ppo_loss (1)",
        "areset/astep called outside the agents: new violation skyrl_gym.envs.bad:play (2)",
        f"function over 80 lines: new violation skyrl_gym.envs.bad:long_one ({MAX_FUNCTION_LINES + 3})",
        "class over 300 lines: new violation skyrl_gym.envs.bad:Big (",
        f"public signatures with a bare dict[str, Any]: {len(today.dict_any) + 1}, over the ceiling",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in found), (line, found)
    assert len(found) == len(expected), found

    # Entries that no longer match: grown, shrunk, gone; a ceiling above the count.
    grown = frozenset({(Rule.LONG_FUNCTION, "skyrl_gym.envs.bad:long_one", MAX_FUNCTION_LINES + 1)})
    assert problems(
        scan_only(measured, Rule.LONG_FUNCTION, "skyrl_gym.envs.bad:long_one"),
        grown,
        len(measured.dict_any),
    ) == [
        f"function over 80 lines: skyrl_gym.envs.bad:long_one grew from {MAX_FUNCTION_LINES + 1} to {MAX_FUNCTION_LINES + 3}"
    ]
    shrunk = frozenset({(Rule.LONG_FUNCTION, "skyrl_gym.envs.bad:long_one", 500)})
    assert problems(
        scan_only(measured, Rule.LONG_FUNCTION, "skyrl_gym.envs.bad:long_one"),
        shrunk,
        len(measured.dict_any),
    ) == [
        "function over 80 lines: skyrl_gym.envs.bad:long_one shrank to 83: lower its ALLOWED entry (500)"
    ]
    gone = frozenset({(Rule.LONG_CLASS, "skyrl_gym.envs.gone:Gone", 400)})
    assert problems(Scan(dict_any=["a:b"]), gone, 2) == [
        "class over 300 lines: skyrl_gym.envs.gone:Gone is gone: remove its ALLOWED entry (400)",
        "public signatures with a bare dict[str, Any]: 1: lower DICT_ANY_CEILING to it",
    ]


def scan_only(measured: Scan, rule: Rule, key: str) -> Scan:
    """`measured` reduced to one violation (and its dict[str, Any] signatures)."""
    only = Scan(dict_any=list(measured.dict_any))
    only.violations[rule][key] = measured.violations[rule][key]
    return only


if __name__ == "__main__":
    print(render(scan(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)))
