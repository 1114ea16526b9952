"""Benchmark: the same RDP ε sweep on every available device (CPU, and GPU/TPU if present).

ε of DP-SGD over (q, σ) grids of growing size (T steps, δ fixed), computed

  public   ``jaxdp.epsilon`` (host-level, float64, chunked) under
           ``jax.default_device(dev)``: what a user gets
  kernel   ``jit(jaxdp.rdp.dpsgd_epsilon)`` on the whole device-resident grid in
           one call (float64): the raw kernel throughput

on each device found by ``jax.devices()`` (CPU always; the accelerator when
there is one — the script detects and reports it and never fails without
one). Compile time is reported separately; run time is the median of
repetitions. Accuracy: max relative difference between devices, and to
dp_accounting's ``RdpAccountant`` (same orders) on a random sample of the grid.

  python benchmarks/device.py [--quick]

Writes benchmarks/results/device.json.
"""

import argparse
import os
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxdp
from jaxdp._src.core import numerics as _numerics
from jaxdp import rdp
from _common import median_time, write_result  # noqa: E402  (benchmarks/ is on sys.path)

ORDERS = np.array([1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], dtype=np.float64)
STEPS = 10000
DELTA = 1e-5


def grid(n):
  """A ~sqrt(n) x sqrt(n) (q, σ) grid, flattened, exactly n points."""
  side = int(np.ceil(np.sqrt(n)))
  qs = np.geomspace(1e-4, 0.1, side)
  ss = np.linspace(0.5, 5.0, side)
  qq, sig = np.meshgrid(qs, ss, indexing="ij")
  return qq.reshape(-1)[:n], sig.reshape(-1)[:n]


def devices():
  """CPU plus the default backend's first device when that is an accelerator."""
  out = [("cpu", jax.devices("cpu")[0])]
  backend = jax.default_backend()
  if backend != "cpu":
    out.append((backend, jax.devices()[0]))
  return out


def bench_public(dev, q, s, reps):
  steps = np.full(q.shape, float(STEPS))
  d = np.full(q.shape, DELTA)
  with jax.default_device(dev):
    t0 = time.perf_counter()
    out = jaxdp.epsilon(q, s, steps, d, orders=ORDERS)
    first = time.perf_counter() - t0
    run = median_time(lambda: jaxdp.epsilon(q, s, steps, d, orders=ORDERS), reps)
  return np.asarray(out), first, run


_KERNEL = jax.jit(lambda q, s: rdp.dpsgd_epsilon(q, s, float(STEPS), DELTA, ORDERS))


def bench_kernel(dev, q, s, reps):
  with _numerics.x64():
    qd = jax.device_put(jnp.asarray(q, jnp.float64), dev)
    sd = jax.device_put(jnp.asarray(s, jnp.float64), dev)
    t0 = time.perf_counter()
    out = jax.block_until_ready(_KERNEL(qd, sd))
    first = time.perf_counter() - t0
    run = median_time(lambda: _KERNEL(qd, sd), reps)
    return np.asarray(out), first, run


def dp_accounting_sample(q, s, idx):
  import dp_accounting
  out = []
  t0 = time.perf_counter()
  for i in idx:
    acc = dp_accounting.rdp.RdpAccountant(orders=[float(a) for a in ORDERS])
    acc.compose(dp_accounting.PoissonSampledDpEvent(
        float(q[i]), dp_accounting.GaussianDpEvent(float(s[i]))), STEPS)
    out.append(acc.get_epsilon(DELTA))
  return np.array(out), (time.perf_counter() - t0) / len(idx)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  sizes = [10 ** 2, 10 ** 3, 10 ** 4] if args.quick else [10 ** k for k in range(2, 7)]
  reps = 3 if args.quick else 5
  devs = devices()
  print("devices: " + ", ".join(f"{name} = {d} ({getattr(d, 'device_kind', '?')})"
                                for name, d in devs))
  if len(devs) == 1:
    print("no accelerator found: CPU only")

  rng = np.random.default_rng(0)
  rows = []
  ref_eps = {}
  for n in sizes:
    q, s = grid(n)
    for name, dev in devs:
      # The kernel path holds the whole grid's intermediates at once: cap it on CPU.
      kernel_ok = name != "cpu" or n <= (10 ** 5 if not args.quick else 10 ** 4)
      eps_p, first_p, run_p = bench_public(dev, q, s, reps)
      row = dict(device=name, device_str=str(dev), n=n, public_first_s=first_p,
                 public_s=run_p, public_configs_per_s=n / run_p)
      if kernel_ok:
        try:
          eps_k, first_k, run_k = bench_kernel(dev, q, s, reps)
          row.update(kernel_first_s=first_k, kernel_s=run_k, kernel_configs_per_s=n / run_k,
                     kernel_vs_public_max_rel_diff=float(np.max(np.abs(eps_k / eps_p - 1))))
        except Exception as e:  # pylint: disable=broad-except  (e.g. out of memory)
          row.update(kernel_error=f"{type(e).__name__}: {str(e)[:200]}")
      ref_eps.setdefault(n, {})[name] = eps_p
      rows.append(row)

  # Cross-device agreement and accuracy vs dp_accounting on a sample of the largest grid.
  n_big = sizes[-1]
  q, s = grid(n_big)
  base = ref_eps[n_big]["cpu"]
  cross = {name: float(np.max(np.abs(e / base - 1))) for name, e in ref_eps[n_big].items()
           if name != "cpu"}
  samples = 20 if args.quick else 100
  idx = rng.choice(n_big, size=samples, replace=False)
  ref, per_call = dp_accounting_sample(q, s, idx)
  rel = base[idx] / ref - 1
  # Where dp_accounting's fractional-order series fails to converge it drops the
  # order (and warns) and gets looser; compare in the practical range ε ≤ 100.
  practical = ref <= 100.0
  rel_practical = rel[practical] if practical.any() else rel
  best_public = min(r["public_s"] / r["n"] for r in rows if r["n"] == n_big)

  print(f"\nRDP sweep: T={STEPS}, delta={DELTA}, {len(ORDERS)} orders, float64")
  print(f"{'device':>6} {'configs':>8} {'public first s':>14} {'public s':>9} {'cfg/s':>10} "
        f"{'kernel first s':>14} {'kernel s':>9} {'cfg/s':>10}")
  for r in rows:
    k = (f"{r['kernel_first_s']:14.2f} {r['kernel_s']:9.4f} {r['kernel_configs_per_s']:10.3g}"
         if "kernel_s" in r else f"{'-':>14} {'-':>9} {'-':>10}")
    print(f"{r['device']:>6} {r['n']:8d} {r['public_first_s']:14.2f} {r['public_s']:9.4f} "
          f"{r['public_configs_per_s']:10.3g} {k}")
  if cross:
    for name, v in cross.items():
      gpu = [r for r in rows if r["device"] == name and r["n"] == n_big][0]
      cpu = [r for r in rows if r["device"] == "cpu" and r["n"] == n_big][0]
      print(f"{name} vs cpu at {n_big} configs: public speed-up "
            f"{cpu['public_s'] / gpu['public_s']:.1f}x, max rel diff {v:.2e}")
  print(f"dp_accounting RdpAccountant: {per_call * 1e3:.2f} ms/config ({samples} sampled) -> "
        f"speed ratio {per_call / best_public:.0f}x vs jaxdp public path at {n_big} configs")
  print(f"max |rel diff| to dp_accounting (eps <= 100, {int(practical.sum())} of {samples}): "
        f"{np.max(np.abs(rel_practical)):.2e}; jaxdp above it by > 1e-9 in "
        f"{int(np.sum(rel > 1e-9))} of {samples}; largest jaxdp deficit {-np.min(rel):.2e} "
        f"(dp_accounting looser)")

  result = dict(
      benchmark="device", quick=args.quick, machine=platform.node(),
      platform=platform.platform(), processor=platform.processor(), cpu_count=os.cpu_count(),
      jax_version=jax.__version__, device=str(jax.devices()[0]),
      backend=jax.default_backend(),
      devices=[dict(name=n, device=str(d), kind=getattr(d, "device_kind", None))
               for n, d in devs],
      accelerator=len(devs) > 1, orders=ORDERS.tolist(), steps=STEPS, delta=DELTA,
      rows=rows, cross_device_max_rel_diff=cross,
      dp_accounting_per_config_s=per_call,
      speed_ratio_vs_dp_accounting=per_call / best_public,
      max_rel_diff_dp_accounting=float(np.max(np.abs(rel_practical))),
      max_rel_diff_dp_accounting_note="over sampled configs with epsilon <= 100",
      n_jaxdp_above_dp_accounting=int(np.sum(rel > 1e-9)),
      max_jaxdp_below_dp_accounting=float(-np.min(rel)),
      n_dp_accounting_samples=samples)
  write_result("device", result)


if __name__ == "__main__":
  main()
