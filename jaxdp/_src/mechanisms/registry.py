"""The mechanism registry: the one place that maps an event to what accountants need.

Each mechanism module declares an ``ENTRIES`` dict, event class →
:class:`jaxdp._src.mechanisms.entry.Entry` (RDP curve, dominating pairs,
pure-DP ε, zCDP ρ, fast-kernel parameters); this module merges them
(:func:`table`) and answers for every event:

* :func:`event_rdp` — its RDP curve ε(α), an upper bound at every order,
  pure and jittable in the event's leaves (``jaxdp.accountant.event_rdp`` is
  this function);
* :func:`dominating_pairs` — one :class:`jaxdp.pairs.Mechanism` holding a
  pair (P, Q) per direction of the neighbouring relation, ``remove`` with P
  the output on the larger dataset and ``add`` the reverse, each either a
  :class:`jaxdp.pairs.DiscretePair` or a :class:`jaxdp.pairs.MonotonePair`
  (a continuous pair written so that its loss log(dP/dQ)(x) is nondecreasing
  in x); :func:`event_mechanisms` — the list whose composed answers are
  maxed over (two for truncated Poisson: neighbour sizes N and N + 1);
* :func:`event_pure_epsilon` — a pure-DP ε (the δ floor of the accountants);
* :func:`event_rho` — zCDP ρ; :func:`fast_pld_params` — where the batched FFT
  PLD kernel applies; :func:`poisson_phases` — T Poisson-sampled Gaussian steps
  as the general engine's phases.

The formulas live in :mod:`jaxdp._src.mechanisms.sampled` (the Gaussian
mechanism and the samplers' events), :mod:`~jaxdp._src.mechanisms.continuous`
(Laplace, subsampled Laplace, mixtures of Gaussians),
:mod:`~jaxdp._src.mechanisms.discrete` (randomized response, discrete Laplace
and Gaussian, (ε, δ)-DP, pure DP) and :mod:`~jaxdp._src.mechanisms.pmf`
(explicit PMF pairs); this module only dispatches. Adding a mechanism: one
module with its formulas and ``ENTRIES``, one line in :func:`table`, its event
class in :mod:`jaxdp.events`. The ONE RULE: every value is an upper bound on
the exact one; rounding goes toward more privacy loss.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events

__all__ = [
    "RDP_EVENTS",
    "event_rdp",
    "dominating_pairs",
    "event_mechanisms",
    "event_pure_epsilon",
    "event_rho",
    "fast_pld_params",
]

E = _events  # pylint: disable=invalid-name

# The mechanism events (not the Gaussian family of sampling): kept as a
# public name; every event's curve is answered by event_rdp.
RDP_EVENTS = (E.RandomizedResponse, E.DiscreteLaplace, E.DiscreteGaussian,
              E.MixtureOfGaussians, E.EpsilonDelta, E.SampledLaplace, E.PMFPair)


@functools.lru_cache(maxsize=1)
def table() -> dict:
  """Event class → :class:`~jaxdp._src.mechanisms.entry.Entry`, merged from
  the mechanism modules (imported on first use: SciPy is not needed to
  import the accountants)."""
  # pylint: disable=g-import-not-at-top
  from jaxdp._src.mechanisms import continuous, discrete, pmf, sampled
  # pylint: enable=g-import-not-at-top
  merged = {}
  for module in (sampled, continuous, discrete, pmf):
    merged.update(module.ENTRIES)
  return merged


def _lookup(event, what):
  """The ``what`` function of the event's entry (its class or a base), or None."""
  entries = table()
  for cls in type(event).__mro__:
    entry = entries.get(cls)
    if entry is not None and getattr(entry, what) is not None:
      return getattr(entry, what)
  return None


def event_rdp(event, orders, dtype=None):
  """RDP curve ε(α) of one event at the given orders (last axis), broadcasting.

  * ``Gaussian(σ, Δ)``: αΔ²/(2σ²); ``SampledGaussian(q, σ)``:
    :func:`jaxdp.rdp.sampled_gaussian` (Mironov–Talwar–Zhang 2019), under
    ``relation="replace_one"`` (this event and ``TruncatedPoissonGaussian``)
    the weak-triangle bound of the add/remove curve,
    :func:`jaxdp.rdp_relations.replace_one`; ``Laplace(b)``: Mironov 2017
    Prop 6; ``PureDP(ε)``: the randomized-response bound.
  * ``RandomizedResponse``: exact (three outcomes), capped by pure DP;
    ``DiscreteLaplace``: exact (closed-form geometric sums);
    ``DiscreteGaussian``: αΔ²/(2σ²) (Canonne, Kamath & Steinke 2020);
    ``MixtureOfGaussians``: joint convexity over sampled-Gaussian components;
    ``EpsilonDelta``: pure DP when δ = 0, else ValueError; ``SampledLaplace``:
    exact at integer orders, convex interpolation between them; ``PMFPair``:
    exact, max over both directions (host-side NumPy).
  * Sampler events (:mod:`jaxdp.sampling`; σ is always noise std / clip norm
    C, the DP-SGD noise multiplier). The kernels of :mod:`jaxdp.rdp_samplers`
    take σ over the query's sensitivity under the relation, so replace-one
    (a clipped sum moves by up to 2C) passes σ/2:

    - ``TruncatedPoissonGaussian``: plain Poisson when capacity >= N, else
      :func:`jaxdp.rdp_samplers.truncated_poisson_gaussian`, the larger of its
      values at N and N + 1 (the neighbour's size; the bound is not monotone);
    - ``SampledWithoutReplacementGaussian``: Wang–Balle–Kasiviswanathan 2019
      (replace-one) or the Balle–Barthe–Gaboardi coupling (add/remove);
    - ``BallsInBinsGaussian`` (one epoch): random allocation (Feldman &
      Shenfeld 2025) when no bin is truncated; with a ``capacity`` below N an
      overfull bin may drop one example for the new one (a 2C change of one
      step), which this accounts as one unamplified Gaussian step with
      sensitivity 2C per epoch (sound, not amplified);
    - ``ShuffledGaussian`` (one epoch): no amplification, one Gaussian step
      of sensitivity 2C per epoch (the added example displaces another one;
      Chua et al. 2024 show amplification cannot be claimed).

  Args:
    event: a :mod:`jaxdp.events` event (fields may be traced).
    orders: 1-D orders > 1.
    dtype: result dtype (default: the default float dtype).

  Returns:
    RDP values of shape ``event_shape + (len(orders),)``, upper bounds.

  Raises:
    TypeError: for an event without an RDP curve.
    ValueError: for an ``EpsilonDelta`` with concrete δ > 0 (no RDP curve;
      use ``jaxdp.accountant.pld()``).
  """
  dtype = jnp.result_type(float) if dtype is None else dtype
  fn = _lookup(event, "rdp")
  if fn is None:
    raise TypeError(f"The RDP accountant cannot compose {type(event).__name__}.")
  return fn(event, orders, dtype)


def event_mechanisms(event):
  """Dominating pairs of one event: a list of :class:`jaxdp.pairs.Mechanism`
  whose composed answers are maxed over (usually one).

  Raises:
    TypeError: for an event without dominating pairs (balls-in-bins).
  """
  fn = _lookup(event, "pairs")
  if fn is None:
    raise TypeError(f"No dominating pairs for {type(event).__name__} (accountant='rdp' only).")
  return fn(event)


def dominating_pairs(event):
  """One-step dominating pairs of an event, as one :class:`jaxdp.pairs.Mechanism`.

  The entry's single pair (``Gaussian(σ, Δ)``: (N(Δ, σ²), N(0, σ²)); Laplace
  and subsampled Laplace: monotone, with plateaus; mixtures of Gaussians;
  randomized response, discrete Laplace and Gaussian, (ε, δ)-DP, pure DP and
  PMF pairs: discrete pairs, exact or with a rigorously bounded truncated
  tail in ``p_inf``; Poisson and the samplers' events: Gaussian mixtures), or
  where the entry lists several (truncated Poisson below capacity N) one
  dominating them all (:func:`jaxdp.pairs.sampler_event_pairs`).

  Args:
    event: a concrete event with scalar fields (one event at a time).

  Returns:
    ``Mechanism(remove, add)``: P is the output on the larger dataset.

  Raises:
    ValueError: for traced or batched fields, or invalid parameters.
    TypeError: for an event without dominating pairs.
  """
  _events.validate(event)
  merged = _lookup(event, "dominating")
  if merged is not None:
    return merged(event)
  mechs = event_mechanisms(event)
  if len(mechs) != 1:
    raise TypeError(f"{type(event).__name__} has {len(mechs)} dominating pairs and no single "
                    f"one dominating them all.")
  return mechs[0]


def event_pure_epsilon(event, dtype=None):
  """A pure-DP ε of one event (per event of a batch), +inf where it has none.

  The event is ε-DP (δ = 0) with this ε under its neighbouring relation,
  both directions: its privacy loss never exceeds it. By basic composition
  (Dwork, McSherry, Nissim & Smith 2006) the sum over composed events is a
  pure-DP ε of the composition, so the true δ(ε) is exactly 0 at every ε
  at or above that sum, and may be positive below it. Values:

  * ``PureDP(ε)``: ε; ``EpsilonDelta(ε, δ)``: ε if δ = 0, else +inf;
  * ``Laplace(b)``: 1/b; ``SampledLaplace(q, b)``: 1/b (each density ratio of
    the mixture lies in [e^{-1/b}, e^{1/b}]; not amplified), 0 if q = 0;
  * ``RandomizedResponse(p, k)``: ln(1 + k(1 − p)/p) (+inf at p = 0);
    ``DiscreteLaplace(a, Δ)``: aΔ; ``PMFPair``: ``max |ln(p_i/q_i)|``;
  * ``SampledGaussian``/``TruncatedPoissonGaussian``: 0 if q = 0 (nothing is
    released about anyone), else +inf;
  * every other event (Gaussian, discrete Gaussian, mixtures of Gaussians,
    the other sampler events): +inf, their privacy loss is unbounded.

  Finite values are computed in ``dtype`` and rounded up by 16 ulps (each
  closed form has at most a few roundings of half an ulp, and casting the
  event's fields to ``dtype`` one more), so they never fall below the exact
  value; +inf is always a valid answer.

  Args:
    event: a :mod:`jaxdp.events` event (fields may be traced or batched).
    dtype: result dtype (default: the default float dtype).

  Returns:
    An array of the event batch's shape.
  """
  dtype = jnp.result_type(float) if dtype is None else dtype
  shape = jnp.broadcast_shapes(*(jnp.shape(x) for x in jax.tree_util.tree_leaves(event)))
  fn = _lookup(event, "pure_epsilon")
  val = jnp.asarray(jnp.inf, dtype) if fn is None else fn(event, dtype)
  return jnp.broadcast_to(nx.round_up(jnp.asarray(val, dtype), 16), shape)


def event_rho(event, dtype):
  """zCDP ρ of one event (Bun–Steinke 2016), per event of a batch.

  ``Gaussian(σ, Δ)``: Δ²/(2σ²); ``SampledGaussian(q, σ)``: 1/(2σ²), or
  2/σ² under replace-one (no amplification); ``PureDP(ε)``: ε²/2;
  ``Laplace(b)``: as ``PureDP(1/b)``.

  Raises:
    TypeError: for an event without a zCDP ρ here.
  """
  fn = _lookup(event, "rho")
  if fn is None:
    raise TypeError(f"The CDP accountant cannot compose {type(event).__name__}.")
  return fn(event, dtype)


def fast_pld_params(event):
  """``(q, σ)`` under which the batched FFT PLD kernel (Poisson-sampled
  Gaussian, add/remove) composes ``event`` exactly, else None."""
  fn = _lookup(event, "fast_pld")
  return None if fn is None else fn(event)


def poisson_phases(q, sigma, steps):
  """The general engine's phases for ``steps`` Poisson-sampled Gaussian steps."""
  return [(dominating_pairs(_events.SampledGaussian(q, sigma)), steps)]
