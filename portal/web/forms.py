"""Forms for the pages. They only parse input; the services validate it for real and their
errors (which name the field) are put back on the form by `apply_error`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django import forms
from django.contrib.auth import get_user_model

from domains.attention.selectors import KINDS
from domains.computedomains.models import (
    Phase,
)
from domains.errors import DomainError
from domains.inventory.models import PartState
from domains.notifications.models import Channel, Kind
from domains.tenancy.models import Role
from domains.tenancy.selectors import is_operator, namespaces_visible_to
from portal.web.fleet import STATE_FILTERS, Filters, Outline

# Service field names → form field names, where they differ.
SERVICE_FIELDS = {
    "lifetime": "lifetime_hours",
    "by": "hours",
    "expiresIn": "expires_in_days",
    "trays": "target",
    "clique": "target",
    "rack": "target",
}


def apply_error(form: forms.Form, error: DomainError) -> None:
    """Show a service's error on the field it names, else above the form."""
    name = SERVICE_FIELDS.get(error.field or "", error.field)
    form.add_error(name if name in form.fields else None, error.message)


class ExtendLeaseForm(forms.Form):
    hours = forms.TypedChoiceField(
        label="Extend by",
        coerce=int,
        choices=[(1, "1 hour"), (4, "4 hours"), (12, "12 hours"), (24, "1 day"), (72, "3 days")],
        initial=4,
    )


class ReasonForm(forms.Form):
    """A confirmation step with an optional reason (release, cordon, drain, deny)."""

    reason = forms.CharField(max_length=300, required=False)


class PartStateForm(forms.Form):
    """An operator records a switch tray or power shelf as down or back (with a reason)."""

    state = forms.ChoiceField(choices=PartState.choices)
    reason = forms.CharField(max_length=300, required=False)


class MaintenanceForm(forms.Form):
    """Schedule maintenance: trays (comma-separated hostnames), a clique or a rack."""

    scope = forms.ChoiceField(
        choices=[("trays", "Trays"), ("clique", "Clique"), ("rack", "Rack")], initial="rack"
    )
    target = forms.CharField(
        max_length=2000,
        help_text="Hostnames separated by commas, a clique label or name, or a rack.",
    )
    starts_at = forms.DateTimeField(
        label="Starts (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    ends_at = forms.DateTimeField(
        label="Ends (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    reason = forms.CharField(max_length=300)

    def scope_arguments(self) -> dict[str, Any]:
        scope, target = self.cleaned_data["scope"], self.cleaned_data["target"].strip()
        if scope == "trays":
            return {"trays": [t.strip() for t in target.split(",") if t.strip()]}
        return {scope: target}


class SubscriptionForm(forms.Form):
    """Subscribe to some kinds of events over one channel."""

    channel = forms.ChoiceField(choices=Channel.choices, initial=Channel.IN_APP)
    kinds = forms.MultipleChoiceField(
        choices=Kind.choices, widget=forms.CheckboxSelectMultiple, initial=list(Kind.values)
    )
    target = forms.CharField(
        required=False,
        max_length=500,
        help_text="E-mail: an address (empty: your account's). Webhook: an http(s) URL.",
    )
    namespace = forms.ChoiceField(required=False, help_text="Empty: every namespace you see.")
    lease_warning_hours = forms.IntegerField(min_value=1, max_value=336, initial=4)
    maintenance_warning_hours = forms.IntegerField(min_value=1, max_value=336, initial=24)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = namespaces_visible_to(user).values_list("name", flat=True)
        field = self.fields["namespace"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "All I can see"), *((n, n) for n in names)]
        if not is_operator(user):  # the portal's health is told to operators only
            kinds = self.fields["kinds"]
            assert isinstance(kinds, forms.MultipleChoiceField)
            kinds.choices = [c for c in Kind.choices if c[0] != Kind.PORTAL_HEALTH]
            kinds.initial = [k for k in Kind.values if k != Kind.PORTAL_HEALTH]


class QuotaForm(forms.Form):
    max_gpus = forms.IntegerField(label="GPUs", min_value=0, required=False)
    max_nodes = forms.IntegerField(label="Trays", min_value=0, required=False)
    max_domains = forms.IntegerField(label="Domains", min_value=0, required=False)
    max_nodes_per_domain = forms.IntegerField(label="Trays per domain", min_value=0, required=False)
    max_lifetime_hours = forms.IntegerField(
        label="Maximum lifetime (hours)", min_value=1, required=False
    )
    approval_above_nodes = forms.IntegerField(
        label="Approval above (trays)", min_value=0, required=False
    )

    USAGE_FIELDS = (
        ("max_gpus", "gpus", "GPUs"),
        ("max_nodes", "nodes", "trays"),
        ("max_domains", "domains", "live domains"),
    )

    def show_usage(self, usage: dict[str, int]) -> None:
        """Beside each limit, what the namespace uses now (live domains, requests awaiting
        approval included)."""
        self.usage = usage
        for name, key, noun in self.USAGE_FIELDS:
            reserved = usage.get(f"reserved_{key}", 0)
            held = f" ({reserved} reserved awaiting approval)" if reserved else ""
            self.fields[name].help_text = f"In use now: {usage.get(key, 0)} {noun}{held}."

    def below_use(self) -> list[str]:
        """A sentence for each limit saved below what the namespace holds now."""
        usage = getattr(self, "usage", {})
        found = []
        for name, key, noun in self.USAGE_FIELDS:
            limit, used = self.cleaned_data.get(name), usage.get(key, 0)
            if limit is not None and limit < used:
                found.append(f"{noun}: {limit} is below the {used} held now")
        return found

    @classmethod
    def initial_from(cls, quota) -> dict:
        if quota is None:
            return {}
        lifetime = quota.max_lifetime
        return {
            "max_gpus": quota.max_gpus,
            "max_nodes": quota.max_nodes,
            "max_domains": quota.max_domains,
            "max_nodes_per_domain": quota.max_nodes_per_domain,
            "max_lifetime_hours": int(lifetime.total_seconds() // 3600) if lifetime else None,
            "approval_above_nodes": quota.approval_above_nodes,
        }

    def limits(self) -> dict:
        data = dict(self.cleaned_data)
        hours = data.pop("max_lifetime_hours")
        data["max_lifetime"] = timedelta(hours=hours) if hours else None
        return data


class MemberForm(forms.Form):
    username = forms.CharField(max_length=150)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def clean_username(self):
        username = self.cleaned_data["username"].strip()
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError(f"no user named {username!r}")
        self.user = user
        return username


class NamespaceForm(forms.Form):
    name = forms.CharField(max_length=63, help_text="A Kubernetes namespace name.")
    display_name = forms.CharField(max_length=200, required=False)


class DomainFilterForm(forms.Form):
    q = forms.CharField(label="Name", required=False)
    namespace = forms.CharField(required=False)
    phase = forms.ChoiceField(
        choices=[("", "Any phase"), ("live", "Live"), *Phase.choices], required=False
    )


class LedgerFilterForm(forms.Form):
    """The channel ledger's filters: one tenant's channels, or a rack or clique searched."""

    namespace = forms.CharField(label="Tenant", required=False, max_length=63)
    q = forms.CharField(label="Rack or clique", required=False, max_length=200)


class FleetFilterForm(forms.Form):
    """The fleet view's filters; the tenant and clique choices come from the fleet read."""

    q = forms.CharField(label="Hostname", required=False, max_length=200)
    state = forms.ChoiceField(required=False)
    tenant = forms.ChoiceField(required=False)
    # Free text with a list of suggestions, not a <select>: 1,000 racks have 1,000-2,000
    # cliques, and Django renders every option through a template.
    clique = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"list": "cliques", "placeholder": "label or name"}),
    )
    # A live domain to outline on every rack it spans: picks out, does not filter.
    domain = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.TextInput(attrs={"list": "fleet-domains", "placeholder": "namespace/name"}),
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._choice("state").choices = [
            ("", "Any state"),
            *((key, words) for key, (words, _) in STATE_FILTERS.items()),
        ]
        # Until `offer` knows the fleet, any value passes; an unknown one matches nothing.
        value = self.data.get("tenant", "") if self.is_bound else ""
        self._choice("tenant").choices = [("", ""), (value, value)] if value else [("", "")]

    def _choice(self, name: str) -> forms.ChoiceField:
        field = self.fields[name]
        assert isinstance(field, forms.ChoiceField)
        return field

    def offer(self, namespaces: list[str], outline: Outline | None = None) -> None:
        """The tenants to choose from; the outlined domain's namespace/name in its field
        (it may have been asked for by uid)."""
        self._choice("tenant").choices = [("", "Any tenant"), *((n, n) for n in namespaces)]
        if outline is not None and outline.holder is not None and self.is_bound:
            self.data = {**self.data, "domain": outline.holder.label}

    def filters(self) -> Filters:
        data = self.cleaned_data
        return Filters(
            state=data.get("state") or "",
            tenant=data.get("tenant") or "",
            clique=data.get("clique") or "",
            q=(data.get("q") or "").strip(),
            domain=(data.get("domain") or "").strip(),
        )


class AuditFilterForm(forms.Form):
    actor = forms.CharField(required=False)
    namespace = forms.CharField(required=False)
    verb = forms.CharField(required=False, help_text="e.g. domain. or node.cordoned")
    since = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )
    until = forms.DateTimeField(
        required=False, widget=forms.DateTimeInput(attrs={"type": "datetime-local"})
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since and until and since > until:
            # No event is both after `since` and before `until`: say so, not "no match".
            self.add_error(
                "until",
                f"Until ({until:%Y-%m-%d %H:%M}) is before since ({since:%Y-%m-%d %H:%M}): "
                "swap them, or move one.",
            )
        return data


class TokenCreateForm(forms.Form):
    name = forms.CharField(
        max_length=100,
        help_text="What uses it, e.g. 'ci-pipeline' or 'kubectl-plugin'.",
        widget=forms.TextInput(attrs={"autocomplete": "off"}),
    )
    read_only = forms.BooleanField(
        required=False, label="Read-only", help_text="Can read, never create or release."
    )
    expires_in_days = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=3650,
        label="Expires after (days)",
        help_text="Empty: never expires (revoke it when no longer needed).",
    )

    def expires_in(self) -> timedelta | None:
        days = self.cleaned_data.get("expires_in_days")
        return timedelta(days=days) if days else None


class AttentionFilterForm(forms.Form):
    """The needs-attention list's filter (one reason, a name) and its order."""

    SORTS = {"kind": "Reason", "subject": "Tray or domain", "rack": "Rack", "since": "Since"}

    kind = forms.ChoiceField(label="Reason", required=False)
    q = forms.CharField(label="Tray, domain or rack", required=False, max_length=200)
    sort = forms.ChoiceField(
        required=False,
        choices=[("", "")] + [(f"{d}{k}", k) for k in SORTS for d in ("", "-")],
        widget=forms.HiddenInput,
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["kind"]
        assert isinstance(field, forms.ChoiceField)
        field.choices = [("", "Any reason"), *KINDS.items()]
