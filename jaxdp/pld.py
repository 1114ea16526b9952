"""Public ``jaxdp.pld``: re-exports :mod:`jaxdp._src.pld.kernel` (its docstring is this module's).

``epsilon`` and ``delta`` come from :mod:`jaxdp._src.accounting.pld_entry`,
which sends a sampler to its own tight path and a rate to the kernel.
"""

from jaxdp._src.pld import kernel as _impl
from jaxdp._src.accounting.pld_entry import delta, epsilon  # noqa: F401
from jaxdp._src.pld.kernel import grid_interval  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
