"""Authentication backend: the demo's well-known logins only work while DEBUG is on.

With DEBUG off the demo users are inert: their password is refused here, their sessions
(ModelBackend.get_user asks `user_can_authenticate`, so websockets too) and their API
tokens (portal/api/authentication.py asks `demo_user_refused`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User

from domains.tenancy.seed import DEMO_GROUP


def demo_user_refused(user: User) -> bool:
    """Whether this is a demo user and DEBUG is off (so it may not sign in at all)."""
    if settings.DEBUG:
        return False
    return user.groups.filter(name=DEMO_GROUP).exists()


class PortalModelBackend(ModelBackend):
    def user_can_authenticate(self, user: User | AnonymousUser | None) -> bool:
        if user is None or not super().user_can_authenticate(user):
            return False
        return isinstance(user, AnonymousUser) or not demo_user_refused(user)
