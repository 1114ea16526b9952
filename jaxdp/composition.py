"""Public ``jaxdp.composition``: re-exports :mod:`jaxdp._src.kernels.composition` (its docstring is this module's)."""

from jaxdp._src.kernels import composition as _impl
from jaxdp._src.kernels.composition import (  # noqa: F401
    basic,
    advanced,
    advanced_heterogeneous,
    optimal_homogeneous_delta,
    optimal_homogeneous_epsilon,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
