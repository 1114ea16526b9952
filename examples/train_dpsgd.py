"""DP-SGD on scikit-learn's digits with in-loop privacy accounting.

Trains a small MLP with per-example gradients (``vmap(grad)``), the
:func:`jaxdp.optax.dp_aggregate` transformation chained with ``optax.adam``,
on batches drawn INSIDE the jitted step by a :mod:`jaxdp.sampling` sampler
(static shapes, padded entries masked), and prints ε of that very sampler
(from the optimizer state) after every epoch. ``--sampler`` picks it.
The step count
and the gathered batch shape are the same for every sampler, so one compiled
step serves the whole run. Then measures the
per-step cost of the accountant: the same jitted step with accounting on and
off (compile time reported separately, median of repeated timings).

Run: ``python examples/train_dpsgd.py [--epochs 5] [--sampler truncated-poisson]``
(< 1 minute on 2 CPU cores).
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

import jaxdp.optax as dpo
from jaxdp import sampling


def init_mlp(key, sizes):
  params = []
  for k, (m, n) in zip(jax.random.split(key, len(sizes) - 1), zip(sizes[:-1], sizes[1:])):
    params.append((jax.random.normal(k, (m, n)) * np.sqrt(2.0 / m), jnp.zeros(n)))
  return params


def forward(params, x):
  for w, b in params[:-1]:
    x = jax.nn.relu(x @ w + b)
  w, b = params[-1]
  return x @ w + b


def loss_fn(params, x, y):
  logits = forward(params, x[None])[0]
  return -jax.nn.log_softmax(logits)[y]


def make_step(tx, sampler, x_all, y_all, key):
  """One jitted DP-SGD step: the sampler draws the batch (indices + mask)."""
  per_example_grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))
  x_all, y_all = jnp.asarray(x_all), jnp.asarray(y_all)

  @jax.jit
  def step(params, opt_state, t):
    idx, mask = sampler.sample_at(key, t)
    grads = per_example_grads(params, x_all[idx], y_all[idx])
    updates, opt_state = tx.update(grads, opt_state, params, mask=mask)
    return optax.apply_updates(params, updates), opt_state

  return step


SAMPLERS = {
    "truncated-poisson": lambda n, b: sampling.poisson(n, b / n, capacity=2 * b),
    "fixed": lambda n, b: sampling.fixed(n, b),
    "balls-in-bins": lambda n, b: sampling.balls_in_bins(n, b, capacity=n),
    "shuffle": lambda n, b: sampling.shuffle(n, b),
}


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--epochs", type=int, default=5)
  parser.add_argument("--batch", type=int, default=64)
  parser.add_argument("--sigma", type=float, default=1.0)
  parser.add_argument("--clip", type=float, default=1.0)
  parser.add_argument("--delta", type=float, default=1e-5)
  parser.add_argument("--timing-steps", type=int, default=200)
  parser.add_argument("--sampler", choices=sorted(SAMPLERS), default="truncated-poisson")
  args = parser.parse_args()

  digits = load_digits()
  x = (digits.data / 16.0).astype(np.float32)
  y = digits.target.astype(np.int32)
  rng = np.random.default_rng(0)
  perm = rng.permutation(len(x))
  x, y = x[perm], y[perm]
  n_train = 1500
  x_tr, y_tr, x_te, y_te = x[:n_train], y[:n_train], x[n_train:], y[n_train:]
  sampler = SAMPLERS[args.sampler](n_train, args.batch)
  steps_per_epoch = n_train // args.batch
  data_key = jax.random.PRNGKey(1)

  def make_tx(accounting):
    return optax.chain(
        dpo.dp_aggregate(args.clip, args.sigma, sampler=sampler, seed=0,
                         accounting=accounting),
        optax.adam(2e-3))

  tx = make_tx(True)
  params = init_mlp(jax.random.PRNGKey(0), [64, 64, 10])
  opt_state = tx.init(params)
  step = make_step(tx, sampler, x_tr, y_tr, data_key)
  print(f"sampler: {args.sampler}, event {sampler.event(args.sigma)}")
  eps_fn = jax.jit(lambda s: dpo.epsilon(s, args.delta))
  accuracy = jax.jit(lambda p: jnp.mean(jnp.argmax(forward(p, x_te), -1) == y_te))

  # The ε printed is that of the sampler that drew the batches above.
  t0 = time.perf_counter()
  t = 0
  for epoch in range(1, args.epochs + 1):
    for _ in range(steps_per_epoch):
      params, opt_state = step(params, opt_state, t)
      t += 1
    eps = float(eps_fn(opt_state))
    print(f"epoch {epoch}: steps {int(dpo.find_state(opt_state).steps):4d}  "
          f"test acc {float(accuracy(params)):.3f}  epsilon {eps:.3f} "
          f"(delta={args.delta:g})")
  print(f"training time {time.perf_counter() - t0:.1f} s (incl. compile)")

  # Accountant overhead: the same jitted step with accounting on and off.
  print("\naccounting  compile_s  ms/step (median of 5 x "
        f"{args.timing_steps} steps)")
  results = {}
  for accounting in (False, True):
    tx = make_tx(accounting)
    step = make_step(tx, sampler, x_tr, y_tr, data_key)
    p, s = params, tx.init(params)
    t = time.perf_counter()
    p, s = step(p, s, 0)
    jax.block_until_ready(p)
    compile_s = time.perf_counter() - t
    reps = []
    for _ in range(5):
      t = time.perf_counter()
      for i in range(args.timing_steps):
        p, s = step(p, s, i)
      jax.block_until_ready((p, s))
      reps.append((time.perf_counter() - t) / args.timing_steps * 1e3)
    results[accounting] = float(np.median(reps))
    print(f"{'on' if accounting else 'off':>10}  {compile_s:9.2f}  {results[accounting]:.3f}")
  over = results[True] - results[False]
  print(f"accountant overhead: {over:.3f} ms/step "
        f"({100 * over / results[False]:.1f}% of the step)")


if __name__ == "__main__":
  main()
