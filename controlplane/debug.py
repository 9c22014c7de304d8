"""Django's debug page, kept for the developer it is meant for (``DEBUG`` on).

Django shows a traceback page, with the settings and every frame's local
variables, to whoever triggers an error while ``DEBUG`` is on: a viewer's API
token included. Its settings filter hides names that look like secrets
(``KEY``, ``PASS``, ``TOKEN``…) but not ``DATABASE_URL`` or ``REDIS_URL``,
which carry passwords, and frame variables are not filtered at all. So:

* the page is shown only to an active superuser signed in to the admin (a
  session, no ``Authorization`` header); anyone else gets one plain line, and
  the traceback goes to the server log as with ``DEBUG`` off;
* even that page hides every setting that names a connection (``*_URL``,
  cache ``LOCATION``), besides what Django hides already.
"""

from __future__ import annotations

import re

from django.db import DatabaseError
from django.views.debug import ExceptionReporter, SafeExceptionReporterFilter

__all__ = ["GuardedExceptionReporter", "SluiceExceptionReporterFilter"]

NOT_FOR_YOU = (
    "A server error occurred. Its traceback is in the server log{request_id}; "
    "Django's debug page is shown only to superusers signed in to the admin."
)


class SluiceExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter, also hiding connection URLs (they embed passwords)."""

    hidden_settings = re.compile(
        r"API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL$|LOCATION|DSN",
        flags=re.IGNORECASE,
    )


class GuardedExceptionReporter(ExceptionReporter):
    """Django's reporter; for a request not from a signed-in superuser, one plain line."""

    def get_traceback_html(self) -> str:
        if self._shown_to_requester():
            return super().get_traceback_html()
        return f"<!doctype html><title>Server error</title><p>{self._refusal()}</p>"

    def get_traceback_text(self) -> str:
        if self._shown_to_requester():
            return super().get_traceback_text()
        return self._refusal() + "\n"

    def _shown_to_requester(self) -> bool:
        """Reports that never reach a browser (emails, a request-less error) are whole."""
        if self.is_email or self.request is None:
            return True
        if self.request.headers.get("Authorization"):  # API and gateway tokens
            return False
        try:  # reading the session may fail: the database may be what failed
            user = getattr(self.request, "user", None)
            return bool(user is not None and user.is_active and user.is_superuser)
        except DatabaseError:
            return False

    def _refusal(self) -> str:
        request_id = getattr(self.request, "id", "")
        return NOT_FOR_YOU.format(
            request_id=f" (request {request_id})" if request_id else ""
        )
