"""Top-level URLs: the web UI, the REST API (with the agent API) and health checks."""

from django.contrib import admin
from django.urls import include, path

from portal import health
from portal.metrics import metrics_view

urlpatterns = [
    path("healthz", health.liveness, name="healthz"),
    path("readyz", health.readiness, name="readyz"),
    path("metrics", metrics_view, name="metrics"),
    path("django-admin/", admin.site.urls),
    path("api/v1/", include("portal.api.urls")),
    path("", include("portal.web.urls")),
]

# Errors Django answers itself (before or around a view): the API's error shape under /api/.
handler400 = "portal.api.errors.bad_request"
handler403 = "portal.api.errors.permission_denied"
handler500 = "portal.api.errors.server_error"
