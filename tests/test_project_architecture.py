"""The package map of docs/architecture.md, held against the code: no import loops anywhere in
``sched/`` (top-level imports and the lazy ones inside functions alike), and no package importing
one its ``__init__`` does not allow (``MAY_IMPORT``).

The imports are read from the source with :mod:`ast`, so nothing is run; a relative import is
resolved the way Python resolves it.
"""

import ast
import functools
import os
import unittest

from tests.helpers import PROJECT

SCHED = os.path.join(PROJECT, "sched")

#: Top-level modules of ``sched`` and what each may import (the packages are read from their
#: ``__init__``): ``sched`` itself holds ``__version__`` only.
TOP_LEVEL = {"sched": (), "engines": ("core", "lab", "vllm"), "serving_bench": ("chapter",)}


def _modules():
    """``{dotted module name: path}`` of every ``.py`` file under ``sched/``."""
    found = {}
    for folder, subfolders, names in os.walk(SCHED):
        subfolders[:] = [d for d in subfolders if d != "__pycache__"]
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path[:-3], PROJECT).replace(os.sep, ".")
                found[dotted[:-len(".__init__")] if dotted.endswith(".__init__") else dotted] = path
    return found


_BLOCKS = (ast.stmt, ast.excepthandler, ast.match_case)


def _import_statements(tree: ast.AST) -> tuple:
    """The import statements anywhere in ``tree`` (top level, and the lazy ones inside functions,
    branches, ``try``/``except`` and ``match`` cases), each as ``(is_from, module, level, names)``:
    ``import a.b`` is ``(False, None, 0, ("a.b",))``, ``from ..x import y`` is ``(True, "x", 2, ("y",))``.
    Only statement lists are walked: an import is a statement, never part of an expression."""
    found, stack = [], [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import):
            found.append((False, None, 0, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.ImportFrom):
            found.append((True, node.module, node.level, tuple(a.name for a in node.names)))
        for _, value in ast.iter_fields(node):
            if isinstance(value, list):
                stack.extend(reversed([item for item in value if isinstance(item, _BLOCKS)]))
    return tuple(found)


@functools.lru_cache(maxsize=None)
def _imports(path: str) -> tuple:
    """:func:`_import_statements` of one file, parsed once per test run (every rule below reads the
    same imports). The parsed tree is not kept: some 300,000 objects that every later test of the
    run would carry through Python's garbage collections."""
    with open(path, encoding="utf-8") as handle:
        return _import_statements(ast.parse(handle.read(), path))


def import_edges(modules=None):
    """``{module: set of sched modules it imports}``; ``from X import name`` counts as importing
    ``X.name`` when that is a module, else ``X``. A fresh copy each call (a test may add an edge)."""
    if modules is None:
        return {module: set(targets) for module, targets in _sched_edges().items()}
    return _edges(modules)


@functools.lru_cache(maxsize=None)
def _sched_edges():
    """:func:`import_edges` of the whole of ``sched/``, computed once per test run."""
    return _edges(_modules())


def _edges(modules):
    edges = {}
    for module, path in modules.items():
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        targets = set()
        for is_from, imported, level, names in _imports(path):
            if not is_from:
                targets.update(name for name in names if name.split(".")[0] == "sched")
                continue
            if level:
                base = package.split(".")[:len(package.split(".")) - (level - 1)]
                source = ".".join(base + ([imported] if imported else []))
            elif imported and imported.split(".")[0] == "sched":
                source = imported
            else:
                continue
            for name in names:
                candidate = f"{source}.{name}"
                targets.add(candidate if candidate in modules else source)
        edges[module] = {t for t in targets if t in modules and t != module}
    return edges


#: Private names one module still imports from another, each with its reason (none may be added).
PRIVATE_IMPORTS_LEFT = set()


def private_imports(source) -> list[str]:
    """The names ``from X import _name`` takes from another module in ``source`` (a module's text, or
    its :func:`_imports`): a name with one leading underscore is its module's own (``__version__`` is
    not private)."""
    imports = _import_statements(ast.parse(source)) if isinstance(source, str) else source
    return [name for is_from, _, _, names in imports if is_from
            for name in names if name.startswith("_") and not name.startswith("__")]


def room(module: str) -> str:
    """The package (or top-level module) of ``sched`` that ``module`` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sched"


def allowed_rooms():
    """``{room: rooms it may import}``, from each package's ``MAY_IMPORT`` and :data:`TOP_LEVEL`."""
    rooms = dict(TOP_LEVEL)
    for name in sorted(os.listdir(SCHED)):
        init = os.path.join(SCHED, name, "__init__.py")
        if os.path.isfile(init):
            with open(init, encoding="utf-8") as handle:
                tree = ast.parse(handle.read(), init)
            value = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                          and any(getattr(t, "id", None) == "MAY_IMPORT" for t in node.targets)), None)
            rooms[name] = None if value is None else ast.literal_eval(value)
    return rooms


def cycles(edges):
    """The strongly connected components with more than one member (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
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

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


class ArchitectureTest(unittest.TestCase):
    def test_every_package_says_what_it_may_import(self):
        for name, may in allowed_rooms().items():
            with self.subTest(package=name):
                self.assertIsNotNone(may, f"sched/{name}/__init__.py has no MAY_IMPORT")

    def test_no_import_loop_between_modules(self):
        self.assertEqual(cycles(import_edges()), [])

    def test_no_import_loop_between_packages(self):
        rooms = {}
        for module, targets in import_edges().items():
            rooms.setdefault(room(module), set()).update(room(t) for t in targets if room(t) != room(module))
        self.assertEqual(cycles(rooms), [])

    def test_each_package_imports_only_what_it_may(self):
        rooms = allowed_rooms()
        for module, targets in sorted(import_edges().items()):
            may = rooms[room(module)]
            for target in sorted(targets):
                if room(target) in (room(module), "sched") or may == ("*",):
                    continue
                with self.subTest(module=module, imports=target):
                    self.assertIn(room(target), may, f"{module} imports {target}: package "
                                  f"{room(module)!r} may import only {may} (its __init__'s MAY_IMPORT)")

    def test_the_checker_sees_a_loop_and_a_forbidden_import(self):
        """The rules above can fail: a made-up loop and a made-up upward import are caught."""
        self.assertEqual(cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}), [["a", "b", "c"]])
        edges = import_edges()
        edges["sched.core.records"] = edges["sched.core.records"] | {"sched.lab.engine"}
        self.assertTrue(cycles(edges), "core -> lab -> core is a loop")
        self.assertNotIn("lab", allowed_rooms()["core"])

    def test_no_module_imports_another_modules_private_names(self):
        """What two modules share is a public name in one place (``import _x`` across modules is refused)."""
        found = set()
        for module, path in _modules().items():
            found.update((module, name) for name in private_imports(_imports(path)))
        self.assertEqual(found, PRIVATE_IMPORTS_LEFT)

    def test_the_private_import_checker_can_fail(self):
        """A made-up module: the private name is caught, a public one renamed private and a dunder are not."""
        text = "from .sweep import _mask, run_sweep\nfrom .a import fail as _fail\nfrom .. import __version__\n"
        self.assertEqual(private_imports(text), ["_mask"])
        lazy = ("def f(x):\n    try:\n        pass\n    except ValueError:\n        from .b import _in_except\n"
                "    match x:\n        case 1:\n            from .c import _in_case\n"
                "class K:\n    def g(self):\n        if self:\n            with open(0):\n"
                "                from . import _in_with\n        else:\n            import _not_from\n")
        self.assertEqual(private_imports(lazy), ["_in_except", "_in_case", "_in_with"])   # nested imports are seen

    def test_test_files_mirror_the_packages(self):
        """Every test file is named after the package it tests (``test_<package>_...``), or
        ``test_project_...`` for what spans the whole project (README, CI, this map)."""
        rooms = set(allowed_rooms()) - {"sched"} | {"project"}
        tests_dir = os.path.join(PROJECT, "tests")
        for name in sorted(os.listdir(tests_dir)):
            if name.startswith("test_") and name.endswith(".py"):
                with self.subTest(file=name):
                    stem = name[len("test_"):-len(".py")]
                    self.assertTrue(any(stem == room or stem.startswith(room + "_") for room in rooms),
                                    f"tests/{name}: name it test_<package>_... for one of {sorted(rooms)}")

    def test_the_chapter_name_the_course_imports_still_works(self):
        """``sched.serving_bench`` keeps the chapter's functions (serving-bench.md)."""
        from sched import serving_bench
        for name in ("select_next_batch", "simulate_serving_scheduler", "summarize_serving_scheduler_runs",
                     "compare_scheduler_to_baseline", "build_scheduler_trace_evidence",
                     "decide_scheduler_candidate"):
            self.assertTrue(callable(getattr(serving_bench, name)), name)


if __name__ == "__main__":
    unittest.main()
