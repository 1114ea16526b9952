"""Host-side privacy-loss-distribution accountant for every event.

``acc = jaxdp.accountant.pld()`` gives ``Accountant(init, compose, epsilon,
delta)`` (plus :func:`tradeoff` below). The state is the list of composed
phases ``((event, count), ...)``; the PLD is built and composed when a
question is asked:

* Poisson-sampled Gaussian phases (``events.SampledGaussian``, add/remove)
  and plain Gaussians (``events.Gaussian``): the batched fast path of
  :mod:`jaxdp.pld` (one FFT per phase and direction, spectra multiplied on
  one loss grid). Other events of the same configuration (Laplace,
  randomized response, discrete mechanisms, (ε, δ) events, mixtures, the
  samplers' events, user PMF pairs), when they are at most as many steps as
  the Gaussian phases, are discretised on the host on that grid
  (:mod:`jaxdp._src.pld.extra`) and composed as more phases of the same kernel;
* balls-in-bins epochs of one configuration (``events.BallsInBinsGaussian``,
  one compose per epoch): the certified random-allocation interval of
  :mod:`jaxdp._src.accounting.allocation_forward`, the same answer as
  ``jaxdp.epsilon(sampling.balls_in_bins(...), ..., accountant="pld")``;
* anything else (no Gaussian phase, or other events dominating the step
  count): the general engine :mod:`jaxdp.pld_general` on the events'
  dominating pairs (:func:`jaxdp.mechanisms.dominating_pairs`), whose grid
  is chosen from every phase.

Both return certified upper bounds (max over the add and remove directions).
Not jittable: the state holds concrete Python values (use
:func:`jaxdp.accountant.rdp` inside ``jit``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from jaxdp._src.core import numerics as num
from jaxdp._src.accounting import accountant as _accountant
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import registry as _registry
from jaxdp._src.pld import kernel as _pld
from jaxdp._src.accounting import pld_allocation as _pld_allocation

__all__ = ["PLDState", "make_accountant", "epsilon_batch", "delta_batch"]


class PLDState(NamedTuple):
  """State of the PLD accountant: the composed phases ``((event, count), ...)``.

  ``compose`` is O(1) (consecutive equal events are merged); the PLD is
  composed on query, so the state stays a small tuple.
  """
  phases: tuple = ()


def _same(a, b) -> bool:
  try:
    return type(a) is type(b) and bool(np.all(np.asarray(a == b)))
  except Exception:  # pylint: disable=broad-except
    return False


def _live_phases(phases):
  """The phases that can leak: (event, count) pairs minus q = 0 Gaussians."""
  out = []
  for ev, c in phases:
    if not (isinstance(ev, _events.SampledGaussian) and float(ev.q) == 0.0):
      out.append((ev, c))
  return out


def _fast_grid(q, sigma, steps, rtol, extra_var=None, extra_count=None):
  """Automatic h per configuration (rows of (n, P) phase arrays): the finest
  phase's grid, kept coarse enough that the composed window stays bounded.

  With other events (``extra_var``: (n,) Σ count·(one-step loss variance),
  ``extra_count``: (n,) Σ count), h may grow to the general engine's
  sqrt(rtol·V/(2·C)) over all phases (V the composed loss variance, C the
  number of steps; :func:`jaxdp.pld_general.grid_interval`): the relative
  ε error of the second-order discretisations is about h²·C/V, so phases
  with a wider loss spread (Laplace, discrete Gaussian next to a small-q
  Gaussian) need no finer grid than their own. It is then re-aligned with
  -log(1-q) of the finest phase.
  """
  per_phase = _pld.grid_interval(q, sigma, steps, rtol)
  h = np.min(per_phase, axis=1)
  total = np.broadcast_to(steps.sum(axis=1, keepdims=True), steps.shape)
  h = np.maximum(h, np.max(_pld.grid_interval(q, sigma, total, rtol), axis=1) / 8.0)
  if extra_var is None:
    return h
  var = (steps * _pld._loss_variance(q, sigma)).sum(axis=1) + extra_var
  count = steps.sum(axis=1) + extra_count
  h_all = np.minimum(np.sqrt(0.5 * rtol * var / np.maximum(count, 1.0)), _pld._MAX_AUTO_H)
  grown = h_all > h
  q_fine = q[np.arange(len(h)), np.argmin(per_phase, axis=1)]
  with np.errstate(divide="ignore"):
    top = -np.log1p(-q_fine)
  ok = grown & np.isfinite(top) & (top >= h_all)
  aligned = np.where(ok, top / np.ceil(np.where(ok, top, 1.0) / h_all), h_all)
  return np.where(grown, np.maximum(aligned, h), h)


def _fast_many(phase_lists, values, want_epsilon, vdi, rtol, extra=None):
  """Configurations with P (sampled) Gaussian phases each (the same P), plus
  any other events: one batched call of the FFT kernel of :mod:`jaxdp.pld`.

  Args:
    phase_lists: n lists of P (event, count) pairs.
    values: (n, V) queries (δ for ε, ε for δ).
    extra: None, or n lists of (event, count) of other events, discretised on
      each configuration's grid (:mod:`jaxdp._src.pld.extra`).

  Returns:
    (lower, upper), each (n, V).
  """
  params = np.array([[_registry.fast_pld_params(ev) for ev, _ in ph] for ph in phase_lists],
                    np.float64)
  q, sigma = params[..., 0], params[..., 1]
  steps = np.array([[c for _, c in ph] for ph in phase_lists], np.float64)
  pairs, ex_var, ex_count = None, None, None
  if extra is not None:
    from jaxdp._src.mechanisms import registry as mechanisms  # pylint: disable=g-import-not-at-top
    from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
    pair_cache, var_cache = {}, {}   # per distinct event

    def mech(ev):
      key = (type(ev).__name__, repr(ev))
      if key not in pair_cache:
        pair_cache[key] = mechanisms.dominating_pairs(ev)
      return pair_cache[key]

    def variance(ev):
      key = (type(ev).__name__, repr(ev))
      if key not in var_cache:
        var_cache[key] = pld_general.loss_variance(mech(ev))
      return var_cache[key]

    pairs = [[(mech(ev), c) for ev, c in ex] for ex in extra]
    if vdi is None:
      ex_var = np.array([sum(c * variance(ev) for ev, c in ex) for ex in extra])
      ex_count = np.array([sum(c for _, c in ex) for ex in extra], np.float64)
  h = (_fast_grid(q, sigma, steps, rtol, ex_var, ex_count) if vdi is None
       else np.full(len(q), float(vdi)))
  up, lo = _pld._run_within_memory(q, sigma, steps, h, values, want_epsilon=want_epsilon,
                                   automatic=vdi is None, extra=pairs)
  if pairs is not None:   # runtime guards (lower <= upper, >= the exact one-step bound)
    name = "epsilon" if want_epsilon else "delta"
    for i, (ph, ex) in enumerate(zip(phase_lists, pairs)):
      every = [(mech(ev), c) for ev, c in ph] + ex
      lo[i], up[i] = pld_general._guard(name, every, values[i], lo[i], up[i])  # pylint: disable=protected-access
  return lo, up


def _best_single(phases, values, want_epsilon, vdi, rtol):
  """Configurations of one (sampled) Gaussian phase each, ``(event, count)``,
  at (n, V) queries: the interval :func:`jaxdp.pld.epsilon` /
  :func:`jaxdp.pld.delta` report for the same (q, σ, T) (the same automatic
  grid as :func:`_fast_grid` for one phase, the guards, the general engine
  where the kernel's interval is +∞ or wide, the RDP cap:
  :mod:`jaxdp._src.pld.fallback`), so the accountant, ``epsilon_batch``,
  ``jaxdp.pld`` and ``jaxdp.epsilon(..., accountant="pld")`` give the same
  number to the same question.

  Returns:
    (lower, upper), each (n, V).
  """
  params = np.array([_registry.fast_pld_params(ev) + (float(c),) for ev, c in phases], np.float64)
  q, sigma, steps = (np.broadcast_to(params[:, k:k + 1], values.shape) for k in range(3))
  name = "epsilon" if want_epsilon else "delta"
  lo, up, _ = _pld.guarded_bounds(name, q, sigma, steps, values, vdi, rtol, best=True,
                                  rdp_value=False)
  return lo, up


def _general_one(phases, values, want_epsilon, vdi, rtol):
  """The general engine (:mod:`jaxdp.pld_general`) on one configuration."""
  from jaxdp._src.mechanisms import registry as mechanisms  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  pairs = [(mechanisms.dominating_pairs(ev), c) for ev, c in phases]
  fn = pld_general.epsilon if want_epsilon else pld_general.delta
  lo, up = fn(pairs, values, value_discretization_interval=vdi, rtol=rtol, return_bounds=True)
  return np.asarray(lo, np.float64).reshape(-1), np.asarray(up, np.float64).reshape(-1)


_MIXED_KERNEL_MIN = 2   # mixed configurations per call for the batched kernel (see below)


def _query_many(phase_lists, values, want_epsilon, vdi, rtol):
  """(lower, upper) of n configurations at (n, V) queries.

  Configurations with (sampled) Gaussian phases go to the batched kernel,
  grouped by their number of such phases. Their other events (Laplace,
  discrete Gaussian, ...) join them as host-discretised phases on the
  Gaussian grid (:mod:`jaxdp._src.pld.extra`) when they are at most as many steps
  as the Gaussian phases (the automatic grid is chosen from the Gaussian
  phases: its second-order discretisation error, ~h² per step, stays within
  rtol of ε only when the other steps do not dominate), and when the call
  holds at least ``_MIXED_KERNEL_MIN`` such mixed configurations: one mixed
  question in a fresh process is answered by the general engine in ~1 s,
  where the kernel would first compile its programs (~5 s; measured on the
  2-core CPU). The rest go one by one to the general engine
  (:mod:`jaxdp.pld_general`), whose grid is chosen from every phase. Both
  give certified intervals.
  """
  n, v = values.shape
  lo, up = np.zeros((n, v)), np.zeros((n, v))
  groups, general = {}, []
  for i, phases in enumerate(phase_lists):
    if not phases:
      continue
    fast = [(ev, c) for ev, c in phases if _registry.fast_pld_params(ev) is not None]
    other = [(ev, c) for ev, c in phases if _registry.fast_pld_params(ev) is None]
    if fast and (vdi is not None or sum(c for _, c in other) <= sum(c for _, c in fast)):
      groups.setdefault(len(fast), []).append((i, fast, other))
    else:
      general.append(i)
  mixed = sum(1 for members in groups.values() for _, _, o in members if o)
  if 0 < mixed < _MIXED_KERNEL_MIN:
    for members in groups.values():
      general += [i for i, _, o in members if o]
      members[:] = [m for m in members if not m[2]]
  for i in sorted(general):
    lo[i], up[i] = _general_one(phase_lists[i], values[i], want_epsilon, vdi, rtol)
  single = [m for m in groups.get(1, []) if not m[2]]
  if single:   # one (sampled) Gaussian phase: jaxdp.pld's best certified answer
    groups[1] = [m for m in groups[1] if m[2]]
    idx = [i for i, _, _ in single]
    lo[idx], up[idx] = _best_single([f[0] for _, f, _ in single], values[idx], want_epsilon,
                                    vdi, rtol)
  for members in groups.values():
    if not members:
      continue
    idx = [i for i, _, _ in members]
    extra = [o for _, _, o in members] if any(o for _, _, o in members) else None
    lo[idx], up[idx] = _fast_many([f for _, f, _ in members], values[idx], want_epsilon,
                                  vdi, rtol, extra)
    _best_many(phase_lists, idx, values, lo, up, want_epsilon, vdi, rtol)
  return lo, up


def _best_many(phase_lists, idx, values, lo, up, want_epsilon, vdi, rtol):
  """The best certified interval for the kernel's multi-phase configurations
  ``idx`` (rows of ``lo``/``up``, updated in place), as
  :mod:`jaxdp._src.pld.fallback` makes it for one phase: the general engine's
  interval intersected in where the kernel's is +∞ or wide (at most
  ``_pld_fallback.MAX_CONFIGURATIONS`` configurations per call, the widest
  first), then the upper end capped by the RDP bound where every phase is
  a (Poisson-sampled) Gaussian (:func:`_rdp_grid_bound`).
  """
  from jaxdp._src.pld import fallback as _pld_fallback  # pylint: disable=g-import-not-at-top
  name = "epsilon" if want_epsilon else "delta"
  need, rank = _pld_fallback._wide(name, lo[idx], up[idx], values[idx])  # pylint: disable=protected-access
  worst = np.where(need, rank, -1.0).max(axis=1)
  for k in np.argsort(-worst, kind="stable")[:_pld_fallback.MAX_CONFIGURATIONS]:
    if worst[k] < 0:
      break
    i = idx[k]
    try:
      g_lo, g_up = _general_fallback(phase_lists[i], values[i], want_epsilon, vdi, rtol)
    except ValueError:   # GridTooLarge, or a user-given h beyond its budget: kernel's stays
      continue
    lo[i], up[i] = _pld_fallback.combine(lo[i], up[i], g_lo, g_up)
  for i in idx:
    rdp_up = _rdp_grid_bound(phase_lists[i], values[i], want_epsilon)
    if rdp_up is not None:
      lo[i], up[i] = _pld_fallback.combine(lo[i], up[i], None, rdp_up)


def _general_fallback(phases, values, want_epsilon, vdi, rtol):
  """The general engine's interval, as :func:`_general_one` computes it, for
  the fallback of :func:`_best_many` (an intersection with the kernel's
  interval, not a routing decision: kept apart from the routing's
  :func:`_general_one`)."""
  from jaxdp._src.mechanisms import registry as mechanisms  # pylint: disable=g-import-not-at-top
  from jaxdp._src.pld import general as pld_general  # pylint: disable=g-import-not-at-top
  pairs = [(mechanisms.dominating_pairs(ev), c) for ev, c in phases]
  fn = pld_general.epsilon if want_epsilon else pld_general.delta
  lo, up = fn(pairs, values, value_discretization_interval=vdi, rtol=rtol, return_bounds=True)
  return np.asarray(lo, np.float64).reshape(-1), np.asarray(up, np.float64).reshape(-1)


def _rdp_grid_bound(phases, values, want_epsilon):
  """The RDP upper bound of a composition of (Poisson-sampled) Gaussian
  phases at ``values`` (δ for ε, ε for δ): the phases' RDP curves at
  :data:`jaxdp.rdp.DEFAULT_ORDERS` summed (Mironov 2017, Prop. 1), each
  computed on the host as :func:`jaxdp.epsilon` computes it
  (:func:`jaxdp._src.kernels.host_rdp.per_step_rdp`, rounded up), then the improved
  conversion's grid minimum (Balle et al. 2020, Prop. 12; no search between
  the orders, so never below the every-real-order value of one phase).
  None where a phase is another event.
  """
  from jaxdp._src.kernels import host_rdp as _host_rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_convert  # pylint: disable=g-import-not-at-top
  params = [_registry.fast_pld_params(ev) for ev, _ in phases]
  if not phases or any(p is None for p in params):
    return None
  orders = rdp.DEFAULT_ORDERS
  q = np.array([p[0] for p in params], np.float64)
  sigma = np.array([p[1] for p in params], np.float64)
  counts = np.array([c for _, c in phases], np.float64)
  with num.x64(), np.errstate(all="ignore"):
    total = (counts[:, None] * _host_rdp.per_step_rdp(q, sigma, orders)).sum(axis=0)
    total = np.broadcast_to(total, (values.size, orders.size))
    if want_epsilon:
      out = rdp_convert.to_epsilon_xp(total, orders, values, "improved", np)[0]  # pylint: disable=protected-access
    else:
      from jaxdp._src.kernels import rdp_driver  # pylint: disable=g-import-not-at-top
      out = rdp_convert.to_delta_xp(total, orders, values, np)  # pylint: disable=protected-access
      out = rdp_driver.delta_floor(out, np.ones(values.shape), np.ones(values.shape), values)
  out = np.asarray(out, np.float64)
  return np.where(np.isnan(out), np.inf, out)


def make_accountant(*, value_discretization_interval=None, rtol=1e-3):
  """PLD accountant: ``Accountant(init, compose, epsilon, delta)``.

  Args:
    value_discretization_interval: loss grid h; None = automatic.
    rtol: target relative accuracy for the automatic grid.

  Returns:
    :class:`jaxdp.accountant.Accountant` whose ``epsilon``/``delta`` return
    certified upper bounds (float64).
  """

  def init():
    return PLDState(())

  def compose(state, event, count=1):
    try:
      _events.validate(event)
    except TypeError as e:
      raise ValueError(f"event: {e}") from None
    num.check_array("count", count, low=0.0, integer=True)
    count = int(count)
    phases = list(state.phases)
    if count == 0:
      return PLDState(tuple(phases))
    if phases and _same(phases[-1][0], event):
      phases[-1] = (event, phases[-1][1] + count)
    else:
      phases.append((event, count))
    return PLDState(tuple(phases))

  def _query(state, value, want_epsilon):
    values = np.asarray(value, np.float64)
    phases = _live_phases(state.phases)
    alloc = _pld_allocation.bounds(phases, values, want_epsilon, value_discretization_interval,
                                   _same)
    if alloc is not None:
      return tuple(np.asarray(a, np.float64).reshape(values.shape) for a in alloc)
    lo, up = _query_many([phases], values.reshape(1, -1), want_epsilon,
                         value_discretization_interval, rtol)
    return lo.reshape(values.shape), up.reshape(values.shape)

  def _out(lo, up, return_bounds, clip):
    lo, up = clip(lo), clip(up)
    if up.ndim == 0:
      lo, up = np.float64(lo), np.float64(up)
    return (np.minimum(lo, up), up) if return_bounds else up

  @num.host_function
  def epsilon(state, delta, *, return_bounds=False):
    """ε upper bound at each δ (``(lower, upper)`` with ``return_bounds``)."""
    num.check_array("delta", delta, low=0.0, high=1.0, low_open=True)
    lo, up = _query(state, delta, True)
    return _out(lo, up, return_bounds, lambda x: np.maximum(x, 0.0))

  @num.host_function
  def delta(state, epsilon, *, return_bounds=False):
    """δ upper bound at each ε (``(lower, upper)`` with ``return_bounds``)."""
    num.check_array("epsilon", epsilon, low=0.0, allow_inf=True)
    lo, up = _query(state, epsilon, False)
    return _out(lo, up, return_bounds, lambda x: np.clip(x, 0.0, 1.0))

  acc = None

  def tradeoff(state, fpr, **kwargs):
    """Certified TPR bounds of a membership-inference test at each FPR
    (:func:`jaxdp.tradeoff.tradeoff_of_state`)."""
    from jaxdp._src.accounting import tradeoff as _tradeoff  # pylint: disable=g-import-not-at-top
    return _tradeoff.tradeoff_of_state(acc, state, fpr, **kwargs)

  acc = _accountant.Accountant(init, compose, epsilon, delta, tradeoff)
  return acc


def _config_phases(configs):
  """Validated live phase lists of a batch of configurations."""
  out = []
  for k, cfg in enumerate(configs):
    phases = cfg.phases if isinstance(cfg, PLDState) else cfg
    try:
      phases = [(ev, c) for ev, c in phases]
    except (TypeError, ValueError):
      raise ValueError(f"configs[{k}] must be a PLDState or a sequence of (event, count) "
                       f"pairs; got {cfg!r}") from None
    for ev, c in phases:
      try:
        _events.validate(ev)
      except TypeError as e:
        raise ValueError(f"configs[{k}]: event: {e}") from None
      num.check_array(f"configs[{k}] count", c, low=0.0, integer=True)
    out.append(_live_phases([(ev, int(c)) for ev, c in phases if int(c) > 0]))
  return out


def _batch(configs, value, name, check, want_epsilon, vdi, rtol, return_bounds):
  phase_lists = _config_phases(configs)
  num.check_array(name, value, **check)
  num.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if vdi is not None:
    num.check_array("value_discretization_interval", vdi, low=0.0, low_open=True)
  n = len(phase_lists)
  values = np.asarray(value, np.float64)
  if values.ndim == 0:
    values = np.full((n,), float(values))
  if values.shape[0] != n:
    raise ValueError(f"{name} must be a scalar or have leading dimension len(configs) = {n}; "
                     f"got shape {values.shape}")
  with num.x64():
    lo, up = _query_many(phase_lists, values.reshape(n, -1), want_epsilon, vdi, rtol)
  clip = (lambda x: np.maximum(x, 0.0)) if want_epsilon else (lambda x: np.clip(x, 0.0, 1.0))
  lo, up = clip(lo).reshape(values.shape), clip(up).reshape(values.shape)
  return (np.minimum(lo, up), up) if return_bounds else up


def epsilon_batch(configs, delta, *, value_discretization_interval=None, rtol=1e-3,
                  return_bounds=False):
  """Certified ε of many heterogeneous compositions in one call.

  Each configuration is a list of ``(event, count)`` phases (or a
  :class:`PLDState`): for example 32 training runs, each
  ``[(SampledGaussian(q_i, σ_i), T_i), (Laplace(b), 10), (DiscreteGaussian(s), 5)]``.
  The answer for configuration ``i`` is the max over the add and remove
  directions of the pessimistic PLD bound, as ``jaxdp.accountant.pld()``
  computes it for the same phases. Configurations with (Poisson-sampled)
  Gaussian phases are composed together by one batched FFT kernel per
  Gaussian phase count (:mod:`jaxdp.pld`), their other events discretised on
  each configuration's grid when they are at most as many steps as the
  Gaussian phases (:mod:`jaxdp._src.pld.extra`); the others by the general engine
  (:mod:`jaxdp.pld_general`), one configuration at a time. A single mixed
  configuration (the accountant's query) goes to the general engine (no
  compilation), so its interval may differ from the batch's within the
  certified widths.

  Args:
    configs: sequence of n configurations, each a :class:`PLDState` or a
      sequence of ``(jaxdp.events event, count)``.
    delta: target δ in (0, 1]: a scalar, an (n,) array, or an (n, V) array
      (V targets per configuration, answered on one composed PLD).
    value_discretization_interval: loss grid h for every configuration; None
      picks each configuration's automatic grid.
    rtol: target relative accuracy of the automatic grids, in (0, 0.1].
    return_bounds: return ``(lower, upper)`` (the optimistic PLD bound below).

  Returns:
    float64 NumPy array of ε upper bounds with ``delta``'s broadcast shape
    ((n,) for a scalar), or ``(lower, upper)``.

  Raises:
    ValueError: naming the argument on a bad configuration, count or δ.
  """
  return _batch(configs, delta, "delta", dict(low=0.0, high=1.0, low_open=True), True,
                value_discretization_interval, rtol, return_bounds)


def delta_batch(configs, epsilon, *, value_discretization_interval=None, rtol=1e-3,
                return_bounds=False):
  """Certified δ(ε) of many heterogeneous compositions in one call.

  As :func:`epsilon_batch`, with ε >= 0 (scalar, (n,) or (n, V); +inf allowed)
  in place of δ.

  Returns:
    float64 NumPy array of δ upper bounds, or ``(lower, upper)``.
  """
  return _batch(configs, epsilon, "epsilon", dict(low=0.0, allow_inf=True), False,
                value_discretization_interval, rtol, return_bounds)


def pld(**kwargs):
  """Privacy-loss-distribution accountant: ``jaxdp.pld_accountant.make_accountant(**kwargs)``.

  See :mod:`jaxdp.pld` for its options and limitations.
  """
  return make_accountant(**kwargs)
