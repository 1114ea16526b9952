"""Functional privacy accountants (optax-style NamedTuples of pure functions).

An :class:`Accountant` bundles four pure functions over a NamedTuple state of
arrays with a fixed shape and dtype::

    acc = jaxdp.accountant.rdp()
    state = acc.init()
    state = acc.compose(state, jaxdp.events.SampledGaussian(q, sigma), count=1)
    eps = acc.epsilon(state, delta)

Because the state never changes structure, ``compose`` can run inside ``jit``,
``lax.scan``, ``lax.cond`` and ``fori_loop`` with traced event parameters and
counts, and the state can live inside a training state (see
:mod:`jaxdp.optax`). Events whose fields are arrays are a *batch* of events,
all composed (their RDP/ρ are summed); ``count`` broadcasts against the event
batch.

Concrete event parameters and counts are validated (``ValueError``) before
the new state is built, so a bad event never changes the state; traced ones
are the caller's responsibility (kernels propagate NaN for out-of-range
values).

Float32 (x64 off, the usual training setting): the state dtype is the default
float dtype at :func:`init` time. Every composed increment is an upper bound:
events with concrete parameters (e.g. a fixed DP-SGD step) get their RDP
computed once in float64 at trace time and rounded *up* to the state dtype
(so a jitted training step only adds a constant vector); traced events use
the kernels in the state dtype (which inflate by a relative 256 ulps); each
product ``count * rdp`` is rounded up by one ulp with ``nextafter``; and
increments are accumulated with compensated (TwoSum) summation, so the
rounding error of the running sum does not grow with the number of steps.
The read-out rounds the compensated sum up again before converting. The
resulting ε is never below the float64 answer and within ~1e-4 relative of
it (tested to 1e-3 over long heterogeneous schedules).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.kernels import cdp as _cdp
from jaxdp._src import events as _events

__all__ = [
    "Accountant",
    "RdpState",
    "CdpState",
    "rdp",
    "cdp",
    "event_rdp",
    "event_pure_epsilon",
]


class Accountant(NamedTuple):
  """An accountant: pure functions over a NamedTuple state.

  Attributes:
    init: ``() -> state``.
    compose: ``(state, event, count=1) -> state``.
    epsilon: ``(state, delta) -> epsilon``.
    delta: ``(state, epsilon) -> delta``.
    tradeoff: ``(state, fpr) -> TradeoffBounds``, certified bounds on the
      TPR of membership-inference tests at each FPR
      (:func:`jaxdp.tradeoff.tradeoff_of_state`); None where not provided.
  """
  init: Callable
  compose: Callable
  epsilon: Callable
  delta: Callable
  tradeoff: Optional[Callable] = None


def _with_tradeoff(acc: Accountant) -> Accountant:
  """``acc`` with ``tradeoff``: certified TPR upper bounds from its δ
  (:func:`jaxdp.tradeoff.tradeoff_of_state`; host-level)."""

  def tradeoff(state, fpr, **kwargs):
    from jaxdp._src.accounting import tradeoff as _tradeoff  # pylint: disable=g-import-not-at-top
    return _tradeoff.tradeoff_of_state(acc, state, fpr, **kwargs)

  return acc._replace(tradeoff=tradeoff)


class RdpState(NamedTuple):
  """State of :func:`rdp`: the RDP curve at the accountant's orders.

  The curve is ``rdp + compensation`` (a compensated sum; ``compensation``
  holds the rounding error of ``rdp``), both of shape ``(len(orders),)``.
  ``pure_epsilon`` (a scalar) is a pure-DP ε of everything composed, +inf
  once an event without one (a Gaussian) is composed; see
  :func:`event_pure_epsilon`. It tells the δ read-out where the true δ can
  be 0 (ε >= pure_epsilon) and where it may be positive, so that a δ bound
  underflowing to 0 is floored there. ``None`` (a state built by hand)
  means unknown, read as +inf.
  """
  rdp: jax.Array
  compensation: jax.Array
  pure_epsilon: Optional[jax.Array] = None


class CdpState(NamedTuple):
  """State of :func:`cdp`: total zCDP ρ = ``rho + compensation`` (scalars);
  ``pure_epsilon`` as in :class:`RdpState`."""
  rho: jax.Array
  compensation: jax.Array
  pure_epsilon: Optional[jax.Array] = None


# --------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------


def _check_count(count):
  _numerics.check_array("count", count, low=0.0, integer=True)


def _two_sum(a, b):
  """Knuth's TwoSum: s + err == a + b exactly (round-to-nearest)."""
  s = a + b
  bb = s - a
  err = (a - (s - bb)) + (b - bb)
  return s, err


def _accumulate(hi, lo, add):
  """Compensated ``(hi, lo) + add``; ``add`` is rounded up by one ulp first."""
  add = add.astype(hi.dtype)
  add = jnp.where(add > 0, jnp.nextafter(add, jnp.asarray(jnp.inf, add.dtype)),
                  add)
  s, e = _two_sum(hi, add)
  return _two_sum(s, lo + e)


def _read(hi, lo):
  """The compensated sum, rounded up (never below hi + lo in exact math)."""
  total = hi + lo
  return jnp.where(total > 0,
                   jnp.nextafter(total, jnp.asarray(jnp.inf, total.dtype)),
                   total)


def _round_up(x, ulps=4.0):
  """Relative upward nudge of a few ulps (for conversions' own rounding)."""
  x = jnp.asarray(x)
  return x * (1.0 + ulps * jnp.finfo(x.dtype).eps)


def _round_to_dtype_up(x: np.ndarray, dtype) -> np.ndarray:
  """Casts float64 ``x`` to ``dtype`` rounding toward +inf."""
  y = x.astype(dtype)
  low = y.astype(np.float64) < x
  return np.where(low, np.nextafter(y, np.asarray(np.inf, dtype)), y).astype(dtype)


def _sum_event_batch(per_event, count, event_shape_ndim, dtype):
  """Σ over the event batch of count * per-event values (trailing dims kept)."""
  count = jnp.asarray(count, dtype)
  extra = per_event.ndim - event_shape_ndim
  count = count.reshape(count.shape + (1,) * extra)
  total = count * per_event
  axes = tuple(range(total.ndim - extra))
  return jnp.sum(total, axis=axes) if axes else total


def _event_ndim(event) -> int:
  # Leaves only: a relation (static aux data) or an absent capacity is not one.
  return max((jnp.ndim(f) for f in jax.tree_util.tree_leaves(event)), default=0)


# --------------------------------------------------------------------------
# Pure-DP ε of the composition: where δ may be positive (the δ floor)
# --------------------------------------------------------------------------


def _pmf_pair_pure_epsilon(event) -> float:
  """max_i |log(p_i/q_i)| of a ``PMFPair`` (normalised as the accountants
  do), +inf where one PMF has mass the other lacks; float64 on the host
  (the PMFs are static), rounded up by a relative 1e-12."""
  p = np.asarray(event.p, np.float64)
  q = np.asarray(event.q, np.float64)
  p, q = p / p.sum(), q / q.sum()
  both = (p > 0) & (q > 0)
  if np.any((p > 0) != (q > 0)):
    return float("inf")
  loss = np.abs(np.log(p[both]) - np.log(q[both]))
  return float(np.max(loss, initial=0.0) * (1.0 + 1e-12))


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
  inf = jnp.asarray(jnp.inf, dtype)

  def f(x):
    return jnp.asarray(1.0 if x is None else x, dtype)

  E = _events  # pylint: disable=invalid-name
  if isinstance(event, E.PureDP):
    val = f(event.epsilon)
  elif isinstance(event, E.EpsilonDelta):
    val = jnp.where(f(event.delta) == 0, f(event.epsilon), inf)
  elif isinstance(event, E.Laplace):
    val = 1.0 / f(event.b)
  elif isinstance(event, E.SampledLaplace):
    val = jnp.where(f(event.q) > 0, 1.0 / f(event.b), 0.0)
  elif isinstance(event, E.RandomizedResponse):
    p = f(event.noise_parameter)
    safe_p = jnp.where(p > 0, p, 1.0)
    val = jnp.where(p > 0, jnp.log1p(f(event.num_buckets) * (1.0 - p) / safe_p), inf)
  elif isinstance(event, E.DiscreteLaplace):
    val = f(event.parameter) * f(event.sensitivity)
  elif isinstance(event, E.PMFPair):
    val = jnp.asarray(_pmf_pair_pure_epsilon(event), dtype)
  elif isinstance(event, (E.SampledGaussian, E.TruncatedPoissonGaussian)):
    val = jnp.where(f(event.q) > 0, inf, 0.0)
  else:
    val = inf
  return jnp.broadcast_to(_numerics.round_up(jnp.asarray(val, dtype), 16), shape)


def _compose_pure_epsilon(total, event, count, dtype):
  """``total`` + Σ over the event batch of count · pure ε, rounded up
  (a sum of n non-negative terms is off by at most (n − 1) ulps relative;
  the result is inflated by n + 2 ulps and one more ``nextafter``);
  ``None`` (unknown) stays ``None``. The running total gains up to one ulp
  per call, so after T calls it may exceed the exact sum by T ulps relative
  (float32: ~6% after 10⁶ steps); that only widens the range of ε where δ is
  floored at ``tiny`` instead of left at its computed value."""
  if total is None:
    return None
  per = event_pure_epsilon(event, dtype)
  c, per = jnp.broadcast_arrays(jnp.asarray(count, dtype), per)
  terms = jnp.where(c > 0, c * per, 0.0)       # 0 · inf is 0 here: a count of 0 releases nothing
  add = _numerics.round_up(jnp.sum(terms), terms.size + 2)
  new = total + add
  up = jnp.nextafter(new, jnp.asarray(jnp.inf, dtype))
  return jnp.where((new > 0) & jnp.isfinite(new), up, new)


def _floor_delta(d, epsilon, pure_epsilon):
  """δ bounds never below the smallest normal number of their dtype where
  the true δ may be positive (ε below the state's pure-DP ε).

  The in-jit counterpart of :func:`jaxdp._src.kernels.rdp_driver.delta_floor` (bitwise the same
  floor, ``finfo(float64).tiny``, in float64): a computed bound below
  ``tiny`` (0 or a subnormal, whose rounding is no longer relative) means
  the true δ is below it too, so ``tiny`` is an upper bound there. Where
  ε >= the pure-DP ε the true δ is exactly 0 and ``d`` stays as it is.
  """
  d = jnp.asarray(d)
  pe = jnp.asarray(jnp.inf if pure_epsilon is None else pure_epsilon, d.dtype)
  live = jnp.asarray(epsilon, d.dtype) < pe
  return jnp.where(live, jnp.maximum(d, jnp.finfo(d.dtype).tiny), d)


# --------------------------------------------------------------------------
# RDP accountant
# --------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _host_sampled_gaussian_kernel(orders_bytes: bytes):
  """A jitted sampled-Gaussian RDP kernel per order grid (shared compile cache)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders = np.frombuffer(orders_bytes, dtype=np.float64)
  return jax.jit(
      lambda q, sigma: _rdp.sampled_gaussian(q[..., None], sigma[..., None], orders))


def _poisson_add_remove_rdp(event, col, alpha):
  """Add/remove RDP (both directions) of a ``SampledGaussian`` or
  ``TruncatedPoissonGaussian`` at orders ``alpha`` (last axis)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_samplers as _rs  # pylint: disable=g-import-not-at-top
  plain = _rdp.sampled_gaussian(col(event.q), col(event.sigma), alpha)
  if isinstance(event, _events.SampledGaussian):
    return plain
  if _numerics.is_concrete(event.capacity) and _numerics.is_concrete(event.dataset_size) and \
      np.all(np.asarray(event.capacity) >= np.asarray(event.dataset_size)):
    return plain
  n, q, cap, s = (col(getattr(event, f)) for f in ("dataset_size", "q", "capacity", "sigma"))
  # The bound is not monotone in N and an add/remove neighbour has N or N+1
  # examples: take the larger of the two.
  trunc = jnp.maximum(_rs.truncated_poisson_gaussian(n, q, cap, s, alpha),
                      _rs.truncated_poisson_gaussian(n + 1, q, cap, s, alpha))
  return jnp.where(cap >= n, plain, trunc)


def event_rdp(event, orders, dtype=None):
  """RDP curve ε(α) of one event at the given orders (last axis), broadcasting.

  The one place that maps an event to its RDP kernel:

  * ``SampledGaussian(q, σ)``: :func:`jaxdp.rdp.sampled_gaussian`
    (Mironov–Talwar–Zhang 2019); under ``relation="replace_one"`` (this event
    and ``TruncatedPoissonGaussian``) the weak-triangle bound of the
    add/remove curve, :func:`jaxdp.rdp_relations.replace_one`; ``Gaussian(σ, Δ)``: αΔ²/(2σ²);
    ``Laplace(b)``: Mironov 2017 Prop 6; ``PureDP(ε)``: the randomized-response
    bound.
  * ``RandomizedResponse``, ``DiscreteLaplace``, ``DiscreteGaussian``,
    ``MixtureOfGaussians``, ``EpsilonDelta`` (δ = 0 only), ``SampledLaplace``,
    ``PMFPair``: :func:`jaxdp.mechanisms.event_rdp`.
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
    RDP values of shape ``event_shape + (len(orders),)``.

  Raises:
    TypeError: for an event without an RDP curve.
    ValueError: for an ``EpsilonDelta`` with concrete δ > 0 (no RDP curve;
      use :func:`pld`).
  """
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_samplers as _rs  # pylint: disable=g-import-not-at-top
  dtype = jnp.result_type(float) if dtype is None else dtype
  alpha = jnp.asarray(orders, dtype)

  def col(x):
    return jnp.asarray(x, dtype)[..., None]

  E = _events  # pylint: disable=invalid-name
  if isinstance(event, (E.SampledGaussian, E.TruncatedPoissonGaussian)):
    curve = functools.partial(_poisson_add_remove_rdp, event, col)
    if event.relation == "replace_one":
      from jaxdp._src.kernels import rdp_relations  # pylint: disable=g-import-not-at-top
      return jnp.asarray(rdp_relations.replace_one(curve, orders), dtype)
    return jnp.asarray(curve(orders), dtype)
  if isinstance(event, E.Gaussian):
    sens = 1.0 if event.sensitivity is None else event.sensitivity
    return jnp.asarray(_rdp.gaussian(col(event.sigma) / col(sens), orders), dtype)
  from jaxdp._src.mechanisms import registry as _mech  # pylint: disable=g-import-not-at-top
  if isinstance(event, _mech.RDP_EVENTS):
    return _mech.event_rdp(event, orders, dtype)
  if isinstance(event, E.Laplace):
    from jaxdp._src.mechanisms import continuous as _cont  # pylint: disable=g-import-not-at-top
    return jnp.asarray(_cont.laplace_rdp(col(event.b), alpha), dtype)
  if isinstance(event, E.PureDP):
    from jaxdp._src.mechanisms import discrete as _disc  # pylint: disable=g-import-not-at-top
    return jnp.asarray(_disc.pure_dp_rdp(col(event.epsilon), alpha), dtype)
  if isinstance(event, E.SampledWithoutReplacementGaussian):
    s = col(event.sigma)
    s = s / 2.0 if event.relation == "replace_one" else s
    return jnp.asarray(_rs.without_replacement_gaussian(
        col(event.dataset_size), col(event.batch_size), s, alpha, relation=event.relation), dtype)
  if isinstance(event, E.BallsInBinsGaussian):
    s = col(event.sigma)
    untruncated = _rs.balls_in_bins_gaussian_epoch(col(event.dataset_size), col(event.batch_size),
                                                   s, alpha)
    if event.capacity is None:
      return jnp.asarray(untruncated, dtype)
    unamplified = _rdp.gaussian(s / 2.0, alpha)
    cap_ok = col(event.capacity) >= col(event.dataset_size)
    return jnp.asarray(jnp.where(cap_ok, untruncated, unamplified), dtype)
  if isinstance(event, E.ShuffledGaussian):
    return jnp.asarray(_rdp.gaussian(col(event.sigma) / 2.0, alpha), dtype)
  raise TypeError(f"The RDP accountant cannot compose {type(event).__name__}.")


def rdp(orders=None) -> Accountant:
  """Rényi-DP accountant over a fixed grid of orders.

  Composition adds RDP curves (Mironov 2017, Prop 1). Per-event RDP:
  ``SampledGaussian(q, σ)`` by :func:`jaxdp.rdp.sampled_gaussian`
  (Mironov–Talwar–Zhang 2019), ``Gaussian(σ)`` α/(2σ²), ``Laplace(b)``
  Mironov 2017 Prop 6, ``PureDP(ε)`` the randomized-response bound. ε and δ
  use :func:`jaxdp.rdp.to_epsilon` / :func:`jaxdp.rdp.to_delta` (improved
  conversion, Balle et al. 2020 / Canonne–Kamath–Steinke 2020). The state
  also carries a pure-DP ε of the composition (:func:`event_pure_epsilon`):
  below it δ is floored at the dtype's smallest normal number, as the host
  path (:func:`jaxdp._src.kernels.rdp_driver.delta_floor`) does, so that a positive δ never
  underflows to 0 or to an unrounded subnormal.

  Args:
    orders: 1-D concrete orders > 1 (default ``jaxdp.rdp.DEFAULT_ORDERS``).

  Returns:
    An :class:`Accountant` whose state is :class:`RdpState`.

  Raises:
    ValueError: for orders that are not a non-empty 1-D array of finite
      values > 1.
  """
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top

  orders = _rdp.DEFAULT_ORDERS if orders is None else orders
  orders = np.asarray(orders, dtype=np.float64)
  if orders.ndim != 1 or orders.size == 0:
    raise ValueError(f"orders must be a non-empty 1-D array; found shape {orders.shape}.")
  _numerics.check_array("orders", orders, low=1.0, low_open=True)
  orders = orders.copy()
  orders.setflags(write=False)
  n = orders.size
  # The read-out refines between neighbouring orders: sorted, unique.
  sorted_idx = np.unique(orders, return_index=True)[1].astype(np.int32)
  sorted_orders = orders[sorted_idx]

  def ascending(total):
    if sorted_idx.size == n and np.all(sorted_idx == np.arange(n)):
      return total
    return jnp.take(total, sorted_idx, axis=-1)

  host_sampled_gaussian = _host_sampled_gaussian_kernel(orders.tobytes())

  def host_event_rdp(event, dtype):
    """Per-event RDP of a concrete event: float64 on the host, rounded up."""
    with jax.ensure_compile_time_eval(), _numerics.x64():
      if isinstance(event, _events.SampledGaussian) and event.relation == "add_remove":
        val = host_sampled_gaussian(np.asarray(event.q, np.float64),
                                    np.asarray(event.sigma, np.float64))
      else:
        val = per_event_rdp(event, np.float64)
      val = np.asarray(val, np.float64)
    return jnp.asarray(_round_to_dtype_up(val, dtype))

  def per_event_rdp(event, dtype):
    return event_rdp(event, orders, dtype)

  def init() -> RdpState:
    dtype = jnp.result_type(float)
    return RdpState(rdp=jnp.zeros((n,), dtype), compensation=jnp.zeros((n,), dtype),
                    pure_epsilon=jnp.zeros((), dtype))

  def compose(state: RdpState, event, count=1) -> RdpState:
    _events.validate(event)
    _check_count(count)
    dtype = state.rdp.dtype
    if all(_numerics.is_concrete(f) for f in event):
      per = host_event_rdp(event, dtype)
    else:
      per = per_event_rdp(event, dtype)
    add = _sum_event_batch(per, count, _event_ndim(event), dtype)
    add = jnp.broadcast_to(add, (n,))
    hi, lo = _accumulate(state.rdp, state.compensation, add)
    return RdpState(rdp=hi, compensation=lo,
                    pure_epsilon=_compose_pure_epsilon(state.pure_epsilon, event, count, dtype))

  def epsilon(state: RdpState, delta):
    _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True,
                          high_open=True)
    total = _read(state.rdp, state.compensation)
    return _round_up(_rdp.to_epsilon_refined(ascending(total), sorted_orders, delta))

  def delta(state: RdpState, epsilon):
    _numerics.check_array("epsilon", epsilon, low=0.0)
    total = _read(state.rdp, state.compensation)
    d = _round_up(_rdp.to_delta_refined(ascending(total), sorted_orders, epsilon))
    return jnp.minimum(_floor_delta(d, epsilon, state.pure_epsilon), 1.0)

  return _with_tradeoff(Accountant(init=init, compose=compose, epsilon=epsilon, delta=delta))


# --------------------------------------------------------------------------
# zCDP accountant
# --------------------------------------------------------------------------


def cdp() -> Accountant:
  """Zero-concentrated-DP (ρ-zCDP) accountant.

  ρ adds under composition (Bun–Steinke 2016, Lemma 1.7). Per event:
  ``Gaussian(σ)`` ρ = 1/(2σ²) (the Dwork–Rothblum (τ²/2, τ)-CDP of Thm 3.2
  with τ = 1/σ); ``SampledGaussian(q, σ)`` also 1/(2σ²) — zCDP gives no
  amplification by subsampling, and the bound is valid because Rényi
  divergence is jointly quasi-convex; ``PureDP(ε)`` ε²/2 (Bun–Steinke Prop
  1.4; tighter than Dwork–Rothblum Thm 3.5); ``Laplace(b)`` as PureDP(1/b).
  ε and δ use the improved conversion of :func:`jaxdp.cdp.rho_to_epsilon`
  (Canonne–Kamath–Steinke 2020, Cor 13); δ is floored below the state's
  pure-DP ε as in :func:`rdp`.

  For DP-SGD prefer :func:`rdp` (which amplifies by sampling); this
  accountant suits unsampled Gaussian/pure-DP workloads.

  Returns:
    An :class:`Accountant` whose state is :class:`CdpState`.
  """

  def per_event_rho(event, dtype):
    if isinstance(event, (_events.Gaussian, _events.SampledGaussian)):
      sigma = jnp.asarray(event.sigma, dtype)
      if isinstance(event, _events.Gaussian) and event.sensitivity is not None:
        sigma = sigma / jnp.asarray(event.sensitivity, dtype)  # ρ = Δ²/(2σ²)
      if isinstance(event, _events.SampledGaussian):
        sigma = jnp.broadcast_to(sigma, jnp.broadcast_shapes(
            jnp.shape(event.q), jnp.shape(event.sigma)))
        if event.relation == "replace_one":
          sigma = sigma / 2.0  # the sampled example moves the sum by up to 2C
      return 0.5 / jnp.square(sigma)
    if isinstance(event, _events.PureDP):
      eps = jnp.asarray(event.epsilon, dtype)
      return 0.5 * eps * eps
    if isinstance(event, _events.Laplace):
      lam = 1.0 / jnp.asarray(event.b, dtype)
      return 0.5 * lam * lam
    raise TypeError(f"The CDP accountant cannot compose {type(event).__name__}.")

  def init() -> CdpState:
    dtype = jnp.result_type(float)
    return CdpState(rho=jnp.zeros((), dtype), compensation=jnp.zeros((), dtype),
                    pure_epsilon=jnp.zeros((), dtype))

  def compose(state: CdpState, event, count=1) -> CdpState:
    _events.validate(event)
    _check_count(count)
    dtype = state.rho.dtype
    per = per_event_rho(event, dtype)
    per = _round_up(per, 2.0)
    count = jnp.asarray(count, dtype)
    add = jnp.sum(count * per)
    hi, lo = _accumulate(state.rho, state.compensation, add)
    return CdpState(rho=hi, compensation=lo,
                    pure_epsilon=_compose_pure_epsilon(state.pure_epsilon, event, count, dtype))

  def epsilon(state: CdpState, delta):
    _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
    rho = _read(state.rho, state.compensation)
    return _round_up(_cdp._rho_to_epsilon_kernel(rho, delta), 8.0)  # pylint: disable=protected-access

  def delta(state: CdpState, epsilon):
    _numerics.check_array("epsilon", epsilon, low=0.0, allow_inf=True)
    rho = _read(state.rho, state.compensation)
    d = _cdp._rho_to_delta_kernel(rho, epsilon)  # pylint: disable=protected-access
    return jnp.minimum(_floor_delta(_round_up(d, 8.0), epsilon, state.pure_epsilon), 1.0)

  return _with_tradeoff(Accountant(init=init, compose=compose, epsilon=epsilon, delta=delta))


# --------------------------------------------------------------------------
# PLD accountant (delegates)
# --------------------------------------------------------------------------

