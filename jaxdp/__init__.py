"""jaxdp: differential-privacy accounting as batched, jitted JAX kernels.

Top level: :func:`epsilon` and :func:`delta` for DP-SGD (``steps`` compositions
of the Poisson-sampled Gaussian mechanism). Submodules (imported lazily):
``rdp``, ``profiles``, ``pld``, ``cdp``, ``composition``, ``events``,
``accountant``, ``calibrate``, ``optax``, ``sweep``, ``sampling``,
``rdp_samplers``, ``rdp_relations``, ``cli``, ``tuning``, ``tradeoff``, ``pld_accountant``,
``mechanisms``, ``pairs``, ``pld_general``. :func:`enable_compilation_cache` turns on JAX's
persistent compilation cache (the ``jaxdp`` command does it by default).
"""

import importlib as _importlib

from jaxdp._src.interfaces.api import delta, epsilon
from jaxdp._src.core.cache import enable_compilation_cache
from jaxdp._src.kernels.guards import GuardViolation, GuardWarning

__version__ = "0.1.0"

for _obj in (epsilon, delta, enable_compilation_cache, GuardViolation, GuardWarning):
  _obj.__module__ = __name__
del _obj

_SUBMODULES = (
    "rdp", "profiles", "pld", "cdp", "composition", "events", "accountant",
    "calibrate", "optax", "sweep", "sampling", "rdp_samplers", "rdp_relations", "cli",
    "tuning", "tradeoff", "pld_accountant", "mechanisms", "pairs", "pld_general",
)

__all__ = ["epsilon", "delta", "enable_compilation_cache", "GuardViolation", "GuardWarning",
           *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    module = _importlib.import_module(f"jaxdp.{name}")
    globals()[name] = module
    return module
  raise AttributeError(f"module 'jaxdp' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))
