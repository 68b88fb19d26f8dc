"""TeX → MathML at build time, so the site renders maths without network access.

``pymdownx.arithmatex`` (``generic: true``) leaves each formula in the page's HTML as
``<span class="arithmatex">\\(…\\)</span>`` (inline) or
``<div class="arithmatex">\\[…\\]</div>`` (display). :func:`render_math` replaces each by
the MathML of ``latex2mathml`` (a pure-Python package of the ``docs`` extra); every
current browser renders MathML natively, so no script and no CDN is involved. A formula
that ``latex2mathml`` cannot convert fails the build with the page and the TeX, instead
of shipping raw TeX.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_DISPLAY = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


# latex2mathml leaves a few symbols as TeX inside <mo>/<mi> (after \big…, and \arg).
_SYMBOLS = {
    r"\{": "&#x0007B;",
    r"\}": "&#x0007D;",
    r"\lbrace": "&#x0007B;",
    r"\rbrace": "&#x0007D;",
    r"\arg": "arg",
}
_LEFT_TEX = re.compile(r">(\\[A-Za-z{}|]+|&amp;|&)<")
_ALIGNED = re.compile(r"\\begin\{aligned\}(.*?)\\end\{aligned\}", re.S)


def _aligned_to_array(tex: str) -> str:
    """``aligned`` (which latex2mathml does not know) as an ``array`` of r/l columns."""

    def repl(m: re.Match) -> str:
        body = m.group(1)
        cols = 1 + max(row.count("&") for row in body.split(r"\\"))
        return r"\begin{array}{" + ("rl" * cols)[:cols] + "}" + body + r"\end{array}"

    return _ALIGNED.sub(repl, tex)


class MathError(ValueError):
    """A formula that cannot be converted to MathML."""


def tex_to_mathml(tex: str, *, display: bool, where: str = "") -> str:
    """The MathML of one TeX formula (``display``: a block, else inline).

    Example:
        >>> tex_to_mathml(r"\\sqrt{d}", display=False)[:5]
        '<math'
    """
    try:
        mathml = convert(_aligned_to_array(tex), display="block" if display else "inline")
    except Exception as err:  # latex2mathml raises several exception types
        raise MathError(
            f"{where}: cannot convert the formula {tex!r} to MathML ({err!r}); "
            "rewrite it with commands latex2mathml supports"
        ) from err
    for symbol, entity in _SYMBOLS.items():
        mathml = mathml.replace(f">{symbol}<", f">{entity}<")
    left = _LEFT_TEX.findall(mathml)
    if left:
        raise MathError(
            f"{where}: latex2mathml left TeX {left} in the MathML of {tex!r}; "
            "rewrite the formula with commands it supports (or map them in texmath._SYMBOLS)"
        )
    return mathml


def render_math(page_html: str, where: str = "") -> str:
    """``page_html`` with every arithmatex formula replaced by MathML."""

    def block(m: re.Match) -> str:
        mathml = tex_to_mathml(html.unescape(m.group(1)), display=True, where=where)
        return f'<div class="arithmatex tf-math">{mathml}</div>'

    def inline(m: re.Match) -> str:
        mathml = tex_to_mathml(html.unescape(m.group(1)), display=False, where=where)
        return f'<span class="arithmatex tf-math">{mathml}</span>'

    return _INLINE.sub(inline, _DISPLAY.sub(block, page_html))
