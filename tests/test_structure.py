"""The layout of the model zoo (issue 28): one home for the architectures.

- ``transflow.interop`` defines no ``equinox.Module`` subclass (it converts; the model
  classes live in ``transflow.models``) and its modules import each other without a cycle;
- ``transflow.models`` imports nothing from ``transflow.interop`` (its sources, and a fresh
  interpreter's ``sys.modules`` after importing it);
- docs/architectures.md lists every public model class of ``transflow.models`` with its
  module;
- the public import paths give the same objects; the old private module paths are gone
  (CHANGELOG.md);
- the modules of ``src/transflow`` import each other without a cycle (issue 36): the
  import graph of module- and function-level imports has no strongly connected component;
- an import of a module is also an import of its parent packages' ``__init__`` (Python
  runs them first), except the packages the importer itself lies in (issue 47);
- the layers below ``evolve`` (the schemes, the control paths, the adaptive solve, the
  integrator) import nothing from which ``transflow._evolve`` can be reached (issue 47).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pathlib
import pkgutil
import re
import subprocess
import sys
import warnings

import equinox as eqx
import pytest

import transflow
import transflow.interop
import transflow.models

ROOT = pathlib.Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "transflow"


def _modules(package) -> list:
    names = [package.__name__]
    names += [f"{package.__name__}.{m.name}" for m in pkgutil.iter_modules(package.__path__)]
    return [importlib.import_module(n) for n in names]


def _defined_modules(module) -> list[type]:
    return [
        c
        for c in vars(module).values()
        if inspect.isclass(c) and issubclass(c, eqx.Module) and c.__module__ == module.__name__
    ]


def _model_classes() -> list[type]:
    found = []
    for module in _modules(transflow.models):
        found += [c for c in _defined_modules(module) if not c.__name__.startswith("_")]
    return found


def test_interop_defines_no_module_class():
    defined = [
        f"{c.__module__}.{c.__name__}"
        for m in _modules(transflow.interop)
        for c in _defined_modules(m)
    ]
    assert defined == [], f"model classes belong in transflow.models, not interop: {defined}"


def test_models_holds_the_architectures():
    names = {c.__name__ for c in _model_classes()}
    for name in (
        "SplitTransformer",
        "SplitDecoder",
        "SplitEncoderDecoder",
        "CausalDecoder",
        "RMSDecoder",
        "TextEncoder",
        "VisionTransformer",
        "CvtStageModel",
        "CvtModel",
        "HeadModel",
        "DenseHead",
        "FlowModel",
        "T5Encoder",
        "T5EncoderDecoder",
    ):
        assert name in names
        assert getattr(transflow.models, name).__module__.startswith("transflow.models.")


def _relative_imports(path: pathlib.Path, package: str) -> set[str]:
    """Absolute names of the modules ``path`` imports (at any depth of its code)."""
    out = set()
    parts = package.split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = parts[: len(parts) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            out.add(mod)
            out |= {f"{mod}.{a.name}" for a in node.names}
    return out


def test_models_sources_import_nothing_from_interop():
    for path in sorted((SRC / "models").glob("*.py")):
        bad = {m for m in _relative_imports(path, "transflow.models") if "interop" in m}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_models_loads_no_interop_module():
    code = (
        "import sys, transflow.models; "
        "print(sorted(m for m in sys.modules if m.startswith('transflow.interop')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_interop_modules_import_each_other_without_a_cycle():
    graph = {}
    for path in sorted((SRC / "interop").glob("*.py")):
        name = f"transflow.interop.{path.stem}" if path.stem != "__init__" else None
        if name is None:
            continue
        # only imports at module level make a cycle at import time
        tree = ast.parse(path.read_text())
        deps = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(f"transflow.interop.{node.module}")
                else:
                    deps |= {f"transflow.interop.{a.name}" for a in node.names}
        graph[name] = deps

    def visit(node, stack):
        assert node not in stack, f"import cycle: {' -> '.join([*stack, node])}"
        for dep in graph.get(node, ()):
            visit(dep, [*stack, node])

    for node in graph:
        visit(node, [])


def _page_rows() -> set[tuple[str, str]]:
    text = (ROOT / "docs" / "architectures.md").read_text()
    rows = set()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and re.fullmatch(r"`\w+`", cells[0]):
            rows.add((cells[0].strip("`"), cells[1].strip("`")))
    return rows


def test_architectures_page_lists_every_model_class_with_its_module():
    rows = _page_rows()
    missing = [
        f"{c.__name__} ({c.__module__})"
        for c in _model_classes()
        if (c.__name__, c.__module__) not in rows
    ]
    assert not missing, f"docs/architectures.md does not list {missing}"
    for name, module in rows:  # and every row names a real class of that module
        assert getattr(importlib.import_module(module), name).__module__ == module


def test_architectures_page_is_in_the_nav():
    assert "architectures.md" in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.parametrize(
    ("public", "name"),
    [
        ("transflow", "SplitTransformer"),
        ("transflow", "SplitDecoder"),
        ("transflow", "SplitEncoderDecoder"),
        ("transflow", "CausalScheme"),
        ("transflow.vision", "VisionTransformer"),
        ("transflow.vision", "CvtModel"),
        ("transflow.control", "FlowModel"),
        ("transflow.interop", "TextEncoder"),
        ("transflow.interop", "RMSDecoder"),
        ("transflow.interop", "CausalDecoder"),
        ("transflow.interop", "HeadModel"),
    ],
)
def test_public_old_paths_are_plain_reexports(public, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value = getattr(importlib.import_module(public), name)
    assert value is getattr(transflow.models, name)


@pytest.mark.parametrize(
    "old",
    [
        "transflow._model",
        "transflow._decoder",
        "transflow._causal",
        "transflow._heads",
        "transflow._moved",
        "transflow.vision._vit",
        "transflow.vision._cvt",
        "transflow.control._model",
    ],
)
def test_old_private_paths_are_gone(old):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)


def test_llama_ops_no_longer_resolves_rms_decoder():
    import transflow._llama_ops as ops

    with pytest.raises(AttributeError):
        ops.RMSDecoder  # noqa: B018


# --- the import graph of src/transflow (issue 36): no cycle between modules ----------------


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST):
    """Every import statement at any depth (module, class, function), and every
    ``importlib.import_module("literal")`` call, except under ``if TYPE_CHECKING:`` (never
    run). Yields ``(level, module, names)``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield 0, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            yield node.level, node.module, tuple(a.name for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield 0, node.args[0].value, ()
        stack.extend(ast.iter_child_nodes(node))


def _parents(name: str) -> list[str]:
    """The packages above module ``name``: ``a.b.c`` -> ``["a.b", "a"]``."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def import_graph(root: pathlib.Path = SRC, missing: list | None = None) -> dict[str, set[str]]:
    """``module -> {modules of the package it imports}`` from the sources' AST: module- and
    function-level imports, relative ones resolved; ``from P import m`` of a submodule
    ``m`` is an edge to ``P.m``, of a name defined in ``P`` an edge to ``P``. An import of
    ``P.m`` is also an edge to every package above it (``P``'s ``__init__`` runs first)
    that does not hold the importer too (its own packages are being imported already;
    so the top package, above every module, is an edge only where it is imported by
    name). Imports of a module of the package that has no file are appended to
    ``missing``."""
    files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for level, module, names in _imports(ast.parse(path.read_text())):
            if level:
                base = package.split(".")[: len(package.split(".")) - level + 1]
                target = ".".join(base + ([module] if module else []))
            else:
                target = module
            for n in names:
                if f"{target}.{n}" in files:
                    deps.add(f"{target}.{n}")
                elif target in files:
                    deps.add(target)
            if not names and target in files:
                deps.add(target)
            in_package = target == top or target.startswith(top + ".")
            if missing is not None and in_package and target not in files:
                missing.append(f"{name} imports {target}")
        deps.discard(name)
        above = {p for d in deps for p in _parents(d) if p in files}  # run on the way
        graph[name] = deps | (above - {name, *_parents(name)})
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(out)


def test_import_graph_sees_relative_function_level_and_import_module_imports(tmp_path):
    pkg = tmp_path / "transflow"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ._a import f\n")
    (pkg / "_a.py").write_text("def f():\n    from .sub import _b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .. import _c\n"
        "def g():\n    import importlib\n    return importlib.import_module('transflow._a')\n"
    )
    (pkg / "_c.py").write_text("from .sub._b import g\ndef h():\n    from ._gone import x\n")
    missing: list[str] = []
    graph = import_graph(pkg, missing=missing)
    assert missing == ["transflow._c imports transflow._gone"]
    assert graph["transflow"] == {"transflow._a"}
    assert graph["transflow._a"] == {"transflow.sub._b", "transflow.sub"}  # sub's __init__
    assert graph["transflow.sub._b"] == {"transflow._a"}  # not _c: TYPE_CHECKING only
    assert graph["transflow._c"] == {"transflow.sub._b", "transflow.sub"}
    assert import_cycles(graph) == [["transflow._a", "transflow.sub._b"]]


def test_import_graph_counts_the_parent_packages_of_an_import(tmp_path):
    """``from .low._x import f`` runs ``low/__init__`` first: an edge to ``transflow.low``.
    So a package ``__init__`` that re-exports from a module above the importer closes a
    cycle the submodule alone does not show. A module's own packages (being imported
    already) and the top package are no such edge."""
    pkg = tmp_path / "transflow"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from ._top import g\n")
    (pkg / "_top.py").write_text("from .low._x import f\ndef g():\n    return f\n")
    (pkg / "low" / "__init__.py").write_text("from .._top import g\nfrom ._x import f\n")
    (pkg / "low" / "_x.py").write_text("from ._y import h\nf = h\n")
    (pkg / "low" / "_y.py").write_text("import transflow._errors\nh = 1\n")
    (pkg / "_errors.py").write_text("")
    graph = import_graph(pkg)
    assert graph["transflow._top"] == {"transflow.low._x", "transflow.low"}
    assert graph["transflow.low._x"] == {"transflow.low._y"}  # not its own package
    assert graph["transflow.low._y"] == {"transflow._errors"}  # not the top package
    assert import_cycles(graph) == [["transflow._top", "transflow.low"]]


#: Known import cycles (none: the expressivity cycle of issue 36 was broken by moving the
#: shared helpers into bottom modules). Any cycle fails, and so does an entry here that is
#: no longer a cycle, so that it is removed.
KNOWN_CYCLES: list[list[str]] = []


def test_every_import_of_a_transflow_module_finds_its_file():
    """A moved module leaves no import of its old path (a function-level import fails only
    when the function runs)."""
    missing: list[str] = []
    import_graph(missing=missing)
    assert not missing, missing


def test_no_import_cycle_between_the_modules_of_transflow():
    cycles = import_cycles(import_graph())
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycles (module- or function-level imports):\n" + "\n".join(
        " <-> ".join(c) for c in new
    )
    gone = [c for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"no longer a cycle, remove it from KNOWN_CYCLES: {gone}"


def test_the_core_imports_no_layer_above_it():
    """The integrator imports no transflow module but the error helpers; the schemes and
    evolve import nothing of the models, the subpackages or the experiments."""
    graph = import_graph()
    assert graph["transflow._integrate"] <= {"transflow._errors"}, graph["transflow._integrate"]
    upper = ("transflow.models", "transflow.control", "transflow.analysis", "transflow.interop")
    core = [n for n in graph if n.startswith("transflow.schemes")]
    for name in ("transflow._integrate", "transflow._evolve", *core):
        bad = {m for m in graph[name] if m.startswith(upper)}
        assert not bad, f"{name} imports {sorted(bad)}"


#: The layers below ``evolve`` (issue 47): the schemes, the control paths, the adaptive
#: solve of a scheme's continuous limit and the integrator.
BELOW_EVOLVE = ("transflow.schemes", "transflow._paths", "transflow._solve", "transflow._integrate")


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, stack = set(), [start]
    while stack:
        for m in graph.get(stack.pop(), ()):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def test_the_layers_below_evolve_import_nothing_above_it():
    """No import, a package's ``__init__`` counted, runs from the schemes, the control
    paths, the adaptive solve or the integrator up into ``transflow._evolve`` or into any
    module from which it can be reached (``transflow.continuous``, which re-exports
    ``evolve_path``, included); evolve itself imports them."""
    graph = import_graph()
    top = "transflow._evolve"
    above = {top} | {m for m in graph if top in _reachable(graph, m)}
    low = [m for m in graph if m == "transflow.schemes" or m.startswith(BELOW_EVOLVE)]
    assert len(low) > 4 and {"transflow._paths", "transflow._solve"} <= set(low)
    bad = {m: sorted(graph[m] & above) for m in sorted(low) if graph[m] & above}
    assert not bad, f"imports from below evolve into it or above: {bad}"
    assert {"transflow._paths", "transflow._solve", "transflow._integrate"} <= graph[top]
    assert "transflow.continuous" in above  # the public face sits above evolve


def test_diffeqsolve_is_called_by_the_integrator_and_the_reference_only():
    """Options travel as objects to one integrator (issue 47): ``diffrax.diffeqsolve`` is
    called in ``transflow._integrate`` and in the independent diffrax reference
    ``transflow.continuous._reference``, nowhere else in the library."""
    callers = set()
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            func = getattr(node, "func", None) if isinstance(node, ast.Call) else None
            if getattr(func, "attr", getattr(func, "id", None)) == "diffeqsolve":
                callers.add(_module_name(path, SRC))
    assert callers == {"transflow._integrate", "transflow.continuous._reference"}, callers


# ----------------------------------------------------------------------------- experiments/
# Issue 48: the experiments layer is configuration wiring and reports; the library work
# lives in src/transflow. Its size and every task's ``run`` are measured here; the numbers
# below are the ones reached so far and may only fall (lower them when code moves out).
EXPERIMENTS = ROOT / "experiments"
#: Lines of experiments/**/*.py reached so far (issue 48's target: 6,000). Raised once,
#: from 8,579 to 8,680, by issue 50's depth-study options (adaptive split, local orders,
#: kink straddles, partial designs and their report table), merged after the cut; 8,208
#: after the review of 2026-12-07 (shared table, claim and option helpers).
EXPERIMENTS_LINES = 8208
#: The longest a task's ``run`` may be (issue 48).
RUN_MAX_LINES = 80
#: The length of every task's ``run`` reached so far (a new task: at most RUN_MAX_LINES).
RUN_LINES = {
    "analyze": 30, "clustering": 36, "convergence": 59, "depth": 72, "depth_adjoint": 22,
    "depth_memory": 23, "depth_text": 39, "equivalence": 77, "expressivity": 23,
    "grid_refinement": 22, "hf_equivalence": 42, "nonconvergence": 46, "schemes": 75,
    "sharded": 53, "train_digits": 3, "train_sequence": 5, "trained_regions": 41,
    "vit_equivalence": 41,
}  # fmt: skip


def _run_lengths() -> dict[str, int]:
    out = {}
    for path in sorted((EXPERIMENTS / "tasks").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name == "run":
                out[path.stem] = node.end_lineno - node.lineno + 1
    return out


def test_every_task_run_is_at_most_80_lines_and_none_grows():
    lengths = _run_lengths()
    assert lengths, "no task module with a `run` found under experiments/tasks"
    too_long = {t: n for t, n in lengths.items() if n > min(RUN_MAX_LINES, RUN_LINES.get(t, 80))}
    assert not too_long, (
        f"task `run` functions longer than allowed (≤ {RUN_MAX_LINES} lines, and no longer "
        f"than RUN_LINES records): {too_long}; move the work into named functions or the library"
    )


def test_the_experiments_layer_does_not_grow():
    total = sum(len(p.read_text().splitlines()) for p in EXPERIMENTS.rglob("*.py"))
    assert total <= EXPERIMENTS_LINES, (
        f"experiments/ holds {total} lines of Python, more than the {EXPERIMENTS_LINES} reached "
        "(issue 48): library work belongs in src/transflow with its own tests"
    )


def _task_module_names() -> set[str]:
    return {p.stem for p in (EXPERIMENTS / "tasks").glob("*.py") if p.stem != "__init__"}


def test_no_test_imports_a_task_private_name():
    """Tests use a task's public names only (``from ...tasks.X import _y`` or ``X._y`` after
    importing the task module X are refused)."""
    tasks = _task_module_names()
    found = []
    for path in sorted((ROOT / "tests").glob("*.py")):
        tree = ast.parse(path.read_text())
        aliases: set[str] = set()  # names bound to a task module in this file
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                mod = node.module.split(".")
                if "tasks" in mod and "experiments" in mod:
                    for a in node.names:
                        if mod[-1] == "tasks" and a.name in tasks:
                            aliases.add(a.asname or a.name)
                        elif mod[-1] in tasks and a.name.startswith("_"):
                            found.append(f"{path.name}:{node.lineno} imports {a.name}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    mod = a.name.split(".")
                    if "experiments" in mod and mod[-1] in tasks and a.asname:
                        aliases.add(a.asname)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
            ):
                found.append(f"{path.name}:{node.lineno} uses {node.value.id}.{node.attr}")
    assert not found, f"tests reach into task internals (use public names): {found}"
