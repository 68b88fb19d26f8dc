"""The test suite's one way to put the process environment back (issue #40)."""

from __future__ import annotations

import os


def restore_environ(saved: dict[str, str]) -> int:
    """Put back the environment ``saved`` (a ``dict(os.environ)``), touching only the
    variables that differ; returns how many ``setenv``/``unsetenv`` calls that took.

    Issue #40: this harness used to run ``os.environ.clear(); os.environ.update(saved)``
    after every doctest module, that is one ``unsetenv`` and one ``setenv`` per variable
    (about a hundred each), in a process whose XLA worker threads call ``getenv`` (e.g.
    ``SLINKY_VERBOSE`` when a new executable runs; an example that ends in ``y.shape``
    leaves it running). glibc's ``setenv`` reallocates the ``environ`` array and frees
    the old one, and ``getenv`` in another thread does not lock (``man 3 setenv``: not
    thread-safe), so a reader can walk freed memory: every crashed worker died inside this
    test, at the end of a torch example (whose imports add ``TORCHINDUCTOR_CACHE_DIR``,
    which the old restore then removed and re-added with everything else). Restoring only
    what changed makes the usual case zero calls.
    """
    calls = 0
    for key in [k for k in os.environ if k not in saved]:
        del os.environ[key]
        calls += 1
    for key, value in saved.items():
        if os.environ.get(key) != value:
            os.environ[key] = value
            calls += 1
    return calls
