"""Public ``jaxdp.accountant``: re-exports :mod:`jaxdp._src.accounting.accountant` (its docstring is this module's)."""

from jaxdp._src.accounting import accountant as _impl
from jaxdp._src.accounting.accountant import (  # noqa: F401
    Accountant,
    RdpState,
    CdpState,
    rdp,
    cdp,
    event_rdp,
    event_pure_epsilon,
)
from jaxdp._src.accounting import pld_accountant as _pld_accountant
from jaxdp._src.accounting.pld_accountant import pld  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt
import jaxdp.mechanisms  # noqa: F401,E402  (adopts event_rdp and event_pure_epsilon, defined there)

__doc__ = _impl.__doc__
__all__ = [*_impl.__all__, "pld"]
_adopt(__name__, (_impl, _pld_accountant), globals(), __all__)
