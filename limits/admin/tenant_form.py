"""The tenant's form: its billing day, or the date its billing started.

Contracts state an anchor date ("billed monthly from 17 March"); the model keeps
only its day of the month, which is all a billing cycle needs (a month from the
17th to the 17th; a day a month lacks is its last). The form takes either, so
nobody converts a date by hand.
"""

from __future__ import annotations

from django import forms
from django.contrib.admin.widgets import AdminDateWidget

from .base import ServiceValidatedForm

__all__ = ["TenantForm"]


class TenantForm(ServiceValidatedForm):
    """A tenant, with an optional billing anchor date that sets ``billing_day``."""

    billing_anchor = forms.DateField(
        label="billing anchor date",
        required=False,
        widget=AdminDateWidget,
        help_text="Or the date billing started: its day of the month becomes the "
        "billing day (the date itself is not kept).",
    )

    def clean(self):
        """Set ``billing_day`` from the anchor date; a billing day changed to another
        day at the same time is refused, by name, rather than one silently winning."""
        cleaned = super().clean()
        anchor = cleaned.get("billing_anchor")
        day = cleaned.get("billing_day")
        if anchor is None:
            return cleaned
        if "billing_day" in self.changed_data and day not in (None, anchor.day):
            self.add_error(
                "billing_anchor",
                f"Its day ({anchor.day}) is not the billing day given ({day}): "
                "give one of them.",
            )
            return cleaned
        cleaned["billing_day"] = anchor.day
        return cleaned
