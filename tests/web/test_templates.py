"""Mistakes a template can make that no page test would notice on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

TEMPLATES = sorted((Path(__file__).resolve().parents[2] / "templates").rglob("*.html"))


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_no_template_opens_a_comment_that_django_would_print(path):
    # {# … #} is one line only: a comment spread over two is printed on the page as is.
    for number, line in enumerate(path.read_text().splitlines(), 1):
        opened = line.count("{#") - line.count("#}")
        assert opened <= 0, f"{path.name}:{number}: a {{# #}} comment must close on its line"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda p: p.name)
def test_no_table_has_an_empty_column_header(path):
    assert not re.search(r"<th[^>]*>\s*</th>", path.read_text()), path.name
