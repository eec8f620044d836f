"""The one authentication backend: every password form (the portal's /login/ and Django
admin's /django-admin/login/) goes through it, so both follow one sign-in policy
(portal/signin.py): a locked (account, address) pair, and an address over its failure
ceiling between two paced checks, get no password checked at all.

The demo's well-known logins only work while DEBUG is on. With DEBUG off the demo users are
inert: their password is refused here, their sessions (ModelBackend.get_user asks
`user_can_authenticate`, so websockets too) and their API tokens
(portal/api/authentication.py asks `demo_user_refused`).
"""

from __future__ import annotations

from typing import Any

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import PermissionDenied

from domains.tenancy.seed import DEMO_GROUP
from portal.ratelimit import client_address, signin_paced
from portal.signin import known_device


def demo_user_refused(user: User) -> bool:
    """Whether this is a demo user and DEBUG is off (so it may not sign in at all)."""
    if settings.DEBUG:
        return False
    return user.groups.filter(name=DEMO_GROUP).exists()


class PortalModelBackend(AxesStandaloneBackend, ModelBackend):
    """Django's ModelBackend behind the sign-in policy (django-axes' backend, so its checks
    find it in AUTHENTICATION_BACKENDS)."""

    def authenticate(
        self, request: Any, username: str | None = None, password: str | None = None, **kw: Any
    ) -> User | None:
        # A request made up in-process (the test client's login(), a management command)
        # has no client address to count; none reachable from outside lacks one.
        if request is not None and getattr(request, "META", {}).get("REMOTE_ADDR"):
            if not known_device(request, username) and signin_paced(client_address(request)):
                # No password is checked, and nothing counts as a failure: not the pair's
                # (axes skips a request it finds locked out), not the address's
                # (portal.signin). Axes' middleware answers it (portal.signin.lockout_response).
                request.signin_paced = True
                request.axes_locked_out = True
                raise PermissionDenied("too many failed sign-ins from this address; slowed")
            # Raises PermissionDenied while the (account, address) pair is locked out.
            AxesStandaloneBackend.authenticate(self, request, username, password, **kw)
        return ModelBackend.authenticate(self, request, username, password, **kw)

    def user_can_authenticate(self, user: User | AnonymousUser | None) -> bool:
        if user is None or not super().user_can_authenticate(user):
            return False
        return isinstance(user, AnonymousUser) or not demo_user_refused(user)
