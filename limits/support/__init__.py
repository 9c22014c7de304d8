"""What support reads about one tenant: the limits in force, usage now, recent 429s
and why each happened; and the one-click temporary raise.

Reads only, except :func:`~.raises.override_raise`, which opens a change request.
Every policy is resolved by the gateways' resolver (:mod:`sluice.resolver`)
against a published version, never the working copy: support quotes what
gateways enforce.
"""
