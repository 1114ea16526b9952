"""Public ``jaxdp.pld_general``: re-exports :mod:`jaxdp._src.pld.general` (its docstring is this module's)."""

from jaxdp._src.pld import general as _impl
from jaxdp._src.pld.general import (  # noqa: F401
    epsilon,
    delta,
    grid_interval,
    loss_variance,
    GridTooLarge,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
