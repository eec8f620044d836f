"""Webhooks reach public addresses and the networks an operator allows, nothing else: a
tenant cannot point the worker at the metadata service, the cluster's services or the
portal's own database port (server-side request forgery). Checked when the subscription is
saved and again at every delivery, which connects to the very address it checked; a real
HTTP receiver on loopback stands for the internal service."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import override_settings

from domains.errors import InvalidInput
from domains.notifications import egress
from domains.notifications.delivery import deliver
from domains.notifications.models import DeliveryAttempt, Notification, Subscription
from domains.notifications.services import subscription_create
from tests import factories

pytestmark = pytest.mark.django_db


def allowing(*nets: str):
    return override_settings(PORTAL={**settings.PORTAL, "WEBHOOK_ALLOWED_NETS": list(nets)})


@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:5432/",  # the portal's own database port
        "http://localhost:6379/",  # a name for loopback
        "http://169.254.169.254/latest/meta-data/",  # the cloud metadata service
        "http://10.96.0.1/",  # a cluster service
        "http://192.168.1.1/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",  # loopback spelt as IPv6
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://no-such-host.invalid/",
    ],
)
def test_a_subscription_to_an_internal_address_is_refused_naming_the_target(target):
    user = factories.make_user("hooked")
    with allowing(), pytest.raises(InvalidInput) as refused:
        subscription_create(user=user, channel="webhook", kinds=["domain.ready"], target=target)
    assert refused.value.field == "target"
    assert "does not resolve" in str(refused.value) or "not a public address" in str(refused.value)
    assert not Subscription.objects.exists()


def test_a_network_the_operator_allows_is_accepted():
    user = factories.make_user("hooked")
    with allowing("10.0.0.0/8"):
        hook = subscription_create(
            user=user, channel="webhook", kinds=["domain.ready"], target="http://10.1.2.3/x"
        )
    assert hook.target == "http://10.1.2.3/x"


def test_pinning_keeps_the_name_for_the_host_header_and_the_certificate():
    target = egress.pin("https://user@localhost:8443/hook?a=1")
    assert target.url == "https://127.0.0.1:8443/hook?a=1"
    assert target.host == "localhost:8443"
    assert target.server_name == "localhost"


def _notification(hook: Subscription, key: str) -> Notification:
    return Notification.objects.create(
        subscription=hook, key=key, kind="domain.ready", title="t", body="b"
    )


def test_delivery_checks_again_and_connects_to_the_address_it_checked(hooks):
    port = hooks.server_address[1]
    user = factories.make_user("hooked")
    hook = subscription_create(
        user=user,
        channel="webhook",
        kinds=["domain.ready"],
        target=f"http://localhost:{port}/hook",  # loopback is allowed in tests
    )
    assert deliver(notification_id=_notification(hook, "event:1").pk) == "delivered"
    assert [headers["Host"] for headers, _ in hooks.on("/hook")] == [f"localhost:{port}"]

    # The operator narrows what webhooks may reach: the saved subscription is refused too.
    with allowing():
        refused = _notification(hook, "event:2")
        with pytest.raises(Exception, match="not a public address"):
            deliver(notification_id=refused.pk)
    attempt = DeliveryAttempt.objects.get(notification=refused)
    assert attempt.status_code is None and attempt.error.startswith("refused: localhost")
    assert len(hooks.on("/hook")) == 1  # nothing more reached it
