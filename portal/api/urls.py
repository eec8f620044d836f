"""REST API v1 (one router) and the agent API under agent/."""

from django.urls import path  # noqa: F401

urlpatterns: list = []
