"""Public ``jaxdp.profiles``: re-exports :mod:`jaxdp._src.kernels.profiles` and
:mod:`jaxdp._src.kernels.profiles_amplify` (the first's docstring is this module's)."""

from jaxdp._src.kernels import profiles as _impl
from jaxdp._src.kernels import profiles_amplify as _amplify
from jaxdp._src.kernels.profiles import (  # noqa: F401
    gaussian,
    gaussian_log_delta,
    gaussian_epsilon,
    gaussian_group,
    laplace,
    laplace_log_delta,
    laplace_group,
    analytic_gaussian_sigma,
)
# Eager calls on a few values are answered on the host (nothing compiled).
from jaxdp._src.kernels import profiles_eager as _eager
from jaxdp._src.kernels.profiles_eager import (  # noqa: F401
    sampled_gaussian,
    sampled_gaussian_log_delta,
)
from jaxdp._src.kernels.profiles_amplify import (  # noqa: F401
    hockey_stick,
    log_hockey_stick,
    amplify_poisson,
    amplify_without_replacement,
    amplify_with_replacement,
    randomized_response,
    randomized_membership,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
# The order of the original single module.
__all__ = [*_impl.__all__[:9], *_amplify.__all__, *_impl.__all__[9:]]
_adopt(__name__, (_impl, _amplify, _eager), globals(), __all__)
