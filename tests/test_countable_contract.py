"""The contract of a countable model (issue #47, item 6).

A piecewise-linear model declares what the region counters may do with it by the
abstract classes it inherits (its *capabilities*); the counters dispatch on them, never on
a concrete class, a name, a probed method or an exception.

- A new architecture defined here (two maxout units, not a class of the package) is
  counted exactly by ``count_linear_regions`` in 1-D (by each path its capabilities
  allow) and in 2-D, and its slices too, matching the independent reference counter of
  ``tests/_exact_regions.py``; a model lacking a capability is refused in one line naming
  the model and the capability.
- A source scan of ``src/transflow/expressivity``: no ``hasattr``/``getattr``, no
  ``isinstance`` on a concrete model class (outside two argument checks), no class-name
  comparison, no ``NotImplementedError`` raised or caught; no concrete class subclassed.
"""

import ast
import inspect
import pathlib
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import transflow.expressivity as tx
from _exact_regions import ExactNet, reference_1d, reference_2d
from _wrappers import only
from transflow.expressivity import (
    AbstractAffineLogits,
    AbstractBoundedEval,
    AbstractExactEval,
    AbstractPiecewiseLinear,
    CertificationError,
    count_linear_regions,
    exact_regions_1d,
    restrict,
)
from transflow.expressivity._pwl import CAPABILITIES, exact_argmax, gamma, to_fraction_array

SRC = pathlib.Path(tx.__file__).parent


# ----------------------------------------------------------------------------- the model
class _AbstractTwoUnits(AbstractAffineLogits, AbstractExactEval):
    """``y = a_0 max_k (W_0k · x + B_0k) + a_1 max_k (W_1k · x + B_1k)``: one decision layer
    of two max-groups with K competitors each (a new architecture: the counters have never
    seen it)."""

    W: jax.Array  # (2, K, d)
    B: jax.Array  # (2, K)
    a: jax.Array  # (2,)

    @property
    def in_dim(self):
        return int(self.W.shape[2])

    def layer_logits(self, x):
        return (self.W @ x + self.B,)

    def __call__(self, x):
        z = self.W @ x + self.B
        return (self.a @ jnp.max(z, axis=-1))[None]

    def exact_params(self):
        return to_fraction_array(self.W), to_fraction_array(self.B), to_fraction_array(self.a)

    def exact_eval(self, params, x, pattern=None):
        W, B, a = params
        z = W.dot(np.asarray(x, dtype=object)) + B
        win = exact_argmax(z) if pattern is None else np.asarray(pattern, np.int64)
        y = a[0] * z[0, int(win[0])] + a[1] * z[1, int(win[1])]
        return np.array([y], dtype=object), [z], np.asarray(win, np.int64)


class TwoUnits(_AbstractTwoUnits):
    """Affine logits and exact evaluation only: 1-D by the exact walk over the whole
    interval, 2-D by the generic exact program."""


class TwoUnitsWalk(_AbstractTwoUnits, AbstractBoundedEval):
    """The same with round-off-bounded evaluation: 1-D by the certified point walk."""

    def eval_bounded(self, x, ex=None, pattern=None):
        W, B, a = self.W, self.B, self.a
        x = jnp.asarray(x, W.dtype)
        z = W @ x + B
        ez = gamma(self.in_dim + 1, W.dtype) * (jnp.abs(W) @ jnp.abs(x) + jnp.abs(B))
        if ex is not None:
            ez = ez + jnp.abs(W) @ ex
        win = jnp.argmax(z, axis=-1) if pattern is None else pattern
        h = z[jnp.arange(2), win]
        eh = ez[jnp.arange(2), win]
        y = a @ h
        ey = jnp.abs(a) @ eh + gamma(3, W.dtype) * (jnp.abs(a) @ jnp.abs(h))
        return y[None], ey[None], (z,), (ez,), win.astype(jnp.int32)


def _weights(seed, d, K=3, a=(1.0, -0.75)):
    """Dyadic weights (multiples of 1/8) and their reference network; ``a = (1, 0)`` reads
    out one unit only, so the other one's switches change the pattern, not the map."""
    rng = np.random.default_rng(seed)
    W = rng.integers(-16, 17, size=(2, K, d)) / 8
    B = rng.integers(-16, 17, size=(2, K)) / 8
    a = np.array(a)
    ref = ExactNet([W.tolist()], [B.tolist()], [a.tolist()], [0.0])
    return (jnp.asarray(W), jnp.asarray(B), jnp.asarray(a)), ref


def _line_reference(W, B, a, o, D):
    """The reference network of the slice ``t ↦ f(o + D t)`` (exact Fractions)."""
    F = lambda v: Fraction(float(v))
    Ws = [[[[sum(F(w) * F(dd) for w, dd in zip(W[u, k], D))] for k in range(W.shape[1])]
           for u in range(2)]]  # fmt: skip
    bs = [[[sum(F(w) * F(oo) for w, oo in zip(W[u, k], o)) + F(B[u, k])
            for k in range(W.shape[1])] for u in range(2)]]  # fmt: skip
    return ExactNet(Ws, bs, [[F(v) for v in a]], [0])


# ----------------------------------------------------------------------------- (a) counts
@pytest.mark.parametrize("cls", [TwoUnits, TwoUnitsWalk])
@pytest.mark.parametrize(("seed", "a"), [(0, (1.0, -0.75)), (2, (1.0, -0.75)), (5, (1.0, 0.0))])
def test_new_model_counted_exactly_in_1d(cls, seed, a):
    (W, B, a), ref = _weights(seed, 1, a=a)
    f = cls(W, B, a)
    r = count_linear_regions(f, -2.0, 2.0)
    want = reference_1d(ref, -2, 2)
    assert r.certified
    assert (r.linear, r.activation) == (want["linear"], want["activation"])
    np.testing.assert_allclose(r.breakpoints, [float(b) for b in want["breakpoints"]], atol=1e-12)
    assert want["activation"] >= 3  # the weights make a count that could go wrong
    path = r.certificate["method"]
    if cls is TwoUnits:  # exact evaluation only: the exact walk over the whole interval
        assert path.startswith("exact rational walk over the whole interval")
    else:  # bounded evaluation: the point walk (exact fallback where floats cannot prove)
        assert "running error bounds" in path and "walk_rounds" in r.certificate


@pytest.mark.parametrize(("seed", "a"), [(3, (1.0, -0.75)), (4, (1.0, 0.0))])
def test_new_model_counted_exactly_in_2d_and_on_its_slices(seed, a):
    (W, B, a), ref = _weights(seed, 2, a=a)
    f = TwoUnits(W, B, a)
    r = count_linear_regions(f, [-1.0, -1.0], [1.0, 1.0])
    want = reference_2d(ref, -1, 1)
    assert r.certified and r.certificate["program"] == "Generic"
    assert (r.linear, r.activation) == (want["linear"], want["activation"])
    assert want["activation"] >= 4
    # a line through the plane: the slice has f's capabilities, and the count is exact
    o, D = np.array([-0.5, 0.25]), np.array([1.0, 0.5])
    for g in (restrict(f, o, D), restrict(TwoUnitsWalk(W, B, a), o, D)):
        for cap in CAPABILITIES:
            assert isinstance(g, cap) == isinstance(g.f, cap), cap.__name__
        rl = count_linear_regions(g, -2.0, 2.0)
        wl = reference_1d(_line_reference(np.asarray(W), np.asarray(B), np.asarray(a), o, D), -2, 2)
        assert rl.certified and (rl.linear, rl.activation) == (wl["linear"], wl["activation"])


def test_missing_capabilities_are_refused_in_one_line():
    (W, B, a), ref = _weights(0, 1)
    (W2, B2, a2), ref2 = _weights(0, 2)

    def one_line(exc, name, cap):
        msg = str(exc.value)
        assert "\n" not in msg and f"{name} does not inherit {cap}" in msg, msg

    def affine_only(f):  # the model with affine logits only (tests/_wrappers.py)
        return only(f, AbstractAffineLogits)

    def plain(f):  # the model with no capability at all
        return only(f)

    # no exact evaluation, no bounded evaluation: no certified 1-D path
    with pytest.raises(TypeError) as e:
        count_linear_regions(affine_only(TwoUnits(W, B, a)), -2.0, 2.0)
    one_line(e, "Only", "AbstractBoundedEval")
    # ... but the uncertified float count takes it (it needs no capability)
    fl = count_linear_regions(affine_only(TwoUnits(W, B, a)), -2.0, 2.0, certify=False)
    assert not fl.certified and fl.activation == reference_1d(ref, -2, 2)["activation"]
    # 2-D without exact evaluation: strict refuses, strict=False gives the float count
    g = affine_only(TwoUnits(W2, B2, a2))
    with pytest.raises(CertificationError) as e:
        count_linear_regions(g, [-1.0, -1.0], [1.0, 1.0])
    one_line(e, "Only", "AbstractExactEval")
    u = count_linear_regions(g, [-1.0, -1.0], [1.0, 1.0], strict=False)
    assert not u.certified and u.activation == reference_2d(ref2, -1, 1)["activation"]
    # no affine logits: refused in 2-D; in 1-D the exact quadratic walk needs exact eval
    with pytest.raises(ValueError) as e:
        count_linear_regions(plain(TwoUnits(W2, B2, a2)), [-1.0, -1.0], [1.0, 1.0])
    one_line(e, "Only", "AbstractAffineLogits")
    with pytest.raises(TypeError) as e:
        count_linear_regions(plain(TwoUnits(W, B, a)), -2.0, 2.0)
    one_line(e, "Only", "AbstractExactEval")
    with pytest.raises(TypeError) as e:
        exact_regions_1d(plain(TwoUnits(W, B, a)), -2.0, 2.0)
    one_line(e, "Only", "AbstractExactEval")


def test_hardmax_transformers_are_siblings():
    """ConstantQueryTransformer and HardmaxTransformer share an abstract base; only the
    first declares affine logits, and it refuses W_Q != 0."""
    H, C = tx.HardmaxTransformer, tx.ConstantQueryTransformer
    assert not issubclass(C, H) and not issubclass(H, C)
    assert issubclass(C, AbstractAffineLogits) and not issubclass(H, AbstractAffineLogits)
    f = H.random(jax.random.PRNGKey(0), in_dim=1)
    with pytest.raises(ValueError, match=r"blocks\[0\]\[0\].wq` must be zero"):
        C.from_params(list(f.blocks), f.embedding, f.positional, f.readout_weight)


# ----------------------------------------------------------------------------- (b) source
def _classes():
    """Every class of the package's modules (and the slices' generated classes)."""
    out = {}
    for path in sorted(SRC.glob("*.py")):
        mod = __import__(f"transflow.expressivity.{path.stem}", fromlist=["_"])
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and obj.__module__ == mod.__name__:
                out[name] = obj
    net = tx.zigzag_maxout(2, 2, dim=2)
    out["Restricted (generated)"] = type(restrict(net, np.zeros(2), np.ones(2)))
    return out


def _abstract(cls) -> bool:
    return inspect.isabstract(cls) or cls.__name__.lstrip("_").startswith("Abstract")


def test_no_concrete_class_is_subclassed():
    classes = _classes()
    bad = [
        f"{name} subclasses {base.__name__}"
        for name, cls in classes.items()
        for base in cls.__bases__
        if base.__module__.startswith("transflow.expressivity") and not _abstract(base)
    ]
    assert not bad, bad


# the argument checks of functions and records defined on a MaxoutNetwork's weights (they
# refuse other input at the boundary; they select no behaviour): the constructions, the
# LP, and a trained-regions Target's exact CPWL network (counted by its weights)
_ALLOWED_ISINSTANCE = {
    ("_construction.py", "net"),
    ("_lp.py", "net"),
    ("_trained.py", "self.network"),
}


def _names(node):
    """The class names in an isinstance type argument (a name, a tuple, ``A | B``)."""
    if isinstance(node, ast.Name):
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    if isinstance(node, ast.Tuple):
        return set().union(*map(_names, node.elts))
    if isinstance(node, ast.BinOp):
        return _names(node.left) | _names(node.right)
    return set()


def _scan(source: str, filename: str, models: set) -> list:
    """What decides behaviour by something other than a capability."""
    found = []
    for node in ast.walk(ast.parse(source)):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            fn = node.func.id
            if fn in ("hasattr", "getattr"):
                found.append(f"{where} {fn}")
            if fn == "isinstance" and len(node.args) == 2:
                hit = _names(node.args[1]) & models
                arg = ast.unparse(node.args[0])
                if hit and (filename, arg) not in _ALLOWED_ISINSTANCE:
                    found.append(f"{where} isinstance({arg}, {sorted(hit)})")
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            if any(isinstance(p, ast.Attribute) and p.attr == "__name__" for p in parts):
                found.append(f"{where} compares a class name")
            if any(isinstance(p, ast.Constant) and p.value in models for p in parts):
                found.append(f"{where} compares with a class-name string")
        if isinstance(node, ast.ExceptHandler) and node.type is not None:
            if "NotImplementedError" in _names(node.type):
                found.append(f"{where} except NotImplementedError")
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if "NotImplementedError" in _names(exc):
                found.append(f"{where} raise NotImplementedError")
    return found


def test_source_dispatches_on_capabilities_only():
    models = {
        name
        for name, cls in _classes().items()
        if issubclass(cls, AbstractPiecewiseLinear) and not _abstract(cls)
    }
    assert {"MaxoutNetwork", "MaxoutTransformer", "HardmaxTransformer"} <= models
    found = []
    for path in sorted(SRC.glob("*.py")):
        found += _scan(path.read_text(), path.name, models)
    assert not found, found


def test_scan_finds_what_it_forbids():
    """The scan is not vacuous: the dispatch it replaced (main at 9125f54) is flagged."""
    old = (
        'hard = getattr(f, "hardmax", True)\n'
        "if isinstance(f, Restricted) and isinstance(f.f, MaxoutNetwork): pass\n"
        'if type(g).__name__ == "MaxoutTransformer": pass\n'
        "try:\n    f.interval_forward(ctx, x)\nexcept NotImplementedError:\n    pass\n"
        'raise NotImplementedError(f"{type(self).__name__} has no interval_forward")\n'
    )
    found = _scan(old, "old.py", {"MaxoutNetwork", "MaxoutTransformer"})
    assert sorted(s.split(" ", 1)[1] for s in found) == [
        "compares a class name",
        "compares with a class-name string",
        "except NotImplementedError",
        "getattr",
        "isinstance(f.f, ['MaxoutNetwork'])",
        "raise NotImplementedError",
    ], found


def test_docs_example_of_a_new_architecture_runs(capsys):
    """The example of docs/expressivity.md, "Adding an architecture", runs as printed."""
    doc = (SRC.parents[2] / "docs" / "expressivity.md").read_text()
    section = doc[doc.index("### Adding an architecture") :]
    code = section[section.index("```python\n") + 10 : section.index("\n```\n")]
    exec(compile(code, "docs/expressivity.md", "exec"), {"__name__": "doc_example"})
    out = capsys.readouterr().out.splitlines()
    assert out == ["3 3 True [0.25 0.5 ]", "exact rational walk over the whole interval"]
