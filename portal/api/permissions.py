"""Who may call what. Namespace-scoped checks live in the viewsets' `get_namespace()`,
which answers 404 for namespaces the caller cannot see, so only role checks are here."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from domains.tenancy.models import ApiToken
from domains.tenancy.selectors import is_admin, is_operator


class TokenScope(BasePermission):
    """A read-only token may only read, whatever its user could do."""

    message = "This API token is read-only."

    def has_permission(self, request: Request, view: Any) -> bool:
        token = request.auth
        if isinstance(token, ApiToken) and token.read_only:
            return request.method in SAFE_METHODS
        return True


class IsOperator(BasePermission):
    """Operators (staff) and superusers: tray actions."""

    message = "Only operators may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_operator(request.user)


class IsPortalAdmin(BasePermission):
    """Superusers: approvals, quotas, namespaces."""

    message = "Only portal admins may do this."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_admin(request.user)
