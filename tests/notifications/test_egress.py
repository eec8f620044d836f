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
from testbed import factories

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


# Every spelling of an address the worker might connect to, and whether a webhook may go there.
# IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4, Teredo) are judged as
# the IPv4 address inside them; Python's `is_global` alone calls most of them public.
SPELLINGS = [
    # Plain IPv4, including the shorthand forms the resolver accepts.
    ("http://8.8.8.8/", True),
    ("https://1.1.1.1:8443/hook", True),
    ("http://127.0.0.1/", False),
    ("http://127.1/", False),
    ("http://2130706433/", False),  # 127.0.0.1 as one number
    ("http://0x7f000001/", False),
    ("http://0177.0.0.1/", False),  # octal
    ("http://169.254.169.254/", False),
    ("http://10.0.0.1/", False),
    ("http://172.16.0.1/", False),
    ("http://100.64.0.1/", False),  # carrier-grade NAT
    ("http://198.18.0.1/", False),  # benchmarking
    ("http://240.0.0.1/", False),
    ("http://255.255.255.255/", False),
    # Plain IPv6.
    ("http://[2606:4700:4700::1111]/", True),
    ("http://[2001:4860:4860::8888]/", True),
    ("http://[::1]/", False),
    ("http://[::]/", False),
    ("http://[fe80::1]/", False),
    ("http://[fc00::1]/", False),
    ("http://[fd12:3456::1]/", False),
    ("http://[ff02::1]/", False),
    ("http://[2001:db8::1]/", False),
    # IPv4-mapped.
    ("http://[::ffff:8.8.8.8]/", True),
    ("http://[::ffff:127.0.0.1]/", False),
    ("http://[::ffff:7f00:1]/", False),
    ("http://[::ffff:a9fe:a9fe]/", False),
    # IPv4-compatible (deprecated, still parsed).
    ("http://[::8.8.8.8]/", True),
    ("http://[::127.0.0.1]/", False),
    ("http://[::a9fe:a9fe]/", False),
    ("http://[::10.0.0.1]/", False),
    # NAT64, the well-known prefix.
    ("http://[64:ff9b::8.8.8.8]/", True),
    ("http://[64:ff9b::808:808]/", True),
    ("http://[64:ff9b::a9fe:a9fe]/", False),  # the metadata service through NAT64
    ("http://[64:ff9b::7f00:1]/", False),
    ("http://[64:ff9b::10.0.0.1]/", False),
    ("http://[64:ff9b::192.168.0.1]/", False),
    # NAT64, the local-use prefix: every length it may be cut at is read.
    ("http://[64:ff9b:1::8.8.8.8]/", True),
    ("http://[64:ff9b:1::a9fe:a9fe]/", False),
    ("http://[64:ff9b:1:a9fe:a9:fe00::]/", False),  # 169.254.169.254 after a /48
    ("http://[64:ff9b:1:7f:0:100::]/", False),  # 127.0.0.1 after a /56
    ("http://[64:ff9b:1:0:7f:0:1::]/", False),  # 127.0.0.1 after a /64
    # 6to4.
    ("http://[2002:808:808::1]/", True),
    ("http://[2002:7f00:1::1]/", False),
    ("http://[2002:a9fe:a9fe::1]/", False),
    ("http://[2002:a00:1::]/", False),
    # Teredo: the server and the client (stored inverted) must both be public.
    ("http://[2001:0:4136:e378:8000:63bf:f7f7:f7f7]/", True),
    ("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", False),  # client 127.0.0.1
    ("http://[2001:0:a00:1:8000:63bf:f7f7:f7f7]/", False),  # server 10.0.0.1
    ("http://[2001::5601:5656]/", False),  # server 0.0.0.0
    # IPv4-translated (SIIT), which Python calls global.
    ("http://[::ffff:0:7f00:1]/", False),  # 127.0.0.1
    ("http://[::ffff:0:a9fe:a9fe]/", False),  # 169.254.169.254
    ("http://[::ffff:0:808:808]/", True),  # 8.8.8.8
    # Ranges the registries mark as not global that Python's tables lack.
    ("http://[fec0::1]/", False),  # site-local
    ("http://[5f00::1]/", False),  # SRv6 SIDs
    ("http://[3fff::1]/", False),  # documentation
    ("http://[100::1]/", False),  # discard-only
    ("http://[2001:20::1]/", False),  # ORCHIDv2
    ("http://192.88.99.1/", False),  # 6to4 relay anycast, deprecated
    ("http://0.1.2.3/", False),
]


@pytest.mark.parametrize(("url", "allowed"), SPELLINGS)
def test_every_spelling_of_an_address_is_judged_as_the_ipv4_address_inside_it(url, allowed):
    with allowing():
        if allowed:
            assert egress.pin(url).url.startswith(url.split("/")[0])
        else:
            with pytest.raises(egress.EgressRefused, match="not a public address"):
                egress.pin(url)


def test_the_table_covers_forty_spellings_both_ways():
    assert len(SPELLINGS) >= 40
    assert {allowed for _, allowed in SPELLINGS} == {True, False}


def test_an_operator_may_allow_an_ipv6_network_as_written():
    with allowing("64:ff9b:1::/48"):
        assert egress.pin("http://[64:ff9b:1:a9fe:a9:fe00::]/").url.startswith("http://[64:ff9b:1:")
    with allowing("10.0.0.0/8"):
        assert egress.pin("http://[64:ff9b::10.1.2.3]/").url.startswith("http://[64:ff9b::")
