"""The models of the domain app, one module per concept."""

from .announcements import *  # noqa: F403
from .announcements import __all__ as _announcements
from .audit import *  # noqa: F403
from .audit import __all__ as _audit
from .changes import *  # noqa: F403
from .changes import __all__ as _changes
from .deliveries import *  # noqa: F403
from .deliveries import __all__ as _deliveries
from .limits import *  # noqa: F403
from .limits import __all__ as _limits
from .quotas import *  # noqa: F403
from .quotas import __all__ as _quotas
from .rehearsals import *  # noqa: F403
from .rehearsals import __all__ as _rehearsals
from .rules import *  # noqa: F403
from .rules import __all__ as _rules
from .snapshots import *  # noqa: F403
from .snapshots import __all__ as _snapshots
from .stats import *  # noqa: F403
from .stats import __all__ as _stats
from .tokens import *  # noqa: F403
from .tokens import __all__ as _tokens

__all__ = [
    *_rules,
    *_limits,
    *_audit,
    *_snapshots,
    *_stats,
    *_rehearsals,
    *_tokens,
    *_announcements,
    *_deliveries,
    *_changes,
    *_quotas,
]
