"""The package's layering (issue #31), read from the source with `ast`: every import counts, those inside
functions and under `if TYPE_CHECKING:` included, since each one is a dependency a reader has to follow.

- no two bertkit modules import each other, directly or through others;
- nor do two packages (bertkit.X: a subpackage, or a top-level module such as errors.py), so they stack in layers;
- only the CLI (and `python -m bertkit`) imports the CLI;
- only the CLI and the pipelines import the pipelines: the parts below them never reach up;
- models are forward passes: nothing of training, data, distillation, pipelines or the CLI.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import bertkit

ROOT = Path(bertkit.__file__).parent
MODELS_MAY_NOT_IMPORT = ("engine", "pipelines", "cli", "corpus", "objectives", "distill")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        name = ".".join(("bertkit", *path.relative_to(ROOT).with_suffix("").parts))
        found[name.removesuffix(".__init__")] = path
    return found


def _import_graph() -> dict[str, set[str]]:
    """Module -> the bertkit modules it imports (`from a.b import c` counts as a.b, and a.b.c when c is a module)."""
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text("utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            else:
                continue
            graph[name].update(t for t in targets if t in modules and t != name)
    return {name: graph[name] for name in modules}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
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


def _within(name: str, *packages: str) -> bool:
    return any(name == f"bertkit.{p}" or name.startswith(f"bertkit.{p}.") for p in packages)


def _imports_into(graph: dict[str, set[str]], importers: list[str], *packages: str) -> dict[str, list[str]]:
    return {
        name: sorted(t for t in graph[name] if _within(t, *packages))
        for name in importers
        if any(_within(t, *packages) for t in graph[name])
    }


def test_the_graph_sees_every_kind_of_import() -> None:
    """The reader itself: a lazy import inside a function and a TYPE_CHECKING one are edges like any other."""
    graph = _import_graph()
    assert "bertkit.cli.app" in graph["bertkit.__main__"]
    assert all(graph[name] <= set(graph) for name in graph)
    lazy = [name for name, path in _modules().items() if "\n    from bertkit." in path.read_text("utf-8")]
    assert lazy and all(graph[name] for name in lazy)


def test_no_import_cycles() -> None:
    assert _cycles(_import_graph()) == []


def _package(module: str) -> str:
    """bertkit.X for the modules of subpackage X and for the top-level module X; `bertkit` for the root itself."""
    return ".".join(module.split(".")[:2])


def _package_graph() -> dict[str, set[str]]:
    """Package -> the other packages its modules import."""
    graph: dict[str, set[str]] = defaultdict(set)
    for name, targets in _import_graph().items():
        package = _package(name)
        graph[package].update(_package(t) for t in targets if _package(t) != package)
    return dict(graph)


def test_no_import_cycles_between_packages() -> None:
    graph = _package_graph()
    assert {"bertkit.cli", "bertkit.modelio", "bertkit.errors", "bertkit.fsutil", "bertkit.__main__"} <= set(graph)
    assert "bertkit.cli" in graph["bertkit.__main__"]
    assert _cycles(graph) == []


def test_only_the_cli_imports_the_cli() -> None:
    graph = _import_graph()
    outside = [name for name in graph if not _within(name, "cli") and name != "bertkit.__main__"]
    assert _imports_into(graph, outside, "cli") == {}


def test_only_the_cli_and_pipelines_import_pipelines() -> None:
    graph = _import_graph()
    outside = [name for name in graph if not _within(name, "cli", "pipelines")]
    assert _imports_into(graph, outside, "pipelines") == {}


def test_models_are_forward_passes_only() -> None:
    graph = _import_graph()
    models = [name for name in graph if _within(name, "models")]
    assert models
    assert _imports_into(graph, models, *MODELS_MAY_NOT_IMPORT) == {}
