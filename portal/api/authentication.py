"""API authentication: `Authorization: Bearer <token>` personal tokens, and the browser's
session (with CSRF, as DRF's SessionAuthentication enforces for signed-in sessions)."""

from __future__ import annotations

from typing import Any, NoReturn

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from domains.tenancy.models import ApiToken
from domains.tenancy.tokens import token_authenticate
from portal.auth import demo_user_refused
from portal.ratelimit import TOKEN_FAILURES, TOKEN_PREFIX_FAILURES, client_address


class BearerTokenAuthentication(BaseAuthentication):
    """Personal API tokens. `request.auth` is the ApiToken (the read-only flag lives there).

    Failed tokens count against the caller's address and against the presented token's
    prefix from that address; past either limit a failed token is answered 429 instead of
    401. A valid token is always accepted: a scanner (or a script retrying a revoked token)
    on the same address as real users never locks them out of the API.
    """

    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != self.keyword.lower().encode():
            return None  # not ours: let session auth try
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed(
                "Authorization header must be 'Bearer <token>' with no spaces in the token"
            )
        try:
            raw = parts[1].decode("ascii")
        except UnicodeDecodeError:
            raw = ""
        token = token_authenticate(raw) if raw else None
        if token is not None and demo_user_refused(token.user):
            token = None  # a demo user's token is as dead as its password with DEBUG off
        if token is None:
            self._refuse(client_address(request), raw)
        return token.user, token

    @staticmethod
    def _refuse(address: str, raw: str) -> NoReturn:
        per_prefix = f"{address}|{raw[:10]}"  # `dpt_` and 6 characters: as the portal lists it
        over = TOKEN_FAILURES.exceeded(address) or TOKEN_PREFIX_FAILURES.exceeded(per_prefix)
        TOKEN_FAILURES.hit(address)
        TOKEN_PREFIX_FAILURES.hit(per_prefix)
        if over:
            raise exceptions.Throttled(
                wait=TOKEN_FAILURES.retry_after(), detail="Too many failed token attempts."
            )
        raise exceptions.AuthenticationFailed("Invalid, expired or revoked token")

    def authenticate_header(self, request: Request) -> str:
        # Makes unauthenticated requests 401 (with this challenge) rather than 403.
        return f'{self.keyword} realm="api"'


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (`dpt_…`) from the portal or "
            "`manage.py create_token`.",
        }
