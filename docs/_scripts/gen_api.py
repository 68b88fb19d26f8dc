"""Generate the API reference pages (``docs/api/*.md``) from the package's public names.

The pages are never written by hand: at every build (``make docs``, ``mkdocs serve``) the
hook ``docs/_scripts/hooks.py`` calls :func:`api_pages`, which imports ``transflow``, walks
every public module (no path component starting with ``_``) and lists its public names:

- a module's ``__all__`` when it has one;
- otherwise, for a package: every public attribute that is not a module (the re-exports of
  its ``__init__``, written ``from ._x import Name as Name``, equinox style);
- otherwise, for a plain module: the public classes and functions defined in it.

Each name becomes a ``::: transflow.sub.Name`` entry that mkdocstrings renders from the
docstring. A new subpackage or a new name shows up in the reference with no edit here;
``tests/test_docs.py`` checks that every ``__all__`` name is listed (without building).

This module imports neither mkdocs nor griffe, so the test needs only ``transflow``.
"""

from __future__ import annotations

import html
import importlib
import inspect
import pathlib
import pkgutil
import re
from types import ModuleType

ROOT = "transflow"
API_DIR = "api"


_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
_ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):`~?([^`]+)`")
_LITERAL = re.compile(r"(\S)::[ \t]*$", re.MULTILINE)
_CODE_SPAN = re.compile(r"(``.+?``|`[^`]+`)")


def adapt(text: str) -> str:
    """A docstring as mkdocstrings should read it (the sources keep their house style).

    ``Example:`` (singular) becomes ``Examples:``, so the ``>>>`` lines are rendered as code
    (griffe knows only the plural; the singular would be an admonition whose ``>>>`` lines
    Markdown reads as block quotes); Sphinx roles become code spans; a reST literal-block
    marker ``::`` at the end of a line becomes ``:``.

    A mention of a docs page (``docs/masks.md``, ``docs/spec/continuous-model.md §3.2``,
    outside code spans) becomes a link to it on the site.

    Example:
        >>> print(adapt("Uses :func:`~transflow.evolve`::"))
        Uses `transflow.evolve`:
        >>> print(adapt("See docs/spec/continuous-model.md §3.2."))
        See [docs/spec/continuous-model.md §3.2](../spec/continuous-model.md#s3-2).
    """
    text = _EXAMPLE.sub(r"\1Examples:", text)
    text = _ROLE.sub(r"`\1`", text)
    text = _LITERAL.sub(r"\1:", text)
    return "".join(
        part if i % 2 else _DOCS_REF.sub(_docs_link, part)
        for i, part in enumerate(_CODE_SPAN.split(text))
    )


# A docstring's "docs/masks.md" or "docs/spec/continuous-model.md §3.2" becomes a link to
# that page (and section) of the site; API pages are api/<page>.md, so "../" is docs/.
_DOCS_REF = re.compile(
    r"(?<![\w/.-])(?<!\]\()docs/((?:spec/)?[a-z0-9_-]+)\.md"
    r"(?:[ \u00a0](§ ?\d+(?:\.\d+)*|Q\d+|[BC]\d+|pitfall \d+|Appendix [AB]))?"
)


def _anchor(section: str) -> str:
    """The heading id of a spec section: §3.2 → s3-2, Q6 → q6, pitfall 5 → pitfall-5."""
    section = section.replace("§", "s").replace(" ", "-").replace(".", "-").lower()
    return section.replace("s-", "s", 1) if section.startswith("s-") else section


def _docs_link(m: re.Match) -> str:
    page, section = m.group(1), m.group(2)
    target = f"../{page}.md" + (f"#{_anchor(section)}" if section else "")
    return f"[{m.group(0)}]({target})"


def _raise(name: str) -> None:
    raise ImportError(f"the API reference could not import {name!r} (see the traceback above)")


def _declared_packages(root: str) -> list[str]:
    """The packages below ``root`` that ``pyproject.toml`` lists (``[tool.setuptools]``).

    In an editable install a package mapped from another folder (``transflow.experiments``
    from ``experiments/``) is not inside ``transflow.__path__``, so walking the path alone
    would miss it; the package list names it (``tests/test_packaging.py`` keeps it complete).
    """
    pyproject = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.is_file():
        return []
    import tomllib

    packages = tomllib.loads(pyproject.read_text())["tool"]["setuptools"]["packages"]
    return [p for p in packages if p == root or p.startswith(root + ".")]


def public_modules(root: str = ROOT) -> list[str]:
    """Every public module and package below ``root`` (itself included), sorted.

    A module is public when no component of its dotted name starts with ``_``
    (``transflow._grid`` is private, ``transflow.continuous`` public); ``__main__`` modules
    are skipped. An import error fails loudly (a page would silently go missing otherwise).

    Example:
        >>> "transflow.continuous" in public_modules()
        True
        >>> any(m.split(".")[-1].startswith("_") for m in public_modules())
        False
    """
    names: set[str] = set()
    for package_name in [root, *_declared_packages(root)]:
        package = importlib.import_module(package_name)
        names.add(package_name)
        for info in pkgutil.walk_packages(package.__path__, package_name + ".", onerror=_raise):
            names.add(info.name)
    return sorted(n for n in names if not any(p.startswith("_") for p in n.split(".")))


def public_names(module: ModuleType) -> list[str]:
    """The public names of ``module`` that the API reference documents (see module docs).

    Example:
        >>> import transflow.plotting
        >>> public_names(transflow.plotting)
        ['figure_smoke', 'save_figure']
    """
    explicit = getattr(module, "__all__", None)
    if explicit is not None:
        return list(explicit)
    is_package = hasattr(module, "__path__")
    names = []
    for name, obj in vars(module).items():
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if is_package:
            names.append(name)
        elif (inspect.isclass(obj) or inspect.isfunction(obj)) and getattr(
            obj, "__module__", None
        ) == module.__name__:
            names.append(name)
    return names


def _attribute_docs(path: pathlib.Path) -> dict[str, str]:
    """``{name: docstring}`` of a source file's module-level constants, as griffe reads
    them: the string literal right after the assignment, else the ``#:`` comment lines
    right above it."""
    import ast

    source = path.read_text()
    lines = source.splitlines()
    out: dict[str, str] = {}
    body = ast.parse(source).body
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            targets = [node.target.id]
        else:
            continue
        doc = ""
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (
            isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            doc = inspect.cleandoc(nxt.value.value)
        else:
            comments, j = [], node.lineno - 2
            while j >= 0 and lines[j].lstrip().startswith("#:"):
                comments.insert(0, lines[j].lstrip()[2:].strip())
                j -= 1
            doc = "\n".join(comments)
        for target in targets:
            out.setdefault(target, doc)
    return out


_ATTRIBUTE_DOCS: dict[str, dict[str, str]] = {}


def _import_source(init: pathlib.Path, name: str) -> list[pathlib.Path]:
    """The file that ``init`` imports ``name`` from with a relative ``from … import``."""
    import ast

    try:
        tree = ast.parse(init.read_text())
    except (OSError, SyntaxError):
        return []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level and node.module:
            if any(a.name == name for a in node.names):
                base = init.parent
                for _ in range(node.level - 1):
                    base = base.parent
                path = base.joinpath(*node.module.split("."))
                for candidate in (path.with_suffix(".py"), path / "__init__.py"):
                    if candidate.exists():
                        return [candidate]
    return []


def _attribute_doc(module: ModuleType, name: str) -> str:
    """The docstring of constant ``name`` of ``module``: searched in the module's file and,
    for a package, in the files of its package folder (where ``__init__`` imports it from)."""
    file = getattr(module, "__file__", None)
    if not file:
        return ""
    here = pathlib.Path(file)
    # the file a package's __init__ imports the name from (``from .._integrate import
    # SOLVERS`` in transflow/continuous), then its own files and its subpackages' files
    package = here.name == "__init__.py"
    files = [here] + _import_source(here, name)
    if package:
        files += sorted(here.parent.glob("*.py")) + sorted(here.parent.rglob("*.py"))
    files = list(dict.fromkeys(files))  # each file once, in this order
    for path in files:
        key = str(path)
        if key not in _ATTRIBUTE_DOCS:
            try:
                _ATTRIBUTE_DOCS[key] = _attribute_docs(path)
            except (OSError, SyntaxError):
                _ATTRIBUTE_DOCS[key] = {}
        doc = _ATTRIBUTE_DOCS[key].get(name)
        if doc:
            return doc
    return ""


def _summary(obj: object, module: ModuleType | None = None, name: str = "") -> str:
    """The first paragraph of a docstring, on one line, for the overview tables.

    Classes and functions: their docstring. Constants (and type aliases): the attribute
    docstring of ``name`` in ``module`` (see :func:`_attribute_docs`)."""
    if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismethod(obj):
        doc = inspect.getdoc(obj)
    elif module is not None and name:
        doc = _attribute_doc(module, name) or (inspect.getdoc(obj) if callable(obj) else None)
    else:
        doc = inspect.getdoc(obj) if callable(obj) else None
    if not doc:
        return ""
    return adapt(doc.strip().split("\n\n")[0]).replace("\n", " ")


def missing_summaries(root: str = ROOT) -> list[str]:
    """Every public name whose entry in the overview tables would have no summary."""
    missing = []
    for sections in pages_and_modules(root).values():
        for module_name, names in sections:
            module = importlib.import_module(module_name)
            for name in names:
                if not _summary(getattr(module, name, None), module, name).strip():
                    missing.append(f"{module_name}.{name}")
    return missing


def _escape_outside_code(text: str) -> str:
    """A summary as one table cell: outside code spans ``<``, ``&`` become entities and
    ``|`` is escaped; inside them Markdown needs neither (the table splits around them).
    """
    parts = _CODE_SPAN.split(text)  # odd indices: code spans
    for i in range(0, len(parts), 2):
        parts[i] = html.escape(parts[i], quote=False).replace("|", "\\|")
    return "".join(parts)


def _page_of(module: str, root: str = ROOT) -> str:
    """The page a module is documented on: ``transflow`` or its top-level subpackage."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else root


def pages_and_modules(root: str = ROOT) -> dict[str, list[tuple[str, list[str]]]]:
    """``{page: [(module, names), ...]}``: every public module with at least one name.

    One page per top-level subpackage (``transflow.continuous``, ``transflow.experiments``,
    ...) and one for ``transflow`` itself; modules below a subpackage get a section on its
    page (``transflow.experiments.context`` on ``transflow.experiments``).
    """
    pages: dict[str, list[tuple[str, list[str]]]] = {}
    for name in public_modules(root):
        module = importlib.import_module(name)
        names = public_names(module)
        if names:
            pages.setdefault(_page_of(name, root), []).append((name, names))
    return pages


def page_path(page: str) -> str:
    """Where a page lives inside ``docs/`` (``api/transflow.continuous.md``)."""
    return f"{API_DIR}/{page}.md"


def _module_doc_first_paragraph(module: ModuleType) -> str:
    doc = inspect.getdoc(module) or ""
    return _escape_outside_code(adapt(doc.strip().split("\n\n")[0]).replace("\n", " "))


def _render_page(page: str, sections: list[tuple[str, list[str]]]) -> str:
    lines = [f"# `{page}` {{ #{page} }}", ""]
    single = len(sections) == 1 and sections[0][0] == page
    for module_name, names in sections:
        module = importlib.import_module(module_name)
        level = 2 if single else 3
        if not single:
            lines += [f"## `{module_name}` {{ #{module_name} }}", ""]
        # The module docstring (without its members), then a table of the names.
        lines += [
            f"::: {module_name}",
            "    options:",
            "      members: false",
            "      show_root_heading: false",
            "      show_root_toc_entry: false",
            "",
            '<div class="tf-api-summary" markdown>',
            "",
            "| name | summary |",
            "|---|---|",
        ]
        for name in names:
            obj = getattr(module, name, None)
            summary = _escape_outside_code(_summary(obj, module, name))
            lines.append(f"| [`{name}`][{module_name}.{name}] | {summary} |")
        lines += ["", "</div>", ""]
        for name in names:
            lines += [
                f"::: {module_name}.{name}",
                "    options:",
                f"      heading_level: {level}",
                "",
            ]
    return "\n".join(lines)


def _render_index(pages: dict[str, list[tuple[str, list[str]]]]) -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings at every build: each page lists every public name of",
        "a subpackage (its `__all__`, or the names its `__init__` re-exports), so a new name",
        "appears here without editing the docs. Examples in the docstrings run as doctests",
        "in `make test` (`tests/test_doctests.py`).",
        "",
        "| package | names | what it holds |",
        "|---|---|---|",
    ]
    for page, sections in pages.items():
        count = sum(len(names) for _, names in sections)
        module = importlib.import_module(page)
        link = f"[`{page}`]({page}.md)"
        lines.append(f"| {link} | {count} | {_module_doc_first_paragraph(module)} |")
    lines.append("")
    return "\n".join(lines)


def api_pages(root: str = ROOT) -> dict[str, str]:
    """``{path inside docs/: markdown}`` for the API index and one page per subpackage.

    Example:
        >>> pages = api_pages()
        >>> "::: transflow.Grid" in pages["api/transflow.md"]
        True
    """
    pages = pages_and_modules(root)
    out = {f"{API_DIR}/index.md": _render_index(pages)}
    for page, sections in pages.items():
        out[page_path(page)] = _render_page(page, sections)
    return out


def nav_entries(root: str = ROOT) -> list[dict[str, str]]:
    """The API part of the site navigation: the index, then one entry per page."""
    entries = [{"Overview": f"{API_DIR}/index.md"}]
    entries += [{page: page_path(page)} for page in pages_and_modules(root)]
    return entries
