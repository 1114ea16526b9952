"""Public ``jaxdp.tradeoff``: re-exports :mod:`jaxdp._src.accounting.tradeoff` (its docstring is this module's)."""

from jaxdp._src.accounting import tradeoff as _impl
from jaxdp._src.accounting.tradeoff import (  # noqa: F401
    TradeoffBounds,
    GdpEstimate,
    from_profile,
    epsilon_grid,
    tradeoff,
    tradeoff_of_state,
    gdp_tpr,
    gdp_mu,
    calibrate_sigma,
    DEFAULT_NUM_EPS,
    DEFAULT_GDP_FPR,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
