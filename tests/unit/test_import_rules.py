"""The architecture's import rules, read from the source with `ast`.

- `mlxhost.wire` is data: it imports nothing of ours outside itself, and no web server, event
  loop, HTTP client or MLX.
- Only `mlxhost.worker` (a model's worker process) and `mlxhost.job` (a job's process) import MLX or
  mlx-lm; the parent (`host`), the clients, the console, the shared runtime and the test harness
  import neither, so the parent never loads MLX.
- The console, the clients and the shared runtime never import the parent either.
- `mlxhost.cli` is the one dispatcher allowed to reach the worker: `serve --in-process` runs it.
- The parent and the worker are each built in floors (`FLOORS`): a module imports from its own
  floor and the floors below it, never from one above.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MLX = ("mlx", "mlx_lm")
SERVING = ("starlette", "hypercorn", "anyio", "httpx", "h11", "asyncio", "socket", "subprocess")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "tui":
        parts[0] = "mlxhost_tui"
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, name: str | None = None, tree: ast.AST | None = None) -> Iterator[str]:
    """Every module `path` (the module `name`; its `tree` if given) imports, absolute, including
    inside functions."""
    package = (name or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(tree or ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, node.module] if node.module else base)
            yield module
            # `from mlxhost import worker` imports a module by its attribute name.
            yield from (f"{module}.{alias.name}" for alias in node.names)


def _within(module: str, *roots: str) -> bool:
    return any(module == root or module.startswith(root + ".") for root in roots)


def _sources(*folders: str) -> list[Path]:
    return sorted(path for folder in folders for path in (ROOT / folder).rglob("*.py"))


def _violations(paths: list[Path], forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in paths
        for module in _imports(path)
        if _within(module, *forbidden)
    ]


def test_the_contracts_import_nothing_of_ours_but_themselves() -> None:
    found = [
        f"{path.relative_to(ROOT)} imports {module}"
        for path in _sources("mlxhost/wire")
        for module in _imports(path)
        if _within(module, "mlxhost", "mlxhost_tui", *MLX, *SERVING) and not _within(module, "mlxhost.wire")
    ]
    assert found == []


@pytest.mark.parametrize("folder", ["mlxhost/host", "mlxhost/client", "mlxhost/runtime", "tui"])
def test_the_parent_clients_and_console_never_import_the_worker_or_mlx(folder: str) -> None:
    assert _violations(_sources(folder), ("mlxhost.worker", "mlxhost.job", *MLX)) == []


@pytest.mark.parametrize("folder", ["mlxhost/client", "mlxhost/runtime", "tui"])
def test_clients_and_the_shared_runtime_never_reach_into_the_parent(folder: str) -> None:
    """The console and `status` know the host only by its admin API (`wire.admin`), like any client."""
    assert _violations(_sources(folder), ("mlxhost.host",)) == []


def test_only_the_worker_and_the_job_process_import_mlx() -> None:
    outside = [
        p for p in _sources("mlxhost", "tui", "scripts") if not _within(_module_name(p), "mlxhost.worker", "mlxhost.job")
    ]
    # The benchmark measures raw mlx-lm as its baseline: that is the one place outside the worker.
    outside = [p for p in outside if "bench" not in p.relative_to(ROOT).parts[:2]]
    assert _violations(outside, MLX) == []


def test_only_the_cli_reaches_into_the_worker() -> None:
    top_level = [p for p in _sources("mlxhost") if not _within(_module_name(p), "mlxhost.worker")]
    found = _violations([p for p in top_level if p.name != "cli.py"], ("mlxhost.worker",))
    assert found == []


def test_nothing_reaches_into_the_job_process() -> None:
    """The parent starts a job as `python -m mlxhost.job`; it never imports it (nor MLX with it)."""
    others = [p for p in _sources("mlxhost", "tui") if not _within(_module_name(p), "mlxhost.job")]
    assert _violations(others, ("mlxhost.job",)) == []


def test_the_rules_see_a_violation(tmp_path: Path) -> None:
    """The reader resolves relative and in-function imports, so a rule cannot pass by accident."""
    module = tmp_path / "probe.py"
    module.write_text("def f():\n    from ..worker import engine\n    import mlx.core\n")
    found = set(_imports(module, "mlxhost.host.probe"))
    assert found >= {"mlxhost.worker", "mlxhost.worker.engine", "mlx.core"}


# A screen names its app's type for its checker only: the one circle, and no import at run time.
TYPE_ONLY_CIRCLES = [{"mlxhost_tui.app", "mlxhost_tui.screens.main", "mlxhost_tui.screens.job_log"}]


def _module_level_imports(path: Path) -> set[str]:
    """What a module imports when it is imported (`if TYPE_CHECKING:` blocks included)."""
    name = _module_name(path)
    package = name.split(".")
    if path.name != "__init__.py":
        package.pop()
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join([*base, node.module] if node.module else base)
                found.add(module)
                found.update(f"{module}.{alias.name}" for alias in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)

    visit(ast.parse(path.read_text(), str(path)).body)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(group)

    for node in graph:
        if node not in index:
            visit(node)
    return circles


def test_no_module_imports_itself_round_a_circle() -> None:
    """Each floor stands on the ones below: the job tail once borrowed the admin stream's response
    class, which closed admin → state → jobs.runner → jobs.tail → admin."""
    paths = {_module_name(p): p for p in _sources("mlxhost", "tui")}
    graph = {name: {m for m in _module_level_imports(path) if m in paths} for name, path in paths.items()}
    assert [c for c in _circles(graph) if c not in TYPE_ONLY_CIRCLES] == []
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]  # it can fail


# Each package's floors, lowest first. A module is on the floor of the longest prefix it matches.
FLOORS = {
    "mlxhost.host": [
        ["mlxhost.host.events"],
        ["mlxhost.host.workers"],
        ["mlxhost.host.serving"],
        ["mlxhost.host.jobs"],
        ["mlxhost.host.downloads"],
        ["mlxhost.host.state"],
        ["mlxhost.host.routes"],
        ["mlxhost.host.app", "mlxhost.host.serve"],
    ],
    "mlxhost.worker": [
        ["mlxhost.worker.cache"],
        ["mlxhost.worker.engine"],
        ["mlxhost.worker.api"],
        ["mlxhost.worker.pause", "mlxhost.worker.app", "mlxhost.worker.serve"],
        ["mlxhost.worker.in_process", "mlxhost.worker.__main__"],
    ],
}


def _floor(module: str, floors: list[list[str]]) -> int | None:
    found = [(len(root), level) for level, roots in enumerate(floors) for root in roots if _within(module, root)]
    return max(found)[1] if found else None


def _runtime_imports(path: Path) -> set[str]:
    """What a module imports when it runs: `if TYPE_CHECKING:` blocks are for the checker only."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = [ast.Pass()]
    return set(_imports(path, tree=tree))


def _reaching_up(modules: dict[str, set[str]], floors: list[list[str]]) -> list[str]:
    """Each module (name: what it imports) that is on no floor or imports from a floor above."""
    found = []
    for name, imports in sorted(modules.items()):
        own = _floor(name, floors)
        if own is None:
            found.append(f"{name} is on no floor")
            continue
        found.extend(
            f"{name} imports {module}, a floor above it"
            for module in sorted(imports)
            if (_floor(module, floors) or 0) > own
        )
    return found


@pytest.mark.parametrize("package", sorted(FLOORS))
def test_each_floor_stands_only_on_the_floors_below(package: str) -> None:
    paths = [p for p in _sources(package.replace(".", "/")) if _module_name(p) != package]
    assert _reaching_up({_module_name(p): _runtime_imports(p) for p in paths}, FLOORS[package]) == []


def test_the_floor_rule_sees_a_module_reaching_up() -> None:
    floors = [["pkg.low"], ["pkg.high"], ["pkg.high.top"]]
    modules = {"pkg.low.a": {"pkg.high.b"}, "pkg.high.b": {"pkg.low.a"}, "pkg.high.top.c": set(), "pkg.d": set()}
    assert _reaching_up(modules, floors) == ["pkg.d is on no floor", "pkg.low.a imports pkg.high.b, a floor above it"]


def _private_imports(path: Path, name: str | None = None) -> Iterator[str]:
    """Each `_name` (private, not dunder) that `path` (the module `name`) imports from one of ours."""
    package = (name or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        module = ".".join([*base, node.module] if node.module else base)
        if not _within(module, "mlxhost", "mlxhost_tui"):
            continue
        for alias in node.names:
            if alias.name.startswith("_") and not alias.name.startswith("__"):
                yield f"{module}.{alias.name}"


def test_no_module_imports_another_modules_private_names(tmp_path: Path) -> None:
    """A name with a leading underscore is its module's own: what another module needs is public,
    in the module where it belongs."""
    found = [
        f"{path.relative_to(ROOT)} imports {private}"
        for path in _sources("mlxhost", "tui")
        for private in _private_imports(path)
    ]
    assert found == []
    probe = tmp_path / "probe.py"  # it can fail
    probe.write_text("from .chat import _check, public, __version__\nfrom mlx_lm import _private\n")
    assert list(_private_imports(probe, "mlxhost.worker.api.probe")) == ["mlxhost.worker.api.chat._check"]
