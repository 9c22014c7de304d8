"""Calendar quotas as tenants use them: how much of each quota a tenant has used
this period, read from the Redis gateways charge (``usage``).

Quotas are read from the active version's rules, never the working copy: usage
follows what gateways enforce. Reads only; the 80 % / 100 % reminders that use
this read are sent by ``limits.announcements.quota_reminders``.
"""
