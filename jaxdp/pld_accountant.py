"""Public ``jaxdp.pld_accountant``: re-exports :mod:`jaxdp._src.accounting.pld_accountant` (its docstring is this module's)."""

from jaxdp._src.accounting import pld_accountant as _impl
from jaxdp._src.accounting.pld_accountant import (  # noqa: F401
    PLDState,
    make_accountant,
    epsilon_batch,
    delta_batch,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
