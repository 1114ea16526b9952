"""Dominating pairs of the sampled Gaussian events (Gaussian mixtures).

One place for every sampler's one-step pair: Poisson sampling (either
relation), fixed batches drawn without replacement, truncated Poisson, and the
event → mechanisms map the PLD engines read (:func:`event_mechanisms`,
:func:`sampler_event_pairs`). σ is always the noise
multiplier std / C, as dp_accounting's ``GaussianDpEvent.noise_multiplier``
for the same event and relation.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxdp._src.core import numerics as nx
from jaxdp._src import events as _events
from jaxdp._src.mechanisms import pairs as _pairs
from jaxdp._src.mechanisms.entry import Entry, column, field, scalars


EPOCH_EVENTS = (_events.BallsInBinsGaussian, _events.ShuffledGaussian)


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
  with np.errstate(all="ignore"):   # the brackets in NumPy: nothing compiled
    par = [[float(v) for v in rs._truncation_parameters(  # pylint: disable=protected-access
        *(np.asarray(float(v), np.float64) for v in (n, q, capacity)), xp=np)] for n in sizes]
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


def sampler_event_pairs(event):
  """One :class:`Mechanism` for a ``SampledGaussian`` (add/remove) or sampler event.

  Where the tight answer is a maximum over several compositions (truncated
  Poisson: neighbour sizes N and N + 1), one pair dominating all of them
  (``both_sizes=True`` of :func:`truncated_poisson_gaussian`,
  sound but with excess mass per step); :func:`event_mechanisms`
  lists the tighter alternatives.

  Raises:
    TypeError: for events without dominating pairs (balls-in-bins).
  """
  mechs = event_mechanisms(event)
  if len(mechs) == 1:
    return mechs[0]
  n, q, cap, s = (float(v) for v in (event.dataset_size, event.q, event.capacity, event.sigma))
  return truncated_poisson_gaussian(n, q, cap, s, both_sizes=True)


def _poisson_add_remove_rdp(event, col, alpha):
  """Add/remove RDP (both directions) of a ``SampledGaussian`` or
  ``TruncatedPoissonGaussian`` at orders ``alpha`` (last axis)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_samplers as _rs  # pylint: disable=g-import-not-at-top
  plain = _rdp.sampled_gaussian(col(event.q), col(event.sigma), alpha)
  if isinstance(event, _events.SampledGaussian):
    return plain
  if nx.is_concrete(event.capacity) and nx.is_concrete(event.dataset_size) and \
      np.all(np.asarray(event.capacity) >= np.asarray(event.dataset_size)):
    return plain
  n, q, cap, s = (col(getattr(event, f)) for f in ("dataset_size", "q", "capacity", "sigma"))
  # The bound is not monotone in N and an add/remove neighbour has N or N+1
  # examples: take the larger of the two.
  trunc = jnp.maximum(_rs.truncated_poisson_gaussian(n, q, cap, s, alpha),
                      _rs.truncated_poisson_gaussian(n + 1, q, cap, s, alpha))
  return jnp.where(cap >= n, plain, trunc)


def host_poisson_rdp(event, orders):
  """:func:`_poisson_rdp` of one concrete ``SampledGaussian`` or
  ``TruncatedPoissonGaussian`` event at 1-D float64 ``orders``, computed in
  NumPy (the same formulas: :func:`jaxdp._src.kernels.host_rdp.per_step_rdp`
  and :func:`jaxdp._src.kernels.rdp_truncated.truncated_poisson_gaussian_host`),
  nothing compiled; within ~1e-10 relative of the compiled curve (tested).
  Host-level callers (the sampler answers) use it: one question about a
  truncated-Poisson run compiled ~12 s of kernels for it."""
  from jaxdp._src.kernels import host_rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_relations  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_truncated  # pylint: disable=g-import-not-at-top
  q, s = float(event.q), float(event.sigma)
  truncated = (isinstance(event, _events.TruncatedPoissonGaussian)
               and float(event.capacity) < float(event.dataset_size))

  @np.errstate(all="ignore")
  def curve(alpha):
    alpha = np.asarray(alpha, np.float64)
    plain = host_rdp.per_step_rdp(np.array([q]), np.array([s]), alpha)[0]
    if not truncated:
      return plain
    n, cap = float(event.dataset_size), float(event.capacity)
    # Neighbours of a dataset of size N have N or N + 1 examples (see above).
    return np.maximum(*(rdp_truncated.truncated_poisson_gaussian_host(m, q, cap, s, alpha, plain)
                        for m in (n, n + 1.0)))

  orders = np.asarray(orders, np.float64)
  if event.relation == "replace_one":
    return np.asarray(rdp_relations.replace_one(curve, orders), np.float64)
  return curve(orders)


# --------------------------------------------------------------------------
# Registry entries of the Gaussian family (jaxdp._src.mechanisms.registry)
# --------------------------------------------------------------------------


def _gaussian_rdp(event, orders, dtype):
  """``Gaussian(σ, Δ)``: αΔ²/(2σ²) (Mironov 2017, Prop 7)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  sens = 1.0 if event.sensitivity is None else event.sensitivity
  return jnp.asarray(_rdp.gaussian(column(event.sigma, dtype) / column(sens, dtype), orders), dtype)


def _poisson_rdp(event, orders, dtype):
  """``SampledGaussian``/``TruncatedPoissonGaussian``: Mironov–Talwar–Zhang
  2019 (add/remove); under replace-one the weak-triangle bound of the
  add/remove curve (:func:`jaxdp.rdp_relations.replace_one`)."""
  curve = functools.partial(_poisson_add_remove_rdp, event, functools.partial(column, dtype=dtype))
  if event.relation == "replace_one":
    from jaxdp._src.kernels import rdp_relations  # pylint: disable=g-import-not-at-top
    return jnp.asarray(rdp_relations.replace_one(curve, orders), dtype)
  return jnp.asarray(curve(orders), dtype)


def _without_replacement_rdp(event, orders, dtype):
  """Fixed batches: Wang–Balle–Kasiviswanathan 2019 (replace-one, σ/2: a
  clipped sum moves by 2C) or the Balle–Barthe–Gaboardi coupling (add/remove)."""
  from jaxdp._src.kernels import rdp_samplers as _rs  # pylint: disable=g-import-not-at-top
  alpha = jnp.asarray(orders, dtype)
  s = column(event.sigma, dtype)
  s = s / 2.0 if event.relation == "replace_one" else s
  return jnp.asarray(_rs.without_replacement_gaussian(
      column(event.dataset_size, dtype), column(event.batch_size, dtype), s, alpha,
      relation=event.relation), dtype)


def _balls_in_bins_rdp(event, orders, dtype):
  """One balls-in-bins epoch: random allocation (Feldman & Shenfeld 2025) when
  no bin is truncated; with a capacity below N one unamplified Gaussian step
  of sensitivity 2C per epoch (an overfull bin may drop one example)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  from jaxdp._src.kernels import rdp_samplers as _rs  # pylint: disable=g-import-not-at-top
  alpha = jnp.asarray(orders, dtype)
  s = column(event.sigma, dtype)
  untruncated = _rs.balls_in_bins_gaussian_epoch(column(event.dataset_size, dtype),
                                                 column(event.batch_size, dtype), s, alpha)
  if event.capacity is None:
    return jnp.asarray(untruncated, dtype)
  unamplified = _rdp.gaussian(s / 2.0, alpha)
  cap_ok = column(event.capacity, dtype) >= column(event.dataset_size, dtype)
  return jnp.asarray(jnp.where(cap_ok, untruncated, unamplified), dtype)


def _shuffled_rdp(event, orders, dtype):
  """One shuffled epoch: one Gaussian step of sensitivity 2C (no amplification
  can be claimed, Chua et al. 2024)."""
  from jaxdp._src.kernels import rdp as _rdp  # pylint: disable=g-import-not-at-top
  alpha = jnp.asarray(orders, dtype)
  return jnp.asarray(_rdp.gaussian(column(event.sigma, dtype) / 2.0, alpha), dtype)


def _gaussian_pairs(event):
  sigma, sens = scalars(event, "sigma", "sensitivity")
  return [_pairs.gaussian(sigma, sens)]


def _poisson_pure_epsilon(event, dtype):
  """0 where q = 0 (nothing is released about anyone), else +inf."""
  return jnp.where(field(event.q, dtype) > 0, jnp.asarray(jnp.inf, dtype), 0.0)


def _gaussian_rho(event, dtype):
  """ρ = Δ²/(2σ²) (Dwork–Rothblum Thm 3.2 with τ = Δ/σ; Bun–Steinke)."""
  sigma = jnp.asarray(event.sigma, dtype)
  if event.sensitivity is not None:
    sigma = sigma / jnp.asarray(event.sensitivity, dtype)
  return 0.5 / jnp.square(sigma)


def _sampled_gaussian_rho(event, dtype):
  """ρ = 1/(2σ²): zCDP gives no amplification by subsampling (valid: Rényi
  divergence is jointly quasi-convex); replace-one moves the sum by 2C."""
  sigma = jnp.asarray(event.sigma, dtype)
  sigma = jnp.broadcast_to(sigma, jnp.broadcast_shapes(jnp.shape(event.q), jnp.shape(event.sigma)))
  if event.relation == "replace_one":
    sigma = sigma / 2.0  # the sampled example moves the sum by up to 2C
  return 0.5 / jnp.square(sigma)


def _gaussian_fast_pld(event):
  sens = getattr(event, "sensitivity", None)
  sens = 1.0 if sens is None else float(sens)
  return 1.0, float(event.sigma) / sens


def _sampled_gaussian_fast_pld(event):
  if event.relation == "add_remove":
    return float(event.q), float(event.sigma)
  return None


ENTRIES = {
    _events.Gaussian: Entry(rdp=_gaussian_rdp, pairs=_gaussian_pairs, rho=_gaussian_rho,
                            fast_pld=_gaussian_fast_pld),
    _events.SampledGaussian: Entry(rdp=_poisson_rdp, pairs=event_mechanisms,
                                   pure_epsilon=_poisson_pure_epsilon, rho=_sampled_gaussian_rho,
                                   fast_pld=_sampled_gaussian_fast_pld),
    _events.TruncatedPoissonGaussian: Entry(rdp=_poisson_rdp, pairs=event_mechanisms,
                                            dominating=sampler_event_pairs,
                                            pure_epsilon=_poisson_pure_epsilon),
    _events.SampledWithoutReplacementGaussian: Entry(rdp=_without_replacement_rdp,
                                                     pairs=event_mechanisms),
    _events.BallsInBinsGaussian: Entry(rdp=_balls_in_bins_rdp),
    _events.ShuffledGaussian: Entry(rdp=_shuffled_rdp, pairs=event_mechanisms),
}
