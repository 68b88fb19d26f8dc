"""Test configuration: float64 on (verification), strict dtype promotion, a `getkey` fixture.

float32 checks create float32 arrays explicitly; x64 only changes the default dtype.
"""

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", True)
# Strict dtype promotion: an implicit float32/float64 (or int/float) mix in library code is
# an error in the tests, not a silent upcast (issue #17).
jax.config.update("jax_numpy_dtype_promotion", "strict")


@pytest.fixture
def getkey():
    """Return a function producing fresh PRNG keys (deterministic per test)."""
    state = {"key": jax.random.key(0)}

    def _getkey():
        state["key"], sub = jax.random.split(state["key"])
        return sub

    return _getkey
