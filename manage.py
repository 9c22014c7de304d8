#!/usr/bin/env python
"""Django's command-line utility for Sluice's control plane."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    from controlplane.preflight import ServiceUnavailable, explain_unavailable

    try:
        execute_from_command_line(sys.argv)
    except ServiceUnavailable as exc:
        sys.exit(str(exc))
    except Exception as exc:  # a missing Postgres or Redis: one line, not a traceback
        message = explain_unavailable(exc)
        if message is None:
            raise
        sys.exit(message)


if __name__ == "__main__":
    main()
