"""Public ``jaxdp.tradeoff``: re-exports :mod:`jaxdp._src.accounting.tradeoff` (its docstring is this module's)."""

from jaxdp._src.accounting import tradeoff as _impl
from jaxdp._src.accounting import tradeoff_dpsgd as _dpsgd
from jaxdp._src.accounting.tradeoff import (  # noqa: F401
    TradeoffBounds,
    from_profile,
    epsilon_grid,
    tradeoff,
    tradeoff_of_state,
    DEFAULT_NUM_EPS,
)
from jaxdp._src.accounting import tradeoff_gdp as _gdp
from jaxdp._src.accounting.tradeoff_gdp import (  # noqa: F401
    GdpEstimate,
    gdp_tpr,
    gdp_mu,
    DEFAULT_GDP_FPR,
)
from jaxdp._src.solvers import tradeoff_calibrate as _calibrate
from jaxdp._src.solvers.tradeoff_calibrate import calibrate_sigma  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = ["TradeoffBounds", "GdpEstimate", "from_profile", "epsilon_grid", "tradeoff",
           "tradeoff_of_state", "gdp_tpr", "gdp_mu", "calibrate_sigma", "DEFAULT_NUM_EPS",
           "DEFAULT_GDP_FPR"]
_adopt(__name__, (_impl, _dpsgd, _gdp, _calibrate), globals(), __all__)
