"""End-to-end accounting of the jaxdp.sampling samplers (issue 13).

Kernel-level references (exact enumeration, dp_accounting's kernels) are in
tests/kernels/test_rdp_samplers.py; this file checks the plumbing a user goes through:
jaxdp.epsilon/delta with a sampler, calibrate.sigma, the optax transform fed
by a sampler, and the CLI.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import jaxdp
from jaxdp import accountant, calibrate, cli, events, profiles, sampling
import jaxdp.optax as dpo

N, B, SIGMA, DELTA = 6000, 60, 1.1, 1e-5


def test_untruncated_poisson_sampler_is_plain_poisson():
  smp = sampling.poisson(N, B / N, N)
  assert isinstance(smp.event(SIGMA), events.SampledGaussian)
  got = jaxdp.epsilon(smp, SIGMA, 1000, DELTA)
  assert got == pytest.approx(float(jaxdp.epsilon(B / N, SIGMA, 1000, DELTA)), rel=1e-12)


def test_shuffle_pld_is_unamplified_gaussian_closed_form():
  """E epochs of shuffling = E Gaussian steps of sensitivity 2C (σ/2), i.e. one
  Gaussian with σ/(2√E): ε by the closed form (Balle–Wang)."""
  smp = sampling.shuffle(N, B)
  epochs = 7
  steps = epochs * smp.steps_per_epoch
  got = float(jaxdp.epsilon(smp, SIGMA, steps, DELTA, accountant="pld"))
  with jax.enable_x64(True):  # a kernel: it follows the caller's dtype
    exact = float(profiles.gaussian_epsilon(np.float64(DELTA), np.float64(SIGMA / (2 * np.sqrt(epochs)))))
  assert exact <= got <= exact * 1.01
  # A started epoch is charged in full.
  assert float(jaxdp.epsilon(smp, SIGMA, steps + 1, DELTA, accountant="pld")) > got


def test_fixed_batches_match_dp_accounting_rdp_replace_one():
  """σ is the DP-SGD noise multiplier (std / C); replace-one moves a clipped
  sum by 2C, which is dp_accounting's REPLACE_ONE RDP with noise σ/2."""
  from dp_accounting import dp_event
  from dp_accounting.rdp import rdp_privacy_accountant as rdp_acc
  orders = np.arange(2, 65, dtype=np.float64)
  ref = rdp_acc.RdpAccountant(list(orders), rdp_acc.NeighborRel.REPLACE_ONE)
  ref.compose(dp_event.SampledWithoutReplacementDpEvent(
      N, B, dp_event.GaussianDpEvent(SIGMA / 2)), 500)
  acc = accountant.rdp(orders)
  with jax.enable_x64(True):  # the state follows the default dtype
    state = acc.compose(acc.init(), sampling.fixed(N, B).event(SIGMA), 500)
    ours = float(acc.epsilon(state, DELTA))
  assert ours == pytest.approx(ref.get_epsilon(DELTA), rel=1e-6)


def test_sampler_epsilon_broadcasts_and_delta_is_consistent():
  smp = sampling.fixed(N, B)
  eps = jaxdp.epsilon(smp, np.array([1.0, 2.0, 4.0]), 300, DELTA)
  assert np.all(np.diff(eps) < 0)
  d = jaxdp.delta(smp, 2.0, 300, float(eps[1]))
  assert d <= DELTA * (1 + 1e-6)


def test_pld_accounts_balls_in_bins():
  # Balls-in-bins under the PLD accountant (issue 38): random allocation's
  # certified laws, never above the certified RDP answer.
  smp = sampling.balls_in_bins(N, B, 2 * B)
  got = float(jaxdp.epsilon(smp, SIGMA, 100, DELTA, accountant="pld"))
  assert 0 < got <= float(jaxdp.epsilon(smp, SIGMA, 100, DELTA))


def test_calibrate_sigma_for_a_sampler_meets_target():
  smp = sampling.fixed(N, B)
  s = float(calibrate.sigma(4.0, DELTA, smp, 500, rtol=1e-5))
  assert float(jaxdp.epsilon(smp, s, 500, DELTA)) <= 4.0
  assert float(jaxdp.epsilon(smp, s * (1 - 1e-4), 500, DELTA)) > 4.0


# Shuffling is charged one unamplified epoch per started epoch: a larger budget.
@pytest.mark.parametrize("make, target", [(lambda: sampling.fixed(N, B), 3.0),
                                          (lambda: sampling.shuffle(N, B), 40.0)])
def test_calibrate_sampling_rate_for_a_sampler_is_the_largest_batch(make, target):
  smp = make()
  q = float(calibrate.sampling_rate(target, DELTA, SIGMA, 300, sampler=smp))
  b = round(q * N)
  assert b == q * N and 1 <= b < N
  at = lambda size: float(jaxdp.epsilon(type(smp)(N, size, smp.relation), SIGMA, 300, DELTA))
  assert at(b) <= target < at(b + 1), (b, at(b), at(b + 1))


def test_calibrate_sampling_rate_for_a_poisson_sampler_keeps_its_capacity():
  smp = sampling.poisson(N, 0.05, 40)
  q = float(calibrate.sampling_rate(2.0, DELTA, SIGMA, 200, sampler=smp, rtol=1e-4))
  assert 0.0 < q < 1.0
  assert float(jaxdp.epsilon(sampling.poisson(N, q, 40), SIGMA, 200, DELTA)) <= 2.0
  assert float(jaxdp.epsilon(sampling.poisson(N, q * (1 + 2e-4), 40), SIGMA, 200, DELTA)) > 2.0


def test_calibrate_sampling_rate_sampler_edges_and_validation():
  # Nothing fits: one unamplified epoch of a shuffled sampler already overspends.
  assert float(calibrate.sampling_rate(0.01, DELTA, SIGMA, 10, sampler=sampling.shuffle(N, B))) == 0.0
  # Everything fits: huge noise.
  assert float(calibrate.sampling_rate(5.0, DELTA, 1e3, 10, sampler=sampling.fixed(N, B))) == 1.0
  with pytest.raises(ValueError, match="sampler"):
    calibrate.sampling_rate(1.0, DELTA, SIGMA, 10, sampler="fixed")
  with pytest.raises(ValueError, match="steps"):
    calibrate.sampling_rate(1.0, DELTA, SIGMA, [10, 20], sampler=sampling.fixed(N, B))


def test_cli_solves_the_batch_size_of_a_sampler(capsys):
  argv = ["calibrate", "--solve", "sampling-rate", "--target-epsilon", "3", "--delta", "1e-5",
          "--sigma", str(SIGMA), "--steps", "300", "--sampler", "fixed", "--dataset-size", str(N)]
  assert cli.main(argv) == 0
  lines = dict(line.split(" = ") for line in capsys.readouterr().out.strip().splitlines())
  b = int(lines["batch_size"])
  assert float(lines["q"]) == calibrate.sampling_rate(3.0, 1e-5, SIGMA, 300,
                                                      sampler=sampling.fixed(N, B))
  assert float(jaxdp.epsilon(sampling.fixed(N, b), SIGMA, 300, 1e-5)) <= 3.0
  assert cli.main(argv + ["--batch-size", "10"]) == 2     # the unknown must not be given


def _run_steps(smp, steps, grads_scale=1.0, mask_all=None):
  tx = dpo.dp_aggregate(1.0, SIGMA, sampler=smp, seed=3)
  params = {"w": jnp.zeros(3)}
  state = tx.init(params)
  key = jax.random.PRNGKey(0)

  @jax.jit
  def step(state, t):
    idx, mask = smp.sample_at(key, t)
    if mask_all is not None:
      mask = jnp.full_like(mask, mask_all)
    g = {"w": grads_scale * jnp.ones((idx.shape[0], 3)) * (1.0 + idx[:, None])}
    upd, state = tx.update(g, state, params, mask=mask)
    return state, upd["w"]

  def body(state, t):
    return step(state, t)

  state, upd = jax.lax.scan(body, state, jnp.arange(steps))
  return state, upd


def test_optax_with_sampler_accounts_its_event():
  smp = sampling.fixed(N, B)
  state, _ = _run_steps(smp, 40)
  got = float(dpo.epsilon(state, DELTA))
  ref = float(jaxdp.epsilon(smp, SIGMA, 40, DELTA))
  assert ref <= got <= ref * (1 + 1e-3)


def test_optax_charges_epoch_events_at_the_first_step_of_each_epoch():
  smp = sampling.shuffle(600, 60)  # 10 steps per epoch
  one_epoch = float(jaxdp.epsilon(smp, SIGMA, 10, DELTA))
  two = float(jaxdp.epsilon(smp, SIGMA, 11, DELTA))
  for steps, want in ((1, one_epoch), (10, one_epoch), (11, two)):
    state, _ = _run_steps(smp, steps)
    assert float(dpo.epsilon(state, DELTA)) == pytest.approx(want, rel=1e-3), steps


def test_optax_masked_entries_contribute_nothing():
  smp = sampling.poisson(N, B / N, 2 * B)
  _, a = _run_steps(smp, 3, grads_scale=1.0, mask_all=False)
  _, b = _run_steps(smp, 3, grads_scale=100.0, mask_all=False)
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # noise only


def test_optax_requires_exactly_one_of_rate_and_sampler():
  with pytest.raises(ValueError, match="sampling_rate"):
    dpo.dp_aggregate(1.0, 1.0, 0.01, sampler=sampling.fixed(N, B))
  with pytest.raises(ValueError, match="sampling_rate"):
    dpo.dp_aggregate(1.0, 1.0)


def test_cli_sampler_matches_python(capsys):
  argv = ["epsilon", "--dataset-size", str(N), "--batch-size", str(B), "--steps", "300",
          "--sigma", "2", "--delta", "1e-5", "--sampler", "fixed"]
  assert cli.main(argv) == 0
  printed = float(capsys.readouterr().out.split("=")[1])
  assert printed == pytest.approx(float(jaxdp.epsilon(sampling.fixed(N, B), 2.0, 300, 1e-5)),
                                  rel=1e-12)


@pytest.mark.parametrize("extra", [["--sampler", "fixed", "--capacity", "5"],
                                   ["--sampler", "truncated-poisson"],
                                   ["--sampler", "bogus"],
                                   ["--sampler", "balls-in-bins", "--capacity", "300",
                                    "--relation", "replace-one"],
                                   ["--relation", "replace-one", "--tradeoff", "0.1"]])
def test_cli_sampler_bad_combinations_fail(extra, capsys):
  argv = ["epsilon", "--dataset-size", str(N), "--batch-size", str(B), "--steps", "300",
          "--sigma", "2", "--delta", "1e-5"] + extra
  try:
    code = cli.main(argv)  # validation errors: exit status 2 with a message
  except SystemExit as e:  # argparse's own errors (unknown choice)
    code = e.code
  assert code == 2
  assert "error" in capsys.readouterr().err


def test_calibrate_steps_for_a_sampler_is_the_exact_boundary():
  smp = sampling.shuffle(600, 60)  # epochs of 10 steps: the boundary is an epoch's end
  t = int(calibrate.steps(6.0, DELTA, smp, SIGMA))
  assert float(jaxdp.epsilon(smp, SIGMA, t, DELTA)) <= 6.0
  assert float(jaxdp.epsilon(smp, SIGMA, t + 1, DELTA)) > 6.0
  assert t % smp.steps_per_epoch == 0
