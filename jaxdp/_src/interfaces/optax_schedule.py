"""The known schedule of :func:`jaxdp._src.interfaces.optax.dp_aggregate`.

What the transform knows when it is built (:class:`_Schedule`: sampler or
Poisson rate, σ, host accountant, planned steps), the host answers it gives,
the steps planned within a budget (``jaxdp.calibrate.steps``, float64) and
the in-jit read-out of ε/δ from float64 per-charge RDP tables (the Poisson
table refined at every real order, the coupled truncated-Poisson bound).
Split out of :mod:`jaxdp._src.interfaces.optax` (moves only).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.accounting import accountant as _accountant
from jaxdp._src import events as _events
from jaxdp._src.core import persist


# --------------------------------------------------------------------------
# The known schedule: host answers, planned steps, in-jit read-out
# --------------------------------------------------------------------------

# Orders of the in-jit read-out of a known Poisson schedule: DEFAULT_ORDERS
# and a grid in x = α - 1 over the range the host's every-real-order search
# covers (1 + (1.01 - 1)/4 .. 2·4096). With the chord bound between
# neighbours (jaxdp.rdp.to_epsilon_refined), a relative step s in x costs
# about s²·x/(4(2x + 1)) relative against the minimum over every real order
# (exact for the Gaussian mechanism, (α-1)ε(α) = ρα(α-1), at its optimal
# order; 1.6× that measured for sampled Gaussians), so the step is
# s(x) = 2·sqrt(_FINE_TOL·(2x + 1)/x): ~7000 orders for ~5e-7.
_FINE_TOL = 3e-7


@functools.lru_cache(maxsize=1)
def _fine_orders() -> np.ndarray:
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  c = 2.0 * math.sqrt(_FINE_TOL)
  u, stop, xs = math.log(0.0025), math.log(8191.0), []
  while u < stop:
    xs.append(math.exp(u))
    u += c * math.sqrt((2.0 * xs[-1] + 1.0) / xs[-1])
  xs.append(8191.0)
  out = np.unique(np.concatenate([_rdp.DEFAULT_ORDERS, 1.0 + np.asarray(xs)]))
  out.setflags(write=False)
  return out


# Adaptive refinement of the Poisson table: an interval whose chord, at its
# midpoint in log(α-1), is above (α-1)ε(α) there by more than this relative
# gap is split (the sampled Gaussian's curve bends sharply where small-q
# amplification ends, beyond what the Gaussian model above predicts).
_REFINE_GAP = 4e-7
_REFINE_ROUNDS = 24
_REFINE_MAX_POINTS = 60000


@functools.lru_cache(maxsize=32)
def _poisson_table(q: float, sigma: float):
  """Per-step RDP of the Poisson-sampled Gaussian at :func:`_fine_orders`,
  adaptively refined (float64 quadrature, valid at every real order, rounded
  up; cached per (q, σ)). Accuracy only: any orders give a valid bound."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_quadrature as _quad  # pylint: disable=g-import-not-at-top

  def rdp_at(alpha):
    with _numerics.x64():
      return np.asarray(_rdp.quadrature_rdp(np.float64(q), np.float64(sigma), alpha,
                                            _quad.NODES_PER_WINDOW, xp=np),  # pylint: disable=protected-access
                        np.float64)

  orders = np.asarray(_fine_orders(), np.float64)
  curve = rdp_at(orders)
  open_ = np.ones(orders.size - 1, bool)       # intervals not checked yet
  for _ in range(_REFINE_ROUNDS):
    idx = np.nonzero(open_)[0]
    if idx.size == 0 or orders.size + idx.size > _REFINE_MAX_POINTS:
      break
    xa, xb = orders[idx] - 1.0, orders[idx + 1] - 1.0
    xm = np.sqrt(xa * xb)
    rm = rdp_at(1.0 + xm)
    fa, fb, fm = xa * curve[idx], xb * curve[idx + 1], xm * rm
    with np.errstate(invalid="ignore", divide="ignore"):
      gap = (fa + (fb - fa) * (xm - xa) / (xb - xa) - fm) / fm
    split = np.isfinite(gap) & (gap > _REFINE_GAP) & np.isfinite(rm)
    open_[idx] = False
    if not split.any():
      break
    pos = idx[split] + 1
    orders = np.insert(orders, pos, 1.0 + xm[split])
    curve = np.insert(curve, pos, rm[split])
    # The two halves of each split interval are open; the rest keep their flag.
    open_[idx[split]] = True
    open_ = np.insert(open_, pos, True)
  orders.setflags(write=False)
  curve.setflags(write=False)
  return orders, curve


class _Schedule:
  """What :func:`jaxdp._src.interfaces.optax.dp_aggregate` knows when it is
  built (static pytree data).

  Attributes:
    target: the sampler, or the Poisson rate q (``sampling_rate``).
    sigma: the noise multiplier.
    event: the event composed per charge.
    epoch_len: steps per charge (1, or the epoch length of epoch events).
    host: "rdp" or "pld", the host accountant of
      :func:`jaxdp._src.interfaces.optax.epsilon` read on the host and of the
      planned steps; None when the transform was given an
      :class:`jaxdp.accountant.Accountant` (then that accountant decides).
    planned: the planned number of steps under ``budget`` (host, float64), or
      None (no budget, or a user accountant).

  Compared by identity (it is jit's static data); its float64 tables are
  computed on first use and cached.
  """

  def __init__(self, target, sigma, event, epoch_len, host, planned):
    self.target, self.sigma, self.event = target, float(sigma), event
    self.epoch_len, self.host, self.planned = int(epoch_len), host, planned
    self._tables = {}

  def __repr__(self):
    return (f"_Schedule(target={self.target!r}, sigma={self.sigma!r}, host={self.host!r}, "
            f"planned={self.planned!r})")

  def charges(self, steps):
    """Events composed after ``steps`` updates (epoch events when started)."""
    if self.epoch_len == 1:
      return steps
    return (steps + self.epoch_len - 1) // self.epoch_len

  def host_value(self, kind, steps, value, accountant):
    """``jaxdp.epsilon`` / ``jaxdp.delta`` of this schedule (host, float64)."""
    from jaxdp._src.interfaces import api as _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    return fn(self.target, self.sigma, int(steps), value, accountant=accountant)

  def table(self, name):
    """Cached float64 per-charge RDP curves: ``(orders, curve)``."""
    if name not in self._tables:
      self._tables[name] = _build_table(self, name)
    return self._tables[name]


jax.tree_util.register_pytree_node(_Schedule, lambda s: ((), s), lambda s, _: s)


def _is_plain_poisson(event) -> bool:
  return isinstance(event, _events.SampledGaussian) and event.relation == "add_remove"


def _build_table(schedule, name):
  """Per-charge RDP (float64, rounded up) of the schedule's event ("main") or
  of the untruncated Poisson event of a truncated-Poisson sampler ("poisson")."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  event = schedule.event
  if name == "poisson":
    event = _events.SampledGaussian(float(event.q), float(event.sigma), relation=event.relation)
  if _is_plain_poisson(event):
    # Every real order, like the host's jaxdp.epsilon, with the chord
    # between neighbours at read-out.
    return _poisson_table(float(event.q), float(event.sigma))
  # The host's sampler answer: the grid minimum over DEFAULT_ORDERS.
  orders = np.asarray(_rdp.DEFAULT_ORDERS, np.float64)
  with jax.ensure_compile_time_eval(), _numerics.x64():
    curve = persist.jit(lambda: _accountant.event_rdp(event, orders, jnp.float64))()
    curve = np.asarray(curve, np.float64)
  return orders, curve


def _charges_as_float(charges, dtype):
  """``charges`` (an int32 count) in ``dtype``, never below it (exact in
  float64; one ulp up in float32, whose 24-bit mantissa may round it)."""
  f = jnp.asarray(charges).astype(dtype)
  if jnp.finfo(dtype).bits >= 64:
    return f
  return jnp.where(f > 0, jnp.nextafter(f, jnp.asarray(jnp.inf, dtype)), f)


def _table_total(schedule, name, charges, dtype):
  """``charges`` × the per-charge curve in ``dtype``, rounded up; and orders."""
  orders, curve = schedule.table(name)
  per = jnp.asarray(_numerics.round_to_dtype_up(curve, dtype))
  total = _charges_as_float(charges, dtype)[..., None] * per
  total = jnp.where(total > 0, jnp.nextafter(total, jnp.asarray(jnp.inf, dtype)), total)
  return orders, total


def _table_epsilon(schedule, name, charges, delta, dtype):
  """In-jit ε of ``charges`` compositions from a table (rounded up)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_convert as _convert  # pylint: disable=g-import-not-at-top
  orders, total = _table_total(schedule, name, charges, dtype)
  delta = jnp.asarray(delta, dtype)
  if orders.size > len(_rdp.DEFAULT_ORDERS):   # the every-real-order table
    eps = _rdp.to_epsilon_refined(total, orders, delta)
  else:   # the host's grid answer (its per-order values carry their rounding)
    per = _convert.epsilon_per_order(total, orders, delta, "improved")[0]  # pylint: disable=protected-access
    eps = jnp.maximum(jnp.min(per, axis=-1), 0.0) * _convert.readout_margin(dtype)  # pylint: disable=protected-access
  return _accountant._round_up(eps)  # pylint: disable=protected-access


def table_delta(schedule, name, charges, eps, dtype):
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders, total = _table_total(schedule, name, charges, dtype)
  eps = jnp.asarray(eps, dtype)
  if orders.size > len(_rdp.DEFAULT_ORDERS):
    d = _rdp.to_delta_refined(total, orders, eps)
  else:
    d = _rdp.to_delta(total, orders, eps)
  return jnp.minimum(_accountant._round_up(d), 1.0)  # pylint: disable=protected-access


def _truncated_poisson(schedule) -> bool:
  return isinstance(schedule.event, _events.TruncatedPoissonGaussian) and (
      int(schedule.event.capacity) < int(schedule.event.dataset_size))


def overflow_log_probability(dataset_size, q, capacity) -> float:
  """log of an upper bound on P[Binomial(N + 1, q) > capacity] (one step).

  Chernoff: P[X ≥ a·n] ≤ exp(-n·KL(a ‖ q)) for a = (capacity + 1)/n > q,
  n = N + 1 (the add/remove neighbour's size; the tail grows with n), a
  closed form with a relative slack of 1e-12 on the exponent for its own
  round-off (as :func:`jaxdp._src.kernels.bins_coupling.overflow_probability`).

  Returns:
    A float ≤ 0 (0 where the bound is trivial).
  """
  n = int(dataset_size) + 1
  a = (int(capacity) + 1) / n
  q = float(q)
  if a > 1.0:
    return -math.inf
  if a <= q:
    return 0.0
  kl = a * math.log(a / q) + ((1.0 - a) * math.log1p(-a) - (1.0 - a) * math.log1p(-q)
                              if a < 1.0 else 0.0)
  return min(-n * kl * (1.0 - 1e-12), 0.0)


def _coupled_epsilon(schedule, charges, delta, dtype):
  """Truncated Poisson: ε of the untruncated Poisson run at δ − (1 + e^E)·p.

  The truncated and the untruncated samplers, run on the same draws, give the
  same output unless some step overflows (probability p ≤ T·p_step, any
  dataset of at most N + 1 examples), so δ_trunc(ε) ≤ δ_untrunc(ε) +
  (1 + e^ε)·p (Balle, Barthe & Gaboardi 2018, §3; as
  :mod:`jaxdp._src.kernels.bins_coupling`). With E = ε_untrunc(δ/2): where
  (1 + e^E)·p ≤ δ/2, ε_untrunc(δ − (1 + e^E)·p) ≤ E is valid; else +inf.
  """
  ev = schedule.event
  log_p = overflow_log_probability(ev.dataset_size, ev.q, ev.capacity)
  delta = jnp.asarray(delta, dtype)
  tiny = jnp.finfo(dtype).tiny
  c = _charges_as_float(charges, dtype)
  # p(T) = min(1, T·p_step), formed in log space and rounded up.
  log_pt = jnp.log(jnp.maximum(c, tiny)) + jnp.asarray(log_p, dtype)
  pt = jnp.minimum(jnp.exp(log_pt) * (1.0 + 8.0 * jnp.finfo(dtype).eps), 1.0)
  pt = jnp.where(c > 0, pt, 0.0)
  e_half = _table_epsilon(schedule, "poisson", charges, delta / 2.0, dtype)
  extra = (1.0 + jnp.exp(jnp.minimum(e_half, 80.0))) * pt * (1.0 + 8.0 * jnp.finfo(dtype).eps)
  ok = jnp.isfinite(e_half) & (e_half < 80.0) & (extra <= delta / 2.0)
  d_use = jnp.where(ok, (delta - extra) * (1.0 - 4.0 * jnp.finfo(dtype).eps), delta / 2.0)
  e1 = _table_epsilon(schedule, "poisson", charges, d_use, dtype)
  return jnp.where(ok, jnp.minimum(e1, e_half), jnp.inf)


def schedule_epsilon(schedule, steps, delta, dtype):
  """In-jit RDP ε of ``steps`` updates of a known schedule."""
  charges = schedule.charges(jnp.asarray(steps))
  eps = _table_epsilon(schedule, "main", charges, delta, dtype)
  if _truncated_poisson(schedule):
    eps = jnp.minimum(eps, _coupled_epsilon(schedule, charges, delta, dtype))
  return jnp.where(jnp.asarray(steps) == 0, 0.0, eps)


def _planned_steps(target, sigma, event, epoch_len, budget, host) -> int:
  """Largest number of steps within ``budget`` (``jaxdp.calibrate.steps``).

  Under RDP an untruncated Poisson sampler's answer is ``jaxdp.epsilon`` at
  its rate (``jaxdp._src.accounting.sampler_forward``), so the rate's closed-form search gives
  the same T without the sampler path's galloping search.
  """
  from jaxdp._src.solvers import calibrate as _calibrate  # pylint: disable=g-import-not-at-top
  if host == "rdp" and epoch_len == 1 and _is_plain_poisson(event):
    target = float(event.q)
  t = float(np.asarray(_calibrate.steps(float(budget[0]), float(budget[1]), target, float(sigma),
                                        accountant=host)))
  return _INT32_MAX if not math.isfinite(t) or t >= _INT32_MAX else int(t)


_INT32_MAX = 2 ** 31 - 1


def schedule_of(sampler, sampling_rate, sigma, event, epoch_len, budget, host):
  """The known schedule of an accounting transform (:class:`_Schedule`), with
  the steps planned within ``budget`` by the host accountant (if both)."""
  target = sampler if sampler is not None else float(sampling_rate)
  planned = (_planned_steps(target, sigma, event, epoch_len, budget, host)
             if budget is not None and host is not None else None)
  return _Schedule(target, sigma, event, epoch_len, host, planned)
