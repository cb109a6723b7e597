"""The Tinker server's layering (issue 16): a service without HTTP under thin route modules,
no import cycle among its modules, no function over 80 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import skyrl_sdk.trainer.tinker as package

ROOT = Path(package.__file__).parent
PREFIX = "skyrl_sdk.trainer.tinker"
HTTP = ("fastapi", "starlette", "uvicorn", "httpx")
SERVICE_LAYER = (
    "service",
    "backend",
    "store",
    "worker",
    "model_queue",
    "checkpoints",
    "names",
    "lora",
    "views",
    "errors",
    "wire",
)


def _modules() -> dict[str, ast.Module]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(p for p in (PREFIX, *parts) if p != "__init__")
        out[name] = ast.parse(path.read_text())
    return out


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def test_the_service_layer_imports_no_http() -> None:
    modules = _modules()
    for name in SERVICE_LAYER:
        imported = _imports(modules[f"{PREFIX}.{name}"])
        assert not {i for i in imported if i.split(".")[0] in HTTP}, name
        assert not {i for i in imported if i.startswith(f"{PREFIX}.routes")}, name


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {
        name: {i for i in _imports(tree) if i in modules and i != name}
        for name, tree in modules.items()
    }
    # A package importing its own submodules (routes/__init__) is no cycle: drop parent edges.
    graph = {n: {d for d in deps if not n.startswith(d + ".")} for n, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in graph[node]:
            assert state.get(dep) != 1, f"import cycle: {' -> '.join([*path, dep])}"
            if dep not in state:
                visit(dep, [*path, dep])
        state[node] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])


def test_no_function_over_80_lines() -> None:
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                assert length <= 80, f"{name}.{node.name} has {length} lines"


def test_the_service_parts_import_no_http_and_no_class_is_over_300_lines() -> None:
    modules = _modules()
    parts = [n for n in modules if n.split(".")[-1].startswith("service")]
    assert len(parts) >= 8, parts  # the facade and its parts (issue 26)
    for name in parts:
        imported = _imports(modules[name])
        assert not {i for i in imported if i.split(".")[0] in HTTP}, name
        assert not {i for i in imported if i.startswith(f"{PREFIX}.routes")}, name
    for name, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and name.split(".")[-1].startswith("service"):
                length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                assert length <= 300, f"{name}.{node.name} has {length} lines"


def test_the_service_facade_returns_wire_models() -> None:
    import inspect
    import typing

    from skyrl_sdk.trainer.tinker import service

    for name, fn in inspect.getmembers(service.TinkerService, inspect.isfunction):
        if name.startswith("_"):
            continue
        returned = typing.get_type_hints(fn).get("return")
        assert returned is not None, f"TinkerService.{name} has no return type"
        assert "dict" not in str(returned), f"TinkerService.{name} returns {returned}"


def test_route_handlers_send_reply_models_not_dicts() -> None:
    for name, tree in _modules().items():
        if not name.startswith(f"{PREFIX}.routes"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.AsyncFunctionDef) and node.returns is not None:
                returned = ast.unparse(node.returns)
                assert "Any" not in returned, f"{name}.{node.name} returns {returned}"
