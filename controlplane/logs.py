"""Log formats of the control plane: plain text (the default) or one JSON object a line.

``SLUICE_LOG_FORMAT=json`` gives log collectors (Loki, CloudWatch, Elastic...)
fields instead of text to parse: every record becomes ``{"time", "level",
"logger", "message"}`` plus the fields its caller passed with ``extra=`` (the
request log's ``request_id``, ``method``, ``status``...), and ``exc`` with the
traceback when there is one.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

__all__ = ["JsonFormatter"]

#: What every LogRecord carries; anything else on a record came from ``extra=``.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        document = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name, value in record.__dict__.items():
            if name not in _STANDARD and not name.startswith("_"):
                document[name] = value
        if record.exc_info:
            document["exc"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)
