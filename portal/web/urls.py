"""Web UI pages, per audience: /fabric/ (operators), /ns/<namespace>/ (tenants),
/manage/ (portal admins). Django's own admin stays at /django-admin/."""

from django.contrib.auth import views as auth_views
from django.urls import include, path

from portal.web import views
from portal.web.views import (
    account,
    admin,
    attention,
    calendar,
    health,
    incidents,
    notifications,
    operator,
    tenant,
    trays,
    versions,
)

operator_patterns = (
    [
        path("", operator.fabric, name="fabric"),
        path("attention/", attention.attention, name="attention"),
        path("health/", health.banner, name="health"),
        path("racks/<str:name>/", operator.rack, name="rack"),
        path("cliques/<str:label>/", operator.clique, name="clique"),
        path("nodes/<str:hostname>/", operator.node, name="node"),
        path("nodes/<str:hostname>/accept/", trays.accept, name="node_accept"),
        path("nodes/<str:hostname>/<str:action>/", operator.node_action, name="node_action"),
        path("trays/bulk/", operator.bulk_action, name="bulk_action"),
        path("domains/", operator.domains, name="domains"),
        path("domains/<uuid:uid>/replace/", trays.replace, name="domain_replace"),
        path("channels/", operator.channels, name="channels"),
        path("impact/<str:kind>/<str:name>/", operator.impact, name="impact"),
        path("maintenance/", operator.maintenance, name="maintenance"),
        path("maintenance/calendar/", calendar.calendar, name="calendar"),
        path("versions/", versions.versions, name="versions"),
        path("incidents/", incidents.incidents, name="incidents"),
        path("incidents/<int:pk>/", incidents.incident, name="incident"),
        path(
            "maintenance/<int:pk>/cancel/",
            operator.maintenance_cancel_view,
            name="maintenance_cancel",
        ),
    ],
    "operator",
)

tenant_patterns = (
    [
        path("", tenant.dashboard, name="dashboard"),
        path("request/", tenant.request_domain, name="request"),
        path("request/preview/", tenant.preview, name="preview"),
        path("domains/<uuid:uid>/", tenant.domain_detail, name="domain"),
        path("domains/<uuid:uid>/release/", tenant.release, name="release"),
        path("domains/<uuid:uid>/extend/", tenant.extend, name="extend"),
        path(
            "domains/<uuid:uid>/manifests/<str:kind>.yaml",
            tenant.manifest_download,
            name="manifest",
        ),
    ],
    "tenant",
)

admin_patterns = (
    [
        path("quotas/", admin.quotas, name="quotas"),
        path("quotas/<str:ns>/", admin.quota_edit, name="quota_edit"),
        path("approvals/", admin.approvals, name="approvals"),
        path("approvals/<uuid:uid>/<str:decision>/", admin.approval_decide, name="approval_decide"),
        path("namespaces/", admin.namespaces, name="namespaces"),
        path("namespaces/<str:ns>/", admin.namespace, name="namespace"),
        path(
            "namespaces/<str:ns>/members/<str:username>/remove/",
            admin.member_remove,
            name="member_remove",
        ),
        path("audit/", admin.audit, name="audit"),
        path("tokens/", admin.tokens, name="tokens"),
        path("tokens/<int:token_id>/revoke/", admin.token_revoke_any, name="token_revoke"),
    ],
    "admin_ui",
)

urlpatterns = [
    path("login/", account.SignInView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.home, name="home"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("tokens/", account.tokens, name="tokens"),
    path("notifications/", notifications.notifications, name="notifications"),
    path("notifications/badge/", notifications.badge, name="notifications_badge"),
    path("notifications/read/", notifications.mark_read, name="notifications_read"),
    path(
        "notifications/subscriptions/<int:pk>/",
        notifications.subscription,
        name="subscription",
    ),
    path(
        "notifications/subscriptions/<int:pk>/remove/",
        notifications.subscription_remove,
        name="subscription_remove",
    ),
    path("tokens/<int:token_id>/revoke/", account.token_revoke_view, name="token_revoke"),
    path("fabric/", include(operator_patterns)),
    path("ns/<str:ns>/", include(tenant_patterns)),
    path("manage/", include(admin_patterns)),
]
