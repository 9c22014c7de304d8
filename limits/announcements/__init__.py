"""Limit changes announced like API changes: versioned, dated, explained, pushed.

``services`` (what each version says, and to whom: announcements, reminders
before a lowering), ``changelog`` and ``feeds`` (the public changelog: HTML,
JSON, Atom; ``views`` and ``urls`` serve it), ``tenant_links`` (a tenant's
private page), ``deliveries`` (one notification: a signed webhook or an email,
retried), ``webhooks`` (endpoints, posting), ``signing`` (Standard Webhooks
signatures and secrets), ``tasks``.
"""
