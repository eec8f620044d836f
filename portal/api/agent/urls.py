"""The agent API under /api/v1/agent/ (node-token auth; see views.py)."""

from __future__ import annotations

from django.urls import path

from portal.api.agent import views

urlpatterns: list = [
    path("join/", views.JoinView.as_view(), name="agent-join"),
    path("nodes/<int:node_id>/desired/", views.DesiredView.as_view(), name="agent-desired"),
    path("nodes/<int:node_id>/status/", views.StatusView.as_view(), name="agent-status"),
    path("nodes/<int:node_id>/facts/", views.FactsView.as_view(), name="agent-facts"),
    path("nodes/<int:node_id>/claims/", views.ClaimsView.as_view(), name="agent-claims"),
    path(
        "nodes/<int:node_id>/claims/<uuid:claim_uid>/",
        views.ClaimView.as_view(),
        name="agent-claim",
    ),
]
