"""Authentication backend: the demo's well-known logins only work while DEBUG is on."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User

from domains.tenancy.seed import DEMO_GROUP


class PortalModelBackend(ModelBackend):
    def user_can_authenticate(self, user: User | AnonymousUser | None) -> bool:
        if user is None or not super().user_can_authenticate(user):
            return False
        if settings.DEBUG:
            return True
        return not user.groups.filter(name=DEMO_GROUP).exists()
