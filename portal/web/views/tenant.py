"""Tenant pages: a namespace's dashboard, the request form with its live preview, and a
domain's detail with the formation timeline, peer matrix, manifests and actions."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST

from domains.audit.events import Actor
from domains.computedomains import services
from domains.computedomains.fabric import placement_targets
from domains.computedomains.incidents import domain_incident_notes, replaced_down_trays
from domains.computedomains.models import LIVE_PHASES, ComputeDomain, DomainMember, Phase
from domains.computedomains.selectors import (
    domain_peers,
    domains_visible_to,
    queued_domains,
    quota_usage,
)
from domains.errors import DomainError, InvalidInput, InvalidTransition
from domains.foresight.maintenance import windows_for_domain
from domains.inventory.models import Clique, Rack
from domains.kube.client import kube_enabled
from domains.kube.manifests import follow_replicas, parse_replicas, workload_manifests
from domains.kube.models import TrayPod
from domains.kube.workloads import tray_pods
from domains.tenancy.models import Namespace, Quota
from domains.tenancy.selectors import can_request_in, is_operator
from portal.web.access import (
    SignedInRequest,
    requestable_namespace,
    visible_domain,
    visible_namespace,
)
from portal.web.fabric import fabric_view
from portal.web.formation import (
    channel_text,
    clique_rows,
    member_timeline,
    peer_matrix,
    teardown_summary,
)
from portal.web.forms import ExtendLeaseForm, ReasonForm, apply_error
from portal.web.requestform import GPUS_PER_TRAY, DomainRequestForm
from portal.web.views.trays import replacement_choices

MANIFEST_KINDS = ("deployment", "job", "mpijob")
MANIFEST_TITLES = {"deployment": "Deployment", "job": "Job", "mpijob": "MPIJob"}
QUOTA_LABELS = {"gpus": "GPUs", "nodes": "Trays", "domains": "Domains"}


@login_required
def dashboard(request: SignedInRequest, ns: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    quota = Quota.objects.filter(namespace=namespace).first()
    bars = quota_bars(quota, quota_usage(namespace))
    qs = (
        domains_visible_to(request.user)
        .filter(namespace=namespace)
        .select_related("placement_estimate")
    )
    context = {
        "namespace": namespace,
        "bars": bars,
        "live": with_queue_positions(qs.filter(phase__in=LIVE_PHASES)),
        "ended": qs.exclude(phase__in=LIVE_PHASES)[:20],
        "can_request": can_request_in(request.user, namespace),
    }
    template = "tenant/_dashboard.html" if request.GET.get("partial") else "tenant/dashboard.html"
    return render(request, template, context)


def with_queue_positions(domains: Iterable[ComputeDomain]) -> list[ComputeDomain]:
    """The domains, each waiting for placement told its place in the queue
    (`queue_position`, from 1; None for the others): one query, however many rows."""
    rows = list(domains)
    if not any(d.phase == Phase.ADMITTED for d in rows):
        return rows
    queue = {pk: i for i, pk in enumerate(queued_domains().values_list("pk", flat=True), 1)}
    for d in rows:
        d.queue_position = queue.get(d.pk)  # type: ignore[attr-defined]
    return rows


def _running(row: dict[str, int | None]) -> int:
    return (row["used"] or 0) - (row.get("reserved") or 0)


def quota_bars(quota: Quota | None, usage: dict[str, int]) -> list[dict[str, object]]:
    """One bar per limit: what runs (or is being placed and formed) apart from what
    requests awaiting an admin's approval reserve; both count against the limit."""
    limits = {
        "gpus": quota.max_gpus if quota else None,
        "nodes": quota.max_nodes if quota else None,
        "domains": quota.max_domains if quota else None,
    }
    return [
        {
            "label": QUOTA_LABELS[what],
            "running": usage[what] - usage[f"reserved_{what}"],
            "reserved": usage[f"reserved_{what}"],
            "total": usage[what],
            "limit": limit,
        }
        for what, limit in limits.items()
    ]


@login_required
@require_http_methods(["GET", "POST"])
def request_domain(request: SignedInRequest, ns: str) -> HttpResponse:
    namespace = requestable_namespace(request, ns)
    initial = {k: v for k, v in request.GET.items() if k in DomainRequestForm.base_fields}
    form = DomainRequestForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            domain = services.domain_request(
                actor=Actor.for_user(request.user), namespace=namespace, spec=form.to_spec()
            )
        except DomainError as exc:
            apply_error(form, exc)
        else:
            # Not the phase's message: this banner stays put while the phase below moves on.
            messages.success(request, f"Requested {domain.name}.")
            return redirect("tenant:domain", namespace.name, domain.uid)
    return render(
        request,
        "tenant/request.html",
        {
            "namespace": namespace,
            "form": form,
            "targets": placement_targets(),
            "headroom": headroom(namespace),
        },
    )


@dataclass(frozen=True)
class Headroom:
    """What the namespace's quota lets it ask for now (the request form's first line)."""

    trays: int | None  # the largest request the quota admits now; None: no limit
    reserved: list[tuple[str, int]]  # (name, trays) of requests awaiting approval
    approval_above: int | None  # more trays than this waits for an admin


def headroom(namespace: Namespace) -> Headroom:
    quota = Quota.objects.filter(namespace=namespace).first() or Quota(namespace=namespace)
    usage = quota_usage(namespace)
    room: list[int] = []
    if quota.max_domains is not None and usage["domains"] >= quota.max_domains:
        room.append(0)
    if quota.max_nodes is not None:
        room.append(quota.max_nodes - usage["nodes"])
    if quota.max_gpus is not None:
        room.append((quota.max_gpus - usage["gpus"]) // GPUS_PER_TRAY)
    if quota.max_nodes_per_domain is not None:
        room.append(quota.max_nodes_per_domain)
    pending = ComputeDomain.objects.filter(namespace=namespace, phase=Phase.PENDING)
    return Headroom(
        trays=max(0, min(room)) if room else None,
        reserved=list(pending.order_by("created_at").values_list("name", "num_nodes")),
        approval_above=quota.approval_above_nodes,
    )


@login_required
@require_POST
def preview(request: SignedInRequest, ns: str) -> HttpResponse:
    """The dry run for the form as typed so far: where it lands, or why not (htmx partial)."""
    namespace = requestable_namespace(request, ns)
    form = DomainRequestForm(request.POST)
    result, racks, problem, missing = None, [], "", ""
    if form.is_valid():
        try:
            result = services.domain_dry_run(
                namespace=namespace, spec=form.to_spec(), requested_by=request.user
            )
        except DomainError as exc:  # a name already live (Conflict) as much as bad input
            apply_error(form, exc)
    if result is not None and result.placeable and result.racks:  # every rack it would span
        racks = fabric_view(
            viewer=request.user, rack_names=result.racks, highlight=result.node_ids, links=False
        )
    if not form.is_valid() and form.incomplete_only():
        # Nothing typed is wrong yet (the form has just opened): say what is left, calmly.
        missing = ", ".join(str(form[f].label) for f in form.errors if f in form.fields)
    elif not form.is_valid():
        problem = "; ".join(
            f"{form[f].label if f in form.fields else 'Request'}: {' '.join(map(str, e))}"
            for f, e in form.errors.items()
        )
    rows = result.quota_impact if result else {}
    impact = [
        (QUOTA_LABELS.get(key, key), {**row, "running": _running(row)}) for key, row in rows.items()
    ]
    return render(
        request,
        "tenant/_preview.html",
        {
            "result": result,
            "impact": impact,
            "racks": racks,
            "problem": problem,
            "missing": missing,
            "namespace": namespace,
            "headroom": headroom(namespace),  # the form's first line, kept current with it
        },
    )


@login_required
def domain_detail(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    members = domain_peers(domain)
    manifests, manifests_note, replicas = _manifests(request, domain)
    ended = not domain.is_live
    down = [] if ended else [m for m in members if m.active and m.node.state == "down"]
    racks = _racks_of(request, members) if not ended else []
    context = {
        "namespace": namespace,
        "domain": domain,
        "ended": ended,
        "members": members,
        "clique": _clique_of(members) if not ended else None,
        "clique_rows": clique_rows(domain, members) if not ended else [],
        "active_members": sum(1 for m in members if m.active),
        "down_members": down,
        "silent_members": [] if ended else [m for m in members if m.active and m.state == "silent"],
        "others_up": sum(1 for m in members if m.active) - len(down),
        "again_now": _request_again_url(namespace, domain) if down else "",
        "replaced_down": [] if ended or down else replaced_down_trays(domain),
        "timeline": [member_timeline(m, domain) for m in members],
        "matrix": peer_matrix(members),
        "channels": channel_text(domain),
        "teardown": teardown_summary(domain, members) if ended else None,
        "racks": racks,
        # Its trays whose GPUs need attention (XIDs, NVLink errors rising, heat).
        "gpu_trouble": [t for r in racks for t in r.trays.values() if t.highlight and t.gpu_alerts],
        "pods": _pods(request, members) if not ended else [],
        "again": _request_again_url(namespace, domain) if ended else "",
        "events": domain.events.all()[:50],
        "manifests": [
            (k, MANIFEST_TITLES[k], manifests[k]) for k in MANIFEST_KINDS if k in manifests
        ],
        "manifests_note": manifests_note,
        "replicas": replicas,
        "can_request": can_request_in(request.user, namespace),
        "can_change": can_request_in(request.user, namespace) and domain.is_live,
        "can_extend": domain.phase in (Phase.READY, Phase.DEGRADED),
        "maintenance": list(windows_for_domain(domain)) if domain.is_live else [],
        "extend_form": ExtendLeaseForm(),
    }
    context |= _replace_context(request, domain, members, ended)
    shown = context["down_members"] or context["replaced_down"]
    context["incident_notes"] = list(domain_incident_notes(domain)[:5]) if shown else []
    partial = request.GET.get("partial")
    template = {"1": "tenant/_domain.html", "manifests": "tenant/_manifests.html"}.get(
        partial or "", "tenant/domain.html"
    )
    return render(request, template, context)


def _replace_context(request: SignedInRequest, domain: ComputeDomain, members, ended: bool) -> dict:
    """Operators: the trays of a placed domain that are not ready, and the free trays of its
    clique one of them may be replaced with (the pick of `replace: manual`)."""
    if ended or domain.follows_workload or not is_operator(request.user):
        return {}
    lost = [m.node.hostname for m in members if m.active and m.state != "ready"]
    if not lost:
        return {}
    return {"replace_lost": lost, "replace_choices": replacement_choices(domain)}


def _pods(request: SignedInRequest, members: list[DomainMember]) -> list[TrayPod]:
    """With Kubernetes on: the pods on the domain's trays, of the viewer's own namespaces
    (an operator sees all of them)."""
    if not kube_enabled():
        return []
    return tray_pods(request.user, [m.node_id for m in members if m.active])


def _manifests(
    request: SignedInRequest, domain: ComputeDomain
) -> tuple[dict[str, str], str, dict[str, object] | None]:
    """(manifests, why there are none, the replicas form of a domain that follows its
    workload: value, most, error). A bad `replicas` shows the default's manifests and the
    error beside the field."""
    replicas: dict[str, object] | None = None
    if domain.follows_workload and domain.is_live:
        limits = follow_replicas(domain)
        replicas = {"value": limits.default, "most": limits.most, "error": "", "asked": False,
                    "one_clique": limits.one_clique, "spread": False}  # fmt: skip
        try:
            asked = parse_replicas([v for v in request.GET.getlist("replicas") if v.strip()])
            manifests = workload_manifests(domain, replicas=asked)
            if asked is not None:
                replicas["value"], replicas["asked"] = asked, True
            replicas["spread"] = (asked or limits.default) > limits.one_clique
            return manifests, "", replicas
        except InvalidInput as exc:
            replicas["error"] = exc.message
            replicas["value"] = request.GET.get("replicas", "")[:20]
        except InvalidTransition as exc:
            return {}, exc.message, None
    try:
        return workload_manifests(domain), "", replicas
    except InvalidTransition as exc:
        return {}, exc.message, None


@login_required
def manifest_download(request: SignedInRequest, ns: str, uid: str, kind: str) -> HttpResponse:
    namespace = visible_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    if kind not in MANIFEST_KINDS:
        raise Http404("no such manifest")
    try:
        asked = request.GET.getlist("replicas")
        replicas = parse_replicas(asked) if domain.follows_workload else None
        text = workload_manifests(domain, replicas=replicas)[kind]
    except InvalidInput as exc:
        return HttpResponse(exc.message, status=400, content_type="text/plain; charset=utf-8")
    except InvalidTransition as exc:
        raise Http404(exc.message) from exc
    response = HttpResponse(text, content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{domain.name}-{kind}.yaml"'
    return response


@login_required
@require_http_methods(["GET", "POST"])
def release(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    """GET asks for confirmation; POST releases (idempotent in the service)."""
    namespace = requestable_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    form = ReasonForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.domain_release(
                actor=Actor.for_user(request.user),
                domain=domain,
                reason=form.cleaned_data["reason"],
            )
        except DomainError as exc:
            form.add_error(None, exc.message)
        else:
            messages.success(request, f"Releasing {domain.name}.")
            return redirect("tenant:domain", namespace.name, domain.uid)
    return render(
        request, "tenant/release.html", {"namespace": namespace, "domain": domain, "form": form}
    )


@login_required
@require_POST
def extend(request: SignedInRequest, ns: str, uid: str) -> HttpResponse:
    namespace = requestable_namespace(request, ns)
    domain = visible_domain(request, namespace, uid)
    form = ExtendLeaseForm(request.POST)
    if form.is_valid():
        try:
            services.domain_extend_lease(
                actor=Actor.for_user(request.user),
                domain=domain,
                by=timedelta(hours=form.cleaned_data["hours"]),
            )
        except DomainError as exc:
            messages.error(request, f"Could not extend the lease: {exc.message}")
        else:
            messages.success(request, f"Extended the lease of {domain.name}.")
    else:
        messages.error(request, "Pick how long to extend the lease by.")
    return redirect("tenant:domain", namespace.name, domain.uid)


def _clique_of(members: list[DomainMember]) -> Clique | None:
    """The clique the domain's trays are in (always one), shown under its short name and the
    label the API's `cliqueID` and the manifests use."""
    held = next((m for m in members if m.active), None)
    return held.clique if held is not None else None


def _racks_of(request: SignedInRequest, members) -> list:
    """The racks holding the domain's trays, drawn with its trays outlined."""
    held = [m for m in members if m.active]
    rack_ids = {m.node.rack_id for m in held if m.node.rack_id}
    names = sorted(Rack.objects.filter(pk__in=rack_ids).values_list("name", flat=True))
    if not names:
        return []
    return fabric_view(
        viewer=request.user,
        rack_names=names,
        highlight=[m.node_id for m in held],
        links=False,
        preview=False,
    )


def _request_again_url(namespace, domain: ComputeDomain) -> str:
    """The request form filled in as this domain was asked for."""
    query: dict[str, str | int] = {
        "name": domain.name,
        "num_nodes": domain.num_nodes,
        "allocation_mode": domain.allocation_mode,
        "placement_constraint": domain.placement_constraint,
        "placement_target": domain.placement_target,
        "replace_policy": domain.replace_policy,
    }
    if domain.span_racks or domain.span_cliques:
        query |= {"span_racks": domain.span_racks or "", "span_cliques": domain.span_cliques or ""}
    if domain.follows_workload:
        query["size"] = "workload"
    if domain.lifetime:
        query["lifetime_hours"] = int(domain.lifetime.total_seconds() // 3600) or 1
    return f"{reverse('tenant:request', args=[namespace.name])}?{urlencode(query)}"
