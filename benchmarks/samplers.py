"""Benchmark: per-step cost of the batch samplers in ``jaxdp.sampling``.

For a dataset of N = 10^6 examples and batch sizes B, the time to draw one
step's ``(indices, mask)`` on the default device (jitted, warm, median over
repetitions with a different key each time) for

  poisson        ``poisson(N, B/N, capacity)``, capacity = B + 6·sqrt(B)
  fixed          ``fixed(N, B)``
  balls_in_bins  ``balls_in_bins(N, B, capacity)`` (O(N) per step)
  shuffle        ``shuffle(N, B)`` (O(B) per step: a Feistel permutation read entry by entry)

next to the plain ``jax.random.permutation(key, N)`` (what a shuffling
pipeline pays per epoch, or per step when it keeps no state) and
``jax.random.choice(key, N, (B,), replace=False)`` (which permutes all N).
Two figures per sampler: one call per step (dispatch included), and the
per-step time of ``steps`` steps fused in one ``lax.scan`` (what a jitted
training loop pays). Compile time (first call) is reported separately.

The ε each sampler's event implies is a separate table (``epsilon_rows``).

  python benchmarks/samplers.py [--quick]

Writes benchmarks/results/samplers.json.
"""

import argparse
import itertools
import math
import os
import platform
import time

import jax
import jax.numpy as jnp

from jaxdp import sampling
from _common import median_time, write_result  # noqa: E402  (benchmarks/ is on sys.path)

N = 10 ** 6


def capacity(b):
  """B plus six standard deviations of a Poisson batch: truncation ~1e-9."""
  return int(math.ceil(b + 6 * math.sqrt(b)))


def samplers(b):
  """name -> step function (key, t) -> (indices, mask) for batch size b."""
  cap = capacity(b)
  out = {
      "poisson": sampling.poisson(N, b / N, cap).sample_at,
      "fixed": sampling.fixed(N, b).sample_at,
      "balls_in_bins": sampling.balls_in_bins(N, b, cap).sample_at,
      "shuffle": sampling.shuffle(N, b).sample_at,
  }
  out["permutation"] = lambda key, t: (jax.random.permutation(jax.random.fold_in(key, t), N),)
  out["choice"] = lambda key, t: (
      jax.random.choice(jax.random.fold_in(key, t), N, (b,), replace=False),)
  return out


def time_one(step, reps, scan_steps):
  """Compile time, ms per single call, ms per step fused in a scan."""
  single = jax.jit(step)
  keys = itertools.cycle(jax.random.split(jax.random.key(0), 64))
  t0 = time.perf_counter()
  jax.block_until_ready(single(next(keys), 0))
  compile_s = time.perf_counter() - t0
  counter = itertools.count(1)
  t0 = time.perf_counter()
  jax.block_until_ready(single(next(keys), next(counter)))
  once = time.perf_counter() - t0
  # Slow steps (a permutation of 10^6 takes seconds on CPU) get fewer
  # repetitions and a shorter scan: about 2 s of calls and 2 s of scan each.
  reps = max(3, min(reps, int(2.0 / once)))
  scan_steps = max(2, min(scan_steps, int(2.0 / once)))
  call_ms = 1e3 * median_time(lambda: single(next(keys), next(counter)), reps)

  @jax.jit
  def fused(key):
    def body(acc, t):  # reduce every output: nothing of the step can be skipped
      return acc + sum(jnp.sum(x.astype(jnp.int32)) for x in step(key, t)), None
    return jax.lax.scan(body, jnp.int32(0), jnp.arange(scan_steps))[0]

  jax.block_until_ready(fused(next(keys)))
  scan_ms = 1e3 * median_time(lambda: fused(next(keys)), max(3, reps // 4)) / scan_steps
  return compile_s, call_ms, scan_ms, reps, scan_steps


def epsilon_rows(args):  # pylint: disable=unused-argument
  """ε of each sampler's event, MNIST-like: N = 60000, B = 256 (expected or
  fixed), σ = 1.1, 60 epochs (14040 steps: the one epoch rule,
  :func:`jaxdp.sampling.epochs_to_steps`), δ = 1e-5; RDP, and the tight PLD
  where jaxdp accounts that sampler's event exactly.  Shuffling also gets a
  certified LOWER bound (:func:`jaxdp.rdp_samplers.shuffle_lower_bound_epsilon`)."""
  import jaxdp  # pylint: disable=g-import-not-at-top
  from jaxdp import rdp_samplers  # pylint: disable=g-import-not-at-top
  n, b, sigma, epochs, delta = 60000, 256, 1.1, 60, 1e-5
  steps = sampling.epochs_to_steps(epochs, n // b)   # 60 × 234 = 14040
  cap = capacity(b)
  cases = [
      ("poisson (no truncation)", sampling.poisson(n, b / n, n)),
      ("poisson, replace-one", sampling.poisson(n, b / n, n, relation="replace_one")),
      (f"truncated poisson, capacity {cap}", sampling.poisson(n, b / n, cap)),
      ("fixed, add/remove", sampling.fixed(n, b, relation="add_remove")),
      ("fixed, replace-one", sampling.fixed(n, b, relation="replace_one")),
      ("balls-in-bins (no truncation)", sampling.balls_in_bins(n, b, n)),
      (f"balls-in-bins, capacity {cap}", sampling.balls_in_bins(n, b, cap)),
      ("shuffle", sampling.shuffle(n, b)),
  ]
  rows = []
  for name, smp in cases:
    row = {"sampler": name, "event": type(smp.event(sigma)).__name__,
           "rdp": float(jaxdp.epsilon(smp, sigma, steps, delta))}
    try:
      row["pld"] = float(jaxdp.epsilon(smp, sigma, steps, delta, accountant="pld"))
    except ValueError:
      row["pld"] = None
    rows.append(row)
  rows.append({"sampler": "shuffle: certified lower bound", "event": "", "rdp": None, "pld": None,
               "lower": float(rdp_samplers.shuffle_lower_bound_epsilon(n, b, sigma, epochs, delta))})
  print(f"\nε at N={n}, B={b}, σ={sigma}, {epochs} epochs ({steps} steps), δ={delta:g}")
  print(f"{'sampler':36s} {'RDP':>9s} {'PLD':>9s}")
  for r in rows:
    f = lambda v: f"{v:9.3f}" if v is not None else f"{'-':>9s}"  # noqa: E731
    extra = f"   (lower bound {r['lower']:.3f})" if "lower" in r else ""
    print(f"{r['sampler']:36s} {f(r['rdp'])} {f(r['pld'])}{extra}")
  return rows


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--quick", action="store_true")
  args = parser.parse_args()
  batch_sizes = [1024] if args.quick else [256, 1024, 4096]
  reps = 7 if args.quick else 21
  scan_steps = 8 if args.quick else 32
  print(f"device: {jax.devices()[0]} ({jax.default_backend()}), N = {N}")

  rows = []
  for b in batch_sizes:
    for name, step in samplers(b).items():
      compile_s, call_ms, scan_ms, used_reps, used_steps = time_one(step, reps, scan_steps)
      rows.append(dict(sampler=name, n=N, batch_size=b,
                       capacity=capacity(b) if name in ("poisson", "balls_in_bins") else None,
                       compile_s=compile_s, ms_per_call=call_ms, ms_per_step_scan=scan_ms,
                       reps=used_reps, scan_steps=used_steps))
    base = next(r for r in rows if r["batch_size"] == b and r["sampler"] == "permutation")
    for r in rows:
      if r["batch_size"] == b:
        r["speed_ratio_vs_permutation"] = base["ms_per_step_scan"] / r["ms_per_step_scan"]

  print(f"\n{'sampler':>14} {'B':>5} {'cap':>5} {'compile s':>9} {'ms/call':>9} "
        f"{'ms/step (scan)':>14} {'vs permutation':>14}")
  for r in rows:
    cap = r["capacity"] if r["capacity"] is not None else "-"
    print(f"{r['sampler']:>14} {r['batch_size']:5d} {cap:>5} {r['compile_s']:9.2f} "
          f"{r['ms_per_call']:9.3f} {r['ms_per_step_scan']:14.3f} "
          f"{r['speed_ratio_vs_permutation']:13.1f}x")

  result = dict(
      benchmark="samplers", quick=args.quick, machine=platform.node(),
      platform=platform.platform(), processor=platform.processor(), cpu_count=os.cpu_count(),
      jax_version=jax.__version__, device=str(jax.devices()[0]), backend=jax.default_backend(),
      n=N, reps=reps, scan_steps=scan_steps, rows=rows, epsilon=epsilon_rows(args))
  print("\nwrote", write_result("samplers", result))


if __name__ == "__main__":
  main()
