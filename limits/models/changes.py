"""Change requests: named sets of rule edits, proposed, approved and published on
top of the active version; and the reminders sent before an override expires.

A change request never touches the rules gateways enforce until it is published
(``limits.changes.publishing``): publishing applies exactly its edits to the
version in force, stores the result as the next version, and writes the same
edits into the rule tables.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from .rules import Policy

__all__ = [
    "Approval",
    "ChangeComment",
    "ChangeEdit",
    "ChangeOrigin",
    "ChangeRequest",
    "ChangeRequestState",
    "EditSubject",
    "OverrideReminder",
    "Verdict",
]


class ChangeRequestState(models.TextChoices):
    """draft -> open -> published, or -> withdrawn, or -> rejected. Only the author
    adds to a draft; an open request is reviewed: approved and published as it is,
    sent back to draft with changes requested, or rejected."""

    DRAFT = "draft", "draft: being put together"
    OPEN = "open", "open: proposed, waiting to be published"
    PUBLISHED = "published", "published"
    WITHDRAWN = "withdrawn", "withdrawn"
    REJECTED = "rejected", "rejected by a reviewer"


class Verdict(models.TextChoices):
    """What a comment on a change request says besides its words."""

    COMMENT = "comment", "commented"
    CHANGES = "changes", "requested changes"
    REJECT = "reject", "rejected"


class ChangeOrigin(models.TextChoices):
    """Where a change request came from."""

    ADMIN = "admin", "the admin's forms"
    API = "api", "the REST API"
    FILE = "file", "a rules file (rules apply)"
    RENEWAL = "renewal", "an override renewal"
    PRUNE = "prune", "pruning of expired overrides"
    WORKING_COPY = "working_copy", "the working copy's unpublished edits"


class EditSubject(models.TextChoices):
    """The kind of rule object an edit changes."""

    TIER = "tier"
    TENANT = "tenant"
    ROUTE = "route"
    POLICY = "policy"


class ChangeRequest(models.Model):
    """A named set of rule edits with its author and reason.

    ``summary`` is the diff of its edits against the active version of
    ``summary_version`` (the diff's JSON), kept so lists need not diff again;
    ``lowers`` and ``reach`` (tenants reached) come from it. ``edit_revision``
    grows with every change of the edits (not of the title or reason): an
    approval counts for the revision it saw.
    """

    title = models.CharField(max_length=200)
    reason = models.TextField(
        blank=True, help_text="Why: what reviewers and the audit log read."
    )
    state = models.CharField(
        max_length=9,
        choices=ChangeRequestState.choices,
        default=ChangeRequestState.DRAFT,
    )
    origin = models.CharField(
        max_length=12, choices=ChangeOrigin.choices, default=ChangeOrigin.ADMIN
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="change_requests",
    )
    author_name = models.CharField(
        max_length=150, help_text="Kept as text: the audit log's actor."
    )
    edit_revision = models.PositiveIntegerField(default=1, editable=False)
    summary = models.JSONField(default=dict, blank=True)
    summary_version = models.PositiveIntegerField(null=True, blank=True)
    lowers = models.BooleanField(default=False)
    reach = models.PositiveIntegerField(default=0, help_text="Tenants reached.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    published_by = models.CharField(max_length=150, blank=True)
    published_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="The version that published it."
    )
    carried_versions = ArrayField(
        models.PositiveIntegerField(),
        default=list,
        blank=True,
        help_text="Scheduled versions re-issued with these edits carried in.",
    )

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(state="published") | Q(closed_at__isnull=False),
                name="%(app_label)s_%(class)s_published_is_closed",
                violation_error_message="A published change request is closed.",
            ),
        ]

    def __str__(self) -> str:
        return f"change request #{self.pk}: {self.title}"

    @property
    def is_live(self) -> bool:
        """Still editable or publishable: a draft or an open request."""
        return self.state in (ChangeRequestState.DRAFT, ChangeRequestState.OPEN)


class ChangeEdit(models.Model):
    """One object a change request changes: its document before and after.

    Documents are the rules-as-code vocabulary (``limits.rules.documents``).
    ``before`` is the object in the version the edit was made against (None: it
    did not exist); ``after`` is what publishing writes (None: remove it).
    """

    change_request = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="edits"
    )
    subject = models.CharField(max_length=6, choices=EditSubject.choices)
    key = models.CharField(
        max_length=300,
        help_text="A slug; for a policy scope/route, '~' marking an override.",
    )
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["change_request", "subject", "key"],
                name="%(app_label)s_%(class)s_unique_request_subject_key",
                violation_error_message="A change request edits each object once.",
            ),
        ]
        indexes = [models.Index(fields=["subject", "key"], name="limits_edit_key_idx")]

    def __str__(self) -> str:
        verb = "remove" if self.after is None else "set"
        return f"{verb} {self.subject} {self.key}"


class Approval(models.Model):
    """A product person's approval of one revision of a change request."""

    change_request = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="approvals"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="approvals",
    )
    user_name = models.CharField(max_length=150)
    revision = models.PositiveIntegerField()
    approved_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["approved_at", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["change_request", "user", "revision"],
                name="%(app_label)s_%(class)s_unique_request_user_revision",
                violation_error_message="You approved this revision already.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user_name} approved revision {self.revision}"


class ChangeComment(models.Model):
    """A comment on a change request: the discussion, and the reviewer's verdicts
    ("request changes", "reject") with their reasons."""

    change_request = models.ForeignKey(
        ChangeRequest, on_delete=models.CASCADE, related_name="comments"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        related_name="change_comments",
    )
    author_name = models.CharField(max_length=150)
    verdict = models.CharField(
        max_length=7, choices=Verdict.choices, default=Verdict.COMMENT
    )
    body = models.TextField()
    revision = models.PositiveIntegerField(
        help_text="The request's edit revision the comment was written on."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.author_name} {self.get_verdict_display()} on #{self.change_request_id}"


class OverrideReminder(models.Model):
    """A reminder sent before an override expires: one per override and expiry, so a
    renewal (a new expiry) gets its own."""

    policy = models.ForeignKey(
        Policy, on_delete=models.CASCADE, related_name="expiry_reminders"
    )
    expires_at = models.DateTimeField()
    sent_at = models.DateTimeField(auto_now_add=True)
    recipients = ArrayField(models.EmailField(), default=list, blank=True)

    class Meta:
        ordering = ["-sent_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "expires_at"],
                name="%(app_label)s_%(class)s_unique_policy_expiry",
                violation_error_message="This override was reminded of already.",
            ),
        ]

    def __str__(self) -> str:
        return f"reminder for {self.policy} expiring {self.expires_at:%Y-%m-%d %H:%M}"
