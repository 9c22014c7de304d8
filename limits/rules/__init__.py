"""The working copy: the rule tables people edit, and what they compile to.

``services`` (create, change and delete tiers, tenants, routes and policies:
validated, audited, revision-checked), ``compiling`` (rows to the client's
``sluice.rules`` value types, the one place that happens), ``restore`` (make the
tables hold a given rule set, for rollbacks), ``baseline`` (the rows every
installation needs).
"""
