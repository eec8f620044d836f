"""Node-token authentication for the agent API: `Authorization: Node <token>`.

A node token authenticates a tray, never a person: `request.user` is an `AgentPrincipal`
(no staff rights, no namespaces) and `request.auth` the Node. The user-facing API does not
list this class, so a node token opens nothing there.
"""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.permissions import BasePermission

from domains.agents.selectors import node_for_token
from domains.inventory.models import Node

KEYWORD = "Node"


class AgentPrincipal:
    """The caller of an agent endpoint: one tray."""

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    def __init__(self, node: Node) -> None:
        self.node = node
        self.pk = None

    def get_username(self) -> str:
        return f"agent:{self.node.hostname}"

    def __str__(self) -> str:
        return self.get_username()


def token_from_header(value: bytes | str) -> str:
    """The raw token of a `Node <token>` header value, or "" when it is not one."""
    if isinstance(value, str):
        value = value.encode()
    parts = value.split()
    if len(parts) != 2 or parts[0].decode(errors="replace").lower() != KEYWORD.lower():
        return ""
    return parts[1].decode(errors="replace")


class NodeTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Any) -> tuple[AgentPrincipal, Node] | None:
        header = get_authorization_header(request)
        if not header.lower().startswith(KEYWORD.lower().encode()):
            return None
        raw = token_from_header(header)
        node = node_for_token(raw)
        if node is None:
            raise AuthenticationFailed("Unknown or revoked node token.")
        return AgentPrincipal(node), node

    def authenticate_header(self, request: Any) -> str:
        return KEYWORD


class IsNodeAgent(BasePermission):
    message = "A node token is required."

    def has_permission(self, request: Any, view: Any) -> bool:
        return isinstance(request.user, AgentPrincipal)
