"""Template filters that say changes well: in the admin and on the public changelog."""

from django import template
from django.conf import settings

register = template.Library()


@register.filter
def without_kind(text: str, kind: str) -> str:
    """A change's words without the kind its badge already says: the badge "new" and
    "new tier enterprise (Enterprise)" read "new tier enterprise", not "new new"."""
    prefix = f"{kind} "
    return text[len(prefix) :] if kind and text.startswith(prefix) else text


@register.filter
def shorten(text: str, length: int = 80) -> str:
    """``text`` cut at a word boundary with an ellipsis, never mid-word."""
    text, length = text or "", int(length)
    if len(text) <= length:
        return text
    head = text[: length + 1]
    cut = head.rsplit(None, 1)[0] if " " in head.strip() else text[:length]
    return cut.rstrip(" ,;:.") + "…"


@register.simple_tag
def brand() -> str:
    """The operator's name for its API (``SLUICE_BRAND``), for public titles."""
    return settings.SLUICE_BRAND
