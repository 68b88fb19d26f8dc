"""The layout of the model zoo (issue 28): one home for the architectures.

- ``transflow.interop`` defines no ``equinox.Module`` subclass (it converts; the model
  classes live in ``transflow.models``) and its modules import each other without a cycle;
- ``transflow.models`` imports nothing from ``transflow.interop`` (its sources, and a fresh
  interpreter's ``sys.modules`` after importing it);
- docs/architectures.md lists every public model class of ``transflow.models`` with its
  module;
- the old import paths still give the same objects; the old private module paths warn
  when read from outside transflow.
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
    ("old", "name"),
    [
        ("transflow._model", "SplitTransformer"),
        ("transflow._decoder", "SplitDecoder"),
        ("transflow._causal", "CausalDecoder"),
        ("transflow._heads", "HeadModel"),
        ("transflow.vision._vit", "VisionTransformer"),
        ("transflow.vision._cvt", "CvtModel"),
        ("transflow.control._model", "FlowModel"),
        ("transflow._llama_ops", "RMSDecoder"),
    ],
)
def test_private_old_paths_resolve_and_warn(old, name):
    module = importlib.import_module(old)
    with pytest.warns(DeprecationWarning, match=f"{name} moved to `transflow.models"):
        value = getattr(module, name)
    assert value is getattr(transflow.models, name)


def test_private_old_path_from_import_warns():
    with pytest.warns(DeprecationWarning, match="transflow._model.SplitTransformer"):
        from transflow._model import SplitTransformer
    assert SplitTransformer is transflow.SplitTransformer
