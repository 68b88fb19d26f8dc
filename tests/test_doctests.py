"""The `Example:` sections of every docstring run as doctests (library and experiments).

One test per module that has docstring examples, found through the packages that
pyproject.toml declares (so `transflow.experiments`, mapped from `experiments/`, is
included). x64 is OFF while they run, as for a user who has not enabled it: an example
that needs float64 enables it itself (the previous setting is restored afterwards).
"""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import os
import pathlib
import pkgutil

import pytest

from _environ import restore_environ

ROOT = pathlib.Path(__file__).resolve().parents[1]
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _modules_with_examples() -> list[str]:
    """Every module below the declared packages whose source has a `>>>` line.

    Only packages are imported here (to walk them); modules are located, not imported.
    """
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    names: set[str] = set()
    for package_name in declared["packages"]:
        package = importlib.import_module(package_name)
        names.add(package_name)
        names.update(
            info.name for info in pkgutil.walk_packages(package.__path__, package_name + ".")
        )
    found = []
    for name in sorted(names):
        if name.endswith("__main__"):
            continue
        origin = importlib.util.find_spec(name).origin
        if origin and origin.endswith(".py") and ">>>" in pathlib.Path(origin).read_text():
            found.append(name)
    return found


MODULES = _modules_with_examples()

#: Modules whose examples train, solve adaptively or spawn processes: 20–75 s each on
#: 2 cores, so they run in the slow tier (``make test-slow``), like the other checks that
#: take that long.
SLOW_MODULES = {
    "transflow._solve",
    "transflow.control._at_depth",
    "transflow.control._adjoint",
    "transflow.control._memory",
    "transflow.schemes._stability",
    "transflow.schemes._analysis",
    "transflow.schemes._registry",
    "transflow._integrate",
}


def _param(name: str):
    if name in SLOW_MODULES:
        return pytest.param(
            name, marks=pytest.mark.slow(reason="its examples take 20-75 s on 2 cores")
        )
    return name


def test_modules_found():
    # The walk must see the library, its subpackages and the mapped experiments package.
    assert "transflow._grid" in MODULES
    assert any(m.startswith("transflow.continuous.") for m in MODULES)
    assert any(m.startswith("transflow.experiments.") for m in MODULES)


def test_slow_modules_exist():
    assert SLOW_MODULES <= set(MODULES), SLOW_MODULES - set(MODULES)


@pytest.mark.parametrize("module_name", [_param(m) for m in MODULES])
def test_docstring_examples(module_name, x64_off, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # an example that writes files writes them here
    module = importlib.import_module(module_name)
    tests = [t for t in doctest.DocTestFinder(exclude_empty=True).find(module) if t.examples]
    if not tests:
        pytest.skip(f"{module_name}: its `>>>` lines are not in a docstring of this module")
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    environ = dict(os.environ)
    try:
        for test in tests:
            runner.run(test, out=report.append)
    finally:  # whatever an example sets in the environment does not leak into other tests
        restore_environ(environ)
    result = runner.summarize(verbose=False)
    assert result.attempted > 0
    assert result.failed == 0, f"{result.failed} failing example(s) in {module_name}:\n" + "".join(
        report
    )
