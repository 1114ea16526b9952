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
value). Balls-in-bins raises a ``ValueError`` (no PLD yet; never a Poisson
substitute). With a capacity below N its RDP answer is also bounded by the
untruncated one plus the probability that a bin overflows
(:mod:`jaxdp._bins_coupling`, an (ε, δ) coupling argument; the in-jit RDP
accountant, which composes RDP curves only, keeps the unamplified-epoch
fallback for truncated epochs). σ is always the noise multiplier std / C, as dp_accounting's
``GaussianDpEvent.noise_multiplier`` for the same event and relation.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from jaxdp import _numerics as nx
from jaxdp import events as _events
from jaxdp import pairs as _pairs
from jaxdp._api import is_sampler  # noqa: F401  (re-exported)

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
  from jaxdp import _rdp_truncated as rs  # pylint: disable=g-import-not-at-top
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
  from jaxdp import accountant as _acc  # pylint: disable=g-import-not-at-top
  from jaxdp import rdp as _rdp  # pylint: disable=g-import-not-at-top
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
    from jaxdp import _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    count = compositions(sampler, ev, steps)
    return fn(np.full(shape, float(ev.q)), sigma, count, value, orders=orders)
  from jaxdp import rdp as _rdp  # pylint: disable=g-import-not-at-top
  with nx.x64():
    total, orders = _rdp_total(sampler, sigma, steps, orders)
    if kind == "epsilon":
      out, _ = _rdp.to_epsilon(jnp.asarray(total), orders, jnp.asarray(value))
    else:
      out = _rdp.to_delta(jnp.asarray(total), orders, jnp.asarray(value))
    out = np.nextafter(np.asarray(out, np.float64), np.inf)  # round up
  if _truncated_bins(sampler):
    # Also the untruncated bound plus the overflow probability (coupling,
    # jaxdp._bins_coupling): far tighter than the unamplified-epoch fallback
    # whenever the capacity is a few standard deviations above N/k.
    from jaxdp import _bins_coupling  # pylint: disable=g-import-not-at-top
    fn = _bins_coupling.epsilon if kind == "epsilon" else _bins_coupling.delta
    out = np.minimum(out, fn(_rdp_forward, sampler, sigma, steps, value, orders))
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(np.where(steps == 0, 0.0, out))


def _rdp_forward(kind, sampler, sigma, steps, value, orders):
  return _forward(kind, sampler, sigma, steps, value, "rdp", orders)


def _truncated_bins(sampler):
  from jaxdp import sampling as _sampling  # pylint: disable=g-import-not-at-top
  return (isinstance(sampler, _sampling.BallsInBinsSampler)
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
    raise ValueError(
        f"accountant='pld' is not available for the {type(sampler).__name__} sampler "
        f"({type(ev).__name__}, relation {getattr(ev, 'relation', 'add_remove')!r}) yet; "
        "use accountant='rdp' (never a Poisson substitute).") from None


def _pld(kind, sampler, sigma, steps, value, orders):
  """Tight answer: the fast path where it applies, else the general engine; min with RDP."""
  fast = _pld_equivalent(sampler, sigma, steps)
  if fast is not None:
    from jaxdp import _api  # pylint: disable=g-import-not-at-top
    fn = _api.epsilon if kind == "epsilon" else _api.delta
    return fn(*fast, value, accountant="pld")
  from jaxdp import pld_general  # pylint: disable=g-import-not-at-top
  out = np.empty(sigma.shape)
  for s, t in set(zip(sigma.ravel().tolist(), steps.ravel().tolist())):
    sel = (sigma == s) & (steps == t)
    mechs = _mechanisms(sampler, s)
    count = int(compositions(sampler, sampler.event(s), t))
    if count == 0:
      out[sel] = 0.0
      continue
    fn = pld_general.epsilon if kind == "epsilon" else pld_general.delta
    out[sel] = np.max([np.asarray(fn([(m, count)], value[sel]), np.float64) for m in mechs], axis=0)
  # Every sampler event's RDP analyses the same relation: the min is sound.
  out = np.minimum(out, np.asarray(_forward(kind, sampler, sigma, steps, value, "rdp", orders),
                                   np.float64))
  if kind == "delta":
    out = np.minimum(out, 1.0)
  return nx.to_host(out)


def _check_budget(target_epsilon, delta, name, value, value_check):
  """Scalar budget (ε ≥ 0, δ in (0, 1)) and one more named scalar argument."""
  for n, v in (("target_epsilon", target_epsilon), ("delta", delta), (name, value)):
    if np.ndim(v) != 0:
      raise ValueError(f"{n} must be a scalar with a sampler; found shape {np.shape(v)}.")
  nx.check_array("target_epsilon", target_epsilon, low=0.0)
  nx.check_array(name, value, **value_check)
  nx.check_array("delta", delta, low=0.0, high=1.0, low_open=True, high_open=True)


def calibrate_sigma(sampler, target_epsilon, delta, steps, accountant="rdp", rtol=1e-6):
  """Smallest σ (within ``rtol``) whose sampler ε is <= ``target_epsilon``.

  Bisection in log σ over [1e-3, 1e4] on :func:`epsilon` (ε decreases in σ);
  the answer is the upper end of the final bracket, so it always meets the
  target by the same function a user would check it with.  Scalars only.

  Returns:
    σ as a NumPy float64; ``inf`` when even σ = 1e4 does not meet the target.
  """
  _check_budget(target_epsilon, delta, "steps", steps, dict(low=0.0, integer=True))
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(0.0)

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


def calibrate_steps(sampler, target_epsilon, delta, sigma, accountant="rdp",
                    max_steps=2 ** 40):
  """Largest number of training steps whose sampler ε is <= ``target_epsilon``.

  ε is non-decreasing in the steps, so a galloping search followed by an
  integer bisection on :func:`epsilon` finds the boundary exactly (the
  answer is checked by the same function a user would use).  Scalars only.

  Returns:
    T as a NumPy float64 whole number; ``inf`` when even ``max_steps`` fits.
  """
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))

  def fits(t):
    return float(epsilon(sampler, sigma, t, delta, accountant)) <= target_epsilon

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
  from jaxdp import sampling as _sampling  # pylint: disable=g-import-not-at-top
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
  Scalars only.

  Returns:
    q as a NumPy float64; 0 when even the smallest rate (``min_rate``, or
    B = 1) overspends.
  """
  from jaxdp import sampling as _sampling  # pylint: disable=g-import-not-at-top
  _check_budget(target_epsilon, delta, "sigma", sigma, dict(low=0.0, low_open=True))
  nx.check_array("steps", steps, low=0.0, integer=True)
  if np.ndim(steps) != 0:
    raise ValueError(f"steps must be a scalar with a sampler; found shape {np.shape(steps)}.")
  nx.check_array("rtol", rtol, low=0.0, low_open=True, high=0.1)
  if steps == 0:
    return np.float64(1.0)
  n = sampler.dataset_size

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
