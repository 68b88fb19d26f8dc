"""The documentation site's sources, checked without building it (`make docs` builds it).

- the generated API reference lists every public name of every package: each `__all__`
  (or, for a package without one, every name its `__init__` re-exports);
- every figure snapshot in docs/figures is on the gallery page;
- every README section a page includes (`--8<-- "README.md:name"`) is marked in README;
- the nav has the sections the docs hook fills; CITATION.cff names both papers.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pathlib
import re

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_gen_api():
    spec = importlib.util.spec_from_file_location("gen_api", DOCS / "_scripts" / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def api_text() -> str:
    return "\n".join(_load_gen_api().api_pages().values())


def _declared_packages() -> list[str]:
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return meta["tool"]["setuptools"]["packages"]


def _exported(module) -> list[str]:
    """`__all__`, or the public non-module names of a package's `__init__`."""
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)]


def test_api_reference_lists_every_public_name(api_text):
    checked = 0
    missing = []
    for package_name in _declared_packages():
        package = importlib.import_module(package_name)
        for name in _exported(package):
            checked += 1
            if f"::: {package_name}.{name}\n" not in api_text:
                missing.append(f"{package_name}.{name}")
    assert not missing, f"not in the API reference: {missing}"
    assert checked > 100  # the library has well over 100 public names


def test_api_reference_lists_module_all(api_text):
    # Public modules with their own __all__ (e.g. transflow.experiments.context).
    for module_name in ("transflow.experiments.context", "transflow.experiments.run"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            assert f"::: {module_name}.{name}\n" in api_text, f"{module_name}.{name}"


def test_api_reference_skips_private_modules(api_text):
    assert "::: transflow._" not in api_text
    assert not re.search(r"::: transflow\.\w+\._", api_text)


def test_gallery_shows_every_figure():
    gallery = (DOCS / "gallery.md").read_text()
    shown = set(re.findall(r"\]\(figures/([^)]+\.png)\)", gallery))
    figures = DOCS / "figures"
    committed = {p.relative_to(figures).as_posix() for p in figures.rglob("*.png")}
    assert committed, "docs/figures has no snapshots"
    assert committed <= shown, f"add to docs/gallery.md: {sorted(committed - shown)}"
    assert shown <= committed, f"missing in docs/figures: {sorted(shown - committed)}"


def test_included_readme_sections_exist():
    readme = (ROOT / "README.md").read_text()
    included = set()
    for page in DOCS.glob("*.md"):
        included |= set(re.findall(r'--8<-- "README\.md:([a-z][-_0-9a-z]*)"', page.read_text()))
    # The experiments table stays in README (its landing page) and is included by
    # docs/experiments-table.md; everything else lives in docs/ itself.
    assert "experiments" in included
    for name in included:
        assert f"--8<-- [start:{name}]" in readme, f"README.md lost the start marker of {name!r}"
        assert f"--8<-- [end:{name}]" in readme, f"README.md lost the end marker of {name!r}"


def test_readme_is_a_landing_page():
    """What it is, the two commands, a short example, the experiments table, links into
    the docs (each pointing at an existing page); the rest lives in docs/."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 12_000, f"README.md is {len(readme.encode())} bytes"
    assert "make run" in readme and "make test" in readme
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert example and len(example.group(1).strip().splitlines()) <= 14
    assert "<!-- --8<-- [start:experiments] -->" in readme
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert len(links) >= 15
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to missing pages: {missing}"
    for page in ("docs/spec/continuous-model.md", "docs/overview.md", "docs/model.md"):
        assert f"]({page})" in readme, page


def test_nav_has_the_sections_the_hook_fills():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    titles = [next(iter(item)) for item in config["nav"] if isinstance(item, dict)]
    assert "Guides" in titles and "API reference" in titles


def test_citation_names_both_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    notes = " ".join(ref["notes"] for ref in cff["references"])
    assert "2510.03989" in notes and "2603.03084" in notes
    readme = (ROOT / "README.md").read_text()
    citing = readme[readme.index("## Citing") :]
    assert "2510.03989" in citing and "2603.03084" in citing


# --- maths without network ------------------------------------------------------------

_CDN = re.compile(r"cdn|jsdelivr|unpkg|polyfill\.io|mathjax|katex", re.I)


def _load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / "_scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _page_html(text: str) -> str:
    import markdown

    return markdown.markdown(
        text,
        extensions=["tables", "attr_list", "md_in_html", "pymdownx.arithmatex"],
        extension_configs={"pymdownx.arithmatex": {"generic": True}},
    )


def _script_sources(html: str) -> list[str]:
    return re.findall(r"<script[^>]*\bsrc=[\"']([^\"']+)", html)


def test_mkdocs_loads_no_script_from_the_network():
    config = (ROOT / "mkdocs.yml").read_text()
    assert "extra_javascript" not in config or not _CDN.search(config), (
        "mkdocs.yml loads a script from a CDN; maths is rendered at build time (texmath.py)"
    )
    assert not re.search(r"https?://[^\s]*\.js\b", config)


def test_every_formula_of_the_docs_converts_to_mathml():
    texmath = _load_script("texmath")
    formulas = 0
    for page in sorted(DOCS.rglob("*.md")):
        html = _page_html(page.read_text())
        formulas += html.count('class="arithmatex"')
        # Raises texmath.MathError (naming the page and the formula) if one cannot convert.
        out = texmath.render_math(html, where=str(page.relative_to(ROOT)))
        assert 'class="arithmatex"' not in out, f"{page}: a formula was left as TeX"
    assert formulas > 200  # the spec pages alone have several hundred


def test_math_page_renders_mathml_without_a_cdn_script():
    texmath = _load_script("texmath")
    html = texmath.render_math(_page_html((DOCS / "spec" / "continuous-model.md").read_text()))
    assert html.count("<math") > 100
    assert '<math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in html
    assert "<msqrt>" in html and "<mfrac>" in html  # (CM3), (CM14) rendered as maths
    assert not [s for s in _script_sources(html) if _CDN.search(s)]


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> pathlib.Path:
    """The site, built by `mkdocs build --strict` (which must pass)."""
    import subprocess
    import sys

    site = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return site


@pytest.mark.slow
def test_built_site_renders_maths_offline(built_site):
    """A math page of the strict build has MathML and no CDN script tag."""
    for page in ("spec/continuous-model", "spec/maxout-expressivity", "model"):
        html = (built_site / page / "index.html").read_text()
        assert "<math" in html, page
        assert 'class="arithmatex">\\(' not in html, page
        cdn = [s for s in _script_sources(html) if _CDN.search(s) or s.startswith("http")]
        assert not cdn, f"{page} loads {cdn}"


# --- layout: nothing clipped at 1280 px; API summaries ---------------------------------

_MEASURE = """<script>
window.addEventListener('load', () => setTimeout(() => {
  const out = [];
  const sel = '.md-typeset__scrollwrap, .md-typeset pre > code, .md-typeset div.tf-math';
  document.querySelectorAll(sel).forEach(el => {
    if (el.scrollWidth > el.clientWidth + 1) out.push(el.innerText.slice(0, 60));
  });
  const pre = document.createElement('pre'); pre.id = 'tf-clipped';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
}, 300));
</script>"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", ["analysis", "masks", "continuous", "model", "spec/continuous-model", "experiments"]
)
def test_no_clipped_table_code_or_formula_at_1280px(built_site, page):
    """In a 1280 px wide headless Chromium, no table, code block or display formula of the
    page is wider than its box (scrollWidth > clientWidth)."""
    import html as html_lib
    import json
    import shutil
    import subprocess

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("needs a headless Chromium (apt-get install chromium) to lay the page out")
    src = built_site / page / "index.html"
    probe = src.with_name("_probe.html")
    probe.write_text(src.read_text().replace("</body>", _MEASURE + "</body>"))
    dom = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]
        + ["--virtual-time-budget=4000", "--dump-dom", probe.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = re.search(r'<pre id="tf-clipped">(.*?)</pre>', dom, re.S)
    assert found, "the probe script did not run"
    clipped = json.loads(html_lib.unescape(found.group(1)))
    assert clipped == [], f"{page}: clipped at 1280 px: {clipped}"


def test_styles_wrap_code_blocks_and_table_cells():
    css = re.sub(r"/\*.*?\*/", "", (DOCS / "stylesheets" / "extra.css").read_text(), flags=re.S)
    blocks = dict(re.findall(r"([^{}]+)\{([^}]*)\}", css))
    rules = {k.strip(): v for k, v in blocks.items()}
    assert "white-space: pre-wrap" in rules[".md-typeset pre > code"]
    assert "overflow-wrap: anywhere" in rules[".md-typeset td code"]
    assert "overflow-x: auto" in rules[".md-typeset div.tf-math"]


# Names whose docstring (or attribute docstring) has no first line, in modules other
# helpers are editing: this list may only shrink (fix the docstring, then remove the name).
_KNOWN_WITHOUT_SUMMARY = {
    "transflow.experiments.tasks.TASKS_DIR",
}


def test_every_public_name_has_a_summary():
    missing = set(_load_gen_api().missing_summaries())
    new = sorted(missing - _KNOWN_WITHOUT_SUMMARY)
    assert not new, f"give these a docstring whose first line says what they are: {new}"
    fixed = sorted(_KNOWN_WITHOUT_SUMMARY - missing)
    assert not fixed, f"remove from _KNOWN_WITHOUT_SUMMARY (they have a summary now): {fixed}"


def test_docs_paths_in_docstrings_become_links():
    adapt = _load_gen_api().adapt
    assert adapt("Masks (docs/masks.md): x") == "Masks ([docs/masks.md](../masks.md)): x"
    assert adapt("see ``docs/masks.md``") == "see ``docs/masks.md``"
    assert adapt("docs/spec/continuous-model.md Q6") == (
        "[docs/spec/continuous-model.md Q6](../spec/continuous-model.md#q6)"
    )


# --- the specification lives in the repository ------------------------------------------

_TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".cfg", ".cff", ".css", ""}
_SECTION = r"(§\d+(?:\.\d+)*|Q\d+|C\d+|B\d+|pitfall \d+|Appendix [AB])"


def _repository_text_files() -> list[pathlib.Path]:
    """Tracked (and untracked, not ignored) text files; every file when git is missing."""
    import shutil
    import subprocess

    if shutil.which("git") and (ROOT / ".git").exists():
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
        paths = [ROOT / p for p in out if p]
    else:
        skip = {".git", ".venv", "site", "outputs", "multirun", "__pycache__"}
        paths = [p for p in ROOT.rglob("*") if not skip & set(p.relative_to(ROOT).parts)]
    return [
        p
        for p in paths
        if p.is_file() and p.suffix in _TEXT_SUFFIXES and "egg-info" not in p.as_posix()
    ]


def _spec_anchors() -> dict[str, set[str]]:
    """{page: heading ids} of docs/spec/*.md (explicit `{#id}` attributes)."""
    return {
        p.stem: set(re.findall(r"^#+ .*\{#([\w-]+)\}\s*$", p.read_text(), re.M))
        for p in (DOCS / "spec").glob("*.md")
    }


def _anchor(section: str) -> str:
    if section.startswith("§"):
        return "s" + section[1:].replace(".", "-")
    return section.lower().replace(" ", "-")


def test_no_file_refers_to_specification_files_outside_the_repository():
    outside = ("../" + "shared", "shared" + "/papers")
    found = [
        f"{p.relative_to(ROOT)}: {needle}"
        for p in _repository_text_files()
        for needle in outside
        if needle in p.read_text(errors="replace")
    ]
    assert not found, f"references to files outside the repository: {found}"


def test_spec_references_name_existing_sections():
    anchors = _spec_anchors()
    assert set(anchors) == {"continuous-model", "maxout-expressivity", "reference-layers"}
    assert {"s3-2", "q6", "s8-10"} <= anchors["continuous-model"]
    text_ref = re.compile(r"docs/spec/([a-z-]+)\.md(?:[ \u00a0]" + _SECTION + ")?")
    link_ref = re.compile(r"\]\((?:\.\./)*(?:spec/)?([a-z-]+)\.md#([\w-]+)\)")
    bad, checked = [], 0
    for path in _repository_text_files():
        text = path.read_text(errors="replace")
        for m in text_ref.finditer(text):
            page, section = m.group(1), m.group(2)
            checked += 1
            if page not in anchors or (section and _anchor(section) not in anchors[page]):
                bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
        if path.suffix == ".md" and DOCS in path.parents:
            for m in link_ref.finditer(text):
                if m.group(1) in anchors:
                    checked += 1
                    if m.group(2) not in anchors[m.group(1)]:
                        bad.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not bad, f"references to sections the spec pages do not have: {bad}"
    assert checked > 150  # the code cites the spec well over a hundred times


def test_no_bare_spec_references_are_left():
    """The word "spec" followed by a section and no page: write "docs/spec/<page>.md"
    before the section instead (a link to the page in docs pages)."""
    bare = re.compile(r"(?<![\w/.-])spec[ -](?:§|Q\d|C\d|B\d)")
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _repository_text_files()
        if p.suffix in {".py", ".md", ".yaml"}
        for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if bare.search(line)
    ]
    assert not found, f"references that do not name the spec page: {found}"


# --- the built HTML: no raw TeX, no web fonts, no placeholder repository ---------------


def test_built_page_check_flags_raw_tex_and_web_fonts():
    """texmath.built_page_problems (run on every page by the docs hook, which fails the
    build) finds display maths arithmatex did not take -- the list-item case of the spec
    pages, as Python-Markdown renders it -- and web-font links; MathML and code pass."""
    texmath = _load_script("texmath")
    broken = _page_html("- Layer (MX1):\n  $$\n  z = \\max_j w_j\n  $$\n- next\n")
    assert "arithmatex" not in broken  # the formula stayed text inside the <li>
    found = texmath.built_page_problems(texmath.render_math(broken), "p")
    assert found and all(p.startswith("p: raw TeX") for p in found), found
    fixed = _page_html("- Layer (MX1):\n\n    $$\n    z = \\max_j w_j\n    $$\n\n- next\n")
    assert texmath.built_page_problems(texmath.render_math(fixed)) == []
    font = '<link href="https://fonts.googleapis.com/css?family=Roboto" rel="stylesheet">'
    assert texmath.built_page_problems(font, "q") == [
        "q: requests a web font from fonts.googleapis.com"
    ]
    code = "<p><code>$$x$$ \\frac</code></p><pre>\\(a\\)</pre>"
    assert texmath.built_page_problems(code) == []


def test_no_page_leaves_raw_tex():
    """Every docs page, through the same Markdown extensions and MathML conversion as the
    site, leaves no TeX as text (docs/spec/maxout-expressivity had 12 and
    docs/spec/continuous-model 4 display formulas in list items rendered raw)."""
    texmath = _load_script("texmath")
    bad = {}
    for page in sorted(DOCS.rglob("*.md")):
        html = texmath.render_math(_page_html(page.read_text()))
        found = texmath.built_page_problems(html, str(page.relative_to(ROOT)))
        if found:
            bad[str(page.relative_to(ROOT))] = found[:3]
    assert not bad, f"raw TeX (a $$ block in a list item needs 4 spaces, blank lines): {bad}"


def test_site_uses_system_fonts_and_names_no_placeholder_repository():
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    assert config["theme"].get("font") is False, "theme.font: false (no Google Fonts request)"
    assert "repo_url" not in config and "transflow-dev" not in (ROOT / "mkdocs.yml").read_text()


@pytest.mark.slow
def test_built_site_has_no_raw_tex_and_no_web_fonts(built_site):
    texmath = _load_script("texmath")
    assert texmath.site_problems(built_site) == []
    assert len(list(built_site.rglob("*.html"))) > 30


# --- README performance rows come from the committed benchmark results ------------------


def _readme_rows():
    spec = importlib.util.spec_from_file_location(
        "readme_rows", ROOT / "benchmarks" / "readme_rows.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_performance_rows_are_rendered_from_the_results_file():
    """README.md's performance table is exactly what benchmarks/readme_rows.py renders
    from the committed benchmarks/results/summary.json (the file F-perf plots)."""
    import doctest
    import json

    rr = _readme_rows()
    summary = json.loads((ROOT / "benchmarks/results/summary.json").read_text())
    readme = (ROOT / "README.md").read_text()
    inside = readme.split(rr.START)[1].split(rr.END)[0].strip("\n")
    assert inside == rr.render_rows(summary), "run: python benchmarks/readme_rows.py --write"
    assert f"| {summary['flop_fraction']:.2f} |" in inside
    assert f"| {summary['ratio_vs_torch']:.2f}× |" in inside
    # the rows follow the file: another value renders another README
    changed = dict(summary, ratio_vs_torch=summary["ratio_vs_torch"] + 0.5)
    assert rr.replace_rows(readme, rr.render_rows(changed)) != readme
    assert "not measured" in rr.render_rows({"cpu_count": 2})
    with pytest.raises(ValueError, match="marker"):
        rr.replace_rows("no markers", "rows")
    with pytest.raises(ValueError, match="flop_fraction"):
        rr.render_rows({"flop_fraction": "fast"})
    assert doctest.testmod(rr).failed == 0
