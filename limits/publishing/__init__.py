"""Publishing: the working copy, validated and compiled, stored as the next version.

``services`` (publish, activate scheduled versions; one advisory lock serializes
them), ``rollback`` (an old version's rules published again), ``notice`` (a
lowering needs notice, or an emergency reason), ``problems`` (why a publish is
refused), ``tasks``. A publish announces itself (``limits.announcements``) and
rewrites the gateways' bundle (``limits.gateways``) when it commits.
"""
