"""The models of the domain app, one module per concept."""

from .announcements import *  # noqa: F403
from .announcements import __all__ as _announcements
from .audit import *  # noqa: F403
from .audit import __all__ as _audit
from .deliveries import *  # noqa: F403
from .deliveries import __all__ as _deliveries
from .rules import *  # noqa: F403
from .rules import __all__ as _rules
from .snapshots import *  # noqa: F403
from .snapshots import __all__ as _snapshots
from .tokens import *  # noqa: F403
from .tokens import __all__ as _tokens

__all__ = [
    *_rules,
    *_audit,
    *_snapshots,
    *_tokens,
    *_announcements,
    *_deliveries,
]
