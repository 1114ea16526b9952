"""Public ``jaxdp.sweep``: re-exports :mod:`jaxdp._src.solvers.sweep` (its docstring is this module's)."""

from jaxdp._src.solvers import sweep as _impl
from jaxdp._src.solvers.sweep import (  # noqa: F401
    grid,
    epsilon,
    delta,
    sigma,
    steps,
    sampling_rate,
    mesh_sharding,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
