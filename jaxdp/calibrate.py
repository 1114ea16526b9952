"""Public ``jaxdp.calibrate``: re-exports :mod:`jaxdp._src.solvers.calibrate` (its docstring is this module's)."""

from jaxdp._src.solvers import calibrate as _impl
from jaxdp._src.solvers.calibrate import (  # noqa: F401
    sigma,
    steps,
    sampling_rate,
    analytic_gaussian,
    differentiable_epsilon,
    solve_sigma,
    SIGMA_RANGE,
    MIN_SAMPLING_RATE,
    MAX_STEPS,
)
from jaxdp._src.solvers import calibrate_plan as _plan
from jaxdp._src.solvers.calibrate_plan import optimize_dpsgd, DPSGDPlan  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = ["sigma", "steps", "sampling_rate", "analytic_gaussian", "differentiable_epsilon",
           "solve_sigma", "optimize_dpsgd", "DPSGDPlan", "SIGMA_RANGE", "MIN_SAMPLING_RATE",
           "MAX_STEPS"]
_adopt(__name__, (_impl, _plan), globals(), __all__)
