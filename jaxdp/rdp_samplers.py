"""Public ``jaxdp.rdp_samplers``: re-exports :mod:`jaxdp._src.kernels.rdp_samplers` (its docstring is this module's)."""

from jaxdp._src.kernels import rdp_samplers as _impl
from jaxdp._src.kernels.rdp_samplers import (  # noqa: F401
    without_replacement_gaussian,
    truncated_poisson_gaussian,
    truncated_poisson_pair,
    TruncatedPoissonPair,
    balls_in_bins_gaussian_epoch,
    shuffle_gaussian_epoch,
    shuffle_lower_bound_epsilon,
)
from jaxdp._src.kernels import rdp_bins as _rdp_bins
from jaxdp._src.kernels import rdp_truncated as _rdp_truncated
from jaxdp._src.kernels import rdp_wor as _rdp_wor
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, (_impl, _rdp_wor, _rdp_truncated, _rdp_bins), globals(), __all__)
