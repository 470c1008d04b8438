"""Errors of the API client: one class per kind of answer, all ``ApiError``.

Each carries the API's error envelope (``{"error": {"code", "message",
"field"}}``): ``code``, ``message`` and ``field`` (the dotted path of the
offending value, e.g. ``jobs[1].schedule.timezone``), plus the HTTP
``status`` (0 when no answer came at all).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cronman.errors import CronmanError

if TYPE_CHECKING:
    from cronman.client.types import Job


class ApiError(CronmanError):
    """The API refused a request, failed, or could not be reached (``status`` 0)."""

    def __init__(self, status: int, code: str, message: str, field: str | None = None, *,
                 retry_after: float | None = None) -> None:
        super().__init__(message, field=field)
        self.status = status
        self.code = code
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f" ({self.field})" if self.field else ""
        status = f"HTTP {self.status}: " if self.status else ""
        return f"{status}{self.message}{where}"

    def with_field(self, field: str | None) -> ApiError:
        """The same error naming another field (bulk chunks renumber ``jobs[i]``)."""
        return type(self)(self.status, self.code, self.message, field,
                          retry_after=self.retry_after)


class InvalidRequest(ApiError):
    """400 (or 413): the request is invalid; ``field`` names the offending value."""


class Unauthenticated(ApiError):
    """401: no token, or a wrong or revoked one."""


class PermissionDenied(ApiError):
    """403: the token may not use that namespace."""


class NotFoundError(ApiError):
    """404: no such job or run."""


class ConflictError(ApiError):
    """409: a name taken in its namespace, or a job changed since it was read (version)."""


class Unavailable(ApiError):
    """503 (or 502/504, or no answer at all): try again later."""


class BulkCreateError(ApiError):
    """A chunk of a chunked bulk creation failed; ``created`` holds the jobs made before it.

    Each chunk is all or nothing, so the jobs of the failed chunk and of the
    chunks after it were not created.
    """

    def __init__(self, cause: ApiError, created: list[Job]) -> None:
        super().__init__(cause.status, cause.code, cause.message, cause.field,
                         retry_after=cause.retry_after)
        self.cause = cause
        self.created = created

    def with_field(self, field: str | None) -> ApiError:
        """The same error naming another field, with what was created before it."""
        return BulkCreateError(self.cause.with_field(field), self.created)


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    413: InvalidRequest,
    401: Unauthenticated,
    403: PermissionDenied,
    404: NotFoundError,
    409: ConflictError,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_for(status: int, code: str, message: str, field: str | None = None, *,
              retry_after: float | None = None) -> ApiError:
    """The ``ApiError`` subclass for an HTTP status."""
    cls = _BY_STATUS.get(status, ApiError)
    if status == 0:
        cls = Unavailable
    return cls(status, code, message, field, retry_after=retry_after)
