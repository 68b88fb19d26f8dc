"""MkDocs hooks (``hooks:`` in ``mkdocs.yml``): generated pages and a self-completing nav.

- ``on_config``: fills the ``API reference`` section of the nav with one entry per
  subpackage (``gen_api.nav_entries``), and appends to ``Guides`` every ``docs/*.md`` that
  the nav does not list yet (a guide added by a new subpackage is never left out; list it
  in ``mkdocs.yml`` to choose its place and title).
- ``on_files``: adds the generated API pages (``gen_api.api_pages``); nothing is written
  to ``docs/``.
- ``on_page_markdown``: replaces ``<!-- benchmarks:targets -->`` with the table of
  ``benchmarks/results/summary.json``.
- ``on_page_markdown`` also makes a page's leading ``## Title`` its title when the page has
  no ``# `` heading (a guide written as a README section), so the site does not show the
  nav title above a repeated heading;
- and it keeps maths that looks like a link (``[a + b](u − σ1)`` in a
  guide's formula) as text: a link target with non-ASCII characters and no ``.``, ``/``,
  ``#`` or ``:`` is no path or URL, so its ``(`` becomes ``&#40;`` (outside code spans).
- ``on_page_content``: converts the page's TeX (``pymdownx.arithmatex``) to MathML
  (``texmath.render_math``), so maths renders offline with no script.
- ``on_post_page`` / ``on_post_build``: every built page is checked for TeX left raw (e.g.
  ``$$`` display maths that arithmatex did not take) and web-font requests
  (``texmath.built_page_problems``); any found fail the build, listed page by page.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import gen_api  # noqa: E402
import texmath  # noqa: E402

API_SECTION = "API reference"
GUIDES_SECTION = "Guides"
_MATH_LINK = re.compile(r"\]\(([^()\s./#:]*[^\x00-\x7f][^()\s./#:]*)\)")


def _nav_paths(nav) -> set[str]:
    out: set[str] = set()
    if isinstance(nav, str):
        out.add(nav)
    elif isinstance(nav, list):
        for item in nav:
            out |= _nav_paths(item)
    elif isinstance(nav, dict):
        for value in nav.values():
            out |= _nav_paths(value)
    return out


def _section(nav: list, title: str) -> list:
    for item in nav:
        if isinstance(item, dict) and title in item:
            return item[title]
    raise KeyError(f"mkdocs.yml: the nav has no section {title!r} (the docs hook fills it)")


def on_config(config, **kwargs):
    nav = config["nav"]
    api = _section(nav, API_SECTION)
    api[:] = gen_api.nav_entries()
    docs_dir = pathlib.Path(config["docs_dir"])
    listed = _nav_paths(nav)
    guides = _section(nav, GUIDES_SECTION)
    for path in sorted(docs_dir.glob("*.md")):
        if path.name not in listed:
            guides.append(path.name)
    return config


def on_files(files, config, **kwargs):
    for path, content in gen_api.api_pages().items():
        files.append(File.generated(config, path, content=content))
    return files


def _benchmark_table(config) -> str:
    root = pathlib.Path(config["config_file_path"]).parent
    summary = json.loads((root / "benchmarks/results/summary.json").read_text())
    rows = ["| quantity | measured | target | status |", "|---|---|---|---|"]
    for name, target in summary.get("targets", {}).items():
        # Either {"bound", "met": bool} or {"bound", "value", "status": "met" | ...}.
        value = target.get("value", summary.get(name))
        if "status" in target:
            status = str(target["status"])
        elif "met" in target:
            status = "met" if target["met"] else "not met"
        else:
            status = "?"
        if status != "met":
            status = f"**{status}**"
        shown = "—" if value is None else f"{value:.3g}" if isinstance(value, float) else str(value)
        rows.append(f"| `{name}` | {shown} | {target.get('bound', '')} | {status} |")
    versions = ", ".join(
        f"{k.replace('_version', '')} {summary[k]}"
        for k in ("jax_version", "torch_version")
        if k in summary
    )
    rows += [
        "",
        f"Measured on `{summary.get('backend', '?')}` with {summary.get('cpu_count', '?')} "
        f"cores ({versions}); read from `benchmarks/results/summary.json` at build time.",
    ]
    return "\n".join(rows)


def _escape_math_links(markdown: str) -> str:
    out, fenced = [], False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced:
            line = _MATH_LINK.sub(
                lambda m: (
                    m.group(0)
                    if m.string[: m.start()].count("`") % 2
                    else "]&#40;" + m.group(1) + ")"
                ),
                line,
            )
        out.append(line)
    return "\n".join(out)


def _promote_leading_h2(markdown: str) -> str:
    lines = markdown.split("\n")
    fenced, has_h1 = False, False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and line.startswith("# "):
            has_h1 = True
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if not has_h1 and first is not None and lines[first].startswith("## "):
        lines[first] = lines[first][1:]
    return "\n".join(lines)


def on_page_markdown(markdown, page, config, files, **kwargs):
    marker = "<!-- benchmarks:targets -->"
    if marker in markdown:
        markdown = markdown.replace(marker, _benchmark_table(config))
    return _escape_math_links(_promote_leading_h2(markdown))


def on_page_content(html, page, config, files, **kwargs):
    return texmath.render_math(html, where=page.file.src_uri)


_PAGE_PROBLEMS: list[str] = []


def on_pre_build(config, **kwargs):
    _PAGE_PROBLEMS.clear()


def on_post_page(output, page, config, **kwargs):
    _PAGE_PROBLEMS.extend(texmath.built_page_problems(output, where=page.file.src_uri))
    return output


def on_post_build(config, **kwargs):
    if _PAGE_PROBLEMS:
        raise PluginError(
            f"{len(_PAGE_PROBLEMS)} problem(s) in the built HTML (docs/_scripts/texmath.py "
            "built_page_problems; display maths in a list item needs a blank line before "
            "and after its $$ block):\n  " + "\n  ".join(_PAGE_PROBLEMS)
        )
