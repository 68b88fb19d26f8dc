"""Import the optional reference packages (extra ``reference``: torch, transformers).

A test module that needs one calls :func:`require` at import time. If the distribution
is not installed at all (``importlib.metadata`` knows nothing of it) the module is
skipped with the reason; if it *is* installed but cannot be imported (a broken install,
an ABI mismatch) the import error propagates and the module FAILS to collect instead of
being skipped silently.
"""

from __future__ import annotations

import importlib
import importlib.metadata

import pytest


def installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


def require(module: str, reason: str, dist: str | None = None):
    """``module`` imported, or the calling test module skipped if ``dist`` is not installed."""
    if not installed(dist or module):
        pytest.skip(
            f"{reason} ({dist or module} is not installed: `pip install 'transflow[reference]'`)",
            allow_module_level=True,
        )
    return importlib.import_module(module)  # installed but broken: the error reaches pytest
