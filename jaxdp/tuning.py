"""Public ``jaxdp.tuning``: re-exports :mod:`jaxdp._src.solvers.tuning` (its docstring is this module's)."""

from jaxdp._src.solvers import tuning as _impl
from jaxdp._src.solvers.tuning import (  # noqa: F401
    TunedEpsilon,
    repeat_and_select_event_rdp,
    epsilon,
    sigma,
)
from jaxdp._src.solvers import tuning_kernel as _kernel
from jaxdp._src.solvers.tuning_kernel import (  # noqa: F401
    repeat_and_select_rdp,
    tuned,
    tnb_mean,
    DEFAULT_LAMBDA_HATS,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = ["TunedEpsilon", "repeat_and_select_rdp", "repeat_and_select_event_rdp", "tuned",
           "epsilon", "sigma", "tnb_mean", "DEFAULT_LAMBDA_HATS"]
_adopt(__name__, (_impl, _kernel), globals(), __all__)
