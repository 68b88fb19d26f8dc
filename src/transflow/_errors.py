"""Input checks shared by the public API.

Every check raises with the argument's name, what was expected, what was got, and how to
fix it. Static checks (rank, shape, dtype) run in Python, before any compilation; the
value check for non-finite entries uses :func:`equinox.error_if` so that it survives
``jax.jit`` and ``jax.vmap``.

The input policy (:func:`as_input`, used at the top of every public entry point):

- **torch tensors** are accepted and converted (``tensor.detach().cpu().numpy()``); no
  gradient flows back into torch. bfloat16 tensors have no NumPy form and are rejected.
- **float dtypes**: the model's dtype (its parameters) decides. A *narrower* input
  (float16 → float32, float32 → float64) is cast up, which is exact. A *wider* input
  (float64 → float32 model) is rejected: a float32 model must not silently return
  float64, and a silent cast down would lose digits. The message names the argument,
  both dtypes and the two fixes (cast the input, or convert the model).
- **integer/bool arrays** where features are expected are rejected (cast them first).
- **empty token sets** (zero tokens) are rejected naming the argument.

Traced values and the first line of the error. A value traced by the caller's
``jax.jit``/``eqx.filter_jit`` is unknown when the check is traced, so the check is a
run-time :func:`equinox.error_if`, and the error is raised at the caller's jit boundary,
where no transflow frame is on the stack. Its first line is then not ours: under
``eqx.filter_jit`` it is equinox's fixed header ("Above is the stack outside of JIT. Below
is the stack inside of JIT:", ``_on_error_msg`` in ``equinox/_jit.py``) followed by the
trace-time stack and "equinox.EquinoxRuntimeError: <our message>"; under ``jax.jit`` it
is XLA's "INTERNAL: CpuCallback error calling callback: Traceback ..." followed by
"_EquinoxRuntimeError: <our message>". XLA hands only the text of the callback's
exception back to the host (no ``__cause__``, jax-ml/jax#26102), and ``EQX_ON_ERROR``
only chooses raise/nan/breakpoint/off, so no public API lets the first line be ours. Our
message still starts with the argument's name: it is the first line after the header
(docs/reliability.md gives the measured line numbers; tests/test_public_inputs.py checks
it). Without ``jit`` every check raises a one-line error before any compilation.

Cost. Static checks (rank, shape, dtype, Python-number options) are free at trace time
and may sit in operators. The NaN/Inf check of a concrete array is one reduction and one
host transfer; it runs at the public entry points only, never inside a scan body (the
operators of a step loop check shapes and dtypes only).
"""

from __future__ import annotations

import sys
import typing
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np


class CheckpointError(ValueError):
    """A checkpoint cannot be read: the file is empty, truncated or corrupted, a tensor has
    the wrong dtype, the weights do not fit the configuration, or the file is not a
    checkpoint of the expected kind. The message names the path and the cause.

    One type for every reader of stored models: :func:`transflow.interop.load_hf`
    (HuggingFace ``save_pretrained`` directories), :func:`transflow.interop.load_torch_checkpoint`
    (torch ``.pt`` files) and the training checkpoints of :mod:`transflow.control`. A
    subclass of ``ValueError``.
    """


def check_array(
    name: str,
    x: Any,
    *,
    ndim: int | None = None,
    shape: tuple[int | None, ...] | None = None,
    floating: bool = True,
) -> None:
    """Raise a clear error if ``x`` is not an array of the expected rank/shape/dtype."""
    if not is_array(x):
        raise TypeError(
            f"`{name}` must be an array (jax.Array or numpy.ndarray); got {type(x).__name__}. "
            "Convert it with `jnp.asarray(...)`."
        )
    if ndim is not None and len(x.shape) != ndim:
        hint = ""
        if ndim == 2 and len(x.shape) == 3:
            hint = " transflow acts on one sequence; batch with `jax.vmap(model)(u)`."
        raise ValueError(
            f"`{name}` must have rank {ndim}, got shape {tuple(x.shape)} "
            f"(rank {len(x.shape)}).{hint}"
        )
    if shape is not None:
        for axis, (want, got) in enumerate(zip(shape, x.shape)):
            if want is not None and want != got:
                raise ValueError(
                    f"`{name}` has shape {tuple(x.shape)}; expected size {want} on axis {axis} "
                    f"(expected shape {tuple('*' if s is None else s for s in shape)})."
                )
    if floating and not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"`{name}` must have a floating dtype (float32 or float64), got {x.dtype}. "
            f"Cast it first, e.g. `{name}.astype(jnp.float32)`."
        )


def is_array(x: Any) -> bool:
    """True for the array types the public API takes: ``jax.Array`` (tracers included),
    ``numpy.ndarray`` and NumPy scalars (``np.float32(1.0)``)."""
    return isinstance(x, jax.Array | np.ndarray | np.generic)


def _is_torch_tensor(x: Any) -> bool:
    """True for a ``torch.Tensor`` (torch is not imported here: a tensor exists only once
    the caller has imported torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _from_torch(name: str, x: Any):
    try:
        return x.detach().cpu().numpy()
    except (TypeError, RuntimeError):  # e.g. bfloat16 has no NumPy dtype
        raise TypeError(
            f"`{name}` is a torch tensor of dtype {x.dtype} that has no NumPy form; convert "
            f"it first, e.g. `jnp.asarray({name}.detach().cpu().float().numpy())`."
        ) from None


def param_dtype(tree: Any) -> np.dtype | None:
    """The floating dtype of a model's parameters (the widest one), or ``None``."""
    best = None
    for leaf in jax.tree.leaves(tree):
        dt = getattr(leaf, "dtype", None)
        if dt is None or not jnp.issubdtype(dt, jnp.floating):
            continue
        if best is None or np.dtype(dt).itemsize > best.itemsize:
            best = np.dtype(dt)
    return best


def as_input(
    name: str,
    x: Any,
    dtype: Any = None,
    *,
    ndim: int | None = None,
    shape: tuple[int | None, ...] | None = None,
    floating: bool = True,
    nonempty: tuple[int, ...] = (0,),
    what: str = "the model",
):
    """Apply the input policy of the module docstring and return the array to use.

    Args:
        name: the argument's name, as the user wrote it.
        x: the value passed.
        dtype: the model's dtype (e.g. :func:`param_dtype` of its parameters); ``None``
            keeps the input's float dtype.
        ndim, shape, floating: as :func:`check_array`.
        nonempty: axes that must not have size 0 (default: the token axis 0).
        what: how the model is named in the dtype message.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> from transflow._errors import as_input
        >>> as_input("u", np.ones((2, 3), np.float16), jnp.float32).dtype  # cast up
        dtype('float32')
    """
    if _is_torch_tensor(x):
        x = _from_torch(name, x)
    check_array(name, x, ndim=ndim, shape=shape, floating=floating)
    for axis in nonempty:
        if axis < len(x.shape) and x.shape[axis] == 0:
            raise ValueError(
                f"`{name}` is empty: shape {tuple(x.shape)} has size 0 on axis {axis}"
                + (" (no tokens)" if axis == max(len(x.shape) - 2, 0) else "")
                + "; pass at least one entry there."
            )
    if dtype is None or not floating:
        return x
    want, got = np.dtype(dtype), np.dtype(x.dtype)
    if got == want:
        return x
    if got.itemsize < want.itemsize:
        return jnp.asarray(x, want)  # exact: every narrower float is representable
    if not jax.config.jax_enable_x64 and not isinstance(x, jax.Array):
        # Without x64 JAX has no float64: a NumPy/Python float64 input becomes float32 on
        # conversion whatever transflow does (the default dtype of `np.array([0.5])`).
        return jnp.asarray(x, want)
    raise TypeError(
        f"`{name}` has dtype {got} but {what} computes in {want}; transflow does not cast "
        f"down silently (it would lose digits, and a {want} model must not return {got}). "
        f"Cast the input, `{name}.astype(jnp.{want})`, or build the model in {got} (e.g. "
        "`from_torch(module.double())` or `LayerControls.random(..., dtype=...)`)."
    )


def _is_traced(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def check_step(name: str, value: Any, owner: str):
    """Return ``value``, raising unless it is a finite number > 0 (a time step such as
    ``dt``).

    One rule for every entry point that takes a step (:func:`transflow.evolve`,
    :class:`transflow.SplitTransformer`, :func:`transflow.parallel.shard_evolve`, ...): a
    Python number or a concrete array is checked here, in one line; a traced value (under
    ``jax.jit``/``grad``) gets a runtime check (:func:`equinox.error_if`) with the same
    message, so use the returned value.

    Example:
        >>> from transflow._errors import check_step
        >>> check_step("dt", 0.5, "SplitTransformer")
        0.5
        >>> check_step("dt", 0.0, "SplitTransformer")
        Traceback (most recent call last):
        ...
        ValueError: SplitTransformer: `dt` must be a finite number > 0 (the time step), got 0.0; ...
    """
    msg = (
        f"{owner}: `{name}` must be a finite number > 0 (the time step), got {{got}}; "
        f"pass e.g. {name}=1.0 (the step of one layer; T = N_t * {name})."
    )
    if _is_traced(value):
        if np.ndim(value) != 0 or not jnp.issubdtype(value.dtype, jnp.floating):
            got = f"a traced {value.dtype} array of shape {tuple(value.shape)}"
            raise TypeError(msg.format(got=got))
        bad = ~(jnp.isfinite(value) & (value > 0))
        return eqx.error_if(value, bad, msg.format(got="a value outside (0, inf) (traced)"))
    v = None
    if not isinstance(value, bool | np.bool_ | str | bytes) and np.ndim(value) == 0:
        try:
            v = float(value)
        except (TypeError, ValueError):
            v = None
    if v is None:
        raise TypeError(
            f"{owner}: `{name}` must be a finite number > 0 (the time step), got "
            f"{type(value).__name__} {value!r}; pass e.g. {name}=1.0."
        )
    if not (np.isfinite(v) and v > 0):
        raise ValueError(msg.format(got=repr(value)))
    return value


def check_finite(name: str, x):
    """Return ``x``, raising if it holds NaN or Inf, with one line naming ``name``.

    A NumPy array or a concrete ``jax.Array`` is checked at once (one reduction and one
    transfer of a bool to the host): the error is a one-line ``ValueError`` whose first
    line names the argument. A traced value (inside ``jax.jit``, ``vmap`` or ``grad``)
    gets a runtime check, :func:`equinox.error_if`, whose message starts with the same
    words (JAX and equinox print their own header above it).
    """
    if isinstance(x, np.ndarray):
        bad = ~np.isfinite(x)
    else:
        bad = ~jnp.isfinite(x)
    n_bad = jnp.sum(bad) if _is_traced(bad) else int(np.sum(bad))
    if _is_traced(n_bad):  # under jit/vmap/grad, or a constant inside a jit trace
        return eqx.error_if(
            x,
            n_bad > 0,
            f"`{name}` contains NaN or Inf; expected finite values. Check how `{name}` "
            "was computed (e.g. `jnp.isfinite(...).all()` before the call).",
        )
    if n_bad:
        raise ValueError(
            f"`{name}` contains NaN or Inf ({n_bad} of {int(np.size(x))} entries); expected "
            f"finite values. Check how `{name}` was computed (e.g. `jnp.isfinite(...).all()`)."
        )
    return x


def check_number(
    name: str,
    value: Any,
    owner: str | None = None,
    *,
    lower: float | None = None,
    upper: float | None = None,
    strict: bool = True,
    integer: bool = False,
    example: str = "",
    traced_ok: bool = False,
) -> None:
    """Raise unless ``value`` is a finite real (an integer with ``integer=True``) inside
    the bounds (``lower < value`` with ``strict``, else ``lower <= value``; the same for
    ``upper``).

    Example:
        >>> from transflow._errors import check_number
        >>> check_number("n_tokens", 4, "Grid.index", lower=0, integer=True)
        >>> check_number("n_tokens", 0, "Grid.index", lower=0, integer=True)
        Traceback (most recent call last):
        ...
        ValueError: Grid.index: `n_tokens` must be an integer > 0, got 0.
    """
    if traced_ok and _is_traced(value):
        return  # an operator inside a traced loop: the public entry point checked it
    where = f"{owner}: " if owner else ""
    kind = "an integer" if integer else "a finite number"
    bounds = []
    if lower is not None:
        bounds.append(f"{'>' if strict else '>='} {lower}")
    if upper is not None:
        bounds.append(f"{'<' if strict else '<='} {upper}")
    want = kind + (" " + " and ".join(bounds) if bounds else "")
    fix = f"; pass e.g. {name}={example}" if example else ""
    ok_type = not isinstance(value, bool | np.bool_ | str | bytes) and np.ndim(value) == 0
    if ok_type and integer:
        ok_type = isinstance(value, int | np.integer)
    if not ok_type or _is_traced(value):
        got = f"{type(value).__name__} {value!r}"
        raise TypeError(f"{where}`{name}` must be {want}, got {got}{fix}.")
    v = float(value)
    ok = bool(np.isfinite(v))
    if lower is not None:
        ok = ok and (v > lower if strict else v >= lower)
    if upper is not None:
        ok = ok and (v < upper if strict else v <= upper)
    if not ok:
        raise ValueError(f"{where}`{name}` must be {want}, got {value!r}{fix}.")


def check_domain(name: str, domain: Any, owner: str | None = None) -> tuple[float, float]:
    """Return ``(a, b)`` as floats, raising unless ``domain`` is a pair of finite numbers
    with ``a < b`` (an interval such as a grid's Ω_x).

    Example:
        >>> from transflow._errors import check_domain
        >>> check_domain("x_domain", (0, 1))
        (0.0, 1.0)
    """
    where = f"{owner}: " if owner else ""
    want = f"{where}`{name}` must be an interval (a, b) of finite numbers with a < b"
    try:
        a, b = domain
        a, b = float(a), float(b)
    except (TypeError, ValueError):
        raise TypeError(f"{want}, got {domain!r}; pass e.g. {name}=(0.0, 1.0).") from None
    if not (np.isfinite(a) and np.isfinite(b) and a < b):
        raise ValueError(f"{want}, got {domain!r}; pass e.g. {name}=(0.0, 1.0).")
    return a, b


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> None:
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}, got {value!r}.")


def check_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = value >= 0 if allow_zero else value > 0
    if not (isinstance(value, int | float) and ok and np.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"`{name}` must be a finite number {bound}, got {value!r}.")


def check_temperature(owner: str, temperature: Any) -> None:
    """Raise unless ``temperature`` (the scale λ of the attention scores) is a finite
    number >= 0 (λ = 0: uniform weights). A traced λ passes (checked where it enters)."""
    check_number(
        "temperature", temperature, owner, lower=0, strict=False, example="1.0", traced_ok=True
    )


def check_times(t0: Any, t1: Any, owner: str, names: tuple[str, str] = ("t0", "t1")) -> None:
    """Raise unless ``t0 < t1`` are finite numbers (a time interval). Traced times pass
    (under ``jit`` the interval is the caller's, checked where it was made)."""
    for name, t in zip(names, (t0, t1)):
        check_number(name, t, owner, example="0.0" if name == names[0] else "1.0", traced_ok=True)
    if not (_is_traced(t0) or _is_traced(t1)) and not float(t0) < float(t1):
        raise ValueError(
            f"{owner}: `{names[1]}` must be > `{names[0]}` = {t0!r} (the end of the interval), "
            f"got {t1!r}."
        )


def check_sizes(owner: str, **sizes: Any) -> None:
    """Raise unless every keyword is an integer >= 1 (``None`` passes: an optional size).
    The first bad one is named, e.g. ``check_sizes("make_vit", d=d, n_steps=n_steps)``."""
    for name, size in sizes.items():
        if size is not None:
            check_number(name, size, owner, lower=0, integer=True, example="8")


def check_callable(name: str, value: Any, owner: str | None = None, example: str = "") -> None:
    """Raise unless ``value`` is callable (a vector field, a projection, ...)."""
    if not callable(value):
        where = f"{owner}: " if owner else ""
        fix = f"; pass e.g. {example}" if example else ""
        raise TypeError(
            f"{where}`{name}` must be a function, got {type(value).__name__} {value!r:.40}{fix}."
        )


def check_flag(name: str, value: Any, owner: str | None = None) -> None:
    """Raise unless ``value`` is a Python or NumPy bool (a switch such as ``hardmax``)."""
    if not isinstance(value, bool | np.bool_):
        where = f"{owner}: " if owner else ""
        raise TypeError(
            f"{where}`{name}` must be True or False, got {type(value).__name__} {value!r}."
        )


def check_kind(name: str, value: Any, kind: type, owner: str | None = None, hint: str = "") -> None:
    """Raise unless ``value`` is a ``kind`` (an abstract capability class or a record type,
    e.g. :class:`transflow.AbstractScheme`): one line naming the argument, the kind
    expected and the type got."""
    if not isinstance(value, kind):
        where = f"{owner}: " if owner else ""
        fix = f"; {hint}" if hint else ""
        want = " or ".join(t.__name__ for t in (typing.get_args(kind) or (kind,)))
        raise TypeError(
            f"{where}`{name}` must be a {want}, got {type(value).__name__} {value!r:.60}{fix}."
        )


def check_values(
    name: str,
    x: Any,
    owner: str | None = None,
    *,
    ndim: int | tuple[int, ...] | None = None,
    shape: tuple[int | None, ...] | None = None,
    square: bool = False,
    finite: bool = True,
):
    """Return ``x`` as an array after the checks of an array argument, each failure one
    line naming ``name``: an array (or a number, or a nested list of numbers) of a
    floating dtype, the rank ``ndim`` (an int or the allowed ranks), the ``shape``
    (``None`` = any size on that axis), a square matrix with ``square``, and no NaN or
    Inf with ``finite`` (:func:`check_finite`: one reduction, a runtime check when
    traced). For analysis functions and constructors, not for the operators of a step
    loop (those check only shapes and dtypes, which are free at trace time)."""
    where = f"{owner}: " if owner else ""
    if _is_torch_tensor(x):
        x = _from_torch(name, x)
    if not is_array(x):
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError):
            arr = None
        if arr is None or arr.dtype == object or arr.dtype.kind not in "biuf":
            raise TypeError(
                f"{where}`{name}` must be an array of numbers, got {type(x).__name__} "
                f"{x!r:.60}; pass e.g. `jnp.asarray(...)`."
            )
        x = arr.astype(np.result_type(float)) if arr.dtype.kind in "biu" else arr
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise TypeError(
            f"{where}`{name}` must have a floating dtype (float32 or float64), got "
            f"{x.dtype}; cast it first, e.g. `{name}.astype(jnp.float32)`."
        )
    ranks = (ndim,) if isinstance(ndim, int) else ndim
    if ranks is not None and x.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(
            f"{where}`{name}` must have rank {want}, got shape {tuple(x.shape)} (rank {x.ndim})."
        )
    if shape is not None and (
        len(shape) != x.ndim or any(w is not None and w != g for w, g in zip(shape, x.shape))
    ):
        want = tuple("*" if s is None else s for s in shape)
        raise ValueError(f"{where}`{name}` must have shape {want}, got {tuple(x.shape)}.")
    if square and (x.ndim != 2 or x.shape[0] != x.shape[1]):
        raise ValueError(f"{where}`{name}` must be a square matrix, got shape {tuple(x.shape)}.")
    if finite:
        try:
            x = check_finite(name, x)
        except ValueError as e:
            raise ValueError(f"{where}{e}") from None
    return x


def check_same_shape(names: tuple[str, str], a: Any, b: Any, owner: str | None = None) -> None:
    """Raise unless arrays ``a`` and ``b`` (named ``names``) have the same shape."""
    if tuple(a.shape) != tuple(b.shape):
        where = f"{owner}: " if owner else ""
        raise ValueError(
            f"{where}`{names[1]}` must have the shape of `{names[0]}`, {tuple(a.shape)}, "
            f"got {tuple(b.shape)}."
        )


def check_key(name: str, key: Any, owner: str | None = None) -> None:
    """Raise unless ``key`` is a JAX PRNG key: a typed key (``jax.random.key``) or a raw
    uint32 key of shape (2,) (``jax.random.PRNGKey``)."""
    ok = isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    if not ok and is_array(key):  # a raw key of jax.random.PRNGKey
        ok = key.dtype == np.uint32 and tuple(key.shape) == (2,)
    if not ok:
        where = f"{owner}: " if owner else ""
        got = f"{type(key).__name__} {key!r:.40}"
        raise TypeError(
            f"{where}`{name}` must be a JAX PRNG key, got {got}; pass e.g. "
            f"{name}=jax.random.key(0)."
        )


def check_float_dtype(name: str, dtype: Any, owner: str | None = None) -> None:
    """Raise unless ``dtype`` is ``None`` (the default) or names float32 or float64 (the
    dtypes transflow computes in)."""
    if dtype is None:
        return
    try:
        ok = np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.float64))
    except TypeError:
        ok = False
    if not ok:
        where = f"{owner}: " if owner else ""
        raise TypeError(
            f"{where}`{name}` must be float32, float64 or None, got {dtype!r:.40}; pass e.g. "
            f"{name}=jnp.float32."
        )


def check_builder(owner: str, *, dt: Any, key: Any, **sizes: Any):
    """The arguments every model builder takes (``make_vit``, ``make_seq``,
    ``make_char_lm``), each refused in one line naming it: the sizes (integers >= 1, see
    :func:`check_sizes`), the step ``dt`` (:func:`check_step`) and the PRNG ``key``
    (:func:`check_key`). (A builder checks its ``activation`` with
    :func:`transflow._activations.activation_fn`, which names it.)"""
    check_sizes(owner, **sizes)
    check_step("dt", dt, owner)
    check_key("key", key, owner)


def check_width(owner: str, name: str, d_model: int, source: str, d: int) -> None:
    """Raise unless the model ``name`` acts on the ``d`` features ``source`` makes (a
    decoder or encoder behind an embedding), naming both."""
    if d_model != d:
        raise ValueError(
            f"{owner}: `{name}` acts on d = {d_model} features but `{source}` makes {d}; "
            "they must match."
        )


def check_path(name: str, value: Any, owner: str | None = None) -> None:
    """Raise unless ``value`` is a file-system path (a ``str`` or an ``os.PathLike``)."""
    import os

    if not isinstance(value, str | os.PathLike) or value == "":
        where = f"{owner}: " if owner else ""
        raise TypeError(
            f"{where}`{name}` must be a path (str or pathlib.Path), got "
            f"{type(value).__name__} {value!r:.40}; pass e.g. {name}='runs/ckpt'."
        )


def check_sequence(
    name: str,
    values: Any,
    owner: str | None = None,
    *,
    integer: bool = True,
    lower: float | None = 0,
    strict: bool = True,
    example: str = "[4, 8]",
    nonempty: bool = True,
) -> list:
    """Return ``list(values)``, raising unless it is a (non-empty) sequence of numbers
    each passing :func:`check_number` with the given bounds (e.g. a list of depths)."""
    where = f"{owner}: " if owner else ""
    kind = "integers" if integer else "finite numbers"
    bound = "" if lower is None else f" {'>' if strict else '>='} {lower}"
    want = f"{where}`{name}` must be a {'non-empty ' if nonempty else ''}sequence of {kind}{bound}"
    is_seq = isinstance(values, list | tuple | range) or (
        isinstance(values, np.ndarray | jax.Array) and values.ndim == 1
    )
    if not is_seq:
        raise TypeError(f"{want}, got {type(values).__name__} {values!r:.40}; pass e.g. {example}.")
    out = list(values)
    if nonempty and not out:
        raise ValueError(f"{want}, got {values!r}; pass e.g. {example}.")
    for v in out:
        try:
            check_number(name, v, lower=lower, strict=strict, integer=integer)
        except (TypeError, ValueError):
            raise ValueError(f"{want}, got {values!r:.60}; pass e.g. {example}.") from None
    return out
