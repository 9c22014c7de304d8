"""Serializers of change requests and of rules files."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from api.serializers.strict import StrictSerializer
from limits.models import ChangeComment, ChangeRequest, EditSubject, Verdict


class EditInSerializer(StrictSerializer):
    object = serializers.ChoiceField(choices=EditSubject.choices)
    key = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=300,
        help_text="A slug; for a policy 'scope/route' ('~' for an override). May be "
        "left out for a policy given whole: its scope, route and expiry name it.",
    )
    value = serializers.JSONField(
        allow_null=True,
        help_text="The object as it should be (a document of docs/rules.schema.json's "
        "$defs), or null to remove it.",
    )

    def validate(self, data):
        if data.get("value") is None and not data.get("key"):
            raise serializers.ValidationError({"key": "Name the object to remove."})
        if data.get("value") is not None and not isinstance(data["value"], dict):
            raise serializers.ValidationError({"value": "An object, or null."})
        return data


class ChangeRequestInSerializer(StrictSerializer):
    title = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        help_text="Says what it changes.",
    )
    reason = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, help_text="Why."
    )
    edits = EditInSerializer(many=True, allow_empty=False, max_length=10_000)


class EditSerializer(serializers.Serializer):
    object = serializers.CharField(source="subject")
    key = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class ApprovalSerializer(serializers.Serializer):
    user = serializers.CharField(source="user_name")
    revision = serializers.IntegerField()
    approved_at = serializers.DateTimeField()


class ApprovalStateSerializer(serializers.Serializer):
    reasons = serializers.ListField(
        child=serializers.CharField(),
        help_text="Why it needs approval; empty: it does not.",
    )
    needed = serializers.BooleanField(help_text="Approval is needed and not given yet.")
    approved_by = serializers.ListField(child=serializers.CharField())


class NoticeSerializer(serializers.Serializer):
    needed = serializers.BooleanField()
    lowered = serializers.ListField(child=serializers.CharField())
    earliest = serializers.DateTimeField(allow_null=True)


class PreviewSerializer(serializers.Serializer):
    base_version = serializers.IntegerField(allow_null=True)
    changes = serializers.JSONField(
        help_text="The diff against the active version (as GET /snapshots/diff)."
    )
    problems = serializers.ListField(child=serializers.CharField())
    conflicts = serializers.ListField(child=serializers.CharField())
    approval = ApprovalStateSerializer()
    notice = NoticeSerializer()
    publishable = serializers.BooleanField()


class CommentSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author_name")

    class Meta:
        model = ChangeComment
        fields = ("author", "verdict", "body", "revision", "created_at")
        read_only_fields = fields


class ReviewSerializer(StrictSerializer):
    verdict = serializers.ChoiceField(
        choices=Verdict.choices,
        default=Verdict.COMMENT,
        help_text="comment (anyone with a role); changes (back to the author as a "
        "draft) or reject (closed), by a reviewer.",
    )
    body = serializers.CharField(max_length=10_000, help_text="What you say.")


class ChangeRequestSerializer(serializers.ModelSerializer):
    author = serializers.CharField(source="author_name")
    edits = EditSerializer(many=True)
    approvals = ApprovalSerializer(many=True)
    comments = CommentSerializer(many=True)
    preview = serializers.SerializerMethodField()

    class Meta:
        model = ChangeRequest
        fields = (
            "id",
            "title",
            "reason",
            "state",
            "origin",
            "author",
            "edit_revision",
            "lowers",
            "reach",
            "created_at",
            "submitted_at",
            "closed_at",
            "published_by",
            "published_version",
            "carried_versions",
            "edits",
            "approvals",
            "comments",
            "preview",
        )
        read_only_fields = fields

    @extend_schema_field(PreviewSerializer(allow_null=True))
    def get_preview(self, row):
        preview = self.context.get("preview")
        return PreviewSerializer(preview.to_json()).data if preview else None


class ChangeRequestPublishSerializer(StrictSerializer):
    effective_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When it takes effect; now if absent.",
    )
    note = serializers.CharField(
        required=False, allow_blank=True, max_length=4000, help_text="Public note."
    )
    emergency_reason = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=2000,
        help_text="Lower limits sooner than the notice period allows; marked and audited.",
    )


class ChangeRequestPublishedSerializer(serializers.Serializer):
    change_request = ChangeRequestSerializer()
    version = serializers.IntegerField(
        allow_null=True, help_text="None: nothing gateways see changed."
    )
    carried = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="Scheduled versions re-issued with these edits carried in.",
    )


class WithdrawSerializer(StrictSerializer):
    reason = serializers.CharField(required=False, allow_blank=True, max_length=2000)


class RulesDocumentSerializer(StrictSerializer):
    document = serializers.CharField(
        trim_whitespace=False,
        max_length=50_000_000,
        help_text="A rules file (YAML), as `manage.py rules export` writes it.",
    )
    name = serializers.CharField(
        required=False,
        default="rules.yaml",
        max_length=200,
        help_text="The file's name, used in error messages.",
    )


class RulesApplySerializer(RulesDocumentSerializer, ChangeRequestPublishSerializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200)
    reason = serializers.CharField(required=False, allow_blank=True, max_length=4000)
    publish = serializers.BooleanField(
        default=False, help_text="Publish the change request once opened."
    )


class ObjectDiffSerializer(serializers.Serializer):
    object = serializers.CharField()
    key = serializers.CharField()
    before = serializers.JSONField(allow_null=True)
    after = serializers.JSONField(allow_null=True)


class RulesDiffSerializer(serializers.Serializer):
    equal = serializers.BooleanField(help_text="The file matches the active version.")
    version = serializers.IntegerField(allow_null=True)
    objects = ObjectDiffSerializer(many=True, help_text="Every object that differs.")
    changes = serializers.JSONField(help_text="The rules' diff, classified.")
    text = serializers.CharField(
        help_text="The changes in words, with whom they reach."
    )


class RulesAppliedSerializer(serializers.Serializer):
    diff = RulesDiffSerializer()
    change_request = ChangeRequestSerializer(allow_null=True)
    published_version = serializers.IntegerField(allow_null=True)
    not_published = serializers.CharField(
        help_text="Why the request was opened but not published (approval, notice)."
    )
