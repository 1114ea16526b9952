"""Public ``jaxdp.mechanisms``: re-exports :mod:`jaxdp._src.mechanisms.registry` (its docstring is this module's)."""

from jaxdp._src.mechanisms import registry as _impl
from jaxdp._src.mechanisms.registry import (  # noqa: F401
    RDP_EVENTS,
    event_rdp,
    dominating_pairs,
    event_mechanisms,
    event_pure_epsilon,
    event_rho,
    fast_pld_params,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
