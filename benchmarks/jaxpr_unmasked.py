"""Print the jaxprs of the unmasked evolution (Lie, pre-LN, chunked, chunked gradient).

Masks cost nothing when absent if these programs are the same with and without the mask
code. Compare two checkouts::

    diff <(cd /tmp && /path/A/.venv/bin/python /path/B/benchmarks/jaxpr_unmasked.py) \\
         <(cd /tmp && /path/B/.venv/bin/python /path/B/benchmarks/jaxpr_unmasked.py)

(masks branch vs main before the merge: identical, 1205 lines).
"""

import jax
import jax.numpy as jnp

from transflow import LayerControls, LieScheme, PreNormScheme, evolve, stack_controls

theta = stack_controls(
    [LayerControls.random(16, n_heads=2, key=jax.random.key(i)) for i in range(2)]
)
u = jnp.ones((12, 16))
for scheme in (LieScheme(), PreNormScheme(), LieScheme(implementation="chunked")):
    print(jax.make_jaxpr(lambda u, s=scheme: evolve(u, theta, s, causal=True))(u))
chunked = LieScheme(implementation="chunked")
print(jax.make_jaxpr(jax.grad(lambda u: evolve(u, theta, chunked).sum()))(u))
