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
    discretize,
    hockey_stick,
    validate_pair,
)
from jaxdp._src.mechanisms import discretise as _discretise
from jaxdp._src.mechanisms import pair_types as _pair_types
from jaxdp._src.mechanisms import sampled as _sampled
from jaxdp._src.mechanisms.sampled import sampler_event_pairs  # noqa: F401
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = [*_impl.__all__, "sampler_event_pairs"]
_adopt(__name__, (_impl, _pair_types, _discretise, _sampled), globals(), __all__)
