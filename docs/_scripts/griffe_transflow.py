"""Griffe extensions for transflow's API reference (``mkdocs.yml``: mkdocstrings
``extensions``). They change what griffe reads, never the sources.

- :class:`MappedPackages`: ``pyproject.toml`` maps ``transflow.experiments`` (and
  ``transflow.configs``) from top-level folders (setuptools ``package-dir``). Griffe reads
  a package from its folder only, so in the repository it would not find
  ``transflow.experiments`` inside ``src/transflow``; this extension loads each mapped
  folder as that subpackage.
- :class:`TransflowDocstrings`: every docstring goes through ``gen_api.adapt`` (``Example:``
  sections rendered as code, Sphinx roles as code spans).
- :class:`EquinoxInit`: ``eqx.Module`` classes get the signature equinox generates.
"""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import griffe

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from gen_api import adapt  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[2]


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
    import tomllib

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


def _is_equinox_module(cls: griffe.Class, seen: set[str] | None = None) -> bool:
    seen = set() if seen is None else seen
    if cls.path in seen:
        return False
    seen.add(cls.path)
    for base in cls.bases:
        path = getattr(base, "canonical_path", str(base))
        if path in ("equinox.Module", "equinox._module.Module"):
            return True
    try:
        parents = cls.resolved_bases
    except Exception:  # an unresolvable base: not ours to document
        return False
    return any(_is_equinox_module(p, seen) for p in parents if isinstance(p, griffe.Class))


def _field_parameters(cls: griffe.Class) -> list[griffe.Parameter]:
    params = []
    for member in cls.members.values():
        if member.is_alias or not member.is_attribute or member.annotation is None:
            continue
        if "class-attribute" in member.labels and "instance-attribute" not in member.labels:
            continue  # ClassVar
        value = member.value
        default = value
        if isinstance(value, griffe.ExprCall) and str(value.function).endswith("field"):
            kwargs = {a.name: a.value for a in value.arguments if isinstance(a, griffe.ExprKeyword)}
            if kwargs.get("init") == "False":
                continue
            default = kwargs.get("default")
            if "default_factory" in kwargs:
                default = griffe.ExprCall(function=kwargs["default_factory"], arguments=[])
        params.append(
            griffe.Parameter(
                member.name,
                annotation=member.annotation,
                kind=griffe.ParameterKind.positional_or_keyword,
                default=default,
                docstring=member.docstring,
            )
        )
    return params


class EquinoxInit(griffe.Extension):
    """Give ``eqx.Module`` classes without an explicit ``__init__`` the dataclass signature
    equinox generates (their fields, in order, parents first), as griffe does for
    ``@dataclass``; otherwise the reference would show such a class with no signature."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        self._walk(pkg, set())

    def _walk(self, obj: griffe.Object, seen: set[str]) -> None:
        if obj.path in seen:
            return
        seen.add(obj.path)
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if member.is_module or member.is_class:
                self._walk(member, seen)
        if isinstance(obj, griffe.Class) and "__init__" not in obj.all_members:
            if not _is_equinox_module(obj):
                return
            params: list[griffe.Parameter] = []
            for parent in reversed(obj.mro()):
                params += _field_parameters(parent)
            params += _field_parameters(obj)
            unique = {p.name: p for p in params}
            self_param = griffe.Parameter("self", kind=griffe.ParameterKind.positional_or_keyword)
            init = griffe.Function(
                "__init__",
                lineno=0,
                endlineno=0,
                parent=obj,
                parameters=griffe.Parameters(self_param, *unique.values()),
                returns="None",
            )
            obj.set_member("__init__", init)
