"""Public ``jaxdp.rdp``: re-exports :mod:`jaxdp._src.kernels.rdp` (its docstring is this module's)."""

from jaxdp._src.kernels import rdp as _impl
from jaxdp._src.kernels import rdp_convert as _convert
from jaxdp._src.kernels import rdp_eager as _eager
from jaxdp._src.kernels.rdp import (  # noqa: F401
    DEFAULT_ORDERS,
    gaussian,
    sampled_gaussian_bound,
    to_epsilon,
    to_delta,
    to_epsilon_refined,
    to_delta_refined,
    dpsgd_rdp,
    dpsgd_epsilon,
    dpsgd_delta,
)
from jaxdp._src.kernels.rdp_eager import sampled_gaussian  # noqa: F401  (answers eager calls on the host)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, (_impl, _convert, _eager), globals(), __all__)
