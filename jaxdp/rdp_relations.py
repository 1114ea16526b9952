"""Public ``jaxdp.rdp_relations``: re-exports :mod:`jaxdp._src.kernels.rdp_relations` (its docstring is this module's)."""

from jaxdp._src.kernels import rdp_relations as _impl
from jaxdp._src.kernels.rdp_relations import (  # noqa: F401
    replace_one,
    sampled_gaussian_replace_one,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
