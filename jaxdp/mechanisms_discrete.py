"""Public ``jaxdp.mechanisms_discrete``: re-exports :mod:`jaxdp._src.mechanisms.discrete` (its docstring is this module's)."""

from jaxdp._src.mechanisms import discrete as _impl
from jaxdp._src.mechanisms.discrete import (  # noqa: F401
    pure_dp_rdp,
    randomized_response_rdp,
    discrete_laplace_rdp,
    discrete_gaussian_rdp,
    epsilon_delta_rdp,
)
from jaxdp._src.mechanisms import discrete_pairs as _discrete_pairs
from jaxdp._src.mechanisms.discrete_pairs import (  # noqa: F401
    discrete_pair,
    randomized_response_pairs,
    epsilon_delta_pairs,
    discrete_laplace_pairs,
    discrete_gaussian_pairs,
)
from jaxdp._src.mechanisms import pmf as _pmf
from jaxdp._src.mechanisms.pmf import pmf_pair_pairs, pmf_pair_rdp  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = [*_impl.__all__, *_discrete_pairs.__all__, *_pmf.__all__]
_adopt(__name__, (_impl, _discrete_pairs, _pmf), globals(), __all__)
