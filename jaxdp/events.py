"""Mechanism descriptions ("events") as pytrees.

Each event is a NamedTuple of (possibly traced) array parameters, so it can be
passed through ``jit``/``vmap``/``lax.scan`` and stored in training state.
Parameters may be arrays (a batch of events broadcasting together).

Validation happens at construction on *concrete* numeric values (Python
numbers, NumPy arrays, concrete ``jax.Array``): a bad parameter raises
``ValueError`` naming the field and the value. Tracers (values inside ``jit``)
and non-numeric placeholders that JAX's tree utilities may put in the fields
(``None``, booleans, sentinels) are passed through untouched, so the classes
stay ordinary pytrees. :func:`validate` re-checks an existing event (the
accountants call it before changing any state).

All mechanisms are stated for sensitivity 1 (L2 for the Gaussian ones, L1 for
Laplace) under add/remove-one neighbouring datasets; scale the noise parameter
by the sensitivity for other queries.
"""

from __future__ import annotations

import collections
from typing import Any, Union

import jax
import numpy as np

from jaxdp import _numerics

__all__ = [
    "Gaussian",
    "SampledGaussian",
    "Laplace",
    "PureDP",
    "Event",
    "validate",
]


def _is_checkable(x: Any) -> bool:
  """True for concrete numeric values that validation should look at."""
  if x is None or isinstance(x, (bool, np.bool_)):
    return False
  if isinstance(x, jax.core.Tracer):
    return False
  if isinstance(x, (int, float, np.integer, np.floating)):
    return True
  if isinstance(x, (np.ndarray, jax.Array)):
    return np.dtype(x.dtype).kind in "iuf"
  return False


def _check(name: str, value: Any, **kwargs) -> None:
  if _is_checkable(value):
    _numerics.check_array(name, value, **kwargs)


# The checks below are the single source of truth for what a legal event is.
_FIELD_CHECKS = {
    "Gaussian": {"sigma": dict(low=0.0, low_open=True)},
    "SampledGaussian": {
        "q": dict(low=0.0, high=1.0),
        "sigma": dict(low=0.0, low_open=True),
    },
    "Laplace": {"b": dict(low=0.0, low_open=True)},
    "PureDP": {"epsilon": dict(low=0.0)},
}


def _validate_fields(event) -> None:
  cls = type(event).__name__
  checks = _FIELD_CHECKS[cls]
  for field in event._fields:
    _check(f"{cls}.{field}", getattr(event, field), **checks[field])
  concrete = {f: getattr(event, f) for f in event._fields
              if _is_checkable(getattr(event, f))}
  if len(concrete) > 1:
    _numerics.check_same_shape(**concrete)


class _Event:
  """Mixin: validates concrete fields at construction."""
  __slots__ = ()

  def __new__(cls, *args, **kwargs):
    self = super().__new__(cls, *args, **kwargs)
    _validate_fields(self)
    return self


class Gaussian(_Event, collections.namedtuple("Gaussian", ["sigma"])):
  """Gaussian mechanism N(f(x), σ²) with noise multiplier ``sigma`` > 0.

  Sensitivity 1; RDP α/(2σ²) (Mironov 2017, Prop 7), zCDP ρ = 1/(2σ²).
  """
  __slots__ = ()


class SampledGaussian(
    _Event, collections.namedtuple("SampledGaussian", ["q", "sigma"])):
  """Poisson-subsampled Gaussian mechanism: rate ``q`` in [0, 1], ``sigma`` > 0.

  The DP-SGD step (Mironov–Talwar–Zhang 2019): each example is included
  independently with probability ``q`` and the clipped sum gets N(0, σ²)
  noise (clip norm 1).
  """
  __slots__ = ()


class Laplace(_Event, collections.namedtuple("Laplace", ["b"])):
  """Laplace mechanism with scale ``b`` > 0 (L1 sensitivity 1): (1/b)-DP."""
  __slots__ = ()


class PureDP(_Event, collections.namedtuple("PureDP", ["epsilon"])):
  """Any ``epsilon``-DP mechanism (``epsilon`` >= 0)."""
  __slots__ = ()


Event = Union[Gaussian, SampledGaussian, Laplace, PureDP]
EVENT_TYPES = (Gaussian, SampledGaussian, Laplace, PureDP)


def validate(event: Any) -> Any:
  """Checks an event's concrete parameters and returns the event unchanged.

  Args:
    event: one of :data:`EVENT_TYPES`; traced fields are not checked.

  Returns:
    ``event``.

  Raises:
    TypeError: when ``event`` is not a known event type.
    ValueError: naming the field and the value when a concrete parameter is
      out of range (σ, b > 0; q in [0, 1]; ε >= 0; all finite) or the fields do
      not broadcast together.
  """
  if not isinstance(event, EVENT_TYPES):
    raise TypeError(
        f"Unknown event {event!r}; expected one of "
        f"{', '.join(t.__name__ for t in EVENT_TYPES)}.")
  _validate_fields(event)
  return event
