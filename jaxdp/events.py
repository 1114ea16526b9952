"""Public ``jaxdp.events``: re-exports :mod:`jaxdp._src.events` (its docstring is this module's)."""

from jaxdp._src import events as _impl
from jaxdp._src.events import fields as _fields
from jaxdp._src.events import (  # noqa: F401
    Gaussian,
    SampledGaussian,
    Laplace,
    PureDP,
    RandomizedResponse,
    DiscreteLaplace,
    DiscreteGaussian,
    MixtureOfGaussians,
    EpsilonDelta,
    SampledLaplace,
    PMFPair,
    TruncatedPoissonGaussian,
    SampledWithoutReplacementGaussian,
    BallsInBinsGaussian,
    ShuffledGaussian,
    RELATIONS,
    Event,
    EVENT_TYPES,
    validate,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, (_impl, _fields), globals(), __all__)
