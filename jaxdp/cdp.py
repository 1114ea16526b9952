"""Public ``jaxdp.cdp``: re-exports :mod:`jaxdp._src.kernels.cdp` (its docstring is this module's)."""

from jaxdp._src.kernels import cdp as _impl
from jaxdp._src.kernels.cdp import (  # noqa: F401
    gaussian,
    group_gaussian,
    from_pure_dp,
    compose,
    to_epsilon,
    to_delta,
    rho_gaussian,
    rho_from_pure_dp,
    rho_to_epsilon,
    rho_to_delta,
    rho_for_epsilon,
    rho_from_rdp,
    rdp_from_rho,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
