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


# What must not be left in a built page: TeX delimiters or commands outside code, and
# requests to a web-font host (the site uses the system fonts: ``theme.font: false``).
_VERBATIM = re.compile(
    r"<(code|pre|script|style|math|textarea)\b[^>]*>.*?</\1>|<!--.*?-->", re.S | re.I
)
_TAG = re.compile(r"<[^>]+>")
# (``^{``/``_{`` alone are not flagged: docstrings write plain-text formulas such as
# ``u^{N_t}`` on purpose.)
_RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\[A-Za-z]{2,}\b")
_FONT_HOSTS = re.compile(r"fonts\.googleapis\.com|fonts\.gstatic\.com")


def built_page_problems(page_html: str, where: str = "") -> list[str]:
    r"""What a reader would see wrong in one built HTML page.

    TeX left raw (``$$``, ``\(``, ``\[``, ``\command`` outside ``<code>``, ``<pre>`` and
    ``<math>``; e.g. display maths in a list item that arithmatex did not take) and links
    to an external web-font host (``fonts.googleapis.com``/``fonts.gstatic.com``).

    Example:
        >>> built_page_problems(r"<li>(MX1): $$ z_{ij} = <em>w</em> \le 1 $$</li>", "p")
        ["p: raw TeX '(MX1): $$ z_{ij} = w \\\\le 1 $$'"]
        >>> built_page_problems('<p><span class="arithmatex"><math>x</math></span></p>')
        []
    """
    problems = [
        f"{where}: requests a web font from {m.group(0)}" for m in _FONT_HOSTS.finditer(page_html)
    ]
    text = _TAG.sub("", _VERBATIM.sub(" ", page_html))
    shown_to = -1
    for m in _RAW_TEX.finditer(text):
        if m.start() < shown_to:
            continue  # inside the snippet already reported
        start, shown_to = max(0, m.start() - 30), m.end() + 30
        snippet = " ".join(text[start:shown_to].split())
        problems.append(f"{where}: raw TeX {snippet!r}")
    return problems


def site_problems(site_dir) -> list[str]:
    """:func:`built_page_problems` of every ``*.html`` page under ``site_dir`` (the output
    of ``make docs``); ``python docs/_scripts/texmath.py site`` prints them and exits 1 if
    there are any."""
    import pathlib

    site = pathlib.Path(site_dir)
    if not site.is_dir():
        raise ValueError(f"site_dir: expected the built site folder (make docs), got {site}")
    out = []
    for page in sorted(site.rglob("*.html")):
        out += built_page_problems(page.read_text(), str(page.relative_to(site)))
    return out


if __name__ == "__main__":
    import sys

    found = site_problems(sys.argv[1] if len(sys.argv) > 1 else "site")
    print("\n".join(found) or "no raw TeX and no web-font request in the built pages")
    sys.exit(1 if found else 0)
