"""The package's layers: no module imports from a layer above its own, and no import circle."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[1] / "landscape"
#: the layers, bottom to top (docs/architecture.md, "Layers")
LAYERS = [
    ("errors", "options", "version"),
    ("store",),
    ("runtime",),
    ("data",),
    ("models",),
    ("core",),
    ("analyses",),
    ("train",),
    ("plot",),
    ("reproduce",),
    ("cli",),
]
LEVEL = {name: i for i, group in enumerate(LAYERS) for name in group}


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name not in ("landscape", "landscape.__main__"):
            yield name, path


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("landscape.") and not node.level:
            yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("landscape."))


def _top(module):
    return module.split(".")[1]


def test_every_module_belongs_to_a_layer():
    assert {_top(m) for m, _ in _modules()} <= set(LEVEL)


def test_no_module_imports_from_a_layer_above_its_own():
    upward = [
        f"{name} ({_top(name)}) imports {target} ({_top(target)})"
        for name, path in _modules()
        for target in _imports(path)
        if LEVEL[_top(target)] > LEVEL[_top(name)]
    ]
    assert not upward, upward


def test_no_import_circle_between_modules():
    graph = {name: {t for t in _imports(path)} for name, path in _modules()}
    names = set(graph)
    graph = {
        n: {t for t in ts if t in names and t != n and not t.startswith(n + ".") and not n.startswith(t + ".")}
        for n, ts in graph.items()
    }
    seen, stack, circles = {}, [], []

    def visit(node):
        seen[node] = "open"
        stack.append(node)
        for nxt in graph[node]:
            if seen.get(nxt) == "open":
                circles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in seen:
                visit(nxt)
        stack.pop()
        seen[node] = "done"

    for node in sorted(graph):
        if node not in seen:
            visit(node)
    assert not circles, circles[:3]


def _names_from_the_face(path):
    """What ``path`` imports from the package's face (``from landscape import X``), other than its subpackages."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "landscape" and not node.level:
            for alias in node.names:
                below = ROOT / alias.name
                if not (below.is_dir() or below.with_suffix(".py").is_file()):
                    yield alias.name
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name == "landscape")


def test_nothing_below_the_face_imports_from_it():
    # the face (landscape/__init__.py) imports lazily from every layer: a name taken back from it runs up the graph
    upward = [
        f"{name} imports {what} from landscape" for name, path in _modules() for what in _names_from_the_face(path)
    ]
    assert not upward, upward


def test_the_version_is_a_leaf():
    tree = ast.parse((ROOT / "version.py").read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
