"""The state of things at a glance: what the admin's home page shows.

``selectors`` reads one panel from each package that owns it (the active and
scheduled versions, change requests, the fleet, the most-limited tenants,
overrides about to expire). It imports no admin module, so the admin site
(``controlplane.admin_site``) can use it while the admin registers its pages.
"""
