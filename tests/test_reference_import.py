"""The reference suites skip only when the extra is absent, and fail when it is broken."""

import sys

import pytest

from _reference import installed, require


def test_absent_distribution_skips_with_the_reason():
    assert not installed("transflow-no-such-distribution")
    with pytest.raises(pytest.skip.Exception, match="not installed"):
        require("transflow_no_such_module", "needed here", dist="transflow-no-such-distribution")


def test_installed_but_broken_fails(monkeypatch, tmp_path):
    """pytest is installed (metadata); a module that raises on import must not be skipped."""
    (tmp_path / "broken_reference_mod.py").write_text("raise ImportError('ABI mismatch')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed("pytest")
    with pytest.raises(ImportError, match="ABI mismatch"):
        require("broken_reference_mod", "needed here", dist="pytest")
    sys.modules.pop("broken_reference_mod", None)


def test_installed_and_working_imports():
    assert require("pytest", "needed here") is pytest
