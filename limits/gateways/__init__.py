"""The control plane's side of the gateway protocol (``docs/gateway-protocol.md``).

``keys`` (every Redis key the protocol uses, named once), ``bundle`` (the active
and scheduled snapshots, prepared in Redis for polls), ``polling`` (a poll:
authenticate, report, compare ETags) over ``window`` (what this process heard
from Redis lately and the reports it owes it), ``reports`` and ``fleet`` (which
gateway runs which version), ``tokens`` (API and gateway tokens), ``counters``
(counters every web process adds to in Redis).
"""
