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
from jaxdp._src.mechanisms.registry import event_pure_epsilon, event_rdp, event_rho
from jaxdp._src.core import persist
from jaxdp._src.accounting import rdp_readout as _readout

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


class _OrderKey(NamedTuple):
  """An RDP accountant's orders as static program arguments: the ascending
  permutation and the ascending orders (float64 bytes), and their count."""
  sorted_idx: bytes
  sorted_orders: bytes
  n: int

  def ascending(self, total):
    idx = np.frombuffer(self.sorted_idx, dtype=np.int32)
    if idx.size == self.n and np.all(idx == np.arange(self.n)):
      return total
    return jnp.take(total, idx, axis=-1)

  def orders(self):
    return np.frombuffer(self.sorted_orders, dtype=np.float64)


# The RDP accountant's arithmetic after validation, as programs: one compiled
# program each (stored by jaxdp.persist) instead of dozens of op-by-op
# compilations when called outside jit; inside the caller's jit they inline.


@functools.partial(persist.jit, static_argnames=("event_ndim",))
def _rdp_add(state, per, count, event, event_ndim):
  """``state`` plus ``count`` times the per-event RDP ``per`` (compensated)."""
  dtype = state.rdp.dtype
  add = _sum_event_batch(per, count, event_ndim, dtype)
  add = jnp.broadcast_to(add, state.rdp.shape)
  hi, lo = _accumulate(state.rdp, state.compensation, add)
  return RdpState(rdp=hi, compensation=lo,
                  pure_epsilon=_compose_pure_epsilon(state.pure_epsilon, event, count, dtype))


@functools.partial(persist.jit, static_argnums=(2,))
def _rdp_epsilon(state, delta, key):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  total = _read(state.rdp, state.compensation)
  return _round_up(_rdp.to_epsilon_refined(key.ascending(total), key.orders(), delta))


@functools.partial(persist.jit, static_argnums=(2,))
def _rdp_delta(state, epsilon, key):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  total = _read(state.rdp, state.compensation)
  d = _round_up(_rdp.to_delta_refined(key.ascending(total), key.orders(), epsilon))
  return jnp.minimum(_floor_delta(d, epsilon, state.pure_epsilon), 1.0)


def _host_sampled_gaussian(q, sigma, orders):
  """Per-step RDP of a concrete (add/remove) sampled Gaussian at ``orders``,
  float64 NumPy of shape ``q.shape + orders.shape``, computed on the host with
  nothing to compile (:func:`jaxdp._src.kernels.host_rdp.per_step_rdp`: the
  formulas of :func:`jaxdp.rdp.sampled_gaussian` run by NumPy, rounded up by
  the same safety factors; an upper bound by the mpmath reference and within
  ~1e-12 relative of the compiled kernel, tests/kernels/test_host_rdp.py).
  The compiled float64 kernel it replaces took ~5 s to build in a fresh
  process for the first ``compose`` of the README's example."""
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  q, sigma = np.broadcast_arrays(np.asarray(q, np.float64), np.asarray(sigma, np.float64))
  with np.errstate(all="ignore"):   # edge inputs (q = 0, σ -> 0): finite or ±inf by design
    flat = _host_rdp.per_step_rdp(q.reshape(-1), sigma.reshape(-1), orders)
  return flat.reshape(q.shape + orders.shape)


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
  underflows to 0 or to an unrounded subnormal. Called eagerly on a concrete
  state, the first 256 reads of a process convert on the host with nothing
  to compile (:mod:`jaxdp._src.accounting.rdp_readout`: float64 rounded up
  into the state's dtype; in float64 the compiled read-out's value to
  rounding, in float32 at most it or within one ulp).

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

  order_key = _OrderKey(sorted_idx.tobytes(), sorted_orders.tobytes(), n)

  def host_event_rdp(event, dtype):
    """Per-event RDP of a concrete event: float64 on the host, rounded up."""
    with jax.ensure_compile_time_eval(), _numerics.x64():
      if isinstance(event, _events.SampledGaussian) and event.relation == "add_remove":
        val = _host_sampled_gaussian(event.q, event.sigma, orders)
      elif (isinstance(event, (_events.SampledGaussian, _events.TruncatedPoissonGaussian))
            and all(np.ndim(f) == 0 for f in event)):
        # Poisson sampling, truncated or replace-one: the sampler answers'
        # own NumPy curve (the truncated kernels took ~6 s to build).
        from jaxdp._src.mechanisms import sampled as _sampled  # pylint: disable=g-import-not-at-top
        val = _sampled.host_poisson_rdp(event, orders)
      else:
        val = per_event_rdp(event, np.float64)
      val = np.asarray(val, np.float64)
    return jnp.asarray(_numerics.round_to_dtype_up(val, dtype))

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
    return _rdp_add(state, per, count, event, event_ndim=_event_ndim(event))

  def epsilon(state: RdpState, delta):
    _numerics.check_array("delta", delta, low=0.0, high=1.0, low_open=True,
                          high_open=True)
    host = _readout.host_readout(state, delta, sorted_idx, sorted_orders, "epsilon")
    return _rdp_epsilon(state, delta, order_key) if host is None else host

  def delta(state: RdpState, epsilon):
    _numerics.check_array("epsilon", epsilon, low=0.0)
    host = _readout.host_readout(state, epsilon, sorted_idx, sorted_orders, "delta")
    return _rdp_delta(state, epsilon, order_key) if host is None else host

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

  def init() -> CdpState:
    dtype = jnp.result_type(float)
    return CdpState(rho=jnp.zeros((), dtype), compensation=jnp.zeros((), dtype),
                    pure_epsilon=jnp.zeros((), dtype))

  def compose(state: CdpState, event, count=1) -> CdpState:
    _events.validate(event)
    _check_count(count)
    dtype = state.rho.dtype
    per = event_rho(event, dtype)
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

