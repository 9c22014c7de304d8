"""Dates as every Sluice page writes them: ISO 8601, 24-hour, UTC (the admin's own
pages would otherwise say "Dec. 3, 2026, 8:09 p.m." beside "2026-12-03 20:09")."""

DATE_FORMAT = "Y-m-d"
DATETIME_FORMAT = "Y-m-d H:i:s"
SHORT_DATE_FORMAT = "Y-m-d"
SHORT_DATETIME_FORMAT = "Y-m-d H:i"
TIME_FORMAT = "H:i:s"
