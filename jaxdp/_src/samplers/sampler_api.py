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
and the answer is the RDP one. Balls-in-bins and truncated Poisson under
replace-one raise a ``ValueError`` (no PLD yet; never a Poisson substitute).

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
public computation only (:func:`jaxdp._src.solvers.tight.descend`).

σ is always the noise multiplier std / C, as dp_accounting's
``GaussianDpEvent.noise_multiplier`` for the same event and relation.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import pairs as _pairs
from jaxdp._src.interfaces.api import is_sampler  # noqa: F401  (re-exported)

_EPOCH_EVENTS = (_events.BallsInBinsGaussian, _events.ShuffledGaussian)


# --------------------------------------------------------------------------
# dominating pairs of the sampler events (Gaussian mixtures)
# --------------------------------------------------------------------------


def _poisson_x_of_loss(level, q, sigma):
  """x with log(1 - q + q e^{(2x-1)/(2σ²)}) = level (-inf at or below log(1 - q))."""
  level = np.asarray(level, np.float64)
  with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
    x = sigma * sigma * (np.log(np.expm1(level - math.log1p(-q)))
                         + math.log1p(-q) - math.log(q)) + 0.5
  return np.where(level > math.log1p(-q), x, -np.inf)


def poisson_gaussian(q, sigma, relation="add_remove") -> _pairs.Mechanism:
  """Poisson-subsampled Gaussian (rate q, clip norm 1, noise std σ).

  ``"add_remove"`` (σ = std / C): remove P = (1-q)N(0) + qN(1) vs Q = N(0); add
  P = N(0) vs Q = (1-q)N(0) + qN(1), reflected (Mironov, Talwar & Zhang 2019;
  Zhu, Dong & Wang 2022, Thm 11). ``"replace_one"`` (σ = std / C, as
  dp_accounting's PLD accountant reads ``PoissonSampledDpEvent(q,
  GaussianDpEvent(σ))`` under REPLACE_ONE): P = (1-q)N(0) + qN(1) vs
  Q = (1-q)N(0) + qN(-1), symmetric (x -> -x swaps them), the worst case x = +C,
  y = -C conditioned on the rest of the batch, which Poisson sampling keeps
  independent of the example's inclusion (Lebeda, Regehr, Kamath & Steinke
  2024, "Avoiding pitfalls for privacy accounting of subsampled mechanisms
  under composition"; dp_accounting's ``AdjacencyType.REPLACE`` loss).
  """
  q, sigma = float(q), _pairs._check_sigma(sigma)
  if not 0.0 <= q <= 1.0:
    raise ValueError(f"q must be in [0, 1]; found {q}.")
  if relation == "add_remove":
    rem = _pairs.gaussian_mixture_pair([0.0, 1.0], [1 - q, q], [0.0], [1.0], sigma)
    add = _pairs.gaussian_mixture_pair([0.0], [1.0], [0.0, -1.0], [1 - q, q], sigma)
    if 0.0 < q < 1.0:   # closed-form inverses of the losses (a speed hint, checked)
      rem = rem._replace(loss_inverse=lambda l: _poisson_x_of_loss(l, q, sigma))
      add = add._replace(loss_inverse=lambda l: -_poisson_x_of_loss(-np.asarray(l), q, sigma))
    return _pairs.Mechanism(rem, add)
  if relation == "replace_one":
    pair = _pairs.gaussian_mixture_pair([0.0, 1.0], [1 - q, q], [0.0, -1.0], [1 - q, q], sigma)
    return _pairs.Mechanism(pair, pair)
  raise ValueError(f"relation must be 'add_remove' or 'replace_one'; found {relation!r}.")


def without_replacement_gaussian(dataset_size, batch_size, sigma, relation="replace_one"):
  """B of N drawn uniformly without replacement, Gaussian sum (σ = std / C).

  ``"replace_one"``: with γ = B/N the pair A = ((1-γ)N(0) + γN(2), N(0))
  (the example's slot moves the sum by up to 2C) is attained (other examples
  and the replaced one at -C, the new one at +C) and bounds every ordered
  neighbour pair for ε >= 0 (Balle, Barthe & Gaboardi 2018, Thm 10: δ' = γ δ
  of the sensitivity-2C Gaussian at ε'' with e^{ε} = 1 + γ(e^{ε''} - 1)). A
  itself does not dominate for α < 1 (the reversed order can be worse there,
  the "pitfall" of Lebeda et al. 2024), so the dominating pair is the
  symmetrisation of A (:class:`jaxdp.pairs.SymmetrizedPair`; Zhu, Dong & Wang 2022,
  Prop. 30), the same in both directions. ``"add_remove"`` (literal, N ± 1):
  the Poisson pair with rate γ and sensitivity 2C, i.e. σ/2
  (:func:`poisson_gaussian`).
  """
  n, b = float(dataset_size), float(batch_size)
  if not (n >= 1 and n == round(n)):
    raise ValueError(f"dataset_size must be a whole number >= 1; found {dataset_size}.")
  if not (1 <= b <= n and b == round(b)):
    raise ValueError(f"batch_size must be a whole number in [1, dataset_size]; found {batch_size}.")
  sigma = _pairs._check_sigma(sigma)
  g = b / n
  if relation == "add_remove":
    return poisson_gaussian(g, sigma / 2.0)
  if relation != "replace_one":
    raise ValueError(f"relation must be 'add_remove' or 'replace_one'; found {relation!r}.")
  pair = _pairs.SymmetrizedPair(_pairs.gaussian_mixture_pair([0.0, 2.0], [1 - g, g], [0.0], [1.0], sigma))
  return _pairs.Mechanism(pair, pair)


def truncated_poisson_gaussian(dataset_size, q, capacity, sigma, *, both_sizes=False) -> _pairs.Mechanism:
  """Poisson sampling truncated to ``capacity`` (add/remove, σ = std / C).

  The disjoint two-block union of :func:`jaxdp.rdp_samplers.truncated_poisson_pair`
  for the dataset of size N = ``dataset_size`` containing the example: block 0
  (weight 1 - t) the Poisson pair rate q shift 1, block 1 (weight
  t = P[Bin(N-1, q) >= C]) the Poisson pair rate q' shift 2; t, 1 - t and q'
  from rigorous binomial-tail brackets (upper ends here, lower ends for the
  optimistic side). A dataset of size N has neighbours with the example in a
  dataset of size N (removal) or N + 1 (addition): take the maximum of the two
  composed answers. ``both_sizes=True`` instead returns one pair dominating
  both sizes (upper ends of the weights and q' over N and N + 1, lower ends for
  the optimistic side): its weights sum to 1 + |t_{N+1} - t_N| =
  1 + q P[Bin(N-1, q) = C-1], excess mass that compounds as (1 + Δt)^T over T
  steps, so use it only where T·Δt is small (it suits one composition of many
  different events, as in an accountant).
  """
  from jaxdp._src.kernels import rdp_truncated as rs  # pylint: disable=g-import-not-at-top
  sigma = _pairs._check_sigma(sigma)  # pylint: disable=protected-access
  q = float(q)
  sizes = (dataset_size, dataset_size + 1) if both_sizes else (dataset_size,)
  with nx.x64():
    par = [[float(v) for v in rs._truncation_parameters(  # pylint: disable=protected-access
        *(jnp.asarray(float(v), jnp.float64) for v in (n, q, capacity)))] for n in sizes]
  lt_lo, lu_lo = min(p[0] for p in par), min(p[2] for p in par)
  lt_hi, lu_hi = max(p[1] for p in par), max(p[3] for p in par)
  qp, qp_lo = max(p[4] for p in par), min(p[4] for p in par) * (1.0 - 1e-9)
  if q <= 0.0:
    lt_lo = lt_hi = -math.inf
    lu_lo = lu_hi = 0.0
  hi = [math.exp(lu_hi), math.exp(lt_hi)]
  lo = [math.exp(lu_lo), math.exp(lt_lo)]
  blocks = []
  for direction in ("remove", "add"):
    b0 = getattr(poisson_gaussian(q, sigma), direction)
    b1 = getattr(poisson_gaussian(qp, sigma / 2.0), direction)
    b1_lo = getattr(poisson_gaussian(qp_lo, sigma / 2.0), direction)
    blocks.append(_pairs.MixturePair(hi, (b0, (b1, b1_lo)), lo))
  return _pairs.Mechanism(*blocks)


def event_mechanisms(event):
  """Dominating pairs of one sampler event: a list of :class:`jaxdp.pairs.Mechanism`
  whose composed answers are maxed over (two for truncated Poisson: the
  neighbour sizes N and N + 1; one otherwise), under the event's ``relation``.
  σ is the noise multiplier std / C.

  Raises:
    TypeError: for an event without dominating pairs here (balls-in-bins;
      truncated Poisson under replace-one with capacity < N).
  """
  if isinstance(event, _events.SampledGaussian):
    return [poisson_gaussian(float(event.q), float(event.sigma), event.relation)]
  if isinstance(event, _events.TruncatedPoissonGaussian):
    n, q, cap, s = (float(v) for v in (event.dataset_size, event.q, event.capacity, event.sigma))
    if cap >= n:
      return [poisson_gaussian(q, s, event.relation)]
    if event.relation == "replace_one":
      raise TypeError("No replace-one dominating pair for truncated Poisson sampling with "
                      "capacity < dataset_size (accountant='rdp' only: the weak-triangle bound).")
    return [truncated_poisson_gaussian(n, q, cap, s), truncated_poisson_gaussian(n + 1, q, cap, s)]
  if isinstance(event, _events.SampledWithoutReplacementGaussian):
    return [without_replacement_gaussian(event.dataset_size, event.batch_size, float(event.sigma),
                                         event.relation)]
  if isinstance(event, _events.ShuffledGaussian):   # one unamplified Gaussian, sensitivity 2C
    return [_pairs.gaussian(float(event.sigma), 2.0)]
  raise TypeError(f"No dominating pairs for {type(event).__name__} (accountant='rdp' only).")


def compositions(sampler, event, steps):
  """Number of times the event is composed for ``steps`` training steps."""
  steps = np.asarray(steps, np.float64)
  if isinstance(event, _EPOCH_EVENTS):
    return np.ceil(steps / sampler.steps_per_epoch - 1e-12)
  return steps


def _rdp_total(sampler, sigma, steps, orders):
  from jaxdp._src.accounting import accountant as _acc  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  orders = np.asarray(_rdp.DEFAULT_ORDERS if orders is None else orders, np.float64)
  sigma = np.asarray(sigma, np.float64)
  flat = sigma.reshape(-1)
  curves = []
  for s in flat:  # one event per distinct σ (events are scalar per sampler)
    ev = sampler.event(float(s))
    curves.append(np.asarray(_acc.event_rdp(ev, orders, jnp.float64), np.float64))
  curve = np.stack(curves).reshape(sigma.shape + (orders.size,))
  count = compositions(sampler, sampler.event(float(flat[0])), steps)
  # Round the product up (ε grows with it).
  return np.nextafter(curve * np.asarray(count)[..., None], np.inf), orders


def epsilon(sampler, sigma, steps, delta, accountant="rdp", orders=None):
  """ε of ``steps`` DP-SGD steps on batches from ``sampler`` (see module doc)."""
  return _forward("epsilon", sampler, sigma, steps, delta, accountant, orders)


def delta(sampler, sigma, steps, epsilon_, accountant="rdp", orders=None):
  """δ at ``epsilon_`` of ``steps`` DP-SGD steps on batches from ``sampler``."""
  return _forward("delta", sampler, sigma, steps, epsilon_, accountant, orders)


def _forward(kind, sampler, sigma, steps, value, accountant, orders):
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
    from jaxdp._src.interfaces import api as _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    count = compositions(sampler, ev, steps)
    return fn(np.full(shape, float(ev.q)), sigma, count, value, orders=orders)
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  with nx.x64():
    # ``grid`` is the orders of the curve; the coupling below gets the user's
    # ``orders`` (None: every real order for the untruncated Poisson answer).
    total, grid = _rdp_total(sampler, sigma, steps, orders)
    if kind == "epsilon":
      out, _ = _rdp.to_epsilon(jnp.asarray(total), grid, jnp.asarray(value))
    else:
      out = _rdp.to_delta(jnp.asarray(total), grid, jnp.asarray(value))
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
    return _forward(kind_, sampler_, sigma_, steps_, value_, accountant, orders_)

  fn = _bins_coupling.epsilon if kind == "epsilon" else _bins_coupling.delta
  return np.minimum(out, fn(forward, sampler, sigma, steps, value, orders))


def _rdp_forward(kind, sampler, sigma, steps, value, orders):
  return _forward(kind, sampler, sigma, steps, value, "rdp", orders)


def _truncated(sampler):
  """Balls-in-bins or Poisson sampling whose capacity can cut a batch (< N)."""
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  return (isinstance(sampler, (_sampling.BallsInBinsSampler, _sampling.PoissonSampler))
          and sampler.capacity < sampler.dataset_size)


def _pld_equivalent(sampler, sigma, steps):
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
  return np.minimum(up, np.asarray(_forward(kind, sampler, sigma, steps, value, "rdp", orders),
                                   np.float64))


def _tight_upper(kind, sampler, sigma, steps, value, **kw):
  """Upper end of the tight interval of a sampler without a Poisson-sampled
  Gaussian equivalent (see :func:`pld_bounds`)."""
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
    ValueError: naming the sampler where no tight path exists (balls-in-bins;
      truncated Poisson under replace-one).
  """
  kw = {} if value_discretization_interval is None and rtol == 1e-3 else dict(
      value_discretization_interval=value_discretization_interval, rtol=rtol)
  fast = _pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
    fn = pld.epsilon if kind == "epsilon" else pld.delta
    lo, up = fn(*fast, value, return_bounds=True, **kw)
    return np.asarray(lo, np.float64), np.asarray(up, np.float64)
  if _truncated_poisson(sampler):
    up = _tight_upper(kind, sampler, sigma, steps, value, **kw)
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
  if _pld_equivalent(sampler, sigma, steps) is None and not trunc_add_remove:
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
  fast = _pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.interfaces import api as _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    out = np.asarray(fn(*fast, value, accountant="pld"), np.float64)
    if not _plain_poisson(sampler):
      out = np.minimum(out, np.asarray(_forward(kind, sampler, sigma, steps, value, "rdp",
                                                orders), np.float64))
    return nx.to_host(out)
  up = _tight_upper(kind, sampler, sigma, steps, value)
  # Every sampler event's RDP analyses the same relation: the min is sound.
  out = np.minimum(up, np.asarray(_forward(kind, sampler, sigma, steps, value, "rdp", orders),
                                  np.float64))
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(np.where(steps == 0, 0.0, out))


def _plain_poisson(sampler):
  ev = sampler.event(1.0)
  return isinstance(ev, _events.SampledGaussian) and ev.relation == "add_remove"


def _check_budget(target_epsilon, delta, name, value, value_check):
  """Scalar budget (ε ≥ 0, δ in (0, 1)) and one more named scalar argument."""
  for n, v in (("target_epsilon", target_epsilon), ("delta", delta), (name, value)):
    if np.ndim(v) != 0:
      raise ValueError(f"{n} must be a scalar with a sampler; found shape {np.shape(v)}.")
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array(name, value, **value_check)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


# The tight calibrations search to this relative tolerance at the finest: the
# PLD upper bound's own grid accuracy (rtol 1e-3, as jaxdp._src.solvers.tight).
_PLD_RTOL = 1e-3


def _tight_probe(sampler, steps, delta, target):
  """probe(σ) -> (public ε <= target, log(tight ε / target)), one evaluation:
  the public PLD answer min(tight, RDP) decides, the tight part steers."""
  def probe(sigma, steps=steps):
    args = tuple(np.asarray(float(v), np.float64) for v in (sigma, steps, delta))
    tight, rdp = _pld_parts(sampler, *args)
    public = min(tight, rdp)
    g = math.log(max(tight, 1e-300) / max(target, 1e-300)) if math.isfinite(tight) else math.inf
    return public <= target, g
  return probe


def _pld_parts(sampler, sigma, steps, delta, orders=None):
  """(tight upper ε, RDP ε) whose minimum :func:`epsilon` with
  ``accountant="pld"`` returns (the same computations, scalars)."""
  if steps == 0:
    return 0.0, 0.0
  fast = _pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp._src.pld import kernel as pld  # pylint: disable=g-import-not-at-top
    with nx.x64():
      _, up, rdp_eq = pld.guarded_bounds("epsilon", *fast, delta)
    if _plain_poisson(sampler):
      return float(up), float(rdp_eq)
    rdp = float(_forward("epsilon", sampler, sigma, steps, delta, "rdp", orders))
    return float(up), min(rdp, float(rdp_eq))
  rdp = float(_forward("epsilon", sampler, sigma, steps, delta, "rdp", orders))
  return float(_tight_upper("epsilon", sampler, sigma, steps, delta)), rdp


def calibrate_sigma(sampler, target_epsilon, delta, steps, accountant="rdp", rtol=1e-6):
  """Smallest σ (within ``rtol``) whose sampler ε is <= ``target_epsilon``.

  RDP: bisection in log σ over [1e-3, 1e4] on :func:`epsilon` (ε decreases
  in σ); the answer is the upper end of the final bracket, so it always
  meets the target by the same function a user would check it with.

  PLD (``accountant="pld"``; ``rtol`` raised to 1e-3, the PLD grid's own
  accuracy): the RDP answer meets the target (the tight answer is
  min(PLD, RDP)), so the search starts there and brackets below it with the
  tight accountant only (:func:`jaxdp._src.solvers.tight.descend`: secant
  bracketing, then Illinois false position), a probe the engine cannot
  answer counting as "does not meet the target" (conservative: it can only
  give a larger σ). Every probe is the computation :func:`epsilon` makes,
  and only a probe that met the target is returned. Scalars only.

  Returns:
    σ as a NumPy float64; ``inf`` when even σ = 1e4 does not meet the target.
  """
  _check_budget(target_epsilon, delta, "steps", steps, dict(low=0.0, integer=True))
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(0.0)
  if accountant == "pld":
    return _tight_sigma(sampler, float(target_epsilon), float(delta), float(steps), rtol)

  def eps(s):
    return float(epsilon(sampler, s, steps, delta, accountant))

  lo, hi = math.log(1e-3), math.log(1e4)
  if eps(math.exp(hi)) > target_epsilon:
    return np.float64(np.inf)
  if eps(math.exp(lo)) <= target_epsilon:
    return np.float64(math.exp(lo))
  while hi - lo > rtol / 2:
    mid = 0.5 * (lo + hi)
    if eps(math.exp(mid)) <= target_epsilon:
      hi = mid
    else:
      lo = mid
  return np.float64(math.exp(hi))


def _feasible_start(probe, y, up, tries=8):
  """(y, g) of the first feasible probe from ``y`` moving by ``up`` (the RDP
  start meets the target by construction; round-off between the RDP paths
  of the fast kernel could put it 1e-13 over), or None."""
  for _ in range(tries):
    ok, g = probe(y)
    if ok:
      return y, g
    y = up(y)
  return None


def _tight_sigma(sampler, target, delta, steps, rtol):
  """:func:`calibrate_sigma` with accountant="pld" (see there)."""
  from jaxdp._src.solvers import tight as tc  # pylint: disable=g-import-not-at-top
  rtol = max(rtol, _PLD_RTOL)
  # A coarse RDP answer is a feasible start (the tight bound decides below it).
  s_rdp = float(calibrate_sigma(sampler, target, delta, steps, "rdp", rtol=1e-2))
  probe = _tight_probe(sampler, steps, delta, target)
  y_probe = lambda y: probe(math.exp(y))
  found = _feasible_start(y_probe, math.log(min(s_rdp, 1e4)), up=lambda y: y + 1e-6)
  if found is None:      # even σ = 1e4 overspends under both accountants
    return np.float64(np.inf)
  if not found[1] < 0.0:   # the tight bound is no better there: the RDP answer, to rtol
    s_fine = float(calibrate_sigma(sampler, target, delta, steps, "rdp", rtol=rtol))
    return np.float64(s_fine if y_probe(math.log(s_fine))[0] else s_rdp)
  y, _ = tc.descend(y_probe, *found, math.log(1e-3), rtol, slope=-1.0)
  return np.float64(math.exp(y))


def _tight_steps(sampler, target, delta, sigma, t_rdp, max_steps):
  """Largest T meeting the target under accountant="pld", from the RDP answer
  (a lower bound of it) upwards, to rtol 1e-3 (adjacent integers below 1000)."""
  from jaxdp._src.solvers import tight as tc  # pylint: disable=g-import-not-at-top
  probe = _tight_probe(sampler, None, delta, target)
  value = lambda y: float(min(max(round(math.exp(-y)), 1), max_steps))
  y_probe = lambda y: probe(sigma, steps=value(y))
  found = _feasible_start(y_probe, -math.log(max(t_rdp, 1.0)),
                          up=lambda y: -math.log(max(value(y) - 1.0, 1.0)))
  if found is None:
    return np.float64(0.0)
  y, _ = tc.descend(y_probe, *found, -math.log(max_steps), _PLD_RTOL, slope=-0.5,
                    snap=lambda y: -math.log(value(y)))
  return np.float64(np.inf if value(y) >= max_steps else value(y))


def calibrate_steps(sampler, target_epsilon, delta, sigma, accountant="rdp",
                    max_steps=2 ** 40):
  """Largest number of training steps whose sampler ε is <= ``target_epsilon``.

  RDP: ε is non-decreasing in the steps, so a galloping search followed by
  an integer bisection on :func:`epsilon` finds the boundary exactly (the
  answer is checked by the same function a user would use).  PLD
  (``accountant="pld"``): the RDP answer meets the target and is a lower
  bound of the tight one, so the search starts there and brackets upwards
  (:func:`jaxdp._src.solvers.tight.descend` in y = -log T, whole numbers) to
  relative accuracy 1e-3 (adjacent integers below 1000 steps), every probe
  the public computation; the returned T met the target.  Scalars only.

  Returns:
    T as a NumPy float64 whole number; ``inf`` when even ``max_steps`` fits.
  """
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))

  def fits(t):
    return float(epsilon(sampler, sigma, t, delta, accountant)) <= target_epsilon

  if accountant == "pld":
    t_rdp = float(calibrate_steps(sampler, target_epsilon, delta, sigma, "rdp", max_steps))
    if math.isinf(t_rdp):
      return np.float64(np.inf)
    if t_rdp == 0.0 and not fits(1):
      return np.float64(0.0)
    return _tight_steps(sampler, float(target_epsilon), float(delta), float(sigma), t_rdp,
                        max_steps)
  if not fits(1):
    return np.float64(0.0)
  lo, hi = 1, 2
  while fits(hi):  # invariant: fits(lo), and hi > lo is the next candidate
    if hi >= max_steps:
      return np.float64(np.inf)
    lo, hi = hi, hi * 2
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  return np.float64(lo)


def with_rate(sampler, q=None, batch_size=None):
  """A copy of ``sampler`` at another rate: ``q`` for Poisson samplers, else
  ``batch_size`` (other parameters, the capacity and the relation, kept)."""
  import dataclasses  # pylint: disable=g-import-not-at-top
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  if isinstance(sampler, _sampling.PoissonSampler):
    return dataclasses.replace(sampler, q=float(q))
  return dataclasses.replace(sampler, batch_size=int(batch_size))


def calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps, accountant="rdp",
                            rtol=1e-6, min_rate=1e-12, orders=None):
  """Largest rate of ``sampler``'s kind whose ε after ``steps`` steps is <= target.

  Poisson samplers (the capacity kept): bisection in log q over
  [``min_rate``, 1] to relative accuracy ``rtol``, the answer the lower end of
  the final bracket (so it always meets the target, by :func:`epsilon`).
  Fixed-size, balls-in-bins and shuffle samplers: the largest whole batch size
  B in [1, N] by integer bisection, returned as q = B / N (B = q·N exactly).
  Both searches assume ε non-decreasing in the rate (true for every sampler
  here at a fixed number of steps; the answer is checked either way).
  PLD (``accountant="pld"``): from the RDP answer upwards by
  :func:`jaxdp._src.solvers.tight.descend` (q to relative accuracy 1e-3, B to
  1e-3 or adjacent whole numbers), every probe the public computation.
  Scalars only.

  Returns:
    q as a NumPy float64; 0 when even the smallest rate (``min_rate``, or
    B = 1) overspends.
  """
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))
  nx.check_array("steps", steps, low=0.0, integer=True)
  if np.ndim(steps) != 0:
    raise ValueError(f"steps must be a scalar with a sampler; found shape {np.shape(steps)}.")
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(1.0)
  n = sampler.dataset_size
  if accountant == "pld":
    q_rdp = float(calibrate_sampling_rate(sampler, target_epsilon, delta, sigma, steps, "rdp",
                                          1e-6, min_rate, orders))
    return _tight_rate(sampler, float(target_epsilon), float(delta), float(sigma),
                       float(steps), q_rdp, min_rate, orders)

  if isinstance(sampler, _sampling.PoissonSampler):
    def fits(q):
      return float(epsilon(with_rate(sampler, q=q), sigma, steps, delta, accountant,
                           orders)) <= target_epsilon

    if fits(1.0):
      return np.float64(1.0)
    if not fits(min_rate):
      return np.float64(0.0)
    lo, hi = math.log(min_rate), 0.0          # fits(e^lo), not fits(e^hi)
    while hi - lo > rtol / 2:
      mid = 0.5 * (lo + hi)
      lo, hi = (mid, hi) if fits(math.exp(mid)) else (lo, mid)
    return np.float64(math.exp(lo))

  def fits_b(b):
    return float(epsilon(with_rate(sampler, batch_size=b), sigma, steps, delta, accountant,
                         orders)) <= target_epsilon

  if fits_b(n):
    return np.float64(1.0)
  if not fits_b(1):
    return np.float64(0.0)
  lo, hi = 1, n                                # fits_b(lo), not fits_b(hi)
  while hi - lo > 1:
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits_b(mid) else (lo, mid)
  return np.float64(lo / n)


def _tight_rate(sampler, target, delta, sigma, steps, q_rdp, min_rate, orders):
  """:func:`calibrate_sampling_rate` with accountant="pld": from the RDP
  answer (it meets the target) upwards in q (Poisson samplers, to rtol 1e-3)
  or in the whole batch size B (the others), by
  :func:`jaxdp._src.solvers.tight.descend` in y = -log(rate)."""
  from jaxdp._src.solvers import tight as tc  # pylint: disable=g-import-not-at-top
  from jaxdp._src.samplers import sampling as _sampling  # pylint: disable=g-import-not-at-top
  n = sampler.dataset_size
  if isinstance(sampler, _sampling.PoissonSampler):
    value = lambda y: min(math.exp(-y), 1.0)
    build = lambda y: with_rate(sampler, q=value(y))
    snap, y_end = None, 0.0
    start = max(q_rdp, min_rate)
    ret = value
  else:
    value = lambda y: float(min(max(round(math.exp(-y)), 1), n))
    build = lambda y: with_rate(sampler, batch_size=int(value(y)))
    snap, y_end = (lambda y: -math.log(value(y))), -math.log(n)
    start = max(round(q_rdp * n), 1)
    ret = lambda y: value(y) / n

  def y_probe(y):
    smp = build(y)
    args = tuple(np.asarray(float(v), np.float64) for v in (sigma, steps, delta))
    tight, rdp = _pld_parts(smp, *args, orders=orders)
    g = math.log(max(tight, 1e-300) / max(target, 1e-300)) if math.isfinite(tight) else math.inf
    return min(tight, rdp) <= target, g

  y0 = -math.log(start)
  down = (lambda y: y + 1e-6) if snap is None else (lambda y: -math.log(max(value(y) - 1, 1)))
  found = _feasible_start(y_probe, y0, up=down)
  if found is None:
    return np.float64(0.0)
  y, _ = tc.descend(y_probe, *found, y_end, _PLD_RTOL, slope=-1.0, snap=snap)
  return np.float64(ret(y))

