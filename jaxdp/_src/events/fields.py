"""What a legal event is: the field checks of :mod:`jaxdp._src.events`.

The per-class field checks (:data:`_FIELD_CHECKS`, the single source of truth
for a legal event) and cross-field order checks; validation of concrete
numeric fields (tracers and non-numeric placeholders pass untouched),
neighbouring relations and static vector fields; the pytree registration of
events whose relation and vector fields are static auxiliary data; and the
:class:`EventBase` mixin that validates at construction. Split out of the
package's ``__init__`` (moves only).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np

from jaxdp._src.core import numerics as _numerics


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


# Neighbouring relations a sampler event may name (see the module docstring).
RELATIONS = ("add_remove", "replace_one")

# Marks a field that is static pytree auxiliary data checked against RELATIONS.
_RELATION = object()


class _Vector:
  """Marks a vector-valued field: a static tuple of floats, each checked by ``kwargs``."""
  __slots__ = ("kwargs",)

  def __init__(self, **kwargs):
    self.kwargs = kwargs


def _is_static(check) -> bool:
  return check is _RELATION or isinstance(check, _Vector)


_SIZE = dict(low=1.0, integer=True)  # dataset sizes, batch sizes, capacities
_SIGMA = dict(low=0.0, low_open=True)
_RATE = dict(low=0.0, high=1.0)
_SENSITIVITY = dict(low=0.0, low_open=True)  # None (the default) means 1
_INTEGER_SENSITIVITY = dict(low=1.0, integer=True)  # None (the default) means 1
_PMF = _Vector(low=0.0, high=1.0)
# A probability vector must sum to 1 within this (it is then normalised).
_PMF_SUM_TOLERANCE = 1e-6

# The checks below are the single source of truth for what a legal event is.
_FIELD_CHECKS = {
    "Gaussian": {"sigma": dict(low=0.0, low_open=True), "sensitivity": _SENSITIVITY},
    "SampledGaussian": {
        "q": dict(low=0.0, high=1.0),
        "sigma": dict(low=0.0, low_open=True),
        "relation": _RELATION,
    },
    "Laplace": {"b": dict(low=0.0, low_open=True)},
    "PureDP": {"epsilon": dict(low=0.0)},
    "RandomizedResponse": {"noise_parameter": _RATE, "num_buckets": _SIZE},
    "DiscreteLaplace": {"parameter": _SIGMA, "sensitivity": _INTEGER_SENSITIVITY},
    "DiscreteGaussian": {"sigma": _SIGMA, "sensitivity": _INTEGER_SENSITIVITY},
    "MixtureOfGaussians": {
        "sigma": _SIGMA,
        "sensitivities": _Vector(low=0.0),
        "probabilities": _PMF,
    },
    "EpsilonDelta": {"epsilon": dict(low=0.0), "delta": _RATE},
    "SampledLaplace": {"q": _RATE, "b": _SIGMA},
    "PMFPair": {"p": _PMF, "q": _PMF},
    "TruncatedPoissonGaussian": {
        "dataset_size": _SIZE,
        "q": _RATE,
        "capacity": _SIZE,
        "sigma": _SIGMA,
        "relation": _RELATION,
    },
    "SampledWithoutReplacementGaussian": {
        "dataset_size": _SIZE,
        "batch_size": _SIZE,
        "sigma": _SIGMA,
        "relation": _RELATION,
    },
    "BallsInBinsGaussian": {
        "dataset_size": _SIZE,
        "batch_size": _SIZE,
        "sigma": _SIGMA,
        "capacity": _SIZE,  # None (the default) means no truncation
    },
    "ShuffledGaussian": {
        "dataset_size": _SIZE,
        "batch_size": _SIZE,
        "sigma": _SIGMA,
        "relation": _RELATION,
    },
}

# Cross-field checks on concrete values: (smaller, larger) means smaller <= larger.
_ORDER_CHECKS = {
    "SampledWithoutReplacementGaussian": (("batch_size", "dataset_size"),),
    "BallsInBinsGaussian": (("batch_size", "dataset_size"),),
    "ShuffledGaussian": (("batch_size", "dataset_size"),),
}


def _check_relation(name: str, value: Any) -> None:
  if not isinstance(value, str) or value not in RELATIONS:
    raise ValueError(f"{name} must be one of {', '.join(map(repr, RELATIONS))}; "
                     f"found {value!r}.")


def _as_vector(name: str, value: Any) -> Any:
  """A vector field as a tuple of Python floats (static, hashable pytree aux data)."""
  if isinstance(value, tuple) and all(isinstance(v, float) for v in value):
    return value
  if isinstance(value, jax.core.Tracer):
    raise ValueError(f"{name} must be concrete (it is static pytree data, not a traced "
                     f"value); found a tracer {value!r}.")
  try:
    arr = np.asarray(value, dtype=np.float64)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{name} must be a 1-D sequence of numbers; found {value!r}.") from e
  if arr.ndim > 1:
    raise ValueError(f"{name} must be 1-D; found shape {arr.shape}.")
  return tuple(float(v) for v in arr.ravel())


def _check_vector(name: str, value: tuple, **kwargs) -> None:
  if not value:
    raise ValueError(f"{name} must not be empty; found {value!r}.")
  _numerics.check_array(name, np.asarray(value, np.float64), **kwargs)


def _check_pmf_sum(name: str, value: tuple) -> None:
  total = math.fsum(value)
  if abs(total - 1.0) > _PMF_SUM_TOLERANCE:
    raise ValueError(f"{name} must sum to 1 (within {_PMF_SUM_TOLERANCE}); found sum {total!r} "
                     f"for {value!r}.")


def _check_structure(event) -> None:
  """Cross-field checks of the vector-valued events."""
  cls = type(event).__name__
  if cls == "MixtureOfGaussians":
    s, p = event.sensitivities, event.probabilities
    if len(s) != len(p):
      raise ValueError(f"{cls}.sensitivities and {cls}.probabilities must have the same "
                       f"length; found {len(s)} and {len(p)}.")
    _check_pmf_sum(f"{cls}.probabilities", p)
    if not any(si > 0.0 and pi > 0.0 for si, pi in zip(s, p)):
      raise ValueError(f"{cls}.sensitivities must have a positive entry with positive "
                       f"probability; found sensitivities {s!r}, probabilities {p!r}.")
  elif cls == "PMFPair":
    if len(event.p) != len(event.q):
      raise ValueError(f"{cls}.p and {cls}.q must have the same length (a common support); "
                       f"found {len(event.p)} and {len(event.q)}.")
    _check_pmf_sum(f"{cls}.p", event.p)
    _check_pmf_sum(f"{cls}.q", event.q)


def validate_fields(event) -> None:
  cls = type(event).__name__
  checks = _FIELD_CHECKS[cls]
  for field in event._fields:
    if checks[field] is _RELATION:
      _check_relation(f"{cls}.{field}", getattr(event, field))
    elif isinstance(checks[field], _Vector):
      value = _as_vector(f"{cls}.{field}", getattr(event, field))
      _check_vector(f"{cls}.{field}", value, **checks[field].kwargs)
    else:
      _check(f"{cls}.{field}", getattr(event, field), **checks[field])
  _check_structure(event)
  concrete = {f: getattr(event, f) for f in event._fields
              if _is_checkable(getattr(event, f))}
  if len(concrete) > 1:
    _numerics.check_same_shape(**concrete)
  for small, large in _ORDER_CHECKS.get(cls, ()):
    if small in concrete and large in concrete:
      a, b = np.broadcast_arrays(np.asarray(concrete[small]), np.asarray(concrete[large]))
      bad = a > b
      if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        at = f" (first bad element at index {i})" if i else ""
        raise ValueError(
            f"{cls}.{small} must be <= {cls}.{large}; found {a[i]} > {b[i]}{at}.")


def register_static(cls):
  """Registers a NamedTuple event whose relation and vector fields are static aux data.

  The numeric fields stay leaves (they may be traced); the string and
  tuple-of-float fields go in the treedef, so ``jit`` sees them as
  compile-time constants and tree utilities never map over them.
  """
  checks = _FIELD_CHECKS[cls.__name__]
  static = tuple(f for f in cls._fields if _is_static(checks[f]))
  dynamic = tuple(f for f in cls._fields if f not in static)

  def flatten_with_keys(event):
    children = tuple((jax.tree_util.GetAttrKey(f), getattr(event, f)) for f in dynamic)
    return children, tuple(getattr(event, f) for f in static)

  def flatten(event):
    return tuple(getattr(event, f) for f in dynamic), tuple(getattr(event, f) for f in static)

  def unflatten(aux, children):
    return cls(**dict(zip(dynamic, children)), **dict(zip(static, aux)))

  jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
  return cls


class EventBase:
  """Mixin: validates concrete fields at construction."""
  __slots__ = ()

  def __new__(cls, *args, **kwargs):
    self = super().__new__(cls, *args, **kwargs)
    checks = _FIELD_CHECKS[cls.__name__]
    vectors = {f: _as_vector(f"{cls.__name__}.{f}", getattr(self, f))
               for f in self._fields if isinstance(checks[f], _Vector)}
    if vectors:
      self = self._replace(**vectors)
    validate_fields(self)
    return self
