"""Tests for jaxdp.tuning (repeat-and-select, Papernot & Steinke 2022).

References: dp_accounting's ``RepeatAndSelectDpEvent`` on its own test
configurations (``rdp_privacy_accountant_test.py``), and the paper's closed
forms as that file states them (Corollary 3, pure DP; Corollary 4, Gaussian
runs; the pure-DP Poisson case). Every SampledGaussian evaluation below uses
orders inside ``tuning.DEFAULT_LAMBDA_HATS`` so one compiled program serves
the whole file.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from dp_accounting import dp_event
from dp_accounting.rdp import rdp_privacy_accountant as rpa

import jaxdp
from jaxdp import accountant, cli, events, tuning
from jaxdp._src.core import numerics as nx
from jaxdp._src.solvers import tuning_kernel

INF = math.inf
DPA_ORDERS = np.asarray(rpa.DEFAULT_RDP_ORDERS, np.float64)
# dp_accounting's default orders (all in the default λ̂ grid).
COMMON = np.intersect1d(DPA_ORDERS, tuning.DEFAULT_LAMBDA_HATS)


def _dpa_rdp(event, orders=None, mean=None, shape=None):
  acc = rpa.RdpAccountant(orders=None if orders is None else list(orders))
  if mean is not None:
    event = dp_event.RepeatAndSelectDpEvent(event, mean, shape)
  acc.compose(event)
  return np.asarray(acc._rdp, np.float64)  # pylint: disable=protected-access


def _envelope(x):
  """min over orders >= λ (orders ascending)."""
  return np.minimum.accumulate(np.asarray(x)[::-1])[::-1]


def _x64(fn, *args, **kwargs):
  with nx.x64():
    return np.asarray(fn(*args, **kwargs), np.float64)


def _dpsgd(q, sigma, steps):
  return dp_event.SelfComposedDpEvent(
      dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps)


# --------------------------------------------------------------------------
# Same λ̂ set as dp_accounting → the same numbers
# --------------------------------------------------------------------------


@pytest.mark.parametrize("rho,gamma,shape", [
    (0.01, 0.01, 0), (1, 0.1, 0), (10, 0.99, 0), (0.01, 0.01, 0.5), (1, 0.1, 0.5),
    (10, 0.99, 0.5), (0.01, 0.01, 1), (1, 0.1, 1), (10, 0.99, 1), (0.01, 0.01, 5),
    (1, 0.1, 5), (10, 0.99, 5)])
def test_tnb_gaussian_matches_dp_accounting_and_corollary_4(rho, gamma, shape):
  # dp_accounting's test_repeat_select_gaussian_negative_binomial.
  mean = rpa._truncated_negative_binomial_mean(gamma, shape)  # pylint: disable=protected-access
  rho = min(rho, -math.log(gamma))
  orders = [1, 1.1, 2, math.sqrt(-math.log(gamma) / rho), 1 + math.sqrt(math.log(mean) / rho),
            3, 5, 10, 100, 1000, 10000]
  base = dp_event.GaussianDpEvent(math.sqrt(0.5 / rho))
  run = _dpa_rdp(base, orders)
  theirs = _dpa_rdp(base, orders, mean, shape)
  keep = np.asarray(orders) > 1
  # Their grid holds order 1, i.e. the λ̂ → 1 candidate: the same λ̂ set.
  ours = _x64(tuning.repeat_and_select_rdp, run[keep], np.asarray(orders)[keep], mean, shape)
  # γ is solved from the mean: dp_accounting to relative 1e-9, here to ~1 ulp;
  # each changes (1 + η)·log(1/γ)/λ̂ by at most (1 + η)·1e-9.
  np.testing.assert_allclose(ours, theirs[keep], rtol=1e-9, atol=(1 + shape) * 1.1e-9)
  # Corollary 4 of Papernot–Steinke (as dp_accounting's test states it).
  for order, value in zip(np.asarray(orders)[keep], ours):
    root = 2 * (1 + shape) * math.sqrt(-rho * math.log(gamma)) - shape * rho
    if order <= 1 + math.sqrt(math.log(mean) / rho):
      cor4 = 2 * math.sqrt(rho * math.log(mean)) + root
    else:
      cor4 = rho * (order - 1) + math.log(mean) / (order - 1) + root
    assert value == pytest.approx(cor4, rel=1e-7, abs=1e-7)


@pytest.mark.parametrize("sigma,mean", [
    (0.001, 1), (0.001, 1000), (0.001, 1e9), (1, 1), (1, 1000), (1, 1e9), (1000, 1),
    (1000, 1000), (1000, 1e9)])
def test_poisson_gaussian_matches_dp_accounting(sigma, mean):
  # dp_accounting's test_repeat_and_select_gaussian_poisson configurations.
  base = dp_event.GaussianDpEvent(sigma)
  run = _dpa_rdp(base)
  theirs = _dpa_rdp(base, None, mean, INF)
  ours = _x64(tuning.repeat_and_select_rdp, run, DPA_ORDERS, mean, INF)
  # dp_accounting does not apply monotonicity in λ to the Poisson case; the
  # rest (same δ̂ conversion over the same orders) agrees.
  np.testing.assert_allclose(ours, _envelope(theirs), rtol=1e-9, atol=1e-12)
  assert np.all(ours <= theirs * (1 + 1e-10))  # jaxdp rounds δ̂ up by ~4e-12


@pytest.mark.parametrize("mean,shape", [
    (10, INF), (1000, INF), (10, 1), (100, 1), (10, 0), (100, 0.5), (1000, 5), (1, 2), (1, INF)])
def test_dpsgd_matches_dp_accounting_and_optimised_lambda_hat_is_no_worse(mean, shape):
  q, sigma, steps = 0.01, 1.0, 1000
  run = _dpa_rdp(_dpsgd(q, sigma, steps))
  theirs = _dpa_rdp(_dpsgd(q, sigma, steps), None, mean, shape)
  ref = _envelope(theirs)
  # Same λ̂ set (their grid, without the λ̂ → 1 candidate).
  ours = _x64(tuning.repeat_and_select_rdp, run, DPA_ORDERS, mean, shape,
              include_order_one=False)
  atol = 0.0 if math.isinf(shape) else (1 + shape) * 1.1e-9
  np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=atol)
  integer = DPA_ORDERS == np.round(DPA_ORDERS)
  np.testing.assert_allclose(ours[integer], ref[integer], rtol=1e-9, atol=atol)
  # With λ̂ → 1 added: never above.
  with_one = _x64(tuning.repeat_and_select_rdp, run, DPA_ORDERS, mean, shape)
  assert np.all(with_one <= ours)
  # λ̂ optimised over the fine grid, jaxdp's own per-run RDP (which rounds
  # up by ~4e-12): never above theirs.
  # (dp_accounting restricted to those orders, so that its λ' ≥ λ step
  # searches no order that ours lacks.)
  ev = tuning.repeat_and_select_event_rdp(events.SampledGaussian(q, sigma), COMMON, mean, shape,
                                          count=steps)
  their_common = _envelope(_dpa_rdp(_dpsgd(q, sigma, steps), COMMON, mean, shape))
  assert np.all(ev <= their_common * (1 + 1e-9))
  assert np.any(ev < their_common * (1 - 1e-9))  # the finer λ̂ grid pays
  eps = tuning.epsilon(events.SampledGaussian(q, sigma), steps, 1e-5, mean, shape, orders=COMMON)
  their_eps, _ = rpa.compute_epsilon(COMMON, their_common, 1e-5)
  assert eps.tuned <= their_eps * (1 + 1e-9)
  assert eps.tuned >= eps.one_run
  # Default orders (a superset of dp_accounting's): never above its answer.
  default = tuning.epsilon(events.SampledGaussian(q, sigma), steps, 1e-5, mean, shape)
  their_default, _ = rpa.compute_epsilon(DPA_ORDERS, theirs, 1e-5)
  assert default.tuned <= their_default * (1 + 1e-9)
  assert default.one_run <= rpa.compute_epsilon(DPA_ORDERS, run, 1e-5)[0] * (1 + 1e-9)


# --------------------------------------------------------------------------
# Paper closed forms (as dp_accounting's tests state them)
# --------------------------------------------------------------------------


@pytest.mark.parametrize("eps,mean,shape", [
    (1, 1000, 0), (1, 1000, 1), (1, 1000, 0.5), (1, 100, 2), (1, 1000, 5)])
def test_pure_dp_corollary_3(eps, mean, shape):
  # ε-DP runs: (2 + η)·ε at λ → ∞ (one huge order simulates pure DP).
  out = _x64(tuning.repeat_and_select_rdp, [eps], [1e10], mean, shape, include_order_one=False)
  assert out[0] == pytest.approx(eps * (2 + shape), rel=1e-7)
  best = _x64(tuning.repeat_and_select_rdp, [eps], [1e10], mean, shape)
  assert best[0] <= out[0]


@pytest.mark.parametrize("eps,mean", [
    (1, 1), (0.1, 2), (10, 10), (0.001, 100), (2, 1000), (1, 1e10)])
def test_pure_dp_poisson(eps, mean):
  # dp_accounting's test_repeat_and_select_pure_poisson (Laplace runs).
  alpha = 1 + 1 / math.expm1(eps)
  orders = [alpha, 1e10, 1e100]
  run = [rpa._laplace_rdp(eps, a) for a in orders]  # pylint: disable=protected-access
  out = _x64(tuning.repeat_and_select_rdp, run, orders, mean, INF)
  ans = (eps + math.log1p(math.expm1((1 - 2 * alpha) * eps) * (alpha - 1) / (2 * alpha - 1))
         / (alpha - 1) + math.log(mean) * math.expm1(eps))
  # Here the bound at α is also capped by the bounds at the larger orders.
  assert out[0] / min(ans, out[1]) == pytest.approx(1, abs=5e-4)
  assert out[0] <= ans * (1 + 1e-9)


def test_gaussian_runs_optimised_lambda_hat_reaches_corollary_4():
  # Corollary 4 is Theorem 2 minimised over every real λ̂ (and λ' ≥ λ); the
  # event path searches a 2.5 % grid of λ̂ and the same grid for λ'.
  rho, gamma, shape = 0.05, 0.01, 1.0
  mean = tuning.tnb_mean(gamma, shape)
  orders = np.array([2.0, 3.0, 5.0, 8.0, 16.0, 64.0])
  ours = tuning.repeat_and_select_event_rdp(events.Gaussian(math.sqrt(0.5 / rho)), orders, mean,
                                            shape)
  root = 2 * (1 + shape) * math.sqrt(-rho * math.log(gamma)) - shape * rho
  star = 1 + math.sqrt(math.log(mean) / rho)
  cor4 = np.where(orders <= star, 2 * math.sqrt(rho * math.log(mean)) + root,
                  rho * (orders - 1) + math.log(mean) / (orders - 1) + root)
  assert np.all(ours >= cor4 * (1 - 1e-12))
  np.testing.assert_allclose(ours, cor4, rtol=5e-4)
  # ... and improves on the grid-only bound.
  grid_only = _x64(tuning.repeat_and_select_rdp, orders / (2 * math.sqrt(0.5 / rho) ** 2),
                   orders, mean, shape)
  assert np.all(ours <= grid_only) and np.any(ours < grid_only * (1 - 1e-3))


def test_default_grid_holds_dp_accounting_orders():
  np.testing.assert_array_equal(COMMON, np.sort(DPA_ORDERS))


def test_tnb_mean_and_gamma():
  for gamma, shape in [(0.1, 0), (0.5, 0.5), (1e-4, 2), (0.999, 5), (0.3, 1)]:
    mean = tuning.tnb_mean(gamma, shape)
    ref = rpa._truncated_negative_binomial_mean(gamma, shape)  # pylint: disable=protected-access
    assert mean == pytest.approx(ref, rel=1e-12)
    dist = tuning_kernel._distribution(mean, shape)  # pylint: disable=protected-access
    assert math.exp(-dist.log_inv_gamma) <= gamma * (1 + 1e-14)
    assert math.exp(-dist.log_inv_gamma) == pytest.approx(gamma, rel=1e-12)
  assert tuning.tnb_mean(0.25, 1) == 4.0


# --------------------------------------------------------------------------
# Behaviour
# --------------------------------------------------------------------------


def test_tuned_at_least_one_run_and_monotone_in_mean():
  rng = np.random.default_rng(0)
  means = [1.0, 3.0, 10.0, 100.0]
  for _ in range(2):
    q = float(rng.uniform(0.001, 0.05))
    sigma = float(rng.uniform(0.6, 3.0))
    steps = int(rng.integers(10, 5000))
    delta = float(10 ** rng.uniform(-9, -4))
    for shape in (INF, 1.0, 0.0, 0.5, 3.0):
      prev = -1.0
      for mean in means:
        e = tuning.epsilon(events.SampledGaussian(q, sigma), steps, delta, mean, shape)
        assert isinstance(e.tuned, np.float64) and isinstance(e.one_run, np.float64)
        assert e.tuned >= e.one_run > 0
        assert e.tuned >= prev, (q, sigma, steps, delta, shape, mean)
        prev = e.tuned
      assert prev > e.one_run
  # The curve itself dominates the per-run curve, order by order.
  run = _dpa_rdp(_dpsgd(0.01, 1.0, 500))
  for shape in (INF, 1.0, 0.0):
    out = _x64(tuning.repeat_and_select_rdp, run, DPA_ORDERS, 5.0, shape)
    assert np.all(out >= run)


def test_order_permutation_batches_and_float32():
  orders = np.array([8.0, 2.0, 32.0, 3.0, 16.0])
  run = np.stack([orders / 2.0, orders / 8.0])  # Gaussian σ = 1 and σ = 2
  out = _x64(tuning.repeat_and_select_rdp, run, orders, 10.0, 1.0)
  perm = np.argsort(orders)
  out_sorted = _x64(tuning.repeat_and_select_rdp, run[:, perm], orders[perm], 10.0, 1.0)
  np.testing.assert_array_equal(out[:, perm], out_sorted)
  single = _x64(tuning.repeat_and_select_rdp, run[1], orders, 10.0, 1.0)
  np.testing.assert_array_equal(single, out[1])
  # Float32 (x64 off): the answer is rounded up, never below float64.
  with jax.enable_x64(False):
    f32 = tuning.repeat_and_select_rdp(run.astype(np.float32), orders, 10.0, 1.0)
    assert f32.dtype == jnp.float32
  assert np.all(np.asarray(f32, np.float64) >= out)
  # Under jit (traced curve).
  jitted = jax.jit(lambda r: tuning.repeat_and_select_rdp(r, orders, 10.0, INF))
  np.testing.assert_allclose(_x64(jitted, run), _x64(tuning.repeat_and_select_rdp, run, orders,
                                                      10.0, INF), rtol=1e-14)


def test_tuned_from_accountant_state():
  orders = np.array([1.5, 2.0, 3.0, 4.0, 8.0, 16.0, 32.0, 64.0])
  acc = accountant.rdp(orders)
  with nx.x64():
    state = acc.compose(acc.init(), events.Gaussian(4.0), count=10)
    curve = np.asarray(tuning.tuned(state, orders, 20.0, 0.5))
    total = np.asarray(state.rdp + state.compensation)
    ref = np.asarray(tuning.repeat_and_select_rdp(total, orders, 20.0, 0.5))
    in_jit = np.asarray(jax.jit(lambda s: tuning.tuned(s, orders, 20.0, 0.5))(state))
  np.testing.assert_allclose(curve, ref, rtol=1e-14)
  np.testing.assert_allclose(curve, in_jit, rtol=1e-15)
  assert np.all(curve >= total)
  # Continue composing after the tuned release: wrap the curve as a state.
  wrapped = accountant.RdpState(rdp=jnp.asarray(curve), compensation=jnp.zeros_like(curve))
  with nx.x64():
    assert float(acc.epsilon(wrapped, 1e-5)) > float(acc.epsilon(state, 1e-5))


def test_sigma_calibration_meets_target():
  target, delta, q, steps, mean, shape = 4.0, 1e-5, 0.01, 1000, 10.0, 1.0
  s = tuning.sigma(target, delta, q, steps, mean, shape, rtol=1e-4)
  assert isinstance(s, np.float64) and 0.5 < s < 5
  e = tuning.epsilon(events.SampledGaussian(q, s), steps, delta, mean, shape)
  assert e.tuned <= target
  below = tuning.epsilon(events.SampledGaussian(q, s * (1 - 1e-4)), steps, delta, mean, shape)
  assert below.tuned > target
  # More noise per run than one run alone would need.
  assert e.one_run < 0.75 * target
  assert tuning.sigma(target, delta, 0.0, steps, mean, shape) == 0.0


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


@pytest.mark.parametrize("mean,shape,needle", [
    (0.0, 1.0, "mean"), (-1.0, 1.0, "mean"), (0.5, INF, "mean"), (0.5, 1.0, "mean"),
    (math.nan, 1.0, "mean"), (INF, 1.0, "mean"), (2.0, -0.5, "shape"), (2.0, math.nan, "shape"),
    (np.array([2.0, 3.0]), 1.0, "mean"), ("ten", 1.0, "mean")])
def test_bad_distribution_raises(mean, shape, needle):
  with pytest.raises(ValueError, match=needle):
    tuning.repeat_and_select_rdp([1.0, 2.0], [2.0, 3.0], mean, shape)
  with pytest.raises(ValueError, match=needle):
    tuning.epsilon(events.Gaussian(1.0), 1, 1e-5, mean, shape)


def test_bad_arguments_raise():
  with pytest.raises(ValueError, match="orders"):
    tuning.repeat_and_select_rdp([1.0, 2.0], [1.0, 3.0], 2.0, 1.0)
  with pytest.raises(ValueError, match="last axis"):
    tuning.repeat_and_select_rdp([1.0, 2.0, 3.0], [2.0, 3.0], 2.0, 1.0)
  with pytest.raises(ValueError, match="delta"):
    tuning.epsilon(events.Gaussian(1.0), 1, 0.0, 2.0, 1.0)
  with pytest.raises(ValueError, match="count"):
    tuning.epsilon(events.Gaussian(1.0), 1.5, 1e-5, 2.0, 1.0)
  with pytest.raises(ValueError, match="lambda_hats"):
    tuning.repeat_and_select_event_rdp(events.Gaussian(1.0), [2.0], 2.0, 1.0, lambda_hats=[0.5])
  with pytest.raises(ValueError, match="target_epsilon"):
    tuning.sigma(-1.0, 1e-5, 0.01, 100, 2.0, 1.0)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------


def _run(capsys, *argv):
  code = cli.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_cli_tuning(capsys):
  common = ("epsilon", "--q", "0.01", "--sigma", "1.0", "--steps", "1000", "--delta", "1e-5",
            "--orders", "2,3,4,6,8,16,32,64")
  code, out, err = _run(capsys, *common, "--tuning", "poisson:10")
  assert code == 0 and err == ""
  lines = out.strip().splitlines()
  assert [ln.split(" = ")[0] for ln in lines] == ["epsilon", "epsilon_tuned"]
  one, tuned = (float(ln.split(" = ")[1]) for ln in lines)
  ref = jaxdp.epsilon(0.01, 1.0, 1000, 1e-5, orders=np.array([2.0, 3, 4, 6, 8, 16, 32, 64]))
  assert one == float(ref) and tuned > one
  code, out, _ = _run(capsys, *common, "--tuning", "negative-binomial:10,1")
  geo = float(out.strip().splitlines()[1].split(" = ")[1])
  code2, out2, _ = _run(capsys, *common, "--tuning", "geometric:10")
  assert code == code2 == 0 and geo == float(out2.strip().splitlines()[1].split(" = ")[1])
  for extra, needle in [(("--tuning", "poisson:0.5"), "mean"),
                        (("--tuning", "uniform:3"), "--tuning"),
                        (("--tuning", "negative-binomial:3"), "--tuning"),
                        (("--tuning", "poisson:10", "--accountant", "pld"), "--tuning"),
                        (("--tuning", "poisson:10", "--sampler", "fixed", "--dataset-size", "1000",
                          "--batch-size", "10"), "--tuning")]:
    code, out, err = _run(capsys, *common, *extra)
    assert code == 2 and out == "" and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("gamma, shape, name", [
    (1.5, 1.0, "gamma"), (0.0, 1.0, "gamma"), (float("nan"), 1.0, "gamma"), (-0.2, 0.5, "gamma"),
    (0.5, -1.0, "shape"), (0.5, float("inf"), "shape"), (0.5, float("nan"), "shape"),
])
def test_tnb_mean_rejects_parameters_outside_its_domain(gamma, shape, name):
  # tnb_mean(1.5, 1.0) used to return 0.667: a "mean" below 1 for a halting
  # probability above 1.
  with pytest.raises(ValueError, match=name):
    tuning.tnb_mean(gamma, shape)


def test_tnb_mean_closed_forms_at_the_domain_edges():
  assert tuning.tnb_mean(1.0, 0.0) == pytest.approx(1.0)      # γ = 1: one run
  assert tuning.tnb_mean(0.25, 1.0) == 4.0                     # geometric: 1/γ
  g = 0.3                                                      # logarithmic (η = 0)
  assert tuning.tnb_mean(g, 0.0) == pytest.approx((1 - g) / (g * math.log(1 / g)), rel=1e-12)
