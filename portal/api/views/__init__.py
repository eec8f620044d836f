"""API v1 viewsets, by area. Each derives from portal.api.base.ScopedViewSet."""
