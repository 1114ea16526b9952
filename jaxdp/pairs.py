"""Public ``jaxdp.pairs``: re-exports :mod:`jaxdp._src.mechanisms.pairs` (its docstring is this module's)."""

from jaxdp._src.mechanisms import pairs as _impl
from jaxdp._src.mechanisms.pairs import (  # noqa: F401
    DiscretePair,
    MonotonePair,
    SymmetrizedPair,
    MixturePair,
    Mechanism,
    LossPMF,
    gaussian_mixture_pair,
    gaussian,
    sampler_event_pairs,
    discretize,
    hockey_stick,
    validate_pair,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, _impl, globals(), __all__)
