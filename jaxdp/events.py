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

The sampler events (:class:`TruncatedPoissonGaussian`,
:class:`SampledWithoutReplacementGaussian`, :class:`BallsInBinsGaussian`,
:class:`ShuffledGaussian`; produced by :mod:`jaxdp.sampling`) describe a noisy
sum of per-example vectors of L2 norm at most C (the clip norm) over a batch
drawn by a named sampler, with Gaussian noise of standard deviation σ·C: σ is
dp_accounting's ``GaussianDpEvent.noise_multiplier``. Their integer sizes are
array leaves like every other parameter; a neighbouring ``relation`` (a
string) is static pytree auxiliary data, so these events pass through
``jit``/``vmap``/``scan`` unchanged. ``"replace_one"`` swaps one example for
another (two batch sums then differ by up to 2C). For samplers over a fixed
dataset size (fixed-size batches, shuffling) ``"add_remove"`` is accounted
literally (the neighbour has N ± 1 examples): the added example displaces a
batch member, a change of up to 2C. That reading is the conservative one: it
also bounds zero-out (one example replaced by one that contributes nothing;
dp_accounting's ``REPLACE_SPECIAL``, Kairouz et al. 2021, Def. 1.1).
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
    "TruncatedPoissonGaussian",
    "SampledWithoutReplacementGaussian",
    "BallsInBinsGaussian",
    "ShuffledGaussian",
    "RELATIONS",
    "Event",
    "EVENT_TYPES",
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


# Neighbouring relations a sampler event may name (see the module docstring).
RELATIONS = ("add_remove", "replace_one")

# Marks a field that is static pytree auxiliary data checked against RELATIONS.
_RELATION = object()

_SIZE = dict(low=1.0, integer=True)  # dataset sizes, batch sizes, capacities
_SIGMA = dict(low=0.0, low_open=True)
_RATE = dict(low=0.0, high=1.0)

# The checks below are the single source of truth for what a legal event is.
_FIELD_CHECKS = {
    "Gaussian": {"sigma": dict(low=0.0, low_open=True)},
    "SampledGaussian": {
        "q": dict(low=0.0, high=1.0),
        "sigma": dict(low=0.0, low_open=True),
    },
    "Laplace": {"b": dict(low=0.0, low_open=True)},
    "PureDP": {"epsilon": dict(low=0.0)},
    "TruncatedPoissonGaussian": {
        "dataset_size": _SIZE,
        "q": _RATE,
        "capacity": _SIZE,
        "sigma": _SIGMA,
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


def _validate_fields(event) -> None:
  cls = type(event).__name__
  checks = _FIELD_CHECKS[cls]
  for field in event._fields:
    if checks[field] is _RELATION:
      _check_relation(f"{cls}.{field}", getattr(event, field))
    else:
      _check(f"{cls}.{field}", getattr(event, field), **checks[field])
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


def _register_static(cls):
  """Registers a NamedTuple event whose relation fields are static aux data.

  The numeric fields stay leaves (they may be traced); the string fields go in
  the treedef, so ``jit`` sees them as compile-time constants and tree
  utilities never map over them.
  """
  checks = _FIELD_CHECKS[cls.__name__]
  static = tuple(f for f in cls._fields if checks[f] is _RELATION)
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


class TruncatedPoissonGaussian(_Event, collections.namedtuple(
    "TruncatedPoissonGaussian", ["dataset_size", "q", "capacity", "sigma"])):
  """Gaussian sum over a Poisson sample truncated to at most ``capacity``.

  One step of :func:`jaxdp.sampling.poisson`: each of ``dataset_size``
  examples is kept independently with probability ``q``; when more than
  ``capacity`` are kept, a uniformly random ``capacity``-subset of them is
  used; the clipped sum gets N(0, σ²C²) noise. Add/remove neighbours. The same
  event as dp_accounting's ``TruncatedSubsampledGaussianDpEvent(dataset_size,
  sampling_probability=q, truncated_batch_size=capacity,
  noise_multiplier=sigma)``.

  Accounting: with t = P[Binomial(N−1, q) ≥ capacity] the probability that a
  given example's batch is truncated, the step is a mixture of the
  Poisson-sampled Gaussian (q, σ) and, on truncation, a replace-one step
  (the example displaces another) at the conditional inclusion rate;
  dp_accounting builds its PLD that way (``from_truncated_subsampled_gaussian_
  mechanism``; arXiv:2508.15089). When ``capacity >= dataset_size`` nothing is
  ever truncated and the event equals ``SampledGaussian(q, sigma)``.

  Fields: ``dataset_size`` >= 1 and ``capacity`` >= 1 whole numbers, ``q`` in
  [0, 1], ``sigma`` > 0.
  """
  __slots__ = ()


@_register_static
class SampledWithoutReplacementGaussian(_Event, collections.namedtuple(
    "SampledWithoutReplacementGaussian",
    ["dataset_size", "batch_size", "sigma", "relation"],
    defaults=("replace_one",))):
  """Gaussian sum over a batch drawn uniformly without replacement.

  ``batch_size`` of the ``dataset_size`` examples, a fresh independent draw
  every step (:func:`jaxdp.sampling.fixed`); N(0, σ²C²) noise. Like
  dp_accounting's ``SampledWithoutReplacementDpEvent(dataset_size,
  batch_size, GaussianDpEvent(sigma))``. ``relation`` is static (not a pytree
  leaf).

  Accounting, with γ = batch_size / dataset_size:

  * ``"replace_one"`` (the natural relation for a fixed batch size): Rényi DP
    of subsampling without replacement, Wang, Balle & Kasiviswanathan
    (AISTATS 2019), Thm 27, applied to the Gaussian's RDP. Replacing one
    example moves the clipped sum by up to 2C, so the base Gaussian's RDP is
    2α/σ² at order α. dp_accounting's ``RdpAccountant(REPLACE_ONE)`` uses
    α/(2σ²) instead (a shift of C, while its own PLD accountant shifts
    replace-one Gaussians by 2C), so this event's RDP is dp_accounting's RDP
    for ``SampledWithoutReplacementDpEvent(N, B, GaussianDpEvent(sigma /
    2))``.
  * ``"add_remove"`` (zero-out: the batch slot of the changed example
    contributes nothing on one side): conditioned on the other batch members
    the two outputs are N(0, σ²) and (1−γ)N(0, σ²) + γN(1, σ²) up to a common
    shift, so by joint convexity the event is dominated by
    ``SampledGaussian(γ, sigma)``. Read literally (the neighbour has N ± 1
    examples and its own batches of B), the coupling of Balle, Barthe &
    Gaboardi (NeurIPS 2018) swaps the extra example for a batch member, a
    shift of up to 2C with probability at most γ: ``SampledGaussian(γ, sigma
    / 2)``, which also bounds the zero-out reading (the conservative choice).
    dp_accounting has no add/remove analysis of this event (its RDP
    accountant requires REPLACE_ONE; its PLD accountant rejects it).

  Fields: whole numbers 1 <= ``batch_size`` <= ``dataset_size``, ``sigma`` >
  0, ``relation`` in :data:`RELATIONS`.
  """
  __slots__ = ()


class BallsInBinsGaussian(_Event, collections.namedtuple(
    "BallsInBinsGaussian", ["dataset_size", "batch_size", "sigma", "capacity"],
    defaults=(None,))):
  """One epoch of balls-in-bins batches, each with a Gaussian sum: k = N // B steps.

  :func:`jaxdp.sampling.balls_in_bins`: at the start of an epoch every one of
  the N = ``dataset_size`` examples is put in one of k = N // ``batch_size``
  steps uniformly at random, independently of the others (expected batch size
  N/k); step i sums the clipped vectors of its bin and adds N(0, σ²C²) noise.
  The event is the whole epoch (k steps): compose it once per epoch; charging a
  started epoch in full is valid (its first steps are a function of all k
  outputs). Add/remove neighbours.

  Accounting: each example takes part in exactly one uniformly random step of
  the k ("random allocation", 1 out of k). Chua et al., "Balls-and-Bins
  Sampling for DP-SGD" (AISTATS 2025) introduce it for DP-SGD; Feldman &
  Shenfeld, "Privacy amplification by random allocation" (2025,
  arXiv:2502.08202) bound its privacy by that of k Poisson-sampled Gaussian
  steps with rate (1 + o(1))/k, with numerical bounds for the Gaussian.

  ``capacity`` (optional, whole number >= 1): batches were truncated to at most
  ``capacity`` examples (a uniformly random subset of an overfull bin).
  ``None`` means never truncated. Truncation is not post-processing: adding an
  example to a full bin may displace another (a replace-one change of that
  step, shift up to 2C), which happens with probability
  P[Binomial(N−1, 1/k) ≥ capacity]; accountants must either include that
  case or reject a capacity below N. ``dataset_size``, ``batch_size`` whole
  numbers with 1 <= ``batch_size`` <= ``dataset_size``; ``sigma`` > 0.
  """
  __slots__ = ()


@_register_static
class ShuffledGaussian(_Event, collections.namedtuple(
    "ShuffledGaussian", ["dataset_size", "batch_size", "sigma", "relation"],
    defaults=("add_remove",))):
  """One epoch of shuffled batches, each with a Gaussian sum: k = N // B steps.

  :func:`jaxdp.sampling.shuffle`: a uniformly random permutation of the N =
  ``dataset_size`` examples, cut into k = N // ``batch_size`` disjoint blocks
  of ``batch_size`` (the last N − kB examples sit the epoch out); step i sums
  block i with N(0, σ²C²) noise. The event is the whole epoch: compose once per
  epoch. ``relation`` is static (not a pytree leaf).

  Accounting: each example is in at most one batch of the epoch, so the epoch
  costs at most one unamplified Gaussian mechanism: ``Gaussian(sigma)`` would
  do for zero-out neighbours, and ``Gaussian(sigma / 2)`` under
  ``"replace_one"`` (a shift of up to 2C). jaxdp accounts ``"add_remove"``
  literally, also as ``Gaussian(sigma / 2)`` (below). Read literally (a neighbour of
  N ± 1 examples with its own permutation), moving the last example of the
  larger permutation into the extra example's slot couples the two so that
  one batch differs by a replacement — ``Gaussian(sigma / 2)`` — provided
  N ± 1 gives the same k; otherwise the number of steps itself differs. The
  one-Gaussian bound is the only general one: Chua et al., "How Private are
  DP-SGD Implementations?" (ICML 2024) prove lower bounds for shuffled batches
  far above Poisson-subsampling accounting at the same (σ, B/N), so Poisson
  accounting must not be used.

  Fields: whole numbers 1 <= ``batch_size`` <= ``dataset_size``; ``sigma`` >
  0; ``relation`` in :data:`RELATIONS`.
  """
  __slots__ = ()


Event = Union[Gaussian, SampledGaussian, Laplace, PureDP, TruncatedPoissonGaussian,
              SampledWithoutReplacementGaussian, BallsInBinsGaussian, ShuffledGaussian]
EVENT_TYPES = (Gaussian, SampledGaussian, Laplace, PureDP, TruncatedPoissonGaussian,
               SampledWithoutReplacementGaussian, BallsInBinsGaussian, ShuffledGaussian)


def validate(event: Any) -> Any:
  """Checks an event's concrete parameters and returns the event unchanged.

  Args:
    event: one of :data:`EVENT_TYPES`; traced fields are not checked.

  Returns:
    ``event``.

  Raises:
    TypeError: when ``event`` is not a known event type.
    ValueError: naming the field and the value when a concrete parameter is
      out of range (σ, b > 0; q in [0, 1]; ε >= 0; sizes whole numbers >= 1 with
      batch_size <= dataset_size; all finite), a relation is not in
      :data:`RELATIONS`, or the fields do not broadcast together.
  """
  if not isinstance(event, EVENT_TYPES):
    raise TypeError(
        f"Unknown event {event!r}; expected one of "
        f"{', '.join(t.__name__ for t in EVENT_TYPES)}.")
  _validate_fields(event)
  return event
