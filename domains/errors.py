"""The business's errors: each has a stable `code`, an HTTP status for the API and,
where one input is at fault, the `field` that names it."""

from __future__ import annotations

from typing import Any

from django import db


class DomainError(Exception):
    code = "error"
    http_status = 400

    def __init__(self, message: str, *, field: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field:
            body["field"] = self.field
        if self.details is not None:
            body["details"] = self.details
        return body


class InvalidInput(DomainError):
    """Malformed input; `field` names the offending one."""

    code = "invalid"
    http_status = 400


class NotFound(DomainError):
    code = "not_found"
    http_status = 404


class PermissionDenied(DomainError):
    code = "forbidden"
    http_status = 403


class Conflict(DomainError):
    code = "conflict"
    http_status = 409


class NameTaken(Conflict):
    code = "name_taken"


class InvalidTransition(Conflict):
    """The object is not in a phase/state where this action is allowed."""

    code = "invalid_transition"


class MaintenanceConflict(Conflict):
    """Would run into an operator's maintenance window on the trays."""

    code = "maintenance_conflict"


class QuotaExceeded(DomainError):
    code = "quota_exceeded"
    http_status = 422


class Unavailable(DomainError):
    """A service the answer depends on (the Kubernetes API server) did not answer: try again."""

    code = "unavailable"
    http_status = 503


class TransientError(Exception):
    """Worth retrying: a lost connection, a lock timeout, an API server hiccup."""


# A lost or refused database connection (PostgreSQL restarting, failing over, unreachable):
# worth retrying, never a bug. Tasks retry on these; requests answer 503 (docs/reliability.md).
DATABASE_AWAY: tuple[type[Exception], ...] = (db.OperationalError, db.InterfaceError)
