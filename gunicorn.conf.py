"""gunicorn's settings for the control plane, read from the working directory by every
``gunicorn controlplane.wsgi`` (the Dockerfile, the compose file, the tests' servers).

gunicorn answers a request line over 4094 bytes with a plain-text 414 of its own;
``0`` passes every line up to its 1 MiB ceiling to Django, whose input guard
(``controlplane.middleware``) refuses URLs over ``SLUICE_MAX_URL_LENGTH`` with the
API's problem document.
"""

limit_request_line = 0
