"""Demo tenants and users. Their logins are refused whenever DEBUG is off."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from domains.tenancy.models import Membership, Namespace, Quota, Role

DEMO_GROUP = "demo-users"
DEMO_PASSWORD = "demo"  # noqa: S105 - printed at demo start; refused when DEBUG is off

DEMO_USERS: list[tuple[str, bool, bool, str | None, Role | None, str]] = [
    # username, staff, superuser, namespace, role, description
    ("operator", True, False, None, None, "operator: fabric view, cordon/drain trays"),
    ("admin", True, True, None, None, "superuser: quotas, approvals, members, audit log"),
    ("alice", False, False, "team-a", Role.MEMBER, "tenant: member of namespace team-a"),
    ("bob", False, False, "team-b", Role.MEMBER, "tenant: member of namespace team-b"),
]

DEMO_QUOTAS = {
    # team-a's demo domains hold 3 trays and reserve 9 awaiting approval: 18 leaves room
    # for a 4-tray request (and a small one) without touching the quota.
    "team-a": {
        "max_gpus": 72,
        "max_nodes": 18,
        "max_domains": 4,
        "max_nodes_per_domain": 9,
        "max_lifetime": timedelta(days=7),
        "approval_above_nodes": 8,
    },
    # team-b's demo domain holds 4 trays over two racks, leaving room for a 4-tray request.
    "team-b": {
        "max_gpus": 32,
        "max_nodes": 8,
        "max_domains": 2,
        "max_nodes_per_domain": 6,
        "max_lifetime": timedelta(days=2),
        "approval_above_nodes": None,
    },
}


@transaction.atomic
def build_demo_tenants() -> list[tuple[str, str]]:
    """Create namespaces, quotas and users; returns (username, description) pairs."""
    group, _ = Group.objects.get_or_create(name=DEMO_GROUP)
    for name, limits in DEMO_QUOTAS.items():
        ns, _ = Namespace.objects.get_or_create(
            name=name, defaults={"display_name": name.replace("-", " ").title()}
        )
        Quota.objects.update_or_create(namespace=ns, defaults=limits)
    User = get_user_model()
    logins = []
    for username, staff, superuser, ns_name, role, description in DEMO_USERS:
        user, created = User.objects.get_or_create(
            username=username,
            defaults={"is_staff": staff, "is_superuser": superuser, "email": f"{username}@demo"},
        )
        if created:
            user.set_password(DEMO_PASSWORD)
            user.save()
        user.groups.add(group)
        if ns_name and role:
            Membership.objects.get_or_create(
                user=user, namespace=Namespace.objects.get(name=ns_name), defaults={"role": role}
            )
        logins.append((username, description))
    return logins


def demo_logins() -> list[tuple[str, str]]:
    """The demo users there are, as (username, what each may do), in the demo's order."""
    there = set(
        get_user_model().objects.filter(groups__name=DEMO_GROUP).values_list("username", flat=True)
    )
    return [(name, description) for name, *_, description in DEMO_USERS if name in there]
