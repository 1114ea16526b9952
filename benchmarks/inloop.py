"""Benchmark: the cost of privacy accounting inside a jitted DP-SGD step.

One process, one model (an MLP on scikit-learn's digits, per-example
gradients by ``vmap(grad)``, :func:`jaxdp.optax.dp_aggregate` chained with
``optax.adam``), the same batches for every variant:

  off        ``dp_aggregate(accounting=False)``: the DP-SGD step alone
  on         ``dp_aggregate(accounting=True)``: RDP state in the optimizer
             state (a fixed event: one constant RDP vector added per step)
  on+eps     as ``on`` and ε read out inside the same jitted step
  traced σ   the accountant used directly with σ a traced step argument (a
             noise schedule), so the sampled-Gaussian RDP kernel runs in the
             step (float32)
  scan off / scan on   K steps fused in one ``lax.scan``, per-step figure
  anchor     ``off`` plus dp_accounting's ``RdpAccountant.compose`` on the
             host after every step (what a loop with dp_accounting does);
             ``anchor+eps`` also calls ``get_epsilon`` every step

Compile time (first call) is reported separately; ms/step is the median over
repetitions of a block of steps. Accuracy: ε after the run, from the
float32 in-loop state, against dp_accounting's RdpAccountant (float64, the
same orders) — the in-loop value must be ≥ and within ~1e-4 of it.

  python benchmarks/inloop.py [--quick]

Writes benchmarks/results/inloop.json.
"""

import argparse
import os
import sys
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxdp
import jaxdp.optax as dpo
from jaxdp import accountant as acc_lib
from jaxdp import events
from _common import write_result  # noqa: E402  (benchmarks/ is on sys.path)

DELTA = 1e-5
SIGMA = 1.0
CLIP = 1.0
# A small order grid for the traced-σ variant keeps its compile time low.
SMALL_ORDERS = np.array([1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], dtype=np.float64)


def load_data(batch):
  from sklearn.datasets import load_digits
  d = load_digits()
  x = (d.data / 16.0).astype(np.float32)
  y = d.target.astype(np.int32)
  n = 1500
  return x[:n], y[:n], batch / n


# The model is the one of examples/train_dpsgd.py (same MLP, same loss).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from train_dpsgd import init_mlp, loss_fn  # noqa: E402


per_example_grads = jax.vmap(jax.grad(loss_fn), in_axes=(None, 0, 0))


def make_tx(q, batch, accounting):
  return optax.chain(
      dpo.dp_aggregate(CLIP, SIGMA, q, seed=0, expected_batch_size=batch,
                       accounting=accounting),
      optax.adam(1e-3))


def build_variants(q, batch, scan_len):
  """name -> (init_carry(params), step(carry, x, y) -> carry, steps per call)."""
  variants = {}
  for name, accounting, read_eps in (("off", False, False), ("on", True, False),
                                     ("on+eps", True, True)):
    tx = make_tx(q, batch, accounting)

    def step(carry, x, y, tx=tx, read_eps=read_eps):
      params, state = carry[:2]
      updates, state = tx.update(per_example_grads(params, x, y), state, params)
      params = optax.apply_updates(params, updates)
      if read_eps:
        return params, state, dpo.epsilon(state, DELTA)
      return params, state

    variants[name] = (lambda p, tx=tx: (p, tx.init(p)), jax.jit(step), 1)

  # Traced σ: the accountant used directly, its event built from a step argument.
  acc = acc_lib.rdp(SMALL_ORDERS)
  tx_off = make_tx(q, batch, False)

  def traced_step(carry, x, y):
    params, state, acc_state, sigma = carry
    updates, state = tx_off.update(per_example_grads(params, x, y), state, params)
    acc_state = acc.compose(acc_state, events.SampledGaussian(q, sigma))
    return optax.apply_updates(params, updates), state, acc_state, sigma

  variants["traced sigma"] = (
      lambda p: (p, tx_off.init(p), acc.init(), jnp.float32(SIGMA)), jax.jit(traced_step), 1)

  for name, accounting in (("scan off", False), ("scan on", True)):
    tx = make_tx(q, batch, accounting)

    def scan_steps(carry, xs, ys, tx=tx):
      def body(c, xy):
        params, state = c
        updates, state = tx.update(per_example_grads(params, *xy), state, params)
        return (optax.apply_updates(params, updates), state), None
      return jax.lax.scan(body, carry, (xs, ys))[0]

    variants[name] = (lambda p, tx=tx: (p, tx.init(p)), jax.jit(scan_steps), scan_len)
  return variants


def _run_block(step, carry, per_call, xb, yb, calls):
  t0 = time.perf_counter()
  for i in range(calls):
    if per_call == 1:
      carry = step(carry, xb[i % len(xb)], yb[i % len(yb)])
    else:
      carry = step(carry, xb, yb)
  jax.block_until_ready(carry)
  return carry, time.perf_counter() - t0


def time_variants(variants, params, xb, yb, scan_len, n_steps, reps):
  """Compile every variant, then time them interleaved (rep by rep) so that
  load from other processes on a shared machine hits all of them alike."""
  state = {}
  rows = {}
  for name, (init, step, per_call) in variants.items():
    xs, ys = (xb[:scan_len], yb[:scan_len]) if per_call > 1 else (xb, yb)
    carry = init(params)
    t0 = time.perf_counter()
    carry = jax.block_until_ready(step(carry, xs[0], ys[0]) if per_call == 1
                                  else step(carry, xs, ys))
    rows[name] = dict(compile_s=time.perf_counter() - t0)
    state[name] = [carry, step, per_call, xs, ys, max(n_steps // per_call, 1), []]
  for _ in range(reps):
    for name, st in state.items():
      carry, step, per_call, xs, ys, calls, times = st
      st[0], dt = _run_block(step, carry, per_call, xs, ys, calls)
      times.append(dt / (calls * per_call))
  for name, st in state.items():
    rows[name]["ms_per_step"] = statistics.median(st[-1]) * 1e3
    rows[name]["ms_per_step_reps"] = [t * 1e3 for t in st[-1]]
  return rows


def time_anchor(init, step, params, xb, yb, q, n_steps, reps, with_eps):
  import dp_accounting
  event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(SIGMA))
  carry = init(params)
  jax.block_until_ready(step(carry, xb[0], yb[0]))
  times = []
  for _ in range(reps):
    ledger = dp_accounting.rdp.RdpAccountant()  # dp_accounting's default orders
    t0 = time.perf_counter()
    for i in range(n_steps):
      carry = step(carry, xb[i % len(xb)], yb[i % len(yb)])
      ledger.compose(event)
      if with_eps:
        ledger.get_epsilon(DELTA)
    jax.block_until_ready(carry)
    times.append((time.perf_counter() - t0) / n_steps)
  return statistics.median(times) * 1e3


def accuracy(q, batch, params, xb, yb, n_steps):
  """ε after n_steps from the float32 in-loop state vs dp_accounting (float64)."""
  import dp_accounting
  tx = make_tx(q, batch, True)

  @jax.jit
  def run(params, state):
    def body(c, i):
      p, s = c
      u, s = tx.update(per_example_grads(p, xb[i % len(xb)], yb[i % len(yb)]), s, p)
      return (optax.apply_updates(p, u), s), None
    return jax.lax.scan(body, (params, state), jnp.arange(n_steps))[0]

  _, state = run(params, tx.init(params))
  eps_inloop = float(dpo.epsilon(state, DELTA))
  ledger = dp_accounting.rdp.RdpAccountant(orders=[float(a) for a in jaxdp.rdp.DEFAULT_ORDERS])
  ledger.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(SIGMA)),
                 n_steps)
  eps_ref = ledger.get_epsilon(DELTA)
  eps_host = float(jaxdp.epsilon(q, SIGMA, n_steps, DELTA))
  # dp_accounting's fractional-order series is slightly loose (e.g. +1.3e-3 at
  # α = 3.5 for this q, σ, where jaxdp matches an mpmath integral to 1e-12), so
  # also compare on integer orders, where both are exact binomial sums.
  int_orders = np.arange(2.0, 65.0)
  ledger_int = dp_accounting.rdp.RdpAccountant(orders=[float(a) for a in int_orders])
  ledger_int.compose(
      dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(SIGMA)), n_steps)
  eps_ref_int = ledger_int.get_epsilon(DELTA)
  eps_host_int = float(jaxdp.epsilon(q, SIGMA, n_steps, DELTA, orders=int_orders))
  return dict(steps=n_steps, epsilon_inloop_float32=eps_inloop, epsilon_host_float64=eps_host,
              epsilon_dp_accounting=eps_ref, rel_diff_dp_accounting=eps_inloop / eps_ref - 1,
              rel_diff_host=eps_inloop / eps_host - 1, conservative=eps_inloop >= eps_host,
              epsilon_host_integer_orders=eps_host_int,
              epsilon_dp_accounting_integer_orders=eps_ref_int,
              rel_diff_dp_accounting_integer_orders=eps_host_int / eps_ref_int - 1)


def table_times():
  """Seconds and orders of the in-jit read-out's fine Poisson order table
  (host float64 quadrature, built once per (q, σ); docs/inloop.md), on a
  3 × 3 grid of (q, σ), each built fresh."""
  from jaxdp._src.interfaces import optax_schedule  # pylint: disable=g-import-not-at-top
  rows = []
  for q in (1e-3, 256 / 60000, 0.05):
    for sigma in (0.6, 1.1, 4.0):
      t0 = time.perf_counter()
      orders, _ = optax_schedule._poisson_table(q, sigma)
      rows.append(dict(q=q, sigma=sigma, seconds=time.perf_counter() - t0, orders=int(len(orders))))
  print("fine Poisson order table (host, once per (q, sigma)): "
        + ", ".join(f"q={r['q']:.4g} sigma={r['sigma']}: {r['seconds']:.2f} s, {r['orders']} orders"
                    for r in rows))
  return rows


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  batch = 64 if args.quick else 256
  n_steps = 100 if args.quick else 200
  reps = 5 if args.quick else 9
  scan_len = 25 if args.quick else 100

  x, y, q = load_data(batch)
  rng = np.random.default_rng(0)
  n_batches = max(scan_len, 8)
  idx = np.stack([rng.choice(len(x), batch, replace=False) for _ in range(n_batches)])
  xb, yb = jnp.asarray(x[idx]), jnp.asarray(y[idx])
  params = init_mlp(jax.random.PRNGKey(0), [64, 128, 10])

  variants = build_variants(q, batch, scan_len)
  rows = time_variants(variants, params, xb, yb, scan_len, n_steps, reps)
  init, step, _ = variants["off"]
  n_anchor = max(n_steps // 5, 10)  # dp_accounting is slow per compose: fewer steps
  for name, with_eps in (("anchor", False), ("anchor+eps", True)):
    ms = time_anchor(init, step, params, xb, yb, q, n_anchor, reps, with_eps)
    rows[name] = dict(compile_s=None, ms_per_step=ms)

  base = rows["off"]["ms_per_step"]
  scan_base = rows["scan off"]["ms_per_step"]
  print(f"device {jax.devices()[0]} ({jax.default_backend()}), batch {batch}, q={q:.4f}, "
        f"sigma={SIGMA}, MLP 64-128-10")
  print(f"{'variant':>13} {'compile_s':>9} {'ms/step':>9} {'overhead ms':>11} {'overhead %':>10}")
  for name, r in rows.items():
    ref = scan_base if name.startswith("scan") else base
    over = r["ms_per_step"] - ref
    r["overhead_ms"] = over
    r["overhead_pct"] = 100 * over / ref
    comp = f"{r['compile_s']:9.2f}" if r["compile_s"] is not None else f"{'-':>9}"
    print(f"{name:>13} {comp} {r['ms_per_step']:9.3f} {over:11.3f} {r['overhead_pct']:10.1f}")
  acc_over = rows["on"]["ms_per_step"] - base
  anchor_over = rows["anchor"]["ms_per_step"] - base
  print(f"\naccounting overhead per step: jaxdp in-state {acc_over:.3f} ms vs dp_accounting "
        f"host compose {anchor_over:.3f} ms")

  acc = accuracy(q, batch, params, xb, yb, 5 * n_steps)
  print(f"epsilon after {acc['steps']} steps: in-loop float32 {acc['epsilon_inloop_float32']:.6f}, "
        f"host float64 {acc['epsilon_host_float64']:.6f}, dp_accounting "
        f"{acc['epsilon_dp_accounting']:.6f} (rel diff {acc['rel_diff_dp_accounting']:+.2e}; "
        f"dp_accounting's fractional orders are loose)")
  print(f"integer orders 2..64: jaxdp {acc['epsilon_host_integer_orders']:.9f} vs dp_accounting "
        f"{acc['epsilon_dp_accounting_integer_orders']:.9f} "
        f"(rel diff {acc['rel_diff_dp_accounting_integer_orders']:+.2e})")

  result = dict(
      benchmark="inloop", quick=args.quick, machine=platform.node(),
      platform=platform.platform(), processor=platform.processor(), cpu_count=os.cpu_count(),
      jax_version=jax.__version__, device=str(jax.devices()[0]), backend=jax.default_backend(),
      batch=batch, q=q, sigma=SIGMA, timed_steps=n_steps, reps=reps, scan_len=scan_len,
      variants=rows, accounting_overhead_ms=acc_over,
      dp_accounting_overhead_ms=anchor_over,
      speed_ratio_vs_dp_accounting=(anchor_over / acc_over if acc_over > 0 else None),
      max_rel_diff_dp_accounting=abs(acc["rel_diff_dp_accounting"]),
      max_rel_diff_dp_accounting_integer_orders=abs(acc["rel_diff_dp_accounting_integer_orders"]),
      accuracy=acc, fine_table=table_times())
  write_result("inloop", result)


if __name__ == "__main__":
  main()
