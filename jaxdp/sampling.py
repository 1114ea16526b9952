"""Public ``jaxdp.sampling``: re-exports :mod:`jaxdp._src.samplers.sampling` (its docstring is this module's)."""

from jaxdp._src.samplers import sampling as _impl
from jaxdp._src.samplers import sampling_base as _base
from jaxdp._src.samplers import sampling_epoch as _epoch
from jaxdp._src.samplers.sampling import (  # noqa: F401
    poisson_steps_per_epoch,
    epochs_to_steps,
    poisson,
    fixed,
    balls_in_bins,
    shuffle,
    PoissonSampler,
    FixedSampler,
    BallsInBinsSampler,
    ShuffleSampler,
)
from jaxdp._src.core.public import adopt as _adopt

__doc__ = _impl.__doc__
__all__ = list(_impl.__all__)
_adopt(__name__, (_impl, _base, _epoch), globals(), __all__)
