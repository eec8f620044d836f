"""Portal admin pages: quotas, the approval queue, namespaces and members, the audit log."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from domains.audit.events import Actor
from domains.audit.models import Event
from domains.computedomains import services
from domains.computedomains.fabric import FabricRead, fabric_read, topology_snapshot
from domains.computedomains.models import ComputeDomain, Phase
from domains.computedomains.placing import placement_request
from domains.computedomains.selectors import (
    approvals_visible_to,
    domains_visible_to,
    events_visible_to,
    quota_usage,
    usage_by_namespace,
)
from domains.errors import DomainError
from domains.placement.model import Placement, Rejection, SpanningPlacement, Topology
from domains.placement.spanning import plan
from domains.tenancy import services as tenancy
from domains.tenancy.models import ApiToken, Namespace, Quota
from domains.tenancy.selectors import members_of, namespaces_with_members, namespaces_with_quotas
from domains.tenancy.tokens import token_revoke
from portal.web.access import SignedInRequest, admin_required
from portal.web.fabric import Visibility, draw_racks
from portal.web.forms import (
    AuditFilterForm,
    MemberForm,
    NamespaceForm,
    QuotaForm,
    ReasonForm,
    apply_error,
)

AUDIT_PAGE = 200
ZERO_USAGE = {"gpus": 0, "nodes": 0, "domains": 0}


@admin_required
def quotas(request: SignedInRequest) -> HttpResponse:
    """Every namespace's limits beside what it uses now."""
    usage = usage_by_namespace()
    rows = []
    for ns in namespaces_with_quotas():
        quota, used = getattr(ns, "quota", None), usage.get(ns.pk, ZERO_USAGE)
        rows.append({"namespace": ns, "quota": quota, "usage": used, "over": _over(quota, used)})
    return render(request, "admin/quotas.html", {"rows": rows})


def _over(quota: Quota | None, used: dict[str, int]) -> list[str]:
    """The resources a namespace holds more of than its quota allows (saved below use)."""
    if quota is None:
        return []
    limits = {"gpus": quota.max_gpus, "nodes": quota.max_nodes, "domains": quota.max_domains}
    return [key for key, limit in limits.items() if limit is not None and used[key] > limit]


@admin_required
@require_http_methods(["GET", "POST"])
def quota_edit(request: SignedInRequest, ns: str) -> HttpResponse:
    namespace = get_object_or_404(Namespace, name=ns)
    quota = Quota.objects.filter(namespace=namespace).first()
    form = QuotaForm(request.POST or None, initial=QuotaForm.initial_from(quota))
    form.show_usage(quota_usage(namespace))
    if request.method == "POST" and form.is_valid():
        try:
            tenancy.quota_set(
                actor=Actor.for_user(request.user), namespace=namespace, **form.limits()
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"Saved the quota of {namespace.name}.")
            below = form.below_use()
            if below:
                messages.warning(
                    request,
                    f"{namespace.name} holds more than its new quota ({'; '.join(below)}). "
                    "Nothing running is stopped; its new requests are refused until it is "
                    "back under.",
                )
            return redirect(reverse("admin_ui:quotas") + f"#quota-{namespace.name}")
    return render(request, "admin/quota_edit.html", {"namespace": namespace, "form": form})


@admin_required
def approvals(request: SignedInRequest) -> HttpResponse:
    """Requests above their namespace's threshold, each with where it would land now.

    Every preview places against one topology snapshot and draws from one fabric read, so
    the page costs the same queries for one pending request and for twenty.
    """
    pending = list(approvals_visible_to(request.user).filter(phase=Phase.PENDING))
    topology = topology_snapshot() if pending else Topology(())
    outcomes = [plan(placement_request(domain), topology) for domain in pending]
    racks = {rack for o in outcomes for rack in _racks_of(o)}
    read = fabric_read(rack_names=racks, topology=topology) if racks else None
    visibility = Visibility.of(request.user)
    usage = usage_by_namespace()
    items = [
        _approval(domain, outcome, read, visibility, usage)
        for domain, outcome in zip(pending, outcomes, strict=True)
    ]
    template = "admin/_approvals.html" if request.GET.get("partial") else "admin/approvals.html"
    return render(request, template, {"items": items})


def _racks_of(outcome: Placement | SpanningPlacement | Rejection) -> list[str]:
    """The racks a preview lands on (every rack of a domain over several cliques)."""
    if isinstance(outcome, Rejection):
        return []
    return [outcome.rack] if isinstance(outcome, Placement) else outcome.racks


def _approval(
    domain: ComputeDomain,
    outcome: Placement | SpanningPlacement | Rejection,
    read: FabricRead | None,
    visibility: Visibility,
    usage: dict[int, dict[str, int]],
) -> dict[str, Any]:
    quota = getattr(domain.namespace, "quota", None)
    used = usage.get(domain.namespace_id, ZERO_USAGE)  # already includes this request
    racks = []
    if not isinstance(outcome, Rejection) and read is not None:
        names = _racks_of(outcome)
        racks = draw_racks(
            read, visibility, rack_names=names, highlight=outcome.node_ids, links=False
        )
    threshold = quota.approval_above_nodes if quota else None
    why = (
        f"{domain.num_nodes} trays is above {domain.namespace.name}'s approval threshold of "
        f"{threshold} tray{'s' if threshold != 1 else ''}"
        if threshold is not None and domain.num_nodes > threshold
        else "an admin asked to approve it"
    )
    return {
        "domain": domain,
        "why": why,
        "placement": None if isinstance(outcome, Rejection) else outcome,
        "rejection": outcome if isinstance(outcome, Rejection) else None,
        "racks": racks,
        "impact": [
            ("GPUs", domain.gpu_count, used["gpus"], quota.max_gpus if quota else None),
            ("Trays", domain.num_nodes, used["nodes"], quota.max_nodes if quota else None),
            ("Domains", 1, used["domains"], quota.max_domains if quota else None),
        ],
    }


@admin_required
@require_POST
def approval_decide(request: SignedInRequest, uid: str, decision: str) -> HttpResponse:
    domain = get_object_or_404(domains_visible_to(request.user), uid=uid)
    actor = Actor.for_user(request.user)
    form = ReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    try:
        if decision not in ("approve", "deny"):
            raise Http404("no such decision")
        if decision == "approve":
            services.domain_approve(actor=actor, domain=domain)
            messages.success(request, f"Approved {domain}.")
        else:
            services.domain_deny(actor=actor, domain=domain, reason=reason)
            messages.success(request, f"Denied {domain}.")
    except DomainError as exc:
        messages.error(request, exc.message)
    return redirect("admin_ui:approvals")


@admin_required
@require_http_methods(["GET", "POST"])
def namespaces(request: SignedInRequest) -> HttpResponse:
    form = NamespaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            namespace = tenancy.namespace_create(
                actor=Actor.for_user(request.user),
                name=form.cleaned_data["name"].strip(),
                display_name=form.cleaned_data["display_name"],
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"Created namespace {namespace.name}.")
            return redirect("admin_ui:namespace", namespace.name)
    rows = namespaces_with_members()
    return render(request, "admin/namespaces.html", {"namespaces": rows, "form": form})


@admin_required
@require_http_methods(["GET", "POST"])
def namespace(request: SignedInRequest, ns: str) -> HttpResponse:
    """Members of one namespace: add, change role, remove."""
    target = get_object_or_404(Namespace, name=ns)
    form = MemberForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            tenancy.membership_set(
                actor=Actor.for_user(request.user),
                namespace=target,
                user=form.user,
                role=form.cleaned_data["role"],
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            messages.success(request, f"{form.user.username} is now {form.cleaned_data['role']}.")
            return redirect("admin_ui:namespace", target.name)
    members = members_of(target)
    return render(
        request, "admin/namespace.html", {"namespace": target, "members": members, "form": form}
    )


@admin_required
@require_POST
def member_remove(request: SignedInRequest, ns: str, username: str) -> HttpResponse:
    target = get_object_or_404(Namespace, name=ns)
    user = get_object_or_404(get_user_model(), username=username)
    tenancy.membership_remove(actor=Actor.for_user(request.user), namespace=target, user=user)
    messages.success(request, f"Removed {username} from {target.name}.")
    return redirect("admin_ui:namespace", target.name)


@admin_required
def audit(request: SignedInRequest) -> HttpResponseBase:
    """The audit log with filters; `?format=csv` exports every matching row."""
    form = AuditFilterForm(request.GET or None)
    qs = events_visible_to(request.user)
    if form.is_valid():
        data = form.cleaned_data
        if data["actor"]:
            qs = qs.filter(actor_name__icontains=data["actor"])
        if data["namespace"]:
            qs = qs.filter(namespace__name=data["namespace"])
        if data["verb"]:
            qs = qs.filter(verb__startswith=data["verb"])
        if data["since"]:
            qs = qs.filter(created_at__gte=data["since"])
        if data["until"]:
            qs = qs.filter(created_at__lte=data["until"])
    elif form.is_bound:
        # A filter that cannot be read narrows nothing: listing everything would pass for
        # its answer. The form says which field is wrong; nothing is listed or exported.
        qs = qs.none()
        if request.GET.get("format") == "csv":
            return HttpResponse(
                "; ".join(f"{f}: {' '.join(map(str, e))}" for f, e in form.errors.items()),
                status=400,
                content_type="text/plain; charset=utf-8",
            )
    if request.GET.get("format") == "csv":
        response = StreamingHttpResponse(_csv_rows(qs), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="audit-log.csv"'
        return response
    export = request.GET.copy()
    export["format"] = "csv"
    # Pages by offset without counting: a count over the whole audit log grows with it.
    number = _page_number(request.GET.get("page"))
    start = (number - 1) * AUDIT_PAGE
    rows = list(qs[start : start + AUDIT_PAGE + 1])
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "events": rows[:AUDIT_PAGE],
        "page": AUDIT_PAGE,
        "number": number,
        "first": start + 1,
        "last": start + len(rows[:AUDIT_PAGE]),
        "older": number + 1 if len(rows) > AUDIT_PAGE else None,
        "newer": number - 1 if number > 1 else None,
        "query": query.urlencode(),
        "export": export.urlencode(),
        "invalid": form.is_bound and not form.is_valid(),
        # "match these filters" only when there are filters: otherwise the log is empty.
        "filtered": any(request.GET.get(field) for field in form.fields),
    }
    return render(request, "admin/audit.html", context)


def _page_number(text: str | None) -> int:
    try:
        return max(1, min(int(text or 1), 100_000))
    except ValueError:
        return 1


TOKENS_PAGE = 50


@admin_required
def tokens(request: SignedInRequest) -> HttpResponse:
    """Every user's API tokens (never their secrets), newest first, to find and revoke."""
    qs = ApiToken.objects.select_related("user").order_by("-created_at")
    who = request.GET.get("user", "").strip()
    if who:
        qs = qs.filter(user__username__icontains=who)
    page = Paginator(qs, TOKENS_PAGE).get_page(request.GET.get("page"))
    context = {"page": page, "tokens": page.object_list, "who": who, "now": timezone.now()}
    return render(request, "admin/tokens.html", context)


@admin_required
@require_POST
def token_revoke_any(request: SignedInRequest, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken.objects.select_related("user"), pk=token_id)
    token_revoke(actor=Actor.for_user(request.user), token=token)
    messages.success(
        request, f"Revoked {token.user.username}'s token {token.name} ({token.prefix}…)."
    )
    return redirect("admin_ui:tokens")


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv_rows(qs) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(
        ["time", "actor_kind", "actor", "verb", "object", "namespace", "message", "request_id"]
    )
    for event in qs.iterator(chunk_size=1000):
        yield writer.writerow(_csv_line(event))


def _cell(value: str) -> str:
    """Defuse spreadsheet formulas: a message typed by a user must not run in Excel."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _csv_line(event: Event) -> list[str]:
    return [
        _cell(v)
        for v in (
            event.created_at.isoformat(),
            event.actor_kind,
            event.actor_name,
            event.verb,
            event.object_repr,
            event.namespace.name if event.namespace else "",
            event.message,
            event.request_id,
        )
    ]
