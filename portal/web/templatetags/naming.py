"""One name per thing on every page: a clique reads as its short name (what operators call
it) followed by its label, the `nvidia.com/gpu.clique` value that the API, the manifests
and Kubernetes use, so either can be found from the other."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

LABEL_TITLE = "nvidia.com/gpu.clique label: the clique's name in the API and the manifests"


@register.filter
def clique_names(clique: Any) -> SafeString | str:
    """`gb-r02-c0 <code>…uuid….0</code>`; the label alone when the clique has no name, and
    "" for no clique."""
    if clique is None:
        return ""
    label = clique.label
    if not clique.name:
        return format_html('<code class="clique-label" title="{}">{}</code>', LABEL_TITLE, label)
    return format_html(
        '<span class="clique-name">{}</span> <code class="clique-label" title="{}">{}</code>',
        clique.name,
        LABEL_TITLE,
        label,
    )


@register.filter
def identity_value(value: Any) -> str:
    """One side of a reported identity change: a list (GPU UUIDs) comma-separated, nothing
    as "none"."""
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "none"
    return str(value) if value not in (None, "") else "none"
