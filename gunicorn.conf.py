"""gunicorn's settings for the control plane, read from the working directory by every
``gunicorn controlplane.wsgi`` (the Dockerfile, the compose file, the tests' servers).

gunicorn answers a request line over 4094 bytes with a plain-text 414 of its own;
``0`` passes every line up to its 1 MiB ceiling to Django, whose input guard
(``controlplane.middleware``) refuses URLs over ``SLUICE_MAX_URL_LENGTH`` with the
API's problem document.

A web request's SQL statement may run 20 s (``SLUICE_DB_STATEMENT_TIMEOUT_MS``,
read by the settings the workers load), under gunicorn's 30 s worker timeout:
a stuck statement costs a 503, not the worker. Other processes set none by default.
"""

import os

os.environ.setdefault("SLUICE_DB_STATEMENT_TIMEOUT_MS", "20000")

limit_request_line = 0
