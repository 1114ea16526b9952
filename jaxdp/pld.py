"""Public ``jaxdp.pld``: re-exports :mod:`jaxdp._src.pld.kernel` (its docstring is this module's)."""

from jaxdp._src.pld import kernel as _impl
from jaxdp._src.pld.kernel import (  # noqa: F401
    delta,
    epsilon,
    grid_interval,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
