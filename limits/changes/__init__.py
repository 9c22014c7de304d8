"""Change requests: how people change the rules gateways enforce.

A change request is a named set of edits (one document per tier, tenant, route
or policy) on top of the active version, with its author and reason.
``services`` (open, add to a draft, submit, approve, withdraw, rebase),
``permissions`` (who may propose, approve and publish what), ``previews`` (the
diff in words, reach, notice, conflicts and approval state of a request),
``publishing`` (publish exactly its edits on top of the version in force,
carried into scheduled versions, through ``limits.publishing``), ``overrides``
(the lifecycle of temporary overrides: reminders, renewal, pruning), ``tasks``.
"""
