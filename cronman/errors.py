"""The single error hierarchy of cronman.

The API maps each class to an HTTP status; everything else catches
``CronmanError`` where it must survive any failure of ours.
"""

from __future__ import annotations


class CronmanError(Exception):
    """Base of every error cronman raises on purpose."""

    code = "error"
    http_status = 500

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def to_dict(self) -> dict[str, object]:
        return {"error": {"code": self.code, "message": self.message, "field": self.field}}


class ValidationError(CronmanError):
    """Invalid input; ``field`` is the dotted path of the offending value."""

    code = "invalid"
    http_status = 400

    def prefixed(self, prefix: str) -> ValidationError:
        """The same error with ``prefix`` put in front of its field path."""
        field = f"{prefix}.{self.field}" if self.field else prefix
        return type(self)(self.message, field=field)


class NotFound(CronmanError):
    code = "not_found"
    http_status = 404


class Conflict(CronmanError):
    """A uniqueness rule was broken (a job name taken in its namespace)."""

    code = "conflict"
    http_status = 409


class UnsupportedMediaType(CronmanError):
    """A request body of a type the endpoint does not take (JSON endpoints: JSON only)."""

    code = "unsupported_media_type"
    http_status = 415


class Unauthorized(CronmanError):
    code = "unauthorized"
    http_status = 401


class Forbidden(CronmanError):
    code = "forbidden"
    http_status = 403


class StoreUnavailable(CronmanError):
    """The database could not be reached or answered with an operational error."""

    code = "store_unavailable"
    http_status = 503


class CoordinatorUnavailable(CronmanError):
    """No Redis shard could be reached."""

    code = "coordinator_unavailable"
    http_status = 503


class StaleLease(Conflict):
    """A worker's lease token is not the run's current lease (it expired, the
    run was re-queued or completed): nothing was changed."""

    code = "stale_lease"


class QuotaExceeded(CronmanError):
    """A namespace's quota refuses the request (its message names the quota)."""

    code = "quota_exceeded"
    http_status = 403
