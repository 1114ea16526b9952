"""jaxdp: differential-privacy accounting as batched, jitted JAX kernels.

Top level: :func:`epsilon` and :func:`delta` for DP-SGD (``steps`` compositions
of the Poisson-sampled Gaussian mechanism). Submodules (imported lazily):
``rdp``, ``profiles``, ``pld``, ``cdp``, ``composition``, ``events``,
``accountant``, ``calibrate``, ``optax``, ``sweep``, ``sampling``, ``cli``.
"""

import importlib as _importlib

from jaxdp._api import delta, epsilon

__version__ = "0.1.0"

_SUBMODULES = (
    "rdp", "profiles", "pld", "cdp", "composition", "events", "accountant",
    "calibrate", "optax", "sweep", "sampling", "rdp_samplers", "cli",
)

__all__ = ["epsilon", "delta", *_SUBMODULES]


def __getattr__(name):
  if name in _SUBMODULES:
    module = _importlib.import_module(f"jaxdp.{name}")
    globals()[name] = module
    return module
  raise AttributeError(f"module 'jaxdp' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + list(_SUBMODULES))
