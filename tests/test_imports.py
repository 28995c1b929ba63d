"""harness/ is a stack of layers: each module imports only from its own layer or the ones below, and nothing imports
in a circle. The graph is read from the source (ast), imports written inside functions included, so a cycle cannot
hide in a lazy import. Runs without torch or a GPU."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "harness"

# Bottom to top. A module imports from its own layer or a lower one; within a layer, the imports must not form a cycle.
LAYERS = [
    ("paths and toolchain", ["harness", "harness.toolchain"]),
    ("build", ["harness.build"]),
    ("quantization formats, reference math, guard bands", ["harness.quant", "harness.decode_math", "harness.guard"]),
    ("problems", ["harness.problems"]),
    ("catalog", ["harness.catalog"]),
    ("check, bench, roofline, nsight, drawing", ["harness.check", "harness.bench", "harness.roofline", "harness.nsight",
                                                "harness.diagrams"]),
    ("results", ["harness.results"]),
    ("baselines", ["harness.baselines", "harness.baselines.marlin", "harness.baselines.bnb"]),
    ("decode", ["harness.decode", "harness.real_model"]),
    ("commands", ["harness.run", "harness.grade", "harness.ladder", "harness.report", "harness.exercises",
                  "harness.doctor", "harness.notebook", "harness.lab"]),
]
LAYER = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}


def modules(root: Path = HARNESS) -> dict[str, Path]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = p.relative_to(root.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def imports(name: str, path: Path, known) -> dict[str, list[int]]:
    """The harness modules `name` imports (anywhere in the file: top level, functions, classes), with line numbers.
    `from . import x` counts as an import of harness.x when that is a module, else of the package."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, list[int]] = {}

    def add(target, line):
        if target in known and target != name:
            found.setdefault(target, []).append(line)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for a in node.names:
                add(a.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            for target in subs or [mod]:
                add(target, node.lineno)
    return found


def graph(root: Path = HARNESS) -> dict[str, dict[str, list[int]]]:
    mods = modules(root)
    return {name: imports(name, path, mods) for name, path in mods.items()}


def find_cycle(g) -> list[str] | None:
    """One import cycle of g as [a, b, ..., a], or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(g.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state:
                found = visit(w)
                if found:
                    return found
        path.pop()
        state[v] = 2
        return None

    for v in sorted(g):
        if v not in state:
            found = visit(v)
            if found:
                return found
    return None


def test_the_graph_sees_function_local_and_relative_imports(tmp_path):
    pkg = tmp_path / "harness"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "low.py").write_text("import os\n\n\ndef f():\n    from .sub import high  # lazy\n    return high\n")
    (pkg / "sub" / "high.py").write_text("from .. import low\nfrom ..low import f\n")
    g = graph(pkg)
    assert g["harness.low"] == {"harness.sub.high": [5]}
    assert g["harness.sub.high"] == {"harness.low": [1, 2]}
    assert find_cycle(g) == ["harness.low", "harness.sub.high", "harness.low"]


def test_find_cycle_names_the_cycle():
    assert find_cycle({"a": {"b": [1]}, "b": {"c": [1]}, "c": {}}) is None
    assert find_cycle({"a": {"b": [1]}, "b": {"c": [1]}, "c": {"a": [1]}}) == ["a", "b", "c", "a"]


def test_no_import_cycle():
    g = graph()
    cycle = find_cycle(g)
    if cycle:
        steps = [f"{a} imports {b} (line {', '.join(map(str, g[a][b]))})" for a, b in zip(cycle, cycle[1:])]
        pytest.fail("import cycle in harness/: " + " → ".join(cycle) + "\n  " + "\n  ".join(steps))


def test_every_module_has_a_layer():
    missing = sorted(set(modules()) - set(LAYER))
    assert not missing, f"place these modules in a layer of tests/test_imports.py's LAYERS: {missing}"


def test_no_module_imports_from_a_higher_layer():
    bad = []
    for a, targets in graph().items():
        for b, lines in targets.items():
            if a in LAYER and b in LAYER and LAYER[b] > LAYER[a]:
                bad.append(f"{a} ({LAYERS[LAYER[a]][0]}) imports {b} ({LAYERS[LAYER[b]][0]}), line "
                           + ", ".join(map(str, lines)))
    assert not bad, "a lower layer imports a higher one:\n  " + "\n  ".join(bad)
