"""Test configuration: float64 on (verification), strict dtype promotion, a `getkey` fixture.

float32 checks create float32 arrays explicitly; x64 only changes the default dtype.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
import json  # noqa: E402
import resource  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import pytest  # noqa: E402

from _tiers import MOVED_TO_SLOW  # noqa: E402

jax.config.update("jax_enable_x64", True)
# Strict dtype promotion: an implicit float32/float64 (or int/float) mix in library code is
# an error in the tests, not a silent upcast (issue #17).
jax.config.update("jax_numpy_dtype_promotion", "strict")


def _n_mappings() -> int:
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:  # not Linux
        return 0


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module once the process holds many
    memory mappings. Every compiled executable stays mapped until the caches are cleared;
    a pytest worker that runs half the fast tier passed 17 000 mappings within 4 minutes
    and one crashed (segmentation fault) where Linux's limit of 65 530 per process
    (``vm.max_map_count``) ran out, as `transflow-run` did before it released them
    between tasks."""
    yield
    if _n_mappings() > 20_000:
        from transflow.experiments.context import release_compiled

        release_compiled()


@pytest.fixture
def x64_off():
    """Examples run as a user runs them: x64 off and JAX's standard dtype promotion (the
    rest of the suite runs with strict promotion, see conftest.py)."""
    old = jax.config.jax_enable_x64, jax.config.jax_numpy_dtype_promotion
    jax.config.update("jax_enable_x64", False)
    jax.config.update("jax_numpy_dtype_promotion", "standard")
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", old[0])
        jax.config.update("jax_numpy_dtype_promotion", old[1])


@pytest.fixture
def getkey():
    """Return a function producing fresh PRNG keys (deterministic per test)."""
    state = {"key": jax.random.key(0)}

    def _getkey():
        state["key"], sub = jax.random.split(state["key"])
        return sub

    return _getkey


#: TRANSFLOW_TEST_CPU_LOG=path: append one JSON line per test (node id, CPU seconds of the
#: worker and of its child processes, wall seconds) to ``path.<worker>``. CPU time, unlike
#: the wall time of ``--durations``, does not grow with the load of a shared machine; it
#: is what decides which tests belong in the fast tier (docs/reliability.md).
_CPU_LOG = os.environ.get("TRANSFLOW_TEST_CPU_LOG")

if _CPU_LOG:

    def _cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        own, kids, wall = (
            _cpu(resource.RUSAGE_SELF),
            _cpu(resource.RUSAGE_CHILDREN),
            time.perf_counter(),
        )
        yield
        record = {
            "test": item.nodeid,
            "cpu": round(_cpu(resource.RUSAGE_SELF) - own, 3),
            "cpu_children": round(_cpu(resource.RUSAGE_CHILDREN) - kids, 3),
            "wall": round(time.perf_counter() - wall, 3),
        }
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{_CPU_LOG}.{worker}", "a") as f:
            f.write(json.dumps(record) + "\n")


@pytest.hookimpl(tryfirst=True)  # before -m/-k deselect: they see the marks added here
def pytest_collection_modifyitems(config, items):
    """Mark the tests of ``tests/_tiers.py`` slow (with their reason); on a collection of
    the whole suite, an id there that names no collected test is an error."""
    ids = {item.nodeid for item in items}
    for item in items:
        reason = MOVED_TO_SLOW.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.slow(reason=reason))
    whole = not config.args or [str(a).rstrip("/") for a in config.args] == ["tests"]
    if whole:
        stale = sorted(set(MOVED_TO_SLOW) - ids)
        if stale:
            raise pytest.UsageError(
                "tests/_tiers.py names tests that were not collected (renamed or removed?): "
                + ", ".join(stale)
            )
