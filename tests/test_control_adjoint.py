"""Continuous-time adjoints (diffrax) vs the discrete adjoint of the split scheme."""

import jax
import numpy as np
import pytest

from transflow.control import AttentionLinearControls, adjoint_gradients


@pytest.mark.slow  # six diffrax/scan gradient compilations (~25 s CPU)
def test_discrete_gradients_converge_to_diffrax_adjoints():
    theta = AttentionLinearControls.random(6, n_heads=2, key=jax.random.key(0))
    u0 = jax.random.normal(jax.random.key(1), (4, 6))
    target = jax.random.normal(jax.random.key(2), (4, 6))
    r = adjoint_gradients(theta, u0, target, refinements=(8, 16, 32, 64))
    # the two continuous adjoints agree to the solver tolerance (1e-10)
    assert r["backsolve_vs_recursive"] <= 1e-7
    # the discrete (Lie splitting) gradient converges at first order in Δt
    slope = np.polyfit(np.log(r["dt"]), np.log(r["errors"]), 1)[0]
    assert 0.9 <= slope <= 1.1, r
    assert r["errors"][-1] <= 0.02
