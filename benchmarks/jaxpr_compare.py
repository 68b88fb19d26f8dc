"""Print, for every registered scheme, the jaxpr of one ``step`` and of the gradient of
``evolve`` (float64, d = 4, 3 tokens, 2 layers), so that the output at two commits can be
diffed (issue 47: the moves must not change them).

    python benchmarks/jaxpr_compare.py > new.txt
    python -c 'import sys; sys.path.insert(0, "OLD/src"); import runpy; \
        runpy.run_path("benchmarks/jaxpr_compare.py", run_name="__main__")' > old.txt
    diff old.txt new.txt
"""

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import transflow  # noqa: E402
from transflow import LayerControls, evolve, make_scheme, stack_controls  # noqa: E402


def main() -> None:
    print(f"# transflow from {transflow.__file__}")
    for name in transflow.SCHEME_NAMES:
        s = make_scheme(name)
        copies = s.ffn_copies
        layers = [
            LayerControls.random(
                4, n_heads=2, dtype=jnp.float64, ffn_copies=copies, key=jax.random.key(i)
            )
            for i in range(2)
        ]
        theta = stack_controls(layers)
        u = jax.random.normal(jax.random.key(9), (3, 4), jnp.float64)
        print(f"## {name} step")
        print(jax.make_jaxpr(lambda u, c, s=s: s.step(u, c, 0.1))(u, layers[0]))
        print(f"## {name} grad evolve")
        loss = lambda c, u, s=s: jnp.sum(evolve(u, c, s, dt=0.1) ** 2)  # noqa: E731
        print(jax.make_jaxpr(jax.grad(loss))(theta, u))


if __name__ == "__main__":
    main()
