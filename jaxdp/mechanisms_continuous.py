"""Public ``jaxdp.mechanisms_continuous``: re-exports :mod:`jaxdp._src.mechanisms.continuous` (its docstring is this module's)."""

from jaxdp._src.mechanisms import continuous as _impl
from jaxdp._src.mechanisms.continuous import (  # noqa: F401
    laplace_rdp,
    sampled_laplace_rdp,
    mixture_of_gaussians_rdp,
    laplace_pairs,
    sampled_laplace_pairs,
    mixture_of_gaussians_pairs,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
