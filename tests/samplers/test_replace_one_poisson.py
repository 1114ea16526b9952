"""Poisson sampling under replace-one neighbours (events, samplers, accountants, CLI).

References, independent of the code under test:
* closed forms: the weak triangle inequality on Gaussians, and q = 1 (the pair
  is then N(1, σ²) vs N(−1, σ²): a Gaussian of sensitivity 2);
* mpmath: Rényi divergences of the explicit mixture pair, and exact δ(ε) of
  tiny datasets with every batch enumerated (``sampler_reference``);
* dp_accounting's PLD accountant under REPLACE_ONE (test-only oracle).
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import accountant, cli, events, rdp_relations, sampling

import sampler_reference as R

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting import dp_event as DE  # noqa: E402
from dp_accounting import privacy_accountant as PA  # noqa: E402
from dp_accounting.pld import pld_privacy_accountant as PLDA  # noqa: E402


def _pair(q):
  """Output mixtures of one step with the differing example +1 vs -1, others 0."""
  return {(1.0,): q, (0.0,): 1 - q}, {(-1.0,): q, (0.0,): 1 - q}


def _gaussian_delta(mu, eps):
  """Exact δ(ε) of N(μ, 1) vs N(0, 1) (Balle & Wang 2018, Thm 8)."""
  return stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)


def test_weak_triangle_on_gaussians_matches_its_closed_form_and_bounds_the_truth():
  sigma = 1.3
  alpha = np.array([1.01, 1.5, 2.0, 7.0, 100.0])
  bound = rdp_relations.replace_one(lambda a: a / (2 * sigma**2), alpha)
  # (α - ½)/(α - 1) · 2α/(2σ²) + (2α - 1)/(2σ²), by hand
  by_hand = ((alpha - 0.5) / (alpha - 1) * alpha + alpha - 0.5) / sigma**2
  np.testing.assert_allclose(bound, by_hand, rtol=1e-12)
  assert np.all(bound >= 2 * alpha / sigma**2)   # the truth: shift 2, α·4/(2σ²)


@pytest.mark.parametrize("q,sigma,alpha", [
    (0.01, 1.0, 2.0), (0.01, 1.0, 8.0), (0.2, 0.6, 3.0), (0.2, 0.6, 1.5),
    (0.5, 2.0, 5.0), (1e-4, 0.3, 4.0), (1.0, 0.8, 3.0)])
def test_rdp_upper_bounds_the_mixture_pair(q, sigma, alpha):
  p, r = _pair(q)
  exact = float(R.renyi_both_1d(p, r, alpha, sigma))
  got = float(rdp_relations.sampled_gaussian_replace_one(q, sigma, alpha))
  assert got >= exact * (1 - 1e-9)
  ev = events.SampledGaussian(q, sigma, "replace_one")
  via_event = float(np.asarray(accountant.event_rdp(ev, np.array([alpha]), jnp.float32))[0])
  assert via_event >= exact * (1 - 1e-6)


@pytest.mark.parametrize("others,q,sigma", [([0.0] * 3, 0.3, 1.0), ([-1.0, 0.5], 0.5, 0.7),
                                            ([0.0] * 2, 1.0, 1.5)])
def test_sampler_delta_vs_enumeration(others, q, sigma):
  """Every batch of a tiny dataset enumerated (x = +1 vs x' = -1): jaxdp's δ
  is >= the exact δ by both accountants, and the PLD is within 1% of it where
  the others are 0 (they attain the dominating pair)."""
  n = len(others) + 1
  d1 = R.poisson_capacity_mixture(others + [1.0], q, n)
  d2 = R.poisson_capacity_mixture(others + [-1.0], q, n)
  smp = sampling.poisson(n, q, n, relation="replace_one")
  for eps in (0.3, 1.5):
    exact = float(max(R.hockey_stick_1d(d1, d2, eps, sigma), R.hockey_stick_1d(d2, d1, eps, sigma)))
    tight = float(jaxdp.delta(smp, sigma, 1, eps, accountant="pld"))
    loose = float(jaxdp.delta(smp, sigma, 1, eps))
    assert tight >= exact and loose >= exact
    if all(o == 0.0 for o in others):
      assert tight <= exact * 1.01 + 1e-12


def test_truncated_replace_one_rdp_vs_enumeration():
  """Truncation under replace-one (N fixed): the weak-triangle RDP bound is >=
  the exact δ of every enumerated tiny dataset; the tight path refuses."""
  others, q, cap, sigma = [-1.0, -1.0, 0.0, 0.0], 0.5, 2, 1.0
  n = len(others) + 1
  smp = sampling.poisson(n, q, cap, relation="replace_one")
  assert isinstance(smp.event(sigma), events.TruncatedPoissonGaussian)
  for a, b in ((1.0, -1.0), (1.0, 0.0)):
    d1 = R.poisson_capacity_mixture(others + [a], q, cap)
    d2 = R.poisson_capacity_mixture(others + [b], q, cap)
    for eps in (0.5, 2.0):
      exact = float(max(R.hockey_stick_1d(d1, d2, eps, sigma),
                        R.hockey_stick_1d(d2, d1, eps, sigma)))
      assert float(jaxdp.delta(smp, sigma, 1, eps)) >= exact
  with pytest.raises(ValueError, match="replace_one"):
    jaxdp.epsilon(smp, sigma, 10, 1e-5, accountant="pld")


def _dpa_replace_one(q, sigma, steps, delta):
  acc = PLDA.PLDAccountant(neighboring_relation=PA.NeighboringRelation.REPLACE_ONE,
                           value_discretization_interval=1e-4)
  acc.compose(DE.PoissonSampledDpEvent(q, DE.GaussianDpEvent(sigma)), steps)
  return acc.get_epsilon(delta)


@pytest.mark.parametrize("q,sigma,steps", [(0.01, 1.0, 1000), (0.1, 0.6, 30), (0.003, 2.0, 3000)])
def test_pld_matches_dp_accounting_and_rdp_is_above(q, sigma, steps):
  delta = 1e-5
  ref = _dpa_replace_one(q, sigma, steps, delta)
  smp = sampling.poisson(10**6, q, 10**6, relation="replace_one")
  tight = float(jaxdp.epsilon(smp, sigma, steps, delta, accountant="pld"))
  assert abs(tight / ref - 1) <= 5e-3
  pa = accountant.pld()
  state = pa.compose(pa.init(), events.SampledGaussian(q, sigma, "replace_one"), steps)
  assert float(pa.epsilon(state, delta)) == pytest.approx(tight, rel=1e-9)
  # RDP is sound (>= the tight value) and replace-one costs more than add/remove.
  loose = float(jaxdp.epsilon(smp, sigma, steps, delta))
  assert loose >= tight
  assert tight > float(jaxdp.epsilon(q, sigma, steps, delta, accountant="pld"))


def test_full_rate_is_the_gaussian_of_sensitivity_two():
  sigma, steps, eps = 3.0, 4, 1.0
  exact = _gaussian_delta(2 * math.sqrt(steps) / sigma, eps)
  smp = sampling.poisson(100, 1.0, 100, relation="replace_one")
  tight = float(jaxdp.delta(smp, sigma, steps, eps, accountant="pld"))
  assert exact <= tight <= exact * 1.01
  assert float(jaxdp.delta(smp, sigma, steps, eps)) >= exact
  cdp = accountant.cdp()
  state = cdp.compose(cdp.init(), events.SampledGaussian(1.0, sigma, "replace_one"), steps)
  assert float(cdp.delta(state, eps)) >= exact


def test_in_jit_accountant_matches_host_and_vmaps():
  acc = accountant.rdp(orders=[1.5, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0])

  def eps(q, sigma):
    state = acc.compose(acc.init(), events.SampledGaussian(q, sigma, "replace_one"), 500)
    return acc.epsilon(state, 1e-5)

  host = float(eps(0.02, 1.2))
  traced = float(jax.jit(eps)(0.02, 1.2))
  assert traced == pytest.approx(host, rel=1e-4)
  batch = jax.vmap(eps)(jnp.array([0.01, 0.02]), jnp.array([1.2, 1.2]))
  assert float(batch[1]) == pytest.approx(host, rel=1e-4)
  add_remove = acc.compose(acc.init(), events.SampledGaussian(0.02, 1.2), 500)
  assert host > float(acc.epsilon(add_remove, 1e-5))


def test_scan_composes_the_sampler_event_every_step():
  smp = sampling.poisson(1000, 0.05, 1000, relation="replace_one")
  acc = accountant.rdp()

  def step(state, _):
    return acc.compose(state, smp.event(1.0)), None

  state, _ = jax.lax.scan(step, acc.init(), None, length=20)
  direct = acc.compose(acc.init(), smp.event(1.0), 20)
  assert float(acc.epsilon(state, 1e-5)) == pytest.approx(float(acc.epsilon(direct, 1e-5)),
                                                          rel=1e-5)


def test_bad_relations_raise_naming_the_argument():
  with pytest.raises(ValueError, match="relation"):
    events.SampledGaussian(0.1, 1.0, "swap")
  with pytest.raises(ValueError, match="relation"):
    events.TruncatedPoissonGaussian(10, 0.1, 2, 1.0, "replace-one")
  with pytest.raises(ValueError, match="relation"):
    sampling.poisson(10, 0.1, 2, relation="zero_out")


def test_cli_relation_for_poisson(capsys):
  smp = sampling.poisson(60000, 0.01, 60000, relation="replace_one")
  want = float(jaxdp.epsilon(smp, 1.0, 1000, 1e-5, accountant="pld"))
  code = cli.main(["epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "1000", "--delta",
                   "1e-5", "--relation", "replace-one", "--accountant", "pld"])
  out = capsys.readouterr().out
  assert code == 0 and float(out.split("=")[1]) == pytest.approx(want, rel=1e-3)
  code = cli.main(["epsilon", "--sampler", "truncated-poisson", "--dataset-size", "60000",
                   "--batch-size", "600", "--capacity", "700", "--sigma", "1.0", "--steps",
                   "1000", "--delta", "1e-5", "--relation", "replace-one"])
  out = capsys.readouterr().out
  trunc = sampling.poisson(60000, 0.01, 700, relation="replace_one")
  assert code == 0 and float(out.split("=")[1]) == pytest.approx(
      float(jaxdp.epsilon(trunc, 1.0, 1000, 1e-5)), rel=1e-3)
  code = cli.main(["epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "10", "--delta",
                   "1e-5", "--relation", "swap"])
  assert code != 0 and "--relation" in capsys.readouterr().err


@pytest.mark.parametrize("q,sigma", [(1e-6, 0.01), (0.999, 0.05), (1.0, 0.01), (0.3, 0.02)])
def test_edges_of_the_domain(q, sigma):
  """σ down to 0.01, q near 0 and 1, 10^6 steps, δ = 1e-12: finite, never
  below add/remove, and at one step >= the exact δ of the pair (mpmath)."""
  smp = sampling.poisson(100, q, 100, relation="replace_one")
  for steps in (1, 10**6):
    rr = float(jaxdp.epsilon(smp, sigma, steps, 1e-12))
    ar = float(jaxdp.epsilon(q, sigma, steps, 1e-12))
    assert math.isfinite(rr) and rr >= ar
  p, r = _pair(q)
  for eps in (0.5, 20.0):
    exact = float(max(R.hockey_stick_1d(p, r, eps, sigma), R.hockey_stick_1d(r, p, eps, sigma)))
    assert float(jaxdp.delta(smp, sigma, 1, eps)) >= exact
    assert float(jaxdp.delta(smp, sigma, 1, eps, accountant="pld")) >= exact
