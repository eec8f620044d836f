"""Every relative link in README.md, CONTRIBUTING.md and docs/ leads somewhere: the file or
folder it names exists in the tree, and an `#anchor` names a heading of the page it points
at, slugged the way GitHub slugs headings. Markdown is read by markdown-it (CommonMark, as
GitHub reads it), so code spans and fenced blocks are not taken for links.

Pointers written in words, `docs/operations.md, "Releasing"` (in the docs, the code, the
chart), name a section that is there: a heading, or a paragraph's bold lead-in. And code
named as `path.py:function` (or `path.py:Class.method`) is defined there."""

from __future__ import annotations

import ast
import itertools
import re
import unicodedata
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

from testbed.processes import ROOT

PAGES = sorted([ROOT / "README.md", ROOT / "CONTRIBUTING.md", *(ROOT / "docs").rglob("*.md")])
MARKDOWN = MarkdownIt("commonmark").enable("table")
# Where pointers in words may stand (CHANGELOG.md is history: it names sections of its day).
POINTER_SOURCES = [
    *PAGES,
    *(ROOT / "deploy").rglob("*"),
    *(p for top in ("agentwire", "bench", "domains", "nodeagent", "portal", "scripts", "testbed")
      for p in (ROOT / top).rglob("*.py")),
    ROOT / "pyproject.toml",
    ROOT / "Makefile",
]  # fmt: skip
# `portal/web/views/tenant.py:request_domain`, `nodeagent/agent.py:Agent.cycle`
CODE_NAME = re.compile(r"`(?P<path>[\w./-]+\.py):(?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)`")
# `page.md, "Section"`, `[page.md](page.md) ("Section")`, `README's "Section"` …
POINTER = re.compile(
    r"(?P<page>(?:[\w.-]+/)*[\w.-]+\.md|README)(?:\]\([^)\s]*\))?\)?(?:'s)?,?\s*\(?"
    r'"(?P<section>[^"\n]{2,80})"'
)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading (github-slugger): lower case, every character but
    letters, digits, marks, `-`, `_` and spaces dropped, each space a hyphen."""
    kept = (c for c in heading.lower() if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return "".join(kept).replace(" ", "-")


def _inline_text(token: Token) -> str:
    """A heading's text as GitHub renders it: its words and code, without the markup."""
    return "".join(
        child.content for child in token.children or [] if child.type in ("text", "code_inline")
    )


@cache
def tokens(page: Path) -> list[Token]:
    return MARKDOWN.parse(page.read_text(encoding="utf-8"))


@cache
def anchors(page: Path) -> frozenset[str]:
    """The anchors GitHub gives the page's headings (a repeated one gets -1, -2 …)."""
    seen: dict[str, int] = {}
    found = set()
    items = tokens(page)
    for opening, inline in itertools.pairwise(items):
        if opening.type != "heading_open":
            continue
        base = slug(_inline_text(inline))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(page: Path) -> Iterator[str]:
    """Every link and image target of the page, in order."""
    for token in tokens(page):
        for child in token.children or []:
            if child.type == "link_open":
                yield str(child.attrs["href"])
            elif child.type == "image":
                yield str(child.attrs["src"])


def broken(page: Path, target: str) -> str | None:
    """Why a relative link does not lead where it says, or None when it does."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None  # not relative: another site's business
    path, anchor = unquote(parts.path), unquote(parts.fragment)
    base = ROOT if path.startswith("/") else page.parent  # "/…": from the repository's root
    dest = (base / path.lstrip("/")).resolve() if path else page
    if not dest.is_relative_to(ROOT):
        return "points outside the repository"
    if not dest.exists():
        return "no such file or folder"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"no heading of {dest.relative_to(ROOT)} has the anchor #{anchor}"
    return None


@cache
def sections(page: Path) -> tuple[str, ...]:
    """The slugs of what a pointer in words may name: headings and bold lead-ins."""
    found = []
    for token in tokens(page):
        if token.type != "inline":
            continue
        children = token.children or []
        found += [
            slug(text.content)
            for bold, text in itertools.pairwise(children)
            if bold.type == "strong_open" and text.type == "text"
        ]
    items = tokens(page)
    found += [
        slug(_inline_text(i)) for o, i in itertools.pairwise(items) if o.type == "heading_open"
    ]
    return tuple(found)


def pointers(source: Path) -> Iterator[tuple[Path | None, str]]:
    """(the page, the section) of every pointer in words in the file; page None: not found."""
    text = source.read_text(encoding="utf-8", errors="replace")
    for match in POINTER.finditer(text):
        name = "README.md" if match["page"] == "README" else match["page"]
        candidates = [source.parent / name, ROOT / name, ROOT / "docs" / name]
        page = next((c.resolve() for c in candidates if c.is_file()), None)
        yield page, match["section"]


def test_every_pointer_in_words_names_a_section_that_is_there() -> None:
    problems = []
    for source in POINTER_SOURCES:
        if not source.is_file():
            continue
        for page, section in pointers(source):
            where = source.relative_to(ROOT)
            if page is None:
                problems.append(f'{where}: "{section}" is in a page that does not exist')
            elif not any(s.startswith(slug(section)) for s in sections(page)):
                problems.append(f'{where}: {page.relative_to(ROOT)} has no section "{section}"')
    assert problems == [], "\n".join(problems)


@cache
def definitions(source: Path) -> frozenset[str]:
    """The functions and classes a module defines, and its classes' methods as Class.name."""
    found = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.add(node.name)
        if isinstance(node, ast.ClassDef):
            found |= {
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return frozenset(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_code_named_as_file_and_function_is_defined_there(page: Path) -> None:
    problems = []
    for match in CODE_NAME.finditer(page.read_text(encoding="utf-8")):
        source = ROOT / match["path"]
        if not source.is_file():
            problems.append(f"{match[0]}: no file {match['path']}")
        elif match["name"] not in definitions(source):
            problems.append(f"{match[0]}: {match['path']} defines no {match['name']}")
    assert problems == [], f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    problems = [
        f"{target}: {why}" for target in links(page) if (why := broken(page, target)) is not None
    ]
    assert problems == [], f"{page.relative_to(ROOT)}: broken links:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Node agent ↔ portal", "node-agent--portal"),
        ("The Django admin and join tokens", "the-django-admin-and-join-tokens"),
        ("In: Nodes, Namespaces, kubectl-created ComputeDomains",
         "in-nodes-namespaces-kubectl-created-computedomains"),
        ("`make demo` (the whole thing)", "make-demo-the-whole-thing"),
        ("Why two DaemonSets?", "why-two-daemonsets"),
    ],
)  # fmt: skip
def test_anchors_are_slugged_as_github_slugs_them(heading: str, anchor: str) -> None:
    page = MARKDOWN.parse(f"## {heading}\n")
    assert slug(_inline_text(page[1])) == anchor


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Tests\n\n## Tests\n\n## Tests\n")
    assert anchors(page) == {"tests", "tests-1", "tests-2"}


def test_a_pointer_in_words_is_found_however_it_is_written(tmp_path: Path) -> None:
    source = tmp_path / "notes.py"
    source.write_text(
        '# see docs/operations.md, "Releasing"; [security.md](security.md) ("Agent identity")\n'
        '# and the README\'s "Demo logins"\n'
    )
    found = [(page and page.name, section) for page, section in pointers(source)]
    assert found == [
        ("operations.md", "Releasing"),
        ("security.md", "Agent identity"),
        ("README.md", "Demo logins"),
    ]


def test_a_link_to_a_missing_heading_or_file_is_caught() -> None:
    readme = ROOT / "README.md"
    assert broken(readme, "docs/architecture.md#import-layers") is None
    assert broken(readme, "docs/architecture.md#no-such-section") is not None
    assert broken(readme, "docs/no-such-page.md") is not None
    assert broken(readme, "../outside.md") == "points outside the repository"
    assert broken(readme, "https://example.com/#whatever") is None
