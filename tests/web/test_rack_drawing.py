"""The rack drawing keeps every word readable: nothing is printed over anything else."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from domains.inventory.models import Node
from tests.support.lifecycle import form, request_domain

pytestmark = pytest.mark.django_db


def _word(svg: str, hostname: str) -> str:
    tray = svg.split(f'data-hostname="{hostname}"', 1)[1].split("</g>", 1)[0]
    return re.search(r'class="w">([^<]*)</text>', tray).group(1)


def test_the_clique_label_sits_in_the_gutter_and_leaves_every_word_whole(
    client, operator, tenant_a, ns_a, topology
):
    form(request_domain(ns_a, tenant_a, "llm-pretrain", num_nodes=2))
    client.force_login(operator)
    svg = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    # Along the bracket left of the slot numbers, the clique's name without its rack's.
    assert 'class="cql">c0</text>' in svg and "<title>clique gb-r01-c0</title>" in svg
    first, second = Node.objects.filter(slot__in=(1, 2)).order_by("slot")
    assert _word(svg, first.hostname) == _word(svg, second.hostname) == "team-a/llm-pretrain"


def test_a_long_domain_name_is_cut_short_before_the_maintenance_band(
    client, operator, tenant_a, ns_a, topology
):
    form(request_domain(ns_a, tenant_a, "llm-pretrain-long-name", num_nodes=2))
    client.force_login(operator)
    svg = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    first = Node.objects.get(slot=1)
    assert _word(svg, first.hostname) == "team-a/llm-pretrain-l…"


def test_a_drawing_whose_trays_are_links_is_a_group_not_an_image(client, operator, topology):
    client.force_login(operator)
    linked = client.get(reverse("operator:rack", args=["gb-r01"])).content.decode()
    svg = linked.split('<svg class="el"', 1)[1].split(">", 1)[0]
    assert 'role="group"' in svg and "<a href=" in linked.split('<svg class="el"', 1)[1]


def _luminance(colour: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(int(colour[i : i + 2], 16) / 255) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_every_domain_outline_stands_out_on_every_state_fill():
    """One colour system: states fill, domains outline; an outline must be seen (3:1,
    WCAG's non-text contrast) on whatever state its tray is in."""
    from django.conf import settings

    from portal.web.elevation import OUTLINES

    css = (settings.BASE_DIR / "static" / "css" / "portal.css").read_text()
    fills = dict(
        re.findall(
            r"\.st-(free|used|cordoned|draining|down|notready) \{ fill: (#[0-9a-f]{6}); \}", css
        )
    )
    assert len(fills) == 6, fills
    for outline in OUTLINES:
        for state, fill in fills.items():
            light, dark = sorted((_luminance(outline), _luminance(fill)), reverse=True)
            assert (light + 0.05) / (dark + 0.05) >= 3, (outline, state)
