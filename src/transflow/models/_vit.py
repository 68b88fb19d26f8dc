"""The ViT front end and read-out: the initial condition f on a 2-D token grid.

Spec §4.2 [R]: pre- and post-processing of a Vision Transformer live *outside* the
evolution equation. An image of C channels and H × W pixels is cut into patches of
P_h × P_w pixels that index a 2-D discretization of Ω_x (row-major, :meth:`Grid.image`);
the initial condition is

    f(x, ·) = [x_class ; x_p^i E + b]_i + E_pos,

with the patch embedding E ∈ ℝ^{(C·P_h·P_w) × D} (a strided convolution in torch), an
optional learnable class token x_class (one extra node of Ω_x) and learnable position
embeddings E_pos ∈ ℝ^{(N+1) × D}. The read-out is the projection onto S1 of the class-token
row (the final LayerNorm) followed by a linear map and a pointwise activation (HF's
``ViTPooler``: dense + tanh), inside the loss ℓ of docs/spec/continuous-model.md §5.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._controls import NormParams
from .._errors import as_input, check_array, check_kind, check_number, check_values
from .._grid import Grid
from .._operators import activation_fn, project_s1
from ._encoder import SplitTransformer

__all__ = ["PatchEmbedding", "ClassTokenReadout", "VisionTransformer", "patchify"]


def _pair(v, name: str) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, tuple | list) else (v, v)
    if len(t) != 2 or not all(isinstance(s, int | np.integer) and s >= 1 for s in t):
        raise ValueError(f"`{name}` must be a positive int or a pair of them, got {v!r}.")
    return int(t[0]), int(t[1])


def patchify(
    image: Float[Array, "c h w"], patch_size: int | tuple[int, int]
) -> Float[Array, "n c*ph*pw"]:
    """Cut an image ``(C, H, W)`` into non-overlapping patches, one row per patch.

    Patches are ordered row-major over the patch grid (as ``Conv2d(..., stride=P)`` then
    ``flatten(2)``); the entries of a patch are ordered (channel, row, column), the
    layout of a torch ``Conv2d`` weight ``(D, C, P_h, P_w)`` flattened. Pixels that do not
    fill a whole patch (H or W not divisible by P) are dropped, as the convolution does.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow.vision import patchify
        >>> patchify(jnp.zeros((3, 8, 12)), 4).shape
        (6, 48)
    """
    check_array("image", image, ndim=3)
    ph, pw = _pair(patch_size, "patch_size")
    c, h, w = image.shape
    gh, gw = h // ph, w // pw
    if gh == 0 or gw == 0:
        raise ValueError(f"`image` of size {h}x{w} is smaller than one patch of {ph}x{pw} pixels.")
    x = image[:, : gh * ph, : gw * pw].reshape(c, gh, ph, gw, pw)
    return x.transpose(1, 3, 0, 2, 4).reshape(gh * gw, c * ph * pw)


class PatchEmbedding(eqx.Module):
    """The ViT embedding: image ``(C, H, W)`` → initial condition f on the token grid.

    ``f = [x_class ; patchify(image) @ kernel + bias] + pos_embedding``
    (docs/spec/continuous-model.md §4.2).

    Attributes:
        kernel: E, shape ``(C·P_h·P_w, D)``, rows in (channel, row, column) order.
        bias: ``(D,)``.
        cls_token: x_class, ``(D,)``, or ``None`` (no class token).
        pos_embedding: E_pos, ``(n_tokens, D)`` (``n_tokens = N + 1`` with a class token),
            or ``None``.
        image_size, patch_size: ``(H, W)`` and ``(P_h, P_w)`` (static).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow.vision import PatchEmbedding
        >>> emb = PatchEmbedding.random(3, 16, image_size=(8, 12), patch_size=4,
        ...                             key=jax.random.key(0))
        >>> emb.grid_shape, emb(jnp.ones((3, 8, 12))).shape
        ((2, 3), (7, 16))
    """

    kernel: Float[Array, "cpp d"]
    bias: Float[Array, " d"]
    cls_token: Float[Array, " d"] | None
    pos_embedding: Float[Array, "n d"] | None
    image_size: tuple[int, int] = eqx.field(static=True)
    patch_size: tuple[int, int] = eqx.field(static=True)

    def __check_init__(self):
        owner = "PatchEmbedding"
        for name in ("image_size", "patch_size"):
            pair = getattr(self, name)
            if not isinstance(pair, tuple | list) or len(pair) != 2:
                raise TypeError(
                    f"{owner}: `{name}` must be a pair (rows, columns), got {pair!r:.40}."
                )
            for side in pair:
                check_number(name, side, owner, lower=0, integer=True, example="(8, 8)")
        check_values("kernel", self.kernel, owner)
        check_values("bias", self.bias, owner)
        for name in ("cls_token", "pos_embedding"):
            if getattr(self, name) is not None:
                check_values(name, getattr(self, name), owner)
        ph, pw = self.patch_size
        h, w = self.image_size
        if h < ph or w < pw:
            raise ValueError(
                f"PatchEmbedding: `image_size` {self.image_size} is smaller than `patch_size` "
                f"{self.patch_size}."
            )
        if self.kernel.ndim != 2 or self.kernel.shape[0] % (ph * pw):
            raise ValueError(
                "PatchEmbedding: `kernel` must have shape (C*P_h*P_w, D) with P_h*P_w = "
                f"{ph * pw}, got {tuple(self.kernel.shape)}."
            )
        d = self.kernel.shape[1]
        if tuple(self.bias.shape) != (d,):
            raise ValueError(
                f"PatchEmbedding: `bias` must have shape ({d},), got {tuple(self.bias.shape)}."
            )
        if self.cls_token is not None and tuple(self.cls_token.shape) != (d,):
            raise ValueError(
                f"PatchEmbedding: `cls_token` must have shape ({d},), got "
                f"{tuple(self.cls_token.shape)}."
            )
        if self.pos_embedding is not None and tuple(self.pos_embedding.shape) != (self.n_tokens, d):
            raise ValueError(
                f"PatchEmbedding: `pos_embedding` must have shape (n_tokens, D) = "
                f"({self.n_tokens}, {d}), got {tuple(self.pos_embedding.shape)}."
            )

    @property
    def num_channels(self) -> int:
        return self.kernel.shape[0] // (self.patch_size[0] * self.patch_size[1])

    @property
    def d_model(self) -> int:
        return self.kernel.shape[1]

    @property
    def grid_shape(self) -> tuple[int, int]:
        """Patch grid (rows, columns) of Ω_x."""
        return (self.image_size[0] // self.patch_size[0], self.image_size[1] // self.patch_size[1])

    @property
    def n_prefix(self) -> int:
        """Number of tokens before the patch tokens (1 with a class token, else 0)."""
        return 0 if self.cls_token is None else 1

    @property
    def n_tokens(self) -> int:
        gh, gw = self.grid_shape
        return self.n_prefix + gh * gw

    def patch_grid(self, *, dtype=None) -> Grid:
        """The 2-D patch grid (``Grid.image``) without the class token."""
        return Grid.image(*self.grid_shape, self.d_model, dtype=dtype)

    def token_grid(self, *, dtype=None) -> Grid:
        """Ω_x = {x_class} ∪ patch grid, unit weights (the index grid of the encoder).

        The class-token node is placed at (−1, −1), off the patch lattice; only the
        quadrature weights (all 1) enter the operators.
        """
        g = self.patch_grid(dtype=dtype)
        if self.cls_token is None:
            return g
        nodes = jnp.concatenate([jnp.full((1, 2), -1, g.x_nodes.dtype), g.x_nodes])
        return Grid(nodes, jnp.ones(self.n_tokens, g.x_weights.dtype), g.y_nodes, g.y_weights)

    def __call__(self, image: Float[Array, "c h w"]) -> Float[Array, "n d"]:
        """The initial condition f, shape ``(n_tokens, D)``."""
        c = self.num_channels
        image = as_input("image", image, self.kernel.dtype, ndim=3, shape=(c, *self.image_size))
        u = patchify(image.astype(self.kernel.dtype), self.patch_size) @ self.kernel + self.bias
        if self.cls_token is not None:
            u = jnp.concatenate([self.cls_token[None], u], axis=0)
        if self.pos_embedding is not None:
            u = u + self.pos_embedding
        return u

    @classmethod
    def random(
        cls,
        num_channels: int,
        d: int,
        *,
        image_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        cls_token: bool = True,
        pos_embedding: bool = True,
        dtype=None,
        key: PRNGKeyArray,
    ) -> PatchEmbedding:
        """Random embedding with entries ~ N(0, 1/(C·P_h·P_w)) and N(0, 1) tokens."""
        dtype = dtype or jnp.result_type(float)
        image_size = _pair(image_size, "image_size")
        patch_size = _pair(patch_size, "patch_size")
        fan_in = num_channels * patch_size[0] * patch_size[1]
        k1, k2, k3, k4 = jax.random.split(key, 4)
        n = (image_size[0] // patch_size[0]) * (image_size[1] // patch_size[1]) + int(cls_token)
        return cls(
            fan_in**-0.5 * jax.random.normal(k1, (fan_in, d), dtype),
            0.1 * jax.random.normal(k2, (d,), dtype),
            jax.random.normal(k3, (d,), dtype) if cls_token else None,
            jax.random.normal(k4, (n, d), dtype) if pos_embedding else None,
            image_size,
            patch_size,
        )


class ClassTokenReadout(eqx.Module):
    """Read-out of the class token: ``act(P_S1(u(x_class, ·)) W + b)``
    (docs/spec/continuous-model.md §4.2).

    ``norm=None`` skips the projection (when the encoder already ends with it, as HF's
    ``ViTModel`` does: its pooler acts on the normalized ``last_hidden_state``).
    ``weight=None`` returns the (normalized) class-token row itself.

    Example:
        >>> import jax.numpy as jnp
        >>> from transflow import NormParams
        >>> from transflow.vision import ClassTokenReadout
        >>> r = ClassTokenReadout(NormParams.scalar(), jnp.eye(4), jnp.zeros(4), "tanh")
        >>> r(jnp.arange(12.0).reshape(3, 4)).shape
        (4,)
    """

    norm: NormParams | None
    weight: Float[Array, "d p"] | None
    bias: Float[Array, " p"] | None
    activation: str = eqx.field(static=True, default="identity")
    token_index: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        owner = "ClassTokenReadout"
        if self.norm is not None:
            check_kind("norm", self.norm, NormParams, owner, "or None")
        if self.weight is not None:
            w = check_values("weight", self.weight, owner, ndim=2)
            if self.bias is not None:
                check_values("bias", self.bias, owner, shape=(w.shape[1],))
        check_number("token_index", self.token_index, owner, lower=0, strict=False, integer=True)
        activation_fn(self.activation)  # validates the name

    def __call__(self, u: Float[Array, "n d"]) -> Float[Array, " p"]:
        u = as_input("u", u, ndim=2)
        row = u[self.token_index][None]
        if self.norm is not None:
            row = project_s1(row, self.norm.bias, self.norm.gain, eps=self.norm.eps)
        if self.weight is not None:
            row = row @ self.weight
            if self.bias is not None:
                row = row + self.bias
        act = activation_fn(self.activation)
        return act(row)[0]


class VisionTransformer(eqx.Module):
    """ViT = embedding f(image) → evolution (:class:`SplitTransformer`) → read-out.

    ``model(image)`` returns the final state (HF's ``last_hidden_state``, including the
    encoder's final projection), ``model.pooled(image)`` the class-token read-out and
    ``model.initial_condition(image)`` the initial condition f. One image ``(C, H, W)``;
    batch with ``jax.vmap``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from transflow import LayerControls, PreNormScheme, SplitTransformer
        >>> from transflow import stack_controls
        >>> from transflow.vision import PatchEmbedding, VisionTransformer
        >>> emb = PatchEmbedding.random(3, 8, image_size=8, patch_size=4,
        ...                             key=jax.random.key(0))
        >>> enc = SplitTransformer(stack_controls([LayerControls.random(
        ...     8, n_heads=2, d_ff=16, activation="gelu", key=jax.random.key(1))]),
        ...     PreNormScheme())
        >>> VisionTransformer(emb, enc, None)(jnp.ones((3, 8, 8))).shape
        (5, 8)
    """

    embedding: PatchEmbedding
    encoder: SplitTransformer
    readout: ClassTokenReadout | None = None

    def __check_init__(self):
        owner = "VisionTransformer"
        check_kind("embedding", self.embedding, PatchEmbedding, owner)
        check_kind("encoder", self.encoder, SplitTransformer, owner)
        if self.readout is not None:
            check_kind("readout", self.readout, ClassTokenReadout, owner, "or None")
        if self.embedding.d_model != self.encoder.d_model:
            raise ValueError(
                f"VisionTransformer: the embedding width D={self.embedding.d_model} differs "
                f"from the encoder's d_model={self.encoder.d_model}."
            )

    def initial_condition(self, image: Float[Array, "c h w"]) -> Float[Array, "n d"]:
        return self.embedding(image)

    def __call__(self, image: Float[Array, "c h w"], **kwargs) -> Float[Array, "n d"]:
        return self.encoder(self.embedding(image), **kwargs)

    def pooled(self, image: Float[Array, "c h w"]) -> Float[Array, " p"]:
        if self.readout is None:
            raise ValueError("this VisionTransformer has no `readout` (HF: add_pooling_layer).")
        return self.readout(self(image))
