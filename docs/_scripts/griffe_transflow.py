"""Griffe extensions for transflow's API reference (``mkdocs.yml``: mkdocstrings
``extensions``). They change what griffe reads, never the sources.

- :class:`MappedPackages`: ``pyproject.toml`` maps ``transflow.experiments`` (and
  ``transflow.configs``) from top-level folders (setuptools ``package-dir``). Griffe reads
  a package from its folder only, so in the repository it would not find
  ``transflow.experiments`` inside ``src/transflow``; this extension loads each mapped
  folder as that subpackage.
- :class:`TransflowDocstrings`: ``Example:`` (singular, the house style) becomes
  ``Examples:``, so the ``>>>`` lines are rendered as code (griffe knows only the plural;
  the singular would be an admonition whose ``>>>`` lines Markdown reads as block quotes);
  Sphinx roles (``:class:`Grid```, ``:func:`~transflow.evolve```) become code spans; a
  reST literal-block marker ``::`` at the end of a line becomes ``:``.
"""

from __future__ import annotations

import pathlib
import re
import tomllib
from typing import Any

import griffe

REPO = pathlib.Path(__file__).resolve().parents[2]

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
_LITERAL = re.compile(r"(\S)::[ \t]*$", re.MULTILINE)


def adapt(text: str) -> str:
    """The docstring ``text`` as mkdocstrings should read it (see the module docstring)."""
    text = _EXAMPLE.sub(r"\1Examples:", text)
    text = _ROLE.sub(r"`\1`", text)
    return _LITERAL.sub(r"\1:", text)


class TransflowDocstrings(griffe.Extension):
    """Rewrite every docstring with :func:`adapt` as griffe loads the object."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = adapt(obj.docstring.value)


def mapped_packages(top: str) -> dict[str, pathlib.Path]:
    """``{dotted name: folder}`` for the subpackages of ``top`` that ``package-dir`` maps."""
    pyproject = REPO / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    package_dir = tomllib.loads(pyproject.read_text())["tool"]["setuptools"].get("package-dir", {})
    return {
        name: REPO / folder
        for name, folder in package_dir.items()
        if name.startswith(top + ".") and (REPO / folder / "__init__.py").is_file()
    }


class MappedPackages(griffe.Extension):
    """Load the ``package-dir``-mapped subpackages into the top package (see module doc)."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any):
        for name, folder in sorted(mapped_packages(pkg.path).items()):
            parent_path, _, short = name.rpartition(".")
            parent = loader.modules_collection.get_member(parent_path)
            if short in parent.members:
                continue  # an installed (non-editable) layout already has it
            # GriffeLoader has no public call that loads a folder under another name.
            module = loader._load_module(short, folder / "__init__.py", parent=parent)
            parent.set_member(short, module)
            loader.expand_exports(module)
