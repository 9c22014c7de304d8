"""The limit form of the policy page: each kind's settings, in the kind's words.

One mapping, :data:`KINDS`, says for each kind of limit which settings the form
shows, which it folds under "Expert settings", and what the kind calls them. The
inline's fieldsets, the labels, the script that follows the kind as it changes
(``static/limits/limit_kinds.js``) and what a save keeps all read it, so a kind is
one entry here.

A setting the chosen kind does not have is hidden (by the script as the kind
changes; by the stylesheet, from the server's mark, without a script) and is reset
to its default on save: a value left in a field that was hidden on the way from
one kind to another never reaches the model, which would refuse it by name.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from django import forms
from django.utils.text import capfirst

from limits.choices import LimitKind
from limits.models import Limit

__all__ = ["KINDS", "KindForm", "LimitForm", "limit_fieldsets"]

#: The mark, on a field's input, of a setting the row's kind does not have.
OTHER_KIND = "data-sluice-other-kind"


@dataclass(frozen=True)
class KindForm:
    """What the form shows of one kind: its common settings, its expert ones (folded),
    and its own words for some of them: field -> (label, help text)."""

    common: tuple[str, ...]
    expert: tuple[str, ...] = ()
    words: Mapping[str, tuple[str, str]] = field(default_factory=dict)

    @property
    def fields(self) -> tuple[str, ...]:
        return self.common + self.expert


#: kind -> what the form shows of it. Labels not given here are the model's.
KINDS: Mapping[str, KindForm] = {
    LimitKind.RATE: KindForm(
        ("rate", "period", "burst"),
        ("cost", "shadow", "shards", "lease", "lease_ms"),
        {
            "rate": ("rate", "Requests (tokens) per period."),
            "period": ("per", "The period the rate is counted over."),
        },
    ),
    LimitKind.SLIDING_WINDOW: KindForm(
        ("rate", "period"),
        ("cost", "shadow"),
        {
            "rate": ("limit", "The most requests admitted in any window."),
            "period": ("window", "Any window of this length holds at most the limit."),
        },
    ),
    LimitKind.CALENDAR_QUOTA: KindForm(
        ("rate", "quota_per", "quota_cycle"),
        ("cost", "shadow"),
        {
            "rate": ("limit", "The most requests admitted per day or month."),
            "quota_per": ("per", "Days start at midnight in the tenant's time zone."),
            "quota_cycle": (
                "cycle",
                "Calendar months start on the 1st; billing months on the tenant's "
                "billing day.",
            ),
        },
    ),
    LimitKind.CONCURRENT: KindForm(("max_inflight",), ("shadow", "timeout")),
}


def _unique(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _common() -> tuple[str, ...]:
    return _unique(name for kind in KINDS.values() for name in kind.common)


def _expert() -> tuple[str, ...]:
    common = set(_common())
    names = (name for kind in KINDS.values() for name in kind.expert)
    return _unique(name for name in names if name not in common)


def limit_fieldsets() -> tuple:
    """The inline's fieldsets: the settings of every kind, each kind's common ones on
    the limit's second line, the expert ones folded; the form hides the others."""
    return (
        (None, {"fields": (("kind", "dimension"), (*_common(), "reads_as"))}),
        (
            "Expert settings",
            {
                "fields": (_expert(),),
                "classes": ("collapse",),
                "description": "A request's own cost, a shadow limit (reported, never "
                "enforced), hot keys (shards or leases), a concurrency slot's timeout.",
            },
        ),
        (
            "What customers read in a 429",
            {
                "fields": (("public_name", "public_description"),),
                "classes": ("collapse",),
                "description": "Leave empty to derive them from the numbers: "
                '"Rate limit per user", "2 requests per second per user, bursts of 5".',
            },
        ),
    )


def _said(kind: KindForm, name: str) -> tuple[str, str]:
    """(label, help text) of a setting for ``kind``: its words, or the model's."""
    if name in kind.words:
        label, help_text = kind.words[name]
        return capfirst(label), help_text
    model_field = Limit._meta.get_field(name)
    return capfirst(model_field.verbose_name), str(model_field.help_text)


def _script_data() -> str:
    """What the script needs to follow the kind: every kind's settings and words."""
    return json.dumps(
        {
            "fields": [*_common(), *_expert()],
            "kinds": {
                str(name): {f: _said(kind, f) for f in kind.fields}
                for name, kind in KINDS.items()
            },
        }
    )


def _default(name: str):
    """What a setting the row's kind does not have is saved as."""
    model_field = Limit._meta.get_field(name)
    return None if model_field.null else model_field.get_default()


class LimitForm(forms.ModelForm):
    """One limit of the policy form, showing the settings of its kind."""

    class Meta:
        model = Limit
        fields = Limit.SETTINGS

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        kind = KINDS.get(self._kind_name(), KINDS[LimitKind.RATE])
        self.other_kind = [
            name
            for name in (*_common(), *_expert())
            if name in self.fields and name not in kind.fields
        ]
        for name in kind.fields:
            if name in self.fields:
                self.fields[name].label, self.fields[name].help_text = _said(kind, name)
        for name in self.other_kind:
            self.fields[name].required = False
            self.fields[name].widget.attrs[OTHER_KIND] = ""
        if "kind" in self.fields:
            self.fields["kind"].widget.attrs["data-sluice-kinds"] = _script_data()

    def _kind_name(self) -> str:
        """The kind the form shows: the one sent, else the row's."""
        if self.is_bound:
            return self.data.get(self.add_prefix("kind")) or ""
        return self.initial.get("kind") or self.instance.kind

    def clean(self):
        """Settings the kind does not have are saved as their defaults, whatever the
        (hidden) field held: a stale or mistyped value there is not the user's choice."""
        data = super().clean()
        for name in self.other_kind:
            self._errors.pop(name, None)
            data[name] = _default(name)
        return data
