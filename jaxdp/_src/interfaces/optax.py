"""DP-SGD as an optax gradient transformation with in-loop privacy accounting.

:func:`dp_aggregate` turns *per-example* gradients into a privatised average
gradient (clip, sum, add Gaussian noise, normalise) and composes one
Poisson-sampled Gaussian event per update into an accountant state carried in
the optimizer state, next to the PRNG key::

    tx = optax.chain(
        jaxdp.optax.dp_aggregate(l2_clip=1.0, sigma=1.1, sampling_rate=256/60000,
                                 seed=0, expected_batch_size=256),
        optax.adam(1e-3))
    opt_state = tx.init(params)
    # per_example_grads: every leaf has a leading batch axis
    updates, opt_state = tx.update(per_example_grads, opt_state, params)
    eps = jaxdp.optax.epsilon(opt_state, delta=1e-5)

The accounting is exact bookkeeping of the mechanism actually run only if the
batches really are Poisson samples with rate ``sampling_rate`` (each example
included independently); that is the caller's data pipeline's job.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple, Union

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax as _optax

from jaxdp._src.core import numerics as _numerics
from jaxdp._src.accounting import accountant as _accountant
from jaxdp._src import events as _events

__all__ = [
    "DpAggregateState",
    "dp_aggregate",
    "epsilon",
    "delta",
    "budget_exhausted",
    "find_state",
]


class DpAggregateState(NamedTuple):
  """State of :func:`dp_aggregate`.

  Attributes:
    key: PRNG key for the noise.
    accountant_state: the accountant's state (e.g.
      :class:`jaxdp.accountant.RdpState`), or ``()`` with accounting off.
    steps: number of updates applied (int32).
    exhausted: bool; True once one more update would take ε above the
      budget (always False without a budget).
    schedule: the transform's known schedule (:class:`_Schedule`: sampler,
      σ, host accountant, planned steps); static pytree data, no leaves.
      None for states built by hand.
  """
  key: jax.Array
  accountant_state: Any
  steps: jax.Array
  exhausted: jax.Array
  schedule: Any = None


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

  def rdp_at(alpha):
    with _numerics.x64():
      return np.asarray(_rdp.quadrature_rdp(np.float64(q), np.float64(sigma), alpha,
                                            _rdp._NODES_PER_WINDOW, xp=np),  # pylint: disable=protected-access
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
  """What :func:`dp_aggregate` knows when it is built (static pytree data).

  Attributes:
    target: the sampler, or the Poisson rate q (``sampling_rate``).
    sigma: the noise multiplier.
    event: the event composed per charge.
    epoch_len: steps per charge (1, or the epoch length of epoch events).
    host: "rdp" or "pld", the host accountant of :func:`epsilon` read on the
      host and of the planned steps; None when the transform was given an
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
    curve = jax.jit(lambda: _accountant.event_rdp(event, orders, jnp.float64))()
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
  per = jnp.asarray(_accountant._round_to_dtype_up(curve, dtype))  # pylint: disable=protected-access
  total = _charges_as_float(charges, dtype)[..., None] * per
  total = jnp.where(total > 0, jnp.nextafter(total, jnp.asarray(jnp.inf, dtype)), total)
  return orders, total


def _table_epsilon(schedule, name, charges, delta, dtype):
  """In-jit ε of ``charges`` compositions from a table (rounded up)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders, total = _table_total(schedule, name, charges, dtype)
  delta = jnp.asarray(delta, dtype)
  if orders.size > len(_rdp.DEFAULT_ORDERS):   # the every-real-order table
    eps = _rdp.to_epsilon_refined(total, orders, delta)
  else:   # the host's grid answer (its per-order values carry their rounding)
    per = _rdp._epsilon_per_order(total, orders, delta, "improved")[0]  # pylint: disable=protected-access
    eps = jnp.maximum(jnp.min(per, axis=-1), 0.0) * _rdp._readout_margin(dtype)  # pylint: disable=protected-access
  return _accountant._round_up(eps)  # pylint: disable=protected-access


def _table_delta(schedule, name, charges, eps, dtype):
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


def _schedule_epsilon(schedule, steps, delta, dtype):
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


def _global_norms(updates) -> jax.Array:
  """Per-example global L2 norm over all leaves (leading batch axis)."""
  leaves = jax.tree_util.tree_leaves(updates)
  sq = [jnp.sum(jnp.square(x).reshape(x.shape[0], -1), axis=1) for x in leaves]
  return jnp.sqrt(sum(sq))


def dp_aggregate(
    l2_clip: float,
    sigma: float,
    sampling_rate: Optional[float] = None,
    seed: int = 0,
    accountant: Union[None, str, _accountant.Accountant] = None,
    budget: Optional[Tuple[float, float]] = None,
    expected_batch_size: Optional[float] = None,
    accounting: bool = True,
    sampler: Any = None,
) -> _optax.GradientTransformationExtraArgs:
  """DP-SGD aggregation of per-example gradients with in-state accounting.

  Each update (Abadi et al. 2016, Alg. 1):

  1. clips every example's gradient to global L2 norm ``l2_clip`` = C
     (scaling by min(1, C/‖g_i‖), the norm taken over all leaves);
  2. sums the clipped gradients over the batch axis;
  3. adds N(0, (σC)²) noise to every coordinate (a fresh key each step);
  4. divides by the expected batch size B.

  The noisy sum is the Gaussian mechanism with noise multiplier σ on a query
  of L2 sensitivity C (add/remove one example); with Poisson sampling at
  rate q it is one ``SampledGaussian(q, σ)`` event, composed into the
  accountant state at every update.

  Args:
    l2_clip: C > 0.
    sigma: noise multiplier σ > 0 (noise std is σC on the sum).
    sampling_rate: Poisson sampling rate q in [0, 1] (B / dataset size);
      only when the batches really are Poisson samples.  Give ``sampler``
      instead for the samplers of :mod:`jaxdp.sampling`.
    seed: integer seed of the noise PRNG key.
    accountant: "rdp" (default) or "pld": the host accountant that answers
      :func:`epsilon` / :func:`delta` read on the host (``jaxdp.epsilon`` of
      this sampler, σ and steps: the same number bit for bit) and plans the
      budget; the state carries ``jaxdp.accountant.rdp()``'s state, and
      inside jit :func:`epsilon` reads an RDP value of the known schedule
      (never below the host's RDP answer by more than rounding, within
      ~1e-6 relative of it for Poisson sampling). Or a
      :class:`jaxdp.accountant.Accountant`: then that accountant's in-jit
      state and read-out decide everything, the budget included.
    budget: optional ``(epsilon, delta)``; the state's ``exhausted`` flag
      turns True as soon as one more update would exceed ε at δ, so a loop
      that checks :func:`budget_exhausted` before each step never overspends.
      With a host accountant ("rdp"/"pld") the number of steps within the
      budget is computed once, here, by ``jaxdp.calibrate.steps`` (float64,
      the function that also plans a calibration), and the flag compares the
      step counter with it: a σ from ``jaxdp.calibrate.sigma(..., steps=T)``
      trains exactly T steps. With an Accountant object the flag compares its
      in-jit ε with the budget.
    expected_batch_size: B, the normaliser (q × dataset size for Poisson
      sampling). Default: the static leading-axis size of the gradients,
      right for fixed-size batches. Normalising by a constant (not the
      realised Poisson batch size) keeps the output a post-processing of the
      noisy sum.
    accounting: False disables the accountant (state carries ``()``); for
      measuring its overhead.
    sampler: a :mod:`jaxdp.sampling` sampler that draws the batches (give
      exactly one of ``sampler`` and ``sampling_rate``). Its event
      (``sampler.event(sigma)``) is composed at every update, or at the first
      update of every epoch for the epoch-level events (balls-in-bins,
      shuffle), so ε is never under-reported mid-epoch. The default
      normaliser is then ``sampler.expected_batch_size``: a constant fixed
      when the transform is built, never the size of the data it runs on (a
      normaliser recomputed from the private dataset's size would differ
      between neighbouring datasets). Pass the sampler's mask as
      ``update(grads, state, mask=mask)``: padded entries contribute nothing.

  Returns:
    An ``optax.GradientTransformation``. ``update(per_example_grads, state,
    params=None)`` expects a leading batch axis on every leaf and returns
    updates without it.

  Raises:
    ValueError: for out-of-range C, σ, q, B or budget.
  """
  _numerics.check_array("l2_clip", l2_clip, low=0.0, low_open=True)
  if (sampler is None) == (sampling_rate is None):
    raise ValueError("give exactly one of sampling_rate (Poisson batches) and sampler; "
                     f"found sampling_rate={sampling_rate!r}, sampler={sampler!r}.")
  epoch_len = 1
  if sampler is None:
    event = _events.SampledGaussian(sampling_rate, sigma)  # validates q, σ
  else:
    from jaxdp._src.events import is_sampler  # pylint: disable=g-import-not-at-top
    from jaxdp._src.mechanisms.sampled import _EPOCH_EVENTS  # pylint: disable=g-import-not-at-top
    if not is_sampler(sampler):
      raise ValueError(f"sampler must come from jaxdp.sampling; found {sampler!r}.")
    event = sampler.event(sigma)
    if isinstance(event, _EPOCH_EVENTS):  # pylint: disable=protected-access
      epoch_len = int(sampler.steps_per_epoch)
    if expected_batch_size is None:
      expected_batch_size = float(sampler.expected_batch_size)
  if expected_batch_size is not None:
    _numerics.check_array("expected_batch_size", expected_batch_size, low=0.0,
                          low_open=True)
  if budget is not None:
    if len(budget) != 2:
      raise ValueError(f"budget must be (epsilon, delta); found {budget!r}.")
    _numerics.check_array("budget epsilon", budget[0], low=0.0)
    _numerics.check_array("budget delta", budget[1], low=0.0, high=1.0,
                          low_open=True, high_open=True)
  host = None
  if accountant is None or isinstance(accountant, str):
    host = "rdp" if accountant is None else accountant
    if host not in ("rdp", "pld"):
      raise ValueError(f"accountant must be 'rdp', 'pld' or an Accountant; found {accountant!r}.")
    accountant = _accountant.rdp() if accounting else None
  if not accounting:
    budget = None
  schedule = None
  if accounting:
    target = sampler if sampler is not None else float(sampling_rate)
    planned = (_planned_steps(target, sigma, event, epoch_len, budget, host)
               if budget is not None and host is not None else None)
    schedule = _Schedule(target, sigma, event, epoch_len, host, planned)
  l2_clip = float(l2_clip)
  noise_std = float(sigma) * l2_clip

  def charge(steps_done):
    # Epoch events are charged in full at the first update of each epoch.
    if epoch_len == 1:
      return 1
    return (steps_done % epoch_len == 0).astype(jnp.int32)

  def next_exhausted(acc_state, steps_done):
    if budget is None:
      return jnp.zeros((), bool)
    if schedule.planned is not None:   # the host's plan (float64, certified)
      return jnp.asarray(steps_done) >= schedule.planned
    ahead = accountant.compose(acc_state, event, charge(steps_done))
    return accountant.epsilon(ahead, budget[1]) > budget[0]

  def init_fn(params):
    del params
    acc_state = accountant.init() if accounting else ()
    return DpAggregateState(
        key=jax.random.PRNGKey(seed),
        accountant_state=acc_state,
        steps=jnp.zeros((), jnp.int32),
        exhausted=(next_exhausted(acc_state, jnp.zeros((), jnp.int32)) if accounting
                   else jnp.zeros((), bool)),
        schedule=schedule)

  def update_fn(updates, state, params=None, *, mask=None, **extra_args):
    del params, extra_args
    leaves, treedef = jax.tree_util.tree_flatten(updates)
    if not leaves:
      return updates, state
    batch = leaves[0].shape[0]
    norms = _global_norms(updates)
    scale = jnp.minimum(1.0, l2_clip / jnp.maximum(norms, jnp.finfo(norms.dtype).tiny))
    if mask is not None:  # padding of a static-shape batch contributes nothing
      scale = jnp.where(jnp.asarray(mask, bool), scale, 0.0)
    denom = float(batch) if expected_batch_size is None else float(expected_batch_size)
    key, noise_key = jax.random.split(state.key)
    keys = jax.random.split(noise_key, len(leaves))
    out = []
    for leaf, k in zip(leaves, keys):
      s = scale.astype(leaf.dtype).reshape((batch,) + (1,) * (leaf.ndim - 1))
      total = jnp.sum(leaf * s, axis=0)
      noise = noise_std * jax.random.normal(k, total.shape, total.dtype)
      out.append((total + noise) / denom)
    if accounting:
      acc_state = accountant.compose(state.accountant_state, event, charge(state.steps))
      exhausted = next_exhausted(acc_state, state.steps + 1)
    else:
      acc_state, exhausted = (), state.exhausted
    new_state = DpAggregateState(key=key, accountant_state=acc_state,
                                 steps=state.steps + 1, exhausted=exhausted,
                                 schedule=state.schedule)
    return jax.tree_util.tree_unflatten(treedef, out), new_state

  return _optax.GradientTransformationExtraArgs(init_fn, update_fn)


def find_state(opt_state) -> DpAggregateState:
  """The (single) :class:`DpAggregateState` inside an optimizer state.

  Raises:
    ValueError: when there is none or more than one.
  """
  found = [x for x in jax.tree_util.tree_leaves(
      opt_state, is_leaf=lambda x: isinstance(x, DpAggregateState))
           if isinstance(x, DpAggregateState)]
  if len(found) != 1:
    raise ValueError(
        f"opt_state must contain exactly one DpAggregateState; found {len(found)}.")
  return found[0]


def _default_accountant(acc_state):
  if isinstance(acc_state, _accountant.RdpState):
    from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
    if acc_state.rdp.shape[-1] != len(_rdp.DEFAULT_ORDERS):
      raise ValueError(
          "The state was built with custom RDP orders; pass the same "
          "accountant (accountant=jaxdp.accountant.rdp(orders)).")
    return _accountant.rdp()
  if isinstance(acc_state, _accountant.CdpState):
    return _accountant.cdp()
  raise ValueError(
      f"Cannot infer the accountant for a {type(acc_state).__name__}; pass "
      "accountant=.")


def _acc_and_state(opt_state, accountant):
  state = find_state(opt_state)
  if isinstance(state.accountant_state, tuple) and not state.accountant_state:
    raise ValueError("This dp_aggregate was built with accounting=False.")
  if accountant is None:
    accountant = _default_accountant(state.accountant_state)
  return accountant, state.accountant_state


def _schedule_read(kind, opt_state, value, accountant):
  """The known schedule's answer, or None where the accountant decides."""
  state = find_state(opt_state)
  schedule = state.schedule
  if schedule is None or not (accountant is None or isinstance(accountant, str)):
    return None
  host = schedule.host if accountant is None else accountant
  if host is None:
    return None
  if host not in ("rdp", "pld"):
    raise ValueError(f"accountant must be 'rdp', 'pld' or an Accountant; found {accountant!r}.")
  if _numerics.is_concrete(state.steps) and _numerics.is_concrete(value):
    return schedule.host_value(kind, np.asarray(state.steps), value, host)
  dtype = (state.accountant_state.rdp.dtype
           if isinstance(state.accountant_state, _accountant.RdpState) else jnp.result_type(float))
  if kind == "epsilon":
    _numerics.check_array("delta", value, low=0.0, high=1.0, low_open=True, high_open=True)
    return _schedule_epsilon(schedule, state.steps, value, dtype)
  _numerics.check_array("epsilon", value, low=0.0)
  charges = schedule.charges(jnp.asarray(state.steps))
  d = _table_delta(schedule, "main", charges, value, dtype)
  d = _accountant._floor_delta(d, value, None)  # pylint: disable=protected-access  # Gaussian: δ > 0
  return jnp.where(jnp.asarray(state.steps) == 0, 0.0, d)


def epsilon(opt_state, delta, accountant=None):
  """ε spent so far at ``delta``, read from the optimizer state.

  For a transform built with a host accountant ("rdp", the default, or
  "pld"): read on the host (concrete state and δ) it is
  ``jaxdp.epsilon(sampler_or_q, sigma, steps, delta, accountant=...)``, the
  same number; inside jit, the RDP value of the known schedule (every real
  order for Poisson sampling: its per-step curve on a fine order grid,
  float64 on the host once, with the chord bound between orders; the
  host's grid for the other samplers; truncated Poisson also through the
  overflow coupling). ``accountant`` may name the host accountant ("rdp" or
  "pld") to read, or must be the Accountant given to :func:`dp_aggregate`
  when that was one (then its own read-out, pure).

  Args:
    opt_state: an optimizer state holding one :class:`DpAggregateState`.
    delta: δ in (0, 1).
    accountant: None, "rdp", "pld" or an Accountant (see above).

  Returns:
    ε: NumPy float64 on the host path, else a scalar array.
  """
  out = _schedule_read("epsilon", opt_state, delta, accountant)
  if out is not None:
    return out
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.epsilon(acc_state, delta)


def delta(opt_state, epsilon, accountant=None):  # pylint: disable=redefined-outer-name
  """δ spent so far at ``epsilon``, read from the optimizer state (as :func:`epsilon`)."""
  out = _schedule_read("delta", opt_state, epsilon, accountant)
  if out is not None:
    return out
  acc, acc_state = _acc_and_state(opt_state, accountant)
  return acc.delta(acc_state, epsilon)


def budget_exhausted(opt_state) -> jax.Array:
  """True once one more :func:`dp_aggregate` update would exceed the budget."""
  return find_state(opt_state).exhausted
