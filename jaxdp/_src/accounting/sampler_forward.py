"""ε and δ of training runs whose batches came from a :mod:`jaxdp.sampling` sampler.

``jaxdp.epsilon(sampler, sigma, steps, delta)`` and ``jaxdp.delta(...)``
dispatch here when their first argument is a sampler, so the number a user
reads is the ε of the batches their step consumed, never a Poisson ε
substituted for another sampler.

RDP: the sampler's event (:meth:`event`) is composed ``steps`` times, or once
per started epoch for the epoch-level events (balls-in-bins, shuffle: charging
a started epoch in full is valid, its first steps are a function of all of
its outputs), through :func:`jaxdp.accountant.event_rdp`, then converted with
the improved conversion.

PLD (``accountant="pld"``): the tight path of :mod:`jaxdp.pld` where the event
is a Poisson-sampled Gaussian (Poisson without truncation; fixed batches under
add/remove, the Balle–Barthe–Gaboardi coupling; shuffling, one unamplified
Gaussian of sensitivity 2C per epoch); the general engine
:mod:`jaxdp.pld_general` with the dominating pairs below for truncated Poisson
(:func:`truncated_poisson_gaussian`, the larger of the answers for the
neighbour sizes N and N + 1), fixed batches under replace-one
(:func:`without_replacement_gaussian`) and Poisson sampling under replace-one
(:func:`poisson_gaussian`). Every answer is the smaller of the PLD upper bound
and the RDP bound (both certified) where the event's RDP analyses the same
relation, and passes the guards of the engine (upper >= the exact one-step
value); where the general engine cannot answer (a grid beyond its memory
budget, :class:`jaxdp.pld_general.GridTooLarge`) the PLD upper bound is +∞
and the answer is the RDP one. Balls-in-bins: random allocation's own
certified laws (:mod:`jaxdp._src.accounting.allocation_forward`, issue 38).
Truncated Poisson under replace-one raises a ``ValueError`` (no PLD yet;
never a Poisson substitute).

Samplers with a capacity below N (balls-in-bins, truncated Poisson): the
answer of either accountant is also bounded by the untruncated sampler's
plus the probability that some batch overflows (:mod:`jaxdp._src.kernels.bins_coupling`,
an (ε, δ) coupling argument: δ_trunc(ε) <= δ_untrunc(ε) + (1 + e^ε)·p),
whichever is smaller; for truncated Poisson at capacity 128 of a mean batch
of 64 this brings the first epoch's RDP ε to within 0.3% of Poisson's (the
two-block pair's RDP alone: 2.2x). The in-jit RDP accountant, which
composes RDP curves only, keeps the unamplified-epoch fallback for truncated
balls-in-bins epochs.

Certified intervals: :func:`pld_bounds` (``jaxdp.pld.epsilon(sampler, ...,
return_bounds=True)``); ``jaxdp.epsilon(sampler, ..., accountant="pld")`` is
min(its upper end, RDP) (:func:`_pld`). Tight calibration
(:func:`calibrate_sigma`, :func:`calibrate_steps`,
:func:`calibrate_sampling_rate` with ``accountant="pld"``) starts from the
RDP answer, which meets the target, and brackets beyond it with probes of the
public computation only (:func:`jaxdp._src.core.descend.descend`).

σ is always the noise multiplier std / C, as dp_accounting's
``GaussianDpEvent.noise_multiplier`` for the same event and relation.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import pairs as _pairs
from jaxdp._src.events import is_sampler
from jaxdp._src.mechanisms.registry import event_mechanisms, event_rdp
from jaxdp._src.mechanisms.sampled import EPOCH_EVENTS

def compositions(sampler, event, steps):
  """Number of times the event is composed for ``steps`` training steps."""
  steps = np.asarray(steps, np.float64)
  if isinstance(event, EPOCH_EVENTS):
    return np.ceil(steps / sampler.steps_per_epoch - 1e-12)
  return steps


@functools.lru_cache(maxsize=64)
def _event_curve(kind, ev, orders_bytes, x64):
  """RDP curve of one (hashable) sampler event at the orders, read-only NumPy.

  Memoised: the balls-in-bins curve alone costs ~2.7 s per call (its add
  direction's certified quadrature over every order), and the accountants,
  the public answer and their guards ask for the same event more than once.
  The key holds the event's class (two event classes with equal fields
  compare equal as tuples), its fields, the orders' bytes and the x64 flag.
  """
  del x64   # part of the key only
  orders = np.frombuffer(orders_bytes, np.float64)
  if kind in (_events.SampledGaussian, _events.TruncatedPoissonGaussian):
    # Poisson sampling, truncated or not: the same formulas in NumPy
    # (nothing compiled; ~1e-10 relative of the compiled kernels).
    from jaxdp._src.mechanisms import sampled as _sampled  # pylint: disable=g-import-not-at-top
    out = _sampled.host_poisson_rdp(ev, orders)
  else:
    out = np.asarray(event_rdp(ev, orders, jnp.float64), np.float64)
  out.setflags(write=False)
  return out


def _curve(ev, orders):
  try:
    hash(ev)
  except TypeError:   # an event with unhashable (array) fields: not memoised
    return np.asarray(event_rdp(ev, orders, jnp.float64), np.float64)
  return _event_curve(type(ev), ev, orders.tobytes(), bool(jax.config.jax_enable_x64))


def _rdp_total(sampler, sigma, steps, orders):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders = np.asarray(_rdp.DEFAULT_ORDERS if orders is None else orders, np.float64)
  sigma = np.asarray(sigma, np.float64)
  flat = sigma.reshape(-1)
  curves = []
  for s in flat:  # one event per distinct σ (events are scalar per sampler)
    ev = sampler.event(float(s))
    curves.append(_curve(ev, orders))
  curve = np.stack(curves).reshape(sigma.shape + (orders.size,))
  count = compositions(sampler, sampler.event(float(flat[0])), steps)
  # Round the product up (ε grows with it).
  return np.nextafter(curve * np.asarray(count)[..., None], np.inf), orders


def _convert(kind, grid, total, value):
  """RDP curve ``total`` (..., orders) -> ε at δ = ``value`` (kind
  "epsilon") or δ at ε = ``value``, in NumPy (the conversion of
  :func:`jaxdp.rdp.to_epsilon`/:func:`jaxdp.rdp.to_delta`, same formulas;
  nothing compiled)."""
  from jaxdp._src.kernels import rdp_convert  # pylint: disable=g-import-not-at-top
  with np.errstate(all="ignore"):
    if kind == "epsilon":
      return rdp_convert.to_epsilon_xp(total, grid, value, "improved", np)[0]
    return rdp_convert.to_delta_xp(total, grid, value, np)


def epsilon(sampler, sigma, steps, delta, accountant="rdp", orders=None):
  """ε of ``steps`` DP-SGD steps on batches from ``sampler`` (see module doc)."""
  return sampler_answer("epsilon", sampler, sigma, steps, delta, accountant, orders)


def delta(sampler, sigma, steps, epsilon_, accountant="rdp", orders=None):
  """δ at ``epsilon_`` of ``steps`` DP-SGD steps on batches from ``sampler``."""
  return sampler_answer("delta", sampler, sigma, steps, epsilon_, accountant, orders)


def sampler_answer(kind, sampler, sigma, steps, value, accountant, orders):
  """ε at δ = ``value`` (kind "epsilon") or δ at ε = ``value`` (kind "delta")."""
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)
  if kind == "epsilon":
    nx.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
  else:
    nx.check_array("epsilon", value, low=0.0)
  shape = nx.check_same_shape(sigma=sigma, steps=steps, **{"delta" if kind == "epsilon"
                                                           else "epsilon": value})
  sigma, steps, value = (np.broadcast_to(np.asarray(a, np.float64), shape)
                         for a in (sigma, steps, value))
  if accountant == "pld":
    return _pld(kind, sampler, sigma, steps, value, orders)
  if accountant != "rdp":
    raise ValueError(f"accountant must be 'rdp' or 'pld'; found {accountant!r}.")
  ev = sampler.event(float(sigma.reshape(-1)[0]) if sigma.size else 1.0)
  if isinstance(ev, _events.SampledGaussian) and ev.relation == "add_remove":
    # Untruncated Poisson sampling IS the Poisson-sampled Gaussian: the same
    # answer as jaxdp.epsilon at rate q (every real order by default).
    from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
    fn = rate.epsilon if kind == "epsilon" else rate.delta
    count = compositions(sampler, ev, steps)
    return fn(np.full(shape, float(ev.q)), sigma, count, value, orders=orders)
  with nx.x64():
    # ``grid`` is the orders of the curve; the coupling below gets the user's
    # ``orders`` (None: every real order for the untruncated Poisson answer).
    total, grid = _rdp_total(sampler, sigma, steps, orders)
  out = _convert(kind, grid, total, value)
  out = np.nextafter(np.asarray(out, np.float64), np.inf)  # round up
  out = _with_coupling(kind, sampler, sigma, steps, value, out, "rdp", orders)
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(np.where(steps == 0, 0.0, out))


def _with_coupling(kind, sampler, sigma, steps, value, out, accountant, orders):
  """``out`` and, for a sampler with a capacity below N, the untruncated
  sampler's answer (same accountant) plus the overflow probability
  (coupling, :mod:`jaxdp._src.kernels.bins_coupling`), whichever is smaller (both are
  certified). Far tighter than the truncated analyses (the unamplified-epoch
  fallback of balls-in-bins; the two-block pair of truncated Poisson, whose
  ε early in training is ~1.6x Poisson's at capacity 128 of 64) whenever the
  capacity is a few standard deviations above the mean batch."""
  if not _truncated(sampler):
    return out
  from jaxdp._src.kernels import bins_coupling as _bins_coupling  # pylint: disable=g-import-not-at-top

  def forward(kind_, sampler_, sigma_, steps_, value_, orders_):
    return sampler_answer(kind_, sampler_, sigma_, steps_, value_, accountant, orders_)

  fn = _bins_coupling.epsilon if kind == "epsilon" else _bins_coupling.delta
  return np.minimum(out, fn(forward, sampler, sigma, steps, value, orders))


def _rdp_forward(kind, sampler, sigma, steps, value, orders):
  return sampler_answer(kind, sampler, sigma, steps, value, "rdp", orders)


def _truncated(sampler):
  """Balls-in-bins or Poisson sampling whose capacity can cut a batch (< N)."""
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  return (isinstance(sampler, (_sampling.BallsInBinsSampler, _sampling.PoissonSampler))
          and sampler.capacity < sampler.dataset_size)


def pld_equivalent(sampler, sigma, steps):
  """(q, σ, compositions) of the Poisson-sampled Gaussian that IS the sampler's
  event, for the fast tight path (:mod:`jaxdp.pld`); None where there is none."""
  ev = sampler.event(float(np.asarray(sigma).reshape(-1)[0]))
  count = compositions(sampler, ev, steps)
  if isinstance(ev, _events.SampledGaussian) and ev.relation == "add_remove":
    return float(ev.q), sigma, count
  if isinstance(ev, _events.ShuffledGaussian):
    return 1.0, sigma / 2.0, count
  if isinstance(ev, _events.SampledWithoutReplacementGaussian) and ev.relation == "add_remove":
    # Balle–Barthe–Gaboardi coupling (jaxdp.rdp_samplers): the pair is the
    # Poisson-sampled Gaussian with rate B/N and sensitivity 2C, in both
    # directions, i.e. rate B/N at noise multiplier σ/2.
    return float(ev.batch_size) / float(ev.dataset_size), sigma / 2.0, count
  return None


def _mechanisms(sampler, sigma):
  """Mechanisms of one step whose composed ε is maxed over (general engine)."""
  ev = sampler.event(sigma)
  try:
    return event_mechanisms(ev)
  except TypeError:
    raise ValueError(_no_tight_path(sampler, ev)) from None


def _no_tight_path(sampler, ev):
  return (f"accountant='pld' is not available for the {type(sampler).__name__} sampler "
          f"({type(ev).__name__}, relation {getattr(ev, 'relation', 'add_remove')!r}) yet; "
          "use accountant='rdp' (never a Poisson substitute).")


def _attained(sampler, sigma):
  """Pairs whose composed ε is attained by a neighbouring pair of datasets
  (a certified LOWER bound on the true ε), or None where the dominating
  pairs of :func:`event_mechanisms` are themselves attained.

  Fixed batches under replace-one: the pair A of
  :func:`without_replacement_gaussian` and its reverse are attained
  (the example and the others at -C, the replacement at +C, every step), so
  max(ε(A^T), ε(A_rev^T)) <= the true ε; the symmetrised pair that the upper
  bound composes may be larger. Truncated Poisson (capacity < N): None here,
  its lower end comes from the coupling (:func:`_coupling_lower`)."""
  ev = sampler.event(sigma)
  if isinstance(ev, _events.SampledWithoutReplacementGaussian) and ev.relation == "replace_one":
    g = float(ev.batch_size) / float(ev.dataset_size)
    a = _pairs.gaussian_mixture_pair([0.0, 2.0], [1 - g, g], [0.0], [1.0], float(sigma))
    # the reverse order, reflected (x -> -x) so that its loss is nondecreasing
    rev = _pairs.gaussian_mixture_pair([0.0], [1.0], [0.0, -2.0], [1 - g, g], float(sigma))
    return [_pairs.Mechanism(a, rev)]
  return None


def _general(kind, sampler, sigma, steps, value, lower=True, **kw):
  """(lower or None, upper) of the general engine (:mod:`jaxdp.pld_general`)
  for each configuration: the max over the dominating pairs of both ends.
  Where the engine cannot answer (a grid beyond its memory budget) the
  interval is the trivial one: lower 0, upper +∞ (δ: 1), so that the
  public answer is the RDP bound there."""
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  lo, up = np.zeros(sigma.shape), np.zeros(sigma.shape)
  top = np.inf if kind == "epsilon" else 1.0
  for s, t in set(zip(sigma.ravel().tolist(), steps.ravel().tolist())):
    sel = (sigma == s) & (steps == t)
    mechs = _mechanisms(sampler, s)
    count = int(compositions(sampler, sampler.event(s), t))
    if count == 0:
      continue
    try:
      up[sel] = np.max([_general_side(kind, [(m, count)], value[sel], True, kw)
                        for m in mechs], axis=0)
      if lower:
        low = _attained(sampler, s) or mechs
        lo[sel] = np.max([_general_side(kind, [(m, count)], value[sel], False, kw)
                          for m in low], axis=0)
    except pld_general.GridTooLarge:
      lo[sel], up[sel] = 0.0, top
  return (lo if lower else None), up


def _general_side(kind, phases, value, upper, kw):
  """One end of the general engine's interval for one mechanism."""
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  if kind == "epsilon" and not kw:
    return np.asarray(pld_general.epsilon_side(phases, value, upper=upper), np.float64)
  fn = pld_general.epsilon if kind == "epsilon" else pld_general.delta
  lo, up = fn(phases, value, return_bounds=True, **kw)
  return np.asarray(up if upper else lo, np.float64)


def _truncated_poisson(sampler):
  return _truncated(sampler) and hasattr(sampler, "q")


def _engine_forward(kind, sampler, sigma, steps, value, orders):
  """min(general engine's upper end, RDP) for an untruncated sampler: the
  coupling's untruncated answer (certified; no XLA program to compile)."""
  _, up = _general(kind, sampler, sigma, steps, value, lower=False)
  return np.minimum(up, np.asarray(sampler_answer(kind, sampler, sigma, steps, value, "rdp", orders),
                                   np.float64))


def tight_upper(kind, sampler, sigma, steps, value, **kw):
  """Upper end of the tight interval of a sampler without a Poisson-sampled
  Gaussian equivalent (see :func:`pld_bounds`)."""
  from jaxdp._src.accounting import allocation_forward as _alloc  # pylint: disable=g-import-not-at-top
  if _alloc.is_allocation(sampler):   # balls-in-bins: random allocation's own laws (issue 38)
    return _alloc.pld_bounds(kind, sampler, sigma, steps, value,
                             kw.get("value_discretization_interval"))[1]
  if not _truncated_poisson(sampler):
    return _general(kind, sampler, sigma, steps, value, lower=False, **kw)[1]
  from jaxdp._src.kernels import bins_coupling as _bins_coupling  # pylint: disable=g-import-not-at-top
  up = _general(kind, sampler, sigma, steps, value, lower=False, **kw)[1]   # raises for
  # replace-one (no dominating pair with capacity < N; the coupling alone is
  # not offered as a tight answer there)
  fn = _bins_coupling.epsilon if kind == "epsilon" else _bins_coupling.delta
  return np.minimum(up, np.asarray(fn(_engine_forward, sampler, sigma, steps, value, None),
                                   np.float64))


def _coupling_lower(kind, sampler, sigma, steps, value, upper, **kw):
  """Certified lower end for a truncated Poisson sampler (capacity < N).

  The coupling of :mod:`jaxdp._src.kernels.bins_coupling` read the other way: with p the
  overflow bound, δ_trunc(ε) >= δ_untrunc(ε) - (1 + e^ε)·p. For ε: with U
  >= the value claimed (the truncated sampler's upper end) and
  δ'' = δ + (1 + e^U)·p, every ε < L = lower_untrunc(δ'') has
  δ_untrunc(ε) > δ'', so δ_trunc(ε) > δ: the true ε is >= min(L, U).
  For δ at ε: lower_untrunc(ε) - (1 + e^ε)·p. Zero where p is too large."""
  from jaxdp._src.kernels import bins_coupling as _bins_coupling  # pylint: disable=g-import-not-at-top
  unt = _bins_coupling._untruncated(sampler)  # pylint: disable=protected-access
  p = np.broadcast_to(_bins_coupling._overflow(sampler, steps), sigma.shape)  # pylint: disable=protected-access
  with np.errstate(over="ignore"):
    if kind == "delta":
      lo_u, _ = _general(kind, unt, sigma, steps, value, **kw)
      return np.maximum(lo_u - np.nextafter((1.0 + np.exp(value)) * p, np.inf), 0.0)
    extra = np.nextafter((1.0 + np.exp(np.minimum(upper, 700.0))) * p, np.inf)
  ok = np.isfinite(upper) & (value + extra < 1.0)
  if not np.any(ok):
    return np.zeros(sigma.shape)
  lo_u, _ = _general(kind, unt, sigma, steps, np.where(ok, value + extra, value), **kw)
  return np.where(ok, np.minimum(lo_u, upper), 0.0)


def pld_bounds(kind, sampler, sigma, steps, value, value_discretization_interval=None,
               rtol=1e-3):
  """Certified PLD interval ``(lower, upper)`` of a sampler's run (host, float64).

  ``kind`` "epsilon" (value = δ) or "delta" (value = ε); arrays of one shape.

  * Samplers whose event is a Poisson-sampled Gaussian (Poisson without
    truncation, add/remove; fixed batches under add/remove; shuffling):
    :func:`jaxdp.pld.epsilon` / :func:`jaxdp.pld.delta` of that Gaussian's
    (q, σ, compositions) with ``return_bounds=True``: the same interval.
  * Fixed batches under replace-one, Poisson under replace-one: the general
    engine (:mod:`jaxdp.pld_general`), the upper end from the event's
    dominating pairs (:func:`event_mechanisms`), the lower end from pairs a
    neighbouring pair of datasets attains (:func:`_attained`), the max over
    the pairs for each end. Where the engine cannot answer, (0, +∞) (δ: (0, 1)).
  * Truncated Poisson (capacity < N, add/remove): the upper end is the
    smaller of the dominating pairs' (the max over the neighbour sizes N and
    N + 1) and the coupling with the untruncated sampler
    (:mod:`jaxdp._src.kernels.bins_coupling`); the lower end is the coupling's
    (:func:`_coupling_lower`: the two-block pairs are not attained).

  Raises:
    ValueError: naming the sampler where no tight path exists (truncated
      Poisson under replace-one). Balls-in-bins goes to
      :func:`jaxdp._src.accounting.allocation_forward.pld_bounds`.
  """
  from jaxdp._src.accounting import allocation_forward as _alloc  # pylint: disable=g-import-not-at-top
  if _alloc.is_allocation(sampler):   # balls-in-bins: random allocation's own laws (issue 38)
    return _alloc.pld_bounds(kind, sampler, sigma, steps, value, value_discretization_interval)
  kw = {} if value_discretization_interval is None and rtol == 1e-3 else dict(
      value_discretization_interval=value_discretization_interval, rtol=rtol)
  fast = pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
    fn = pld.epsilon if kind == "epsilon" else pld.delta
    lo, up = fn(*fast, value, return_bounds=True, **kw)
    return np.asarray(lo, np.float64), np.asarray(up, np.float64)
  if _truncated_poisson(sampler):
    up = tight_upper(kind, sampler, sigma, steps, value, **kw)
    lo = _coupling_lower(kind, sampler, sigma, steps, value, up, **kw)
  else:
    lo, up = _general(kind, sampler, sigma, steps, value, **kw)
  zero = steps == 0
  return np.where(zero, 0.0, np.minimum(lo, up)), np.where(zero, 0.0, up)


def pld_entry(kind, sampler, sigma, steps, value, value_discretization_interval, rtol,
              return_bounds):
  """:func:`jaxdp.pld.epsilon` / :func:`jaxdp.pld.delta` of a sampler: the
  interval of :func:`pld_bounds` (validated, broadcast; NumPy float64).

  :func:`jaxdp.epsilon` with ``accountant="pld"`` returns min(upper, RDP)
  (:func:`_pld`), so it lies in [lower, RDP]; for the samplers with a
  Poisson-sampled Gaussian equivalent its upper end is the kernel's before
  :mod:`jaxdp._src.pld.fallback` intersects extreme intervals (+∞ or over 10%
  wide) with the general engine's, the same as the plain-rate answer."""
  nx.check_array("sigma", sigma, low=0.0, low_open=True)
  nx.check_array("steps", steps, low=0.0, integer=True)
  if kind == "epsilon":
    nx.check_array("delta", value, low=0.0, high=1.0, low_open=True)
  else:
    nx.check_array("epsilon", value, low=0.0, allow_inf=True)
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if value_discretization_interval is not None:
    nx.check_array("value_discretization_interval", value_discretization_interval,
                   low=0.0, low_open=True)
  shape = nx.check_same_shape(sigma=sigma, steps=steps, **{"delta" if kind == "epsilon"
                                                           else "epsilon": value})
  sigma, steps, value = (np.broadcast_to(np.asarray(a, np.float64), shape)
                         for a in (sigma, steps, value))
  ev = sampler.event(float(sigma.reshape(-1)[0]) if sigma.size else 1.0)
  trunc_add_remove = _truncated_poisson(sampler) and sampler.relation == "add_remove"
  from jaxdp._src.accounting import allocation_forward as _alloc  # pylint: disable=g-import-not-at-top
  if (pld_equivalent(sampler, sigma, steps) is None and not trunc_add_remove
      and not _alloc.is_allocation(sampler)):
    try:
      event_mechanisms(ev)
    except TypeError:
      raise ValueError(f"sampler: no tight (PLD) interval for {sampler!r} "
                       f"({type(ev).__name__}); use jaxdp.epsilon(sampler, ..., "
                       "accountant='rdp').") from None
  with nx.x64():
    lo, up = pld_bounds(kind, sampler, sigma, steps, value, value_discretization_interval, rtol)
  lo, up = nx.to_host(np.asarray(lo).reshape(shape)), nx.to_host(np.asarray(up).reshape(shape))
  return (lo, up) if return_bounds else up


def _pld(kind, sampler, sigma, steps, value, orders):
  """The public tight answer: min(PLD upper end, RDP), both certified.

  For samplers with a Poisson-sampled Gaussian equivalent this is
  ``jaxdp.epsilon(q, σ', compositions, δ, accountant="pld")`` of that
  Gaussian (the kernel's guarded upper end and its RDP bound, bit for bit the
  plain-rate answer), also bounded by the sampler's own RDP answer where the
  sampler is not plain Poisson sampling. Otherwise min(upper end of
  :func:`pld_bounds`, the sampler's RDP answer), where the upper end is +∞
  when the engine cannot answer: the RDP answer is returned there.
  """
  fast = pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.accounting import rate  # pylint: disable=g-import-not-at-top
    fn = rate.epsilon if kind == "epsilon" else rate.delta
    out = np.asarray(fn(*fast, value, accountant="pld"), np.float64)
    if not is_plain_poisson(sampler):
      out = np.minimum(out, np.asarray(sampler_answer(kind, sampler, sigma, steps, value, "rdp",
                                                orders), np.float64))
    return nx.to_host(out)
  up = tight_upper(kind, sampler, sigma, steps, value)   # balls-in-bins: allocation_forward
  # Every sampler event's RDP analyses the same relation: the min is sound.
  out = np.minimum(up, np.asarray(sampler_answer(kind, sampler, sigma, steps, value, "rdp", orders),
                                  np.float64))
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(np.where(steps == 0, 0.0, out))


def is_plain_poisson(sampler):
  ev = sampler.event(1.0)
  return isinstance(ev, _events.SampledGaussian) and ev.relation == "add_remove"

