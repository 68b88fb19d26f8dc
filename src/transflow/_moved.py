"""The old private module paths of the model classes (before :mod:`transflow.models`).

``transflow._model``, ``transflow._decoder``, ``transflow._causal``, ``transflow._heads``,
``transflow.vision._vit``, ``transflow.vision._cvt`` and ``transflow.control._model`` are
found by a finder on ``sys.meta_path`` (:func:`install`) and loaded as thin modules
that resolve each name from its new home; ``transflow._llama_ops.RMSDecoder`` resolves
through :func:`moved`. Code
outside transflow that reads a name through an old path gets a ``DeprecationWarning``
naming the new path (this release only; the paths go in the next). Code inside transflow
does not warn, so a branch written against the old layout keeps working after a merge.
The public paths (``transflow.SplitTransformer``, ``transflow.vision.*``,
``transflow.control.FlowModel``, ``transflow.interop.TextEncoder``, …) are plain
re-exports and stay.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["OLD_PATHS", "install", "moved"]

#: old private module → the module of :mod:`transflow.models` that now holds its names.
OLD_PATHS: dict[str, str] = {
    "transflow._model": "transflow.models._encoder",
    "transflow._decoder": "transflow.models._decoder",
    "transflow._causal": "transflow.models._causal",
    "transflow._heads": "transflow.models._heads",
    "transflow.vision._vit": "transflow.models._vit",
    "transflow.vision._cvt": "transflow.models._cvt",
    "transflow.control._model": "transflow.models._flow",
}


def _warn_outside(old: str, name: str, new: str, depth: int) -> None:
    caller = sys._getframe(depth).f_globals.get("__name__", "")
    if caller == "transflow" or caller.startswith("transflow."):
        return
    warnings.warn(
        f"`{old}.{name}` is deprecated: {name} moved to `{new}`; import it from "
        "`transflow.models` (the old path goes in the next release).",
        DeprecationWarning,
        stacklevel=depth + 1,
    )


def moved(old: str, name: str):
    """``name`` of the old module ``old``, now in :mod:`transflow.models` (warns outside)."""
    models = importlib.import_module("transflow.models")
    value = getattr(models, name)
    # frames: moved ← the old module's __getattr__ ← the caller
    _warn_outside(old, name, value.__module__, 3)
    return value


def _module(old: str) -> types.ModuleType:
    """A module named ``old`` whose attributes are read from its new home (warns outside)."""
    new = OLD_PATHS[old]
    module = types.ModuleType(old, f"Deprecated path of {new} (see transflow.models).")

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(importlib.import_module(new), name)
        _warn_outside(old, name, new, 2)
        return value

    def __dir__():
        return dir(importlib.import_module(new))

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__dir__ = __dir__  # type: ignore[method-assign]
    return module


class _OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths (their files are gone) and loads each as :func:`_module`."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname in OLD_PATHS:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return _module(spec.name)

    def exec_module(self, module) -> None:
        return None


def install() -> None:
    """Put the finder of the old paths on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _OldPaths) for f in sys.meta_path):
        sys.meta_path.insert(0, _OldPaths())


install()
