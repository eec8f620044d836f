"""The operators' needs-attention list: trays and domains that need someone now, each with
why, since when and the actions that deal with it, sortable, filterable and live."""

from __future__ import annotations

from collections import Counter

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from domains.attention.selectors import KINDS, Item, needs_attention
from domains.computedomains.trays import TRAY_ACTIONS
from portal.web.access import SignedInRequest, operator_required
from portal.web.forms import AttentionFilterForm

ROWS_PER_PAGE = 100


@operator_required
def attention(request: SignedInRequest) -> HttpResponse:
    """`?kind=`, `?q=` filter; `?sort=since|-since|kind|subject|rack…`; `?partial=1` for
    the live refresh."""
    form = AttentionFilterForm(request.GET or None)
    data = form.cleaned_data if form.is_valid() else {}
    items = needs_attention(now=timezone.now())
    shown = _filtered(items, data.get("kind", ""), data.get("q", ""))
    sort = data.get("sort") or "kind"
    # A page at a time: when a whole fleet's agents fall silent at once, 18,000 rows.
    page = Paginator(_sorted(shown, sort), ROWS_PER_PAGE).get_page(request.GET.get("page"))
    context = {
        "form": form,
        "rows": [(i, _actions(request, i)) for i in page],
        "page": page,
        "counts": [(KINDS[k], n) for k, n in Counter(i.kind for i in items).items()],
        "shown": len(shown),
        "total": len(items),
        "sort": sort,
        "query": _query_without(request, "sort", "partial", "page"),
        "page_query": _query_without(request, "partial", "page"),
        "headers": [
            (key, words, _order(sort, key)) for key, words in AttentionFilterForm.SORTS.items()
        ],
    }
    template = (
        "operator/_attention.html" if request.GET.get("partial") else "operator/attention.html"
    )
    return render(request, template, context)


def _actions(request: SignedInRequest, item: Item) -> list[tuple[str, str, str]]:
    """(key, words, url) of each action one click away: a tray action's confirmation page
    (it asks for the reason), the tray's accept form, the approvals, the domain's page."""
    out = []
    for key in item.actions:
        if key in TRAY_ACTIONS:
            url = reverse("operator:node_action", args=[item.hostname, key])
            out.append((key, f"{TRAY_ACTIONS[key].title}…", url))
        elif key == "accept":
            out.append((key, "Accept…", reverse("operator:node", args=[item.hostname]) + "#accept"))
        elif key == "approve" and request.user.is_superuser:
            url = reverse("admin_ui:approvals") + f"#approval-{item.domain_uid}"
            out.append((key, "Approve or deny…", url))
        elif key == "open":
            url = reverse("tenant:domain", args=[item.namespace, item.domain_uid])
            out.append((key, "Open domain", url))
    return out


def _order(sort: str, key: str) -> str:
    """The column's aria-sort: "ascending", "descending" or "" when not sorted by it."""
    if sort.removeprefix("-") != key:
        return ""
    return "descending" if sort.startswith("-") else "ascending"


def _filtered(items: list[Item], kind: str, q: str) -> list[Item]:
    q = q.strip().lower()
    return [
        i
        for i in items
        if (not kind or i.kind == kind) and (not q or q in i.subject.lower() or q in i.rack.lower())
    ]


def _sorted(items: list[Item], sort: str) -> list[Item]:
    """`items` (already most urgent first) by `sort`; a leading "-" reverses it."""
    key = sort.removeprefix("-")
    if key == "kind":
        ordered = list(items)
    else:
        ordered = sorted(items, key=lambda i: (str(getattr(i, key) or ""), i.subject))
    return ordered[::-1] if sort.startswith("-") else ordered


def _query_without(request: SignedInRequest, *names: str) -> str:
    query = request.GET.copy()
    for name in names:
        query.pop(name, None)
    return query.urlencode()
