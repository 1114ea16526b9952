"""Tests for jaxdp.optax.dp_aggregate."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdp import accountant as A
from jaxdp import cdp
from jaxdp import optax as dpo

ORDERS = np.array([2.0, 4.0, 8.0, 16.0, 32.0, 64.0])


def test_noise_statistics():
  sigma, clip, batch = 2.0, 0.5, 10
  tx = dpo.dp_aggregate(clip, sigma, 0.01, seed=3, accountant=A.cdp())
  grads = {"w": jnp.zeros((batch, 100_000)), "b": jnp.zeros((batch, 3, 7))}
  state = tx.init(None)
  upd1, state = jax.jit(tx.update)(grads, state)
  upd2, state = jax.jit(tx.update)(grads, state)
  assert upd1["w"].shape == (100_000,) and upd1["b"].shape == (3, 7)
  w = np.asarray(upd1["w"])
  expected = sigma * clip / batch
  assert np.std(w) == pytest.approx(expected, rel=0.02)
  assert abs(np.mean(w)) < 4 * expected / np.sqrt(w.size)
  assert not np.allclose(upd1["w"], upd2["w"])  # the key advances
  assert int(state.steps) == 2


def test_clipping_and_normalisation():
  tx = dpo.dp_aggregate(1.0, 1e-9, 0.1, seed=0, accountant=A.cdp(),
                        expected_batch_size=4.0)
  g = {"a": jnp.array([[3.0, 0.0], [0.0, 0.1], [0.0, 0.0]]),
       "b": jnp.array([[4.0], [0.0], [0.0]])}
  upd, _ = tx.update(g, tx.init(None))
  # Example 0 has global norm 5 → scaled to 1: (0.6, 0, 0.8); example 1 kept.
  np.testing.assert_allclose(upd["a"], np.array([0.6, 0.1]) / 4, atol=1e-6)
  np.testing.assert_allclose(upd["b"], np.array([0.8]) / 4, atol=1e-6)


def test_chains_with_adam_and_accounts():
  q, sigma, delta = 0.05, 1.2, 1e-5
  acc = A.rdp(ORDERS)
  tx = optax.chain(dpo.dp_aggregate(1.0, sigma, q, seed=0, accountant=acc), optax.adam(1e-2))
  params = {"w": jnp.ones(3)}
  opt_state = tx.init(params)

  @jax.jit
  def step(params, opt_state, x):
    grads = jax.vmap(jax.grad(lambda p, xi: jnp.sum((p["w"] - xi) ** 2)),
                     in_axes=(None, 0))(params, x)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  x = jnp.zeros((8, 3))
  for _ in range(30):
    params, opt_state = step(params, opt_state, x)
  assert dpo.find_state(opt_state).steps == 30
  eps = float(dpo.epsilon(opt_state, delta, accountant=acc))
  with jax.enable_x64(True):
    ref_acc = A.rdp(ORDERS)
    from jaxdp import events as E
    ref = float(ref_acc.epsilon(ref_acc.compose(ref_acc.init(), E.SampledGaussian(q, sigma), 30), delta))
  assert ref <= eps <= ref * (1 + 1e-4)
  d = float(dpo.delta(opt_state, eps, accountant=acc))
  assert 0 < d <= 1.0
  with pytest.raises(ValueError, match="custom RDP orders"):
    dpo.epsilon(opt_state, delta)


def test_budget_flag_and_default_cdp_inference():
  sigma = 2.0
  budget_eps, delta = 2.0, 1e-5
  tx = dpo.dp_aggregate(1.0, sigma, 0.5, seed=0, accountant=A.cdp(),
                        budget=(budget_eps, delta))
  state = tx.init(None)
  g = {"w": jnp.zeros((2, 3))}
  update = jax.jit(tx.update)
  steps = 0
  while not bool(dpo.budget_exhausted(state)):
    _, state = update(g, state)
    steps += 1
    assert float(dpo.epsilon(state, delta)) <= budget_eps
  # One more step would overspend (zCDP: ρ = 1/(2σ²) per step).
  rho = (steps + 1) / (2 * sigma**2)
  assert cdp.rho_to_epsilon(rho, delta) > budget_eps
  assert cdp.rho_to_epsilon(steps / (2 * sigma**2), delta) <= budget_eps


def test_accounting_off_and_bad_arguments():
  tx = dpo.dp_aggregate(1.0, 1.0, 0.1, seed=0, accounting=False)
  state = tx.init(None)
  assert state.accountant_state == ()
  _, state = tx.update({"w": jnp.ones((2, 2))}, state)
  with pytest.raises(ValueError, match="accounting=False"):
    dpo.epsilon(state, 1e-5)
  for kwargs, match in [(dict(l2_clip=0.0), "l2_clip"), (dict(sigma=-1.0), "sigma"),
                        (dict(sampling_rate=1.5), "q"),
                        (dict(expected_batch_size=0), "expected_batch_size"),
                        (dict(budget=(1.0, 0.0)), "budget delta")]:
    args = dict(l2_clip=1.0, sigma=1.0, sampling_rate=0.1, seed=0)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
      dpo.dp_aggregate(**args)
  with pytest.raises(ValueError, match="exactly one"):
    dpo.epsilon((), 1e-5)


def test_host_accountant_name_and_epoch_schedule():
  """Issue 34: ``accountant`` names the host accountant; an epoch sampler's
  host read-out is jaxdp.epsilon of the same schedule, and its in-jit read-out
  the same grid answer (up to rounding)."""
  import jaxdp
  from jaxdp import sampling
  with pytest.raises(ValueError, match="accountant"):
    dpo.dp_aggregate(1.0, 1.0, 0.1, accountant="zcdp")
  smp = sampling.shuffle(100, 10)
  host = float(jaxdp.epsilon(smp, 4.0, 13, 1e-5))
  for x64, rtol in ((True, 1e-12), (False, 1e-5)):
    with jax.enable_x64(x64):
      tx = dpo.dp_aggregate(1.0, 4.0, sampler=smp)
      state = tx.init(None)
      update = jax.jit(lambda g, s, tx=tx: tx.update(g, s)[1])
      for _ in range(13):   # two epochs started
        state = update({"w": jnp.ones((10, 2))}, state)
      assert float(dpo.epsilon(state, 1e-5)) == host
      in_jit = float(jax.jit(lambda s: dpo.epsilon(s, 1e-5))(state))
      assert host * (1 - 1e-12) <= in_jit <= host * (1 + rtol)


@pytest.mark.parametrize("with_mask", [False, True])
def test_an_eager_update_is_the_jitted_update(with_mask, record_compilations):
  """An eager ``update`` runs one program (the transform's ``apply_update``,
  kept by jaxdp's disk cache), so its noisy mean and state are the bits a
  jitted training step computes; op by op they differed in the last bit."""
  from jaxdp import sampling
  smp = sampling.poisson(600, 0.05, capacity=48)
  tx = dpo.dp_aggregate(1.0, 1.1, sampler=smp, seed=3)
  params = {"w": jnp.zeros(10), "b": jnp.zeros((2, 3))}
  grads = {"w": jnp.linspace(-2.0, 3.0, 480).reshape(48, 10), "b": jnp.ones((48, 2, 3))}
  jitted = jax.jit(lambda g, s, m: tx.update(g, s, mask=m))
  eager_state = jit_state = tx.init(params)
  for t in range(3):
    mask = smp.sample_at(jax.random.PRNGKey(0), t)[1] if with_mask else None
    with record_compilations() as compiles:
      eager, eager_state = tx.update(grads, eager_state, mask=mask)
    assert len(compiles) <= 1 + (t == 0)   # one program (and the first step's mask broadcast)
    want, jit_state = jitted(grads, jit_state, mask)
    for a, b in zip(jax.tree_util.tree_leaves((eager, eager_state)),
                    jax.tree_util.tree_leaves((want, jit_state))):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
