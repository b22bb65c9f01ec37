"""The package's layers, read from the source with ``ast`` (nothing is imported).

core ← demo (model fixtures), viewer (live view) ← ros ← bag ← sim / replay / egodriver / bench / infer ← drive,
demo.train ← cli (interfaces stands alone): a module may import only from its own layer and the layers its row in
:data:`ALLOWED` names, also inside functions; core, demo and viewer never import ROS; the imports between the
package's modules, at module level, inside functions and under ``TYPE_CHECKING`` alike, form no cycle; the tests
marked ``core`` (run again on the ROS-free transformers 4.57.3 environment by ``scripts/test.sh``) import nothing
that needs ROS.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.core

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "wam_diff2_ros"
ROOT = "wam_diff2_ros"
ROOT_MODULES = {"_interfaces", "msg"}  # the package root: the generated-messages path helper, the messages

#: layer -> the layers it may import (its own included).
ALLOWED: dict[str, set[str]] = {
    "core": {"core"},
    "demo": {"core", "demo"},
    "viewer": {"core", "viewer"},
    "ros": {"core", "demo", "viewer", "ros"},
    "bag": {"core", "ros", "bag"},
    "sim": {"core", "bag", "sim"},
    "replay": {"core", "demo", "viewer", "ros", "bag", "replay"},
    "fleet": {"core", "demo", "viewer", "ros", "bag", "sim", "replay", "fleet"},  # sim: `scale`'s synthetic bags
    "egodriver": {"core", "demo", "viewer", "ros", "egodriver"},  # the planner as an egodriver policy
    "drive": {"core", "demo", "viewer", "ros", "bag", "sim", "replay", "fleet", "egodriver", "drive"},
    "demo.train": {"core", "demo", "sim", "demo.train"},
    "bench": {
        "core",
        "demo",
        "viewer",
        "ros",
        "sim",
        "bench",
    },  # ros: conversions, end-to-end, flood; viewer, sim: `viewer`, `flood`
    "infer": {"core", "demo", "infer"},
    "interfaces": {"interfaces"},
    "cli": {
        *("core", "demo", "viewer", "ros", "bag", "sim", "replay", "fleet", "egodriver", "drive"),
        *("demo.train", "bench", "infer", "interfaces", "cli"),
    },
}
ROS_FREE = ("core", "demo", "viewer")
ROS_ROOTS = ("rclpy", "rosbags", "rosidl", "launch", "launch_ros", "builtin_interfaces", "ament_index_python")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """The layer of ``wam_diff2_ros.X...``; None for the package root and its root modules."""
    parts = module.split(".")[1:]
    if not parts or parts[0] in ROOT_MODULES:
        return None
    if parts[0] == "demo" and len(parts) > 1 and parts[1] == "train":
        return "demo.train"
    return parts[0]


def is_ros(name: str) -> bool:
    top = name.split(".")[0]
    return top in ROS_ROOTS or top.endswith("_msgs") or name.startswith(f"{ROOT}.msg")


def imports(path: Path, module_level_only: bool = False) -> Iterator[tuple[str, int]]:
    """(absolute module name, line) of every import in ``path``; ``from X import y`` yields ``X.y`` when that is
    one of the package's modules, else ``X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                yield (candidate if is_package_module(candidate) else source), node.lineno


def is_package_module(name: str) -> bool:
    if not name.startswith(f"{ROOT}."):
        return False
    rel = Path(*name.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_layers_are_known() -> None:
    unknown = {module_name(p) for p in SOURCES if layer_of(module_name(p)) not in (None, *ALLOWED)}
    assert not unknown, f"modules outside every layer (add the layer to ALLOWED): {sorted(unknown)}"


def test_no_upward_import() -> None:
    problems = []
    for path in SOURCES:
        layer = layer_of(module_name(path))
        if layer is None:
            continue
        for name, line in imports(path):
            if name.startswith(f"{ROOT}.") and not is_ros(name):
                target = layer_of(name)
                if target is not None and target not in ALLOWED[layer]:
                    problems.append(f"{path.relative_to(REPO)}:{line}: {layer} imports {name} ({target})")
            if layer in ROS_FREE and is_ros(name):
                problems.append(f"{path.relative_to(REPO)}:{line}: {layer} imports ROS ({name})")
    assert not problems, "upward imports:\n" + "\n".join(problems)


def module_graph(module_level_only: bool = False) -> dict[str, set[str]]:
    """Per module of the package the package's modules it imports (by default every import: inside functions and
    under ``TYPE_CHECKING`` too)."""
    graph: dict[str, set[str]] = {}
    for path in SOURCES:
        edges = {name for name, _ in imports(path, module_level_only) if is_package_module(name)}
        graph[module_name(path)] = edges
    return graph


def test_no_import_cycle() -> None:
    graph = module_graph()
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    cycles = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):  # a package's __init__ counts: a submodule importing it closes a cycle
            if state.get(nxt) == 1:
                cycle = [*stack[stack.index(nxt) :], nxt] if nxt in stack else [node, nxt]
                cycles.append(" -> ".join(cycle))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def core_test_files() -> list[Path]:
    marked = []
    for path in sorted((REPO / "test").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            is_mark = isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
            if is_mark and "mark.core" in ast.unparse(node.value):
                marked.append(path)
    return marked


def test_core_tests_need_no_ros() -> None:
    """What a core-marked test imports at module level, followed through the package, never reaches ROS."""
    files = core_test_files()
    assert len(files) >= 8, [p.name for p in files]
    graph = module_graph(module_level_only=True)
    ros_direct = {
        module_name(p): sorted({n for n, _ in imports(p, module_level_only=True) if is_ros(n)}) for p in SOURCES
    }
    problems = []
    for path in files:
        seen: set[str] = set()
        todo = [n for n, _ in imports(path, module_level_only=True)]
        while todo:
            name = todo.pop()
            if is_ros(name) or name in {"conftest", "node_helpers"}:
                problems.append(f"{path.name}: imports {name}")
                continue
            if not name.startswith(f"{ROOT}.") or name in seen:
                continue
            seen.add(name)
            parts = name.split(".")
            todo.extend(".".join(parts[:i]) for i in range(2, len(parts)))  # parent packages' __init__
            if ros_direct.get(name):
                problems.append(f"{path.name}: {name} imports {ros_direct[name]}")
            todo.extend(graph.get(name, ()))
    assert not problems, "\n".join(problems)
