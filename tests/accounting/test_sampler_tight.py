"""The tight (PLD) path for samplers (issue 34, rows 1, 2, 6 and point 4, host side).

Regression tests: each fails on the code of commit c297791 (calibration
probes at σ = 1e-3 and an internal grid error; ``tight_one`` raising where
``jaxdp.epsilon`` answers; ``jaxdp.pld.epsilon(sampler, ...)`` raising "q
must be numeric"; truncated Poisson's early-training ε far above Poisson's).
Independent references: SciPy quadrature and binomial/normal tails, never
the code under test.
"""

import math

import numpy as np
import pytest
from scipy import integrate, stats

import jaxdp
from jaxdp import calibrate, pld, pld_general, sampling
from jaxdp._src.accounting import rate as _rate
from jaxdp._src.kernels import bins_coupling as _bins_coupling
from jaxdp._src.mechanisms.registry import poisson_phases

N, B = 1437, 64          # scikit-learn's digits, the run
Q = B / N
DELTA = 1e-5


# --------------------------------------------------------------------------
# row 2: a question the general engine cannot grid
# --------------------------------------------------------------------------


def test_general_engine_names_the_users_argument_not_an_internal_setting():
  """Row 1/2: the automatic grid's failure names ``phases``, never
  ``value_discretization_interval`` (which the user did not pass)."""
  with pytest.raises(pld_general.GridTooLarge) as err:
    pld_general.epsilon(poisson_phases(0.01, 1e-4, 1000), 1e-5)
  msg = str(err.value)
  assert msg.startswith("phases:") and "value_discretization_interval" not in msg
  assert isinstance(err.value, ValueError)
  # A user-given interval still gets the message naming it.
  with pytest.raises(ValueError, match="value_discretization_interval=0.001"):
    pld_general.epsilon(poisson_phases(0.01, 1e-4, 1000), 1e-5,
                        value_discretization_interval=1e-3)


def _remove_delta_bounds(q, sigma, steps, eps, slack):
  """Bounds on the true δ(ε) of ``steps`` Poisson-sampled Gaussians at tiny σ
  (independent of jaxdp): with K ~ Bin(T, q) inclusions the remove-direction
  loss is K(1/(2σ²) + log q) + (T-K) log(1-q) + N(0, K/σ²), up to terms of
  order e^{-1/(4σ²)} (absorbed by ``slack`` loss units); the add direction's
  loss is at most -T log(1-q), far below ε here. Upper: P[L > ε - slack];
  lower: P[L > ε + slack](1 - e^{-slack})."""
  k = np.arange(steps + 1)
  pk = stats.binom.pmf(k, steps, q)
  mean = k * (0.5 / sigma**2 + math.log(q)) + (steps - k) * math.log1p(-q)
  sd = np.sqrt(np.maximum(k, 1e-300)) / sigma
  upper = float(np.sum(pk * stats.norm.sf((eps - slack - mean) / sd)))
  lower = float(np.sum(pk * stats.norm.sf((eps + slack - mean) / sd))) * -math.expm1(-slack)
  return lower, upper


def test_cli_and_python_agree_where_the_general_engine_cannot_grid():
  """Row 2: ``jaxdp epsilon --q 0.01 --sigma 1e-4 --steps 1000 --delta 1e-5``
  (``tight_one``) raised a grid error while ``jaxdp.epsilon(...,
  accountant="pld")`` answered 1.3e9. Both now report the same number, a
  valid upper bound (an independent bound on δ(ε) says so) within 1% of the
  truth, and smaller than the RDP value, which is what a failed engine
  would have returned."""
  q, sigma, steps = 0.01, 1e-4, 1000
  lo, up, rdp_up = _rate.tight_one("epsilon", q, sigma, steps, DELTA)
  cli = min(up, rdp_up)
  python = float(jaxdp.epsilon(q, sigma, steps, DELTA, accountant="pld"))
  assert cli == python
  assert lo <= cli < rdp_up
  assert 1.2e9 < cli < 1.4e9
  _, delta_up = _remove_delta_bounds(q, sigma, steps, cli, slack=1.0)
  assert delta_up <= DELTA                # a valid upper bound on ε
  delta_lo, _ = _remove_delta_bounds(q, sigma, steps, 0.99 * cli, slack=20.0)
  assert delta_lo > DELTA                 # and the true ε is above 0.99 of it


def test_sampler_whose_engine_cannot_grid_answers_with_rdp():
  """Row 2 for samplers: where the general engine cannot grid (σ = 1e-4), the
  public PLD answer is the RDP one, not an error."""
  smp = sampling.fixed(N, B)
  rdp = jaxdp.epsilon(smp, 1e-4, 100, DELTA)
  assert float(jaxdp.epsilon(smp, 1e-4, 100, DELTA, accountant="pld")) == float(rdp)
  lo, up = pld.epsilon(smp, 1e-4, 100, DELTA, return_bounds=True)
  assert lo == 0.0 and up == np.inf


# --------------------------------------------------------------------------
# row 6: certified intervals for samplers
# --------------------------------------------------------------------------


def _mixture_delta(eps, sigma, g, reverse):
  """Exact one-step δ(ε) of P = (1-g)N(0, σ²) + gN(2, σ²) vs Q = N(0, σ²)
  (or the reverse order), by quadrature."""
  p = lambda x: (1 - g) * stats.norm.pdf(x, 0, sigma) + g * stats.norm.pdf(x, 2, sigma)
  qd = lambda x: stats.norm.pdf(x, 0, sigma)
  if reverse:
    p, qd = qd, p
  f = lambda x: max(p(x) - math.exp(eps) * qd(x), 0.0)
  return integrate.quad(f, -12 * sigma, 2 + 12 * sigma, points=[0.0, 1.0, 2.0], limit=400,
                        epsabs=1e-14)[0]


def test_fixed_replace_one_interval_contains_the_exact_one_step_delta():
  """Row 6: ``pld.delta(fixed sampler, ..., return_bounds=True)`` (which
  raised "q must be numeric") returns an interval containing the exact
  one-step δ, max over the two orders of the attained pair (quadrature)."""
  smp = sampling.fixed(N, B)
  sigma = 1.1
  g = B / N
  for eps in (0.5, 1.0):
    exact = max(_mixture_delta(eps, sigma, g, False), _mixture_delta(eps, sigma, g, True))
    lo, up = pld.delta(smp, sigma, 1, eps, return_bounds=True)
    assert lo <= exact * (1 + 1e-9) and exact <= up * (1 + 1e-9)
    assert up <= exact * 1.01


def test_public_answer_is_min_of_interval_upper_and_rdp():
  """Row 6: ``jaxdp.epsilon(sampler, ..., accountant="pld")`` equals
  min(upper end of ``pld.epsilon(sampler, ..., return_bounds=True)``, RDP)
  and lies in [lower, RDP]; the same for δ."""
  smp = sampling.fixed(N, B)
  sigma, steps = 1.1, 200
  lo, up = pld.epsilon(smp, sigma, steps, DELTA, return_bounds=True)
  rdp = float(jaxdp.epsilon(smp, sigma, steps, DELTA))
  public = float(jaxdp.epsilon(smp, sigma, steps, DELTA, accountant="pld"))
  assert public == min(float(up), rdp)
  assert lo <= public <= rdp and lo <= up
  assert up - lo <= 0.2 * up    # the attained pair's lower end (see _sampler_api._attained)
  d_lo, d_up = pld.delta(smp, sigma, steps, 2.0, return_bounds=True)
  d_public = float(jaxdp.delta(smp, sigma, steps, 2.0, accountant="pld"))
  d_rdp = float(jaxdp.delta(smp, sigma, steps, 2.0))
  assert d_public == min(float(d_up), d_rdp) and d_lo <= d_public <= d_rdp


def test_balls_in_bins_has_a_tight_interval():
  """Row 6: balls-in-bins now has a PLD interval (issue 38: random
  allocation's certified laws, capacity by the coupling)."""
  lo, up = pld.epsilon(sampling.balls_in_bins(N, B, N), 1.0, 10, DELTA, return_bounds=True)
  assert 0 < lo <= up < np.inf
  # capacity 96: the coupling's overflow term (~7e-4) exceeds δ, so the
  # interval is the trivial one (the public answer is the RDP bound)
  lo, up = pld.epsilon(sampling.balls_in_bins(N, B, 96), 1.0, 10, DELTA, return_bounds=True)
  assert 0 <= lo <= up


# --------------------------------------------------------------------------
# point 4: truncated Poisson early in training (host side)
# --------------------------------------------------------------------------


def test_poisson_overflow_probability_rounds_up():
  """The overflow bound is >= the exact 1 - (1 - P[Bin(N+1, q) > C])^T
  (SciPy) and within 1e-9 of it."""
  for cap in (96, 128):
    for steps in (1, 22, 660):
      p1 = stats.binom.sf(cap, N + 1, Q)
      exact = -math.expm1(steps * math.log1p(-p1))
      got = float(_bins_coupling.poisson_overflow_probability(N, Q, cap, steps))
      assert exact <= got <= exact * (1 + 1e-9)


def test_truncated_poisson_epoch_one_within_one_percent_of_poisson_pld():
  """Point 4 (PLD interval): at capacity 128 (8 sd) the epoch-1 ε of
  truncated Poisson is within 1% of untruncated Poisson's (it was ~1.6x
  with the two-block pair alone); the coupling's lower end is certified."""
  sigma, steps = 1.9, 22
  trunc = sampling.poisson(N, Q, 128)
  lo, up = pld.epsilon(trunc, sigma, steps, DELTA, return_bounds=True)
  _, pois = pld.epsilon(sampling.poisson(N, Q, N), sigma, steps, DELTA, return_bounds=True)
  assert up <= 1.01 * pois
  assert 0.0 < lo <= up


@pytest.mark.slow
def test_truncated_poisson_epoch_one_within_one_percent_both_accountants():
  """Point 4 (public answers, RDP and PLD): σ from the ε = 3 calibration of
  the digits run (30 epochs); capacity 128 within 1% of Poisson at epoch 1;
  capacity 96 (overflow ~1.1e-3 over the epoch, above δ) is left as it is."""
  pois = sampling.poisson(N, Q, N)
  steps = pois.steps_per_epoch
  sigma = float(calibrate.sigma(3.0, DELTA, pois, 30 * steps))
  for acc in ("rdp", "pld"):
    ref = float(jaxdp.epsilon(pois, sigma, steps, DELTA, accountant=acc))
    got = float(jaxdp.epsilon(sampling.poisson(N, Q, 128), sigma, steps, DELTA, accountant=acc))
    assert ref <= got * (1 + 1e-9) or acc == "pld"   # both certified; PLD engines may differ
    assert got <= 1.01 * ref
  assert float(_bins_coupling.poisson_overflow_probability(N, Q, 96, steps)) > DELTA


# --------------------------------------------------------------------------
# row 1: tight calibration for samplers
# --------------------------------------------------------------------------


def test_tight_sigma_for_fixed_batches_meets_the_target_and_is_tight():
  """Row 1 (``calibrate.sigma(q=sampler, accountant="pld")``): used to probe
  σ = 1e-3 and fail on an internal grid. Now σ meets the target by the public
  function, is 1e-3-tight (σ(1 - 2e-3) overspends) and below the RDP σ."""
  smp = sampling.fixed(N, B)
  steps = 100
  s_pld = float(calibrate.sigma(3.0, DELTA, smp, steps, accountant="pld"))
  assert float(jaxdp.epsilon(smp, s_pld, steps, DELTA)) > 3.0    # below the RDP σ
  assert float(jaxdp.epsilon(smp, s_pld, steps, DELTA, accountant="pld")) <= 3.0
  assert float(jaxdp.epsilon(smp, s_pld * (1 - 2e-3), steps, DELTA, accountant="pld")) > 3.0


@pytest.mark.slow
def test_tight_steps_and_rate_for_fixed_batches():
  """Row 1 for ``calibrate.steps`` and ``calibrate.sampling_rate``: the
  answers meet the target by the public function and the next value does
  not (steps: T + 1; batch size: B + 1), and they are at least the RDP ones.
  (The old galloping/bisection searches answered here too, slowly: slow.)"""
  smp = sampling.fixed(N, B)
  sigma = 2.0
  t = int(calibrate.steps(3.0, DELTA, smp, sigma, accountant="pld"))
  assert t >= int(calibrate.steps(3.0, DELTA, smp, sigma))
  assert float(jaxdp.epsilon(smp, sigma, t, DELTA, accountant="pld")) <= 3.0
  assert float(jaxdp.epsilon(smp, sigma, t + 1, DELTA, accountant="pld")) > 3.0
  steps = 100
  q = float(calibrate.sampling_rate(3.0, DELTA, sigma, steps, accountant="pld", sampler=smp))
  b = round(q * N)
  assert q >= float(calibrate.sampling_rate(3.0, DELTA, sigma, steps, sampler=smp))
  assert float(jaxdp.epsilon(sampling.fixed(N, b), sigma, steps, DELTA, accountant="pld")) <= 3.0
  assert float(jaxdp.epsilon(sampling.fixed(N, b + 1), sigma, steps, DELTA,
                             accountant="pld")) > 3.0


@pytest.mark.slow
@pytest.mark.parametrize("smp", [
    sampling.poisson(N, Q, 96),
    sampling.fixed(N, B, "add_remove"),
    sampling.poisson(N, Q, N, "replace_one"),
    sampling.shuffle(N, 8),
], ids=["truncated-poisson", "fixed-add-remove", "poisson-replace-one", "shuffle"])
def test_tight_sigma_every_sampler(smp):
  """Row 1 for every sampler with a tight path (the issue's 660 steps)."""
  steps = 660
  s_pld = float(calibrate.sigma(3.0, DELTA, smp, steps, accountant="pld"))
  s_rdp = float(calibrate.sigma(3.0, DELTA, smp, steps))
  assert s_pld <= s_rdp
  assert float(jaxdp.epsilon(smp, s_pld, steps, DELTA, accountant="pld")) <= 3.0
  if s_pld < s_rdp:
    assert float(jaxdp.epsilon(smp, s_pld * (1 - 2e-3), steps, DELTA, accountant="pld")) > 3.0


@pytest.mark.slow
def test_cli_row_one_command(capsys):
  """Row 1's exact command answers (it failed after 48 s with a grid error)."""
  from jaxdp import cli
  rc = cli.main(["calibrate", "--target-epsilon", "3", "--delta", "1e-5", "--sampler",
                 "truncated-poisson", "--capacity", "96", "--dataset-size", "1437",
                 "--batch-size", "64", "--steps", "660", "--accountant", "pld"])
  assert rc == 0
  sigma = float(capsys.readouterr().out.split("=")[1])
  smp = sampling.poisson(N, Q, 96)
  assert float(jaxdp.epsilon(smp, sigma, 660, DELTA, accountant="pld")) <= 3.0
  assert sigma < float(calibrate.sigma(3.0, DELTA, smp, 660))
