"""The published versions, read: which one is active, which are scheduled, what
they hold, how two of them differ, and what applies to whom.

``selectors`` (the active version, the scheduled ones, documents parsed once per
process, the diff between two versions or the working copy), ``explain`` (which
policy applies to a tenant and why, with the resolver gateways run). Writing a
version is ``limits.publishing.services``; the gateways' bundle and the changelog read
versions through here.
"""
