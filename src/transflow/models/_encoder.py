"""A whole split-scheme transformer: stacked controls + scheme + Δt, as one eqx.Module."""

from __future__ import annotations

import equinox as eqx
import jax
from jaxtyping import Array, Bool, Float

from .._controls import LayerControls, NormParams, num_steps
from .._errors import as_input, check_finite, check_step, param_dtype
from .._evolve import evolve
from .._grid import Grid
from .._integrate import Adaptive, ConstantSteps, Remat, SaveAt
from ..schemes._base import AbstractScheme, check_masks
from ..schemes._lie import LieScheme

__all__ = ["SplitTransformer"]


class SplitTransformer(eqx.Module):
    """N_t steps of a splitting scheme with per-step controls: a Transformer stack.

    Calling the model maps one sequence ``u`` of shape ``(n_tokens, d_model)`` to the
    state at T = N_t Δt. Batch with ``jax.vmap(model)``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, SplitTransformer, stack_controls
        >>> theta = stack_controls([LayerControls.random(8, key=jax.random.key(i))
        ...                         for i in range(2)])
        >>> model = SplitTransformer(theta)
        >>> model(jnp.arange(32.0).reshape(4, 8)).shape
        (4, 8)
    """

    controls: LayerControls
    scheme: AbstractScheme = LieScheme()
    dt: float = eqx.field(static=True, default=1.0)
    final_norm: NormParams | None = None

    def __check_init__(self):
        check_step("dt", self.dt, "SplitTransformer")
        num_steps(self.controls)

    @property
    def num_layers(self) -> int:
        return num_steps(self.controls)

    @property
    def d_model(self) -> int:
        return self.controls.d_model

    def layer(self, i: int) -> LayerControls:
        n = self.num_layers
        if not -n <= i < n:
            raise IndexError(f"layer index {i} out of range for a model with {n} layers.")
        return jax.tree.map(lambda x: x[i], self.controls)

    def _check(self, u, grid):
        shape = (None if grid is None else grid.n_tokens, self.d_model)
        u = as_input("u", u, param_dtype(self.controls), ndim=2, shape=shape)
        return check_finite("u", u)

    def __call__(
        self,
        u: Float[Array, "n d"],
        *,
        grid: Grid | None = None,
        causal: bool = False,
        saveat: SaveAt | None = None,
        remat: Remat | None = None,
        stepsize_controller: ConstantSteps | Adaptive | None = None,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ):
        """Evolve one sequence; masks as in :func:`transflow.evolve`.

        ``key_padding_mask`` ``(n,)`` bool, True = padded (torch's polarity);
        ``attention_mask`` ``(n, n)``/``(1|H, n, n)``, bool True = may attend, or an
        additive float. Batch with ``jax.vmap(model)(u, key_padding_mask=pad)``.
        ``saveat``, ``remat``, ``stepsize_controller``: how it is computed, as in
        :func:`transflow.evolve` (e.g. ``stepsize_controller=ConstantSteps(unroll=1)``
        for a rolled layer loop).
        """
        u = self._check(u, grid)
        return evolve(
            u,
            self.controls,
            self.scheme,
            dt=self.dt,
            grid=grid,
            causal=causal,
            final_norm=self.final_norm,
            saveat=saveat,
            remat=remat,
            stepsize_controller=stepsize_controller,
            key_padding_mask=key_padding_mask,
            attention_mask=attention_mask,
        )

    def substeps(
        self,
        u: Float[Array, "n d"],
        layer: int = 0,
        *,
        grid: Grid | None = None,
        causal: bool = False,
        key_padding_mask: Bool[Array, " n"] | None = None,
        attention_mask: Bool[Array, "*h n n"] | Float[Array, "*h n n"] | None = None,
    ) -> dict[str, Float[Array, "n d"]]:
        """Every sub-step state of one step (layer) started from ``u``."""
        u = self._check(u, grid)
        heads = getattr(self.controls.attn, "n_heads", None)  # CvT: no masks
        masks = check_masks(self.scheme, u, heads, key_padding_mask, attention_mask)
        _, states = self.scheme.step(
            u, self.layer(layer), self.dt, grid=grid, causal=causal, return_substeps=True, **masks
        )
        return states
