"""Form fields of the admin's publishing pages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django import forms
from django.core.exceptions import ValidationError
from django.utils.dateparse import parse_datetime

from limits.announcements.changelog import note_names_tenants

__all__ = ["PublicNoteCheck", "UtcDateTimeField", "earliest_input"]

_FORMAT = "%Y-%m-%dT%H:%MZ"


class UtcDateTimeField(forms.CharField):
    """An ISO 8601 time as text, read as UTC unless it names another offset.

    A text box, not the browser's ``datetime-local`` picker: that one shows the
    viewer's locale (mm/dd/yyyy, 12-hour) and says nothing of the zone, under a
    label that says UTC.
    """

    def __init__(self, **kwargs):
        kwargs.setdefault(
            "widget",
            forms.TextInput(
                attrs={
                    "placeholder": "2026-12-31T14:00Z",
                    "size": 22,
                    "spellcheck": "false",
                }
            ),
        )
        super().__init__(**kwargs)

    def prepare_value(self, value):
        if isinstance(value, datetime):
            return value.astimezone(UTC).strftime(_FORMAT)
        return value

    def to_python(self, value) -> datetime | None:  # type: ignore[override]
        text = (super().to_python(value) or "").strip()
        if not text:
            return None
        try:
            parsed = parse_datetime(text.replace("z", "Z"))
        except ValueError:
            parsed = None
        if parsed is None:
            raise ValidationError(
                "Give the time as ISO 8601 in UTC, e.g. 2026-12-31T14:00Z.",
                code="invalid",
            )
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def earliest_input(earliest: datetime) -> datetime:
    """The time to pre-fill for a version that may not take effect before
    ``earliest``: the next whole hour at least 10 minutes later, so the form still
    holds when it is sent a few minutes after it was shown."""
    later = earliest.astimezone(UTC) + timedelta(minutes=10)
    return later.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


class PublicNoteCheck(forms.Form):
    """For a form with a public ``note``: a note that names a tenant is stopped once,
    with a warning and a box to tick to send it as it is."""

    note_names_ok = forms.BooleanField(
        required=False,
        widget=forms.HiddenInput,
        label="Publish the note as it is",
        help_text="The note names a customer; every customer reads it.",
    )

    def clean(self):
        data = super().clean() or {}
        named = note_names_tenants(data.get("note") or "")
        if named and not data.get("note_names_ok"):
            box = self.fields.pop("note_names_ok")  # shown last: "the box below"
            box.widget = forms.CheckboxInput()
            self.fields["note_names_ok"] = box
            self.add_error(
                "note",
                f"This public note names {', '.join(named)}: every customer reads it. "
                "Take the name out, or tick the box below to publish it as it is.",
            )
        data.pop("note_names_ok", None)
        return data
