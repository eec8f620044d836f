"""REST API v1: one router, the OpenAPI schema and its docs, and the agent API under agent/."""

from django.urls import include, path, re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.routers import SimpleRouter

from portal.api.errors import not_found
from portal.api.views.domains import ApprovalViewSet, ComputeDomainViewSet
from portal.api.views.fabric import (
    CliqueViewSet,
    MaintenanceWindowViewSet,
    NodeViewSet,
    PowerShelfViewSet,
    RackViewSet,
    SwitchTrayViewSet,
)
from portal.api.views.jointokens import JoinTokenViewSet
from portal.api.views.members import MemberViewSet
from portal.api.views.notifications import NotificationViewSet, SubscriptionViewSet
from portal.api.views.tenancy import EventViewSet, NamespaceViewSet, TokenViewSet


class OptionalSlashRouter(SimpleRouter):
    """The trailing slash is optional: `racks/` the Django way, `racks` the kubectl way.

    DRF >= 3.15 turns the `trailing_slash` argument into a bool, so the pattern is set here.
    """

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"


router = OptionalSlashRouter()
router.register("racks", RackViewSet, basename="rack")
router.register("cliques", CliqueViewSet, basename="clique")
router.register("nodes", NodeViewSet, basename="node")
router.register("switchtrays", SwitchTrayViewSet, basename="switchtray")
router.register("powershelves", PowerShelfViewSet, basename="powershelf")
router.register("maintenance", MaintenanceWindowViewSet, basename="maintenance")
router.register("namespaces", NamespaceViewSet, basename="namespace")
router.register(
    r"namespaces/(?P<namespace>[^/]+)/computedomains",
    ComputeDomainViewSet,
    basename="computedomain",
)
router.register(
    r"namespaces/(?P<namespace>[^/]+)/members", MemberViewSet, basename="namespace-member"
)
router.register("events", EventViewSet, basename="event")
router.register("approvals", ApprovalViewSet, basename="approval")
router.register("tokens", TokenViewSet, basename="token")
router.register("jointokens", JoinTokenViewSet, basename="jointoken")
router.register("subscriptions", SubscriptionViewSet, basename="subscription")
router.register("notifications", NotificationViewSet, basename="notification")

urlpatterns: list = [
    path("agent/", include("portal.api.agent.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file (`?script`), not inline,
    # so the docs work under the Content-Security-Policy.
    path("docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    *router.urls,
    re_path(r"", not_found),  # last: unknown API paths answer JSON, not an HTML page
]
