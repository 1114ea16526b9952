"""Mechanisms: each event's RDP curve and its one-step dominating pairs.

The one place that maps an event (:mod:`jaxdp.events`) to what the
accountants need from it:

* :func:`event_rdp` — its RDP curve ε(α), an upper bound at every order,
  pure and jittable in the event's leaves (``jaxdp.accountant.event_rdp``
  delegates the events listed in :data:`RDP_EVENTS` here);
* :func:`dominating_pairs` — a :class:`jaxdp.pairs.Mechanism` holding one
  pair (P, Q) per direction of the neighbouring relation, ``remove`` with P
  the output on the larger dataset and ``add`` the reverse, each either a
  :class:`jaxdp.pairs.DiscretePair` or a :class:`jaxdp.pairs.MonotonePair`
  (a continuous pair written so that its loss log(dP/dQ)(x) is nondecreasing
  in x), from which the PLD accountant builds certified privacy-loss
  distributions. Sampler events are delegated to
  ``jaxdp.pairs.sampler_event_pairs``.

The formulas live in :mod:`jaxdp.mechanisms_discrete` (randomized response,
discrete Laplace and Gaussian, (ε, δ)-DP, PMF pairs) and
:mod:`jaxdp.mechanisms_continuous` (Laplace, subsampled Laplace, mixtures of
Gaussians); this module only dispatches. The ONE RULE:
every value is an upper bound on the exact one; rounding goes toward more
privacy loss.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import continuous as _cont
from jaxdp._src.mechanisms import discrete as _disc
from jaxdp._src.mechanisms import sampled as _sampled

__all__ = [
    "RDP_EVENTS",
    "event_rdp",
    "dominating_pairs",
]

E = _events  # pylint: disable=invalid-name

# Events whose RDP curve is computed here (the accountant keeps Gaussian,
# SampledGaussian, Laplace, PureDP and the sampler events).
RDP_EVENTS = (E.RandomizedResponse, E.DiscreteLaplace, E.DiscreteGaussian,
              E.MixtureOfGaussians, E.EpsilonDelta, E.SampledLaplace, E.PMFPair)


def _sens(value):
  return 1.0 if value is None else value


def event_rdp(event, orders, dtype=None):
  """RDP curve of one event of :data:`RDP_EVENTS` at the given orders (last axis).

  * ``RandomizedResponse``: exact (three outcomes), capped by pure DP;
  * ``DiscreteLaplace``: exact (closed-form geometric sums);
  * ``DiscreteGaussian``: αΔ²/(2σ²) (Canonne, Kamath & Steinke 2020);
  * ``MixtureOfGaussians``: joint convexity over sampled-Gaussian components
    (:func:`jaxdp.mechanisms_continuous.mixture_of_gaussians_rdp`);
  * ``EpsilonDelta``: pure DP when δ = 0, else ValueError
    (:func:`jaxdp.mechanisms_discrete.epsilon_delta_rdp`);
  * ``SampledLaplace``: exact at integer orders, convex interpolation between
    them (:func:`jaxdp.mechanisms_continuous.sampled_laplace_rdp`);
  * ``PMFPair``: exact, max over both directions (host-side NumPy).

  Args:
    event: an event of :data:`RDP_EVENTS` (leaves may be traced).
    orders: concrete 1-D orders > 1.
    dtype: result dtype (default: the default float dtype).

  Returns:
    RDP values of shape ``event_shape + (len(orders),)``, upper bounds.

  Raises:
    TypeError: for other events.
    ValueError: for an ``EpsilonDelta`` with concrete δ > 0.
  """
  dtype = jnp.result_type(float) if dtype is None else dtype
  alpha_np = np.asarray(orders, np.float64)
  alpha = jnp.asarray(alpha_np, dtype)

  def col(x):
    return jnp.asarray(x, dtype)[..., None]

  if isinstance(event, E.RandomizedResponse):
    out = _disc.randomized_response_rdp(col(event.noise_parameter), col(event.num_buckets), alpha)
  elif isinstance(event, E.DiscreteLaplace):
    out = _disc.discrete_laplace_rdp(col(event.parameter), col(_sens(event.sensitivity)), alpha)
  elif isinstance(event, E.DiscreteGaussian):
    out = _disc.discrete_gaussian_rdp(col(event.sigma), col(_sens(event.sensitivity)), alpha)
  elif isinstance(event, E.MixtureOfGaussians):
    out = _cont.mixture_of_gaussians_rdp(jnp.asarray(event.sigma, dtype), event.sensitivities,
                                         event.probabilities, alpha_np)
  elif isinstance(event, E.EpsilonDelta):
    _disc.epsilon_delta_rdp(0.0, event.delta, alpha_np[:1])  # concrete δ > 0: ValueError
    out = _disc.epsilon_delta_rdp(col(event.epsilon), col(event.delta), alpha)
  elif isinstance(event, E.SampledLaplace):
    out = _cont.sampled_laplace_rdp(jnp.asarray(event.q, dtype), jnp.asarray(event.b, dtype),
                                    alpha_np)
  elif isinstance(event, E.PMFPair):
    val = _disc.pmf_pair_rdp(event.p, event.q, alpha_np)
    out = jnp.asarray(_round_to_dtype_up(val, dtype))
  else:
    raise TypeError(f"jaxdp.mechanisms.event_rdp cannot handle {type(event).__name__}.")
  return jnp.asarray(out, dtype)


def _round_to_dtype_up(x: np.ndarray, dtype) -> np.ndarray:
  """Casts float64 ``x`` to ``dtype`` rounding toward +inf."""
  dtype = np.dtype(dtype)
  y = x.astype(dtype)
  low = y.astype(np.float64) < x
  return np.where(low, np.nextafter(y, np.asarray(np.inf, dtype)), y).astype(dtype)


# --------------------------------------------------------------------------
# Dominating pairs (host-side, concrete scalar parameters)
# --------------------------------------------------------------------------


def _scalars(event, *names):
  """The named fields of a concrete, unbatched event as Python floats."""
  out = []
  for name in names:
    value = getattr(event, name)
    if value is None:
      out.append(1.0)  # an omitted sensitivity
      continue
    if not nx.is_concrete(value):
      raise ValueError(f"{type(event).__name__}.{name} must be concrete for its dominating "
                       f"pairs (host-side); found a tracer.")
    arr = np.asarray(value, np.float64)
    if arr.size != 1:
      raise ValueError(f"{type(event).__name__}.{name} must be a scalar for its dominating "
                       f"pairs (one event at a time); found shape {arr.shape}.")
    out.append(float(arr.reshape(())))
  return out


def dominating_pairs(event):
  """One-step dominating pairs of an event, as a :class:`jaxdp.pairs.Mechanism`.

  * ``Gaussian(σ, Δ)``: (N(Δ, σ²), N(0, σ²)), both directions
    (:func:`jaxdp.pairs.gaussian`);
  * ``Laplace(b)``: monotone, with plateaus
    (:func:`jaxdp.mechanisms_continuous.laplace_pairs`);
  * ``SampledLaplace(q, b)``: remove and the reflected add direction
    (:func:`jaxdp.mechanisms_continuous.sampled_laplace_pairs`);
  * ``MixtureOfGaussians``:
    :func:`jaxdp.mechanisms_continuous.mixture_of_gaussians_pairs`;
  * ``RandomizedResponse``, ``DiscreteLaplace``, ``DiscreteGaussian``,
    ``EpsilonDelta``, ``PureDP``, ``PMFPair``: discrete pairs of
    :mod:`jaxdp.mechanisms_discrete` (exact, or with a rigorously bounded
    truncated tail in ``p_inf``);
  * anything else (``SampledGaussian`` and the sampler events):
    ``jaxdp.pairs.sampler_event_pairs(event)``.

  Args:
    event: a concrete event with scalar fields (one event at a time).

  Returns:
    ``Mechanism(remove, add)``: P is the output on the larger dataset.

  Raises:
    ValueError: for traced or batched fields, or invalid parameters.
    TypeError: for an event without dominating pairs.
  """
  from jaxdp._src.mechanisms import pairs as _pairs  # pylint: disable=g-import-not-at-top
  _events.validate(event)
  if isinstance(event, E.Gaussian):
    sigma, sens = _scalars(event, "sigma", "sensitivity")
    return _pairs.gaussian(sigma, sens)
  if isinstance(event, E.Laplace):
    (b,) = _scalars(event, "b")
    return _cont.laplace_pairs(b)
  if isinstance(event, E.SampledLaplace):
    q, b = _scalars(event, "q", "b")
    return _cont.sampled_laplace_pairs(q, b)
  if isinstance(event, E.MixtureOfGaussians):
    (sigma,) = _scalars(event, "sigma")
    return _cont.mixture_of_gaussians_pairs(sigma, event.sensitivities, event.probabilities)
  if isinstance(event, E.RandomizedResponse):
    p, k = _scalars(event, "noise_parameter", "num_buckets")
    return _disc.randomized_response_pairs(p, int(k))
  if isinstance(event, E.DiscreteLaplace):
    a, d = _scalars(event, "parameter", "sensitivity")
    return _disc.discrete_laplace_pairs(a, int(d))
  if isinstance(event, E.DiscreteGaussian):
    s, d = _scalars(event, "sigma", "sensitivity")
    return _disc.discrete_gaussian_pairs(s, int(d))
  if isinstance(event, E.EpsilonDelta):
    eps, dlt = _scalars(event, "epsilon", "delta")
    return _disc.epsilon_delta_pairs(eps, dlt)
  if isinstance(event, E.PureDP):
    (eps,) = _scalars(event, "epsilon")
    return _disc.epsilon_delta_pairs(eps, 0.0)
  if isinstance(event, E.PMFPair):
    return _disc.pmf_pair_pairs(event.p, event.q)
  return _sampled.sampler_event_pairs(event)


def poisson_phases(q, sigma, steps):
  """The general engine's phases for ``steps`` Poisson-sampled Gaussian steps."""
  return [(dominating_pairs(_events.SampledGaussian(q, sigma)), steps)]
