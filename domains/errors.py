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


# The errors a lost database raises (PostgreSQL restarting, failing over, unreachable).
# Tasks retry on them all: a lock or statement timeout, also an OperationalError, is worth
# another try too. A request answers 503 only when `database_away` says the connection, not
# the statement, failed (docs/reliability.md).
DATABASE_AWAY: tuple[type[Exception], ...] = (db.OperationalError, db.InterfaceError)


def retry_on(
    *errors: type[Exception], backoff_max: int = 30, max_retries: int = 5
) -> dict[str, Any]:
    """Every task's Celery options: acknowledged once done (a killed worker's task runs
    again; tasks are idempotent), retried with jittered exponential backoff on `errors` and
    on a lost database, never on anything else (a bug is logged, not looped)."""
    return {
        "acks_late": True,
        "autoretry_for": (*errors, *DATABASE_AWAY),
        "retry_backoff": 1,
        "retry_backoff_max": backoff_max,
        "retry_jitter": True,
        "max_retries": max_retries,
    }


# SQLSTATEs of a server going or refusing clients: admin_shutdown, crash_shutdown,
# cannot_connect_now (starting up or shutting down), too_many_connections.
_SERVER_GOING = frozenset({"57P01", "57P02", "57P03", "53300"})


def database_away(exc: BaseException | None) -> bool:
    """Whether `exc` means the database is away (try again later), not that the statement is
    wrong. A programming error (syntax, a missing column, a broken constraint) or a statement
    the server refused for its own reasons is a bug to log and answer 500, never retried.

    Django raises its wrapper `from` the driver's error, whose SQLSTATE tells: class 08 is a
    connection exception; no SQLSTATE at all means no server answered (refused, reset,
    closed, the pool's wait for a connection ran out).
    """
    if isinstance(exc, db.InterfaceError):
        return True
    if not isinstance(exc, db.OperationalError):
        return False
    sqlstate = getattr(exc.__cause__, "sqlstate", None)
    if not sqlstate:
        return True
    return str(sqlstate).startswith("08") or sqlstate in _SERVER_GOING
