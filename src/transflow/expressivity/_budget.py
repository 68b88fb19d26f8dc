"""The time budget and the certification errors of the region counters (bottom module).

:func:`check_budget` reads the deadline that :func:`count_linear_regions` sets in
``_DEADLINE``; every counter calls it in its loops. This module imports no other module of
the package, so every counter can import it (the import graph of
``transflow.expressivity`` has no cycle, see ``tests/test_structure.py``).
"""

from __future__ import annotations

import contextvars
import time

__all__ = ["BudgetExceeded", "CertificationError", "check_budget"]


class CertificationError(RuntimeError):
    """A region count could not be certified (and ``strict=True``)."""


class BudgetExceeded(Exception):
    """The user's time budget of :func:`count_linear_regions` ran out (internal)."""


# the deadline (time.perf_counter()) of the running count_linear_regions call, if any
_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "transflow_region_deadline", default=None
)


def check_budget(where: str) -> None:
    """Raise :class:`BudgetExceeded` if the user's time budget has run out."""
    d = _DEADLINE.get()
    if d is not None and time.perf_counter() > d:
        raise BudgetExceeded(where)
