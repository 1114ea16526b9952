"""Public ``jaxdp.optax``: re-exports :mod:`jaxdp._src.interfaces.optax` (its docstring is this module's)."""

from jaxdp._src.interfaces import optax as _impl
from jaxdp._src.interfaces.optax import (  # noqa: F401
    DpAggregateState,
    dp_aggregate,
    epsilon,
    delta,
    budget_exhausted,
    find_state,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
