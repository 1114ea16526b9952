"""Benchmark: batched σ-calibration vs dp_accounting's ``calibrate_dp_mechanism``.

N random DP-SGD calibration problems (target ε, q, steps; δ = 1e-5) are solved

  jaxdp        ``jaxdp.calibrate.sigma`` on all N in ONE call (RDP, default
               orders, rtol 1e-6; includes the final feasibility check by
               ``jaxdp.epsilon``); compile/warm-up reported separately, run time
               the median of repetitions;
  dp_accounting ``mechanism_calibration.calibrate_dp_mechanism`` with a fresh
               ``RdpAccountant`` (its default orders), one target at a time, on a
               sample of the same problems; per-target time extrapolated to N.

Prints throughput (calibrations/s) of both, their ratio, and the max relative
σ difference on the sample (orders differ, so a few % is expected; ours uses
more orders and the improved conversion, so it is usually smaller), plus a
check that every jaxdp σ meets its target.

  python benchmarks/calibration.py [--quick]

Writes benchmarks/results/calibration.json.
"""

import argparse
import json
import os
import platform
import statistics
import time

import jax
import numpy as np

import jaxdp
from jaxdp import calibrate

DELTA = 1e-5


def problems(n, seed=0):
  rng = np.random.default_rng(seed)
  # The distribution of issue 15: ε 0.3–10, q 10^-3.5–0.1, T 100–50 000.
  target = rng.uniform(0.3, 10.0, n)
  q = 10 ** rng.uniform(-3.5, -1.0, n)
  steps = np.round(10 ** rng.uniform(2, np.log10(50000), n))
  return target, q, steps


def dp_accounting_sigma(target, q, steps, accountant="rdp"):
  """σ from dp_accounting's ``calibrate_dp_mechanism`` with its RDP or PLD accountant."""
  from dp_accounting import dp_event, mechanism_calibration
  from dp_accounting.pld import pld_privacy_accountant
  from dp_accounting.rdp import rdp_privacy_accountant
  make_accountant = (rdp_privacy_accountant.RdpAccountant if accountant == "rdp"
                     else pld_privacy_accountant.PLDAccountant)

  def make_event(s):
    return dp_event.SelfComposedDpEvent(
        dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(s)), int(steps))

  return mechanism_calibration.calibrate_dp_mechanism(
      make_accountant, make_event, target, DELTA,
      mechanism_calibration.LowerEndpointAndGuess(0.0, 1.0))


def pld_figures(quick):
  """32 σ-calibrations with the tight accountant, in one call, against
  dp_accounting's ``calibrate_dp_mechanism`` with ``PLDAccountant`` on a sample."""
  n, n_sample = (8, 1) if quick else (32, 3)
  target, q, steps = problems(n, seed=1)
  t0 = time.perf_counter()
  calibrate.sigma(target[:2], DELTA, q[:2], steps[:2], accountant="pld")   # compile
  warmup = time.perf_counter() - t0
  t0 = time.perf_counter()
  s = calibrate.sigma(target, DELTA, q, steps, accountant="pld")
  t_jaxdp = time.perf_counter() - t0
  t0 = time.perf_counter()   # the same call again: every program compiled
  calibrate.sigma(target, DELTA, q, steps, accountant="pld")
  t_again = time.perf_counter() - t0
  eps = jaxdp.epsilon(q, s, steps, DELTA, accountant="pld")
  sample = np.linspace(0, n - 1, n_sample).astype(int)
  t0 = time.perf_counter()
  ref = np.array([dp_accounting_sigma(target[i], q[i], steps[i], "pld") for i in sample])
  t_ref_each = (time.perf_counter() - t0) / n_sample
  rel = np.abs(s[sample] - ref) / ref
  fig = dict(n=n, n_sample=n_sample, jaxdp_seconds=t_jaxdp, jaxdp_warmup_seconds=warmup,
             jaxdp_seconds_compiled=t_again, dp_accounting_seconds_per_target=t_ref_each,
             throughput_ratio=(n / t_jaxdp) * t_ref_each,
             throughput_ratio_compiled=(n / t_again) * t_ref_each,
             max_rel_sigma_diff=float(rel.max()),
             all_feasible=bool(np.all(eps <= target)))
  print(f"PLD: jaxdp {n} calibrations in {t_jaxdp:.2f}s (warm-up {warmup:.1f}s; "
        f"{t_again:.2f}s again, all compiled); dp_accounting {t_ref_each:.1f}s per target "
        f"({n_sample} sampled); ratio {fig['throughput_ratio']:.1f}x "
        f"({fig['throughput_ratio_compiled']:.1f}x compiled); "
        f"max rel sigma diff {fig['max_rel_sigma_diff']:.2e}; "
        f"all meet their targets: {fig['all_feasible']}")
  return fig


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--quick", action="store_true", help="fewer problems and repetitions")
  args = parser.parse_args()
  n = 200 if args.quick else 1000
  n_sample = 3 if args.quick else 20
  reps = 1 if args.quick else 5
  target, q, steps = problems(n)

  t0 = time.perf_counter()
  calibrate.sigma(target[:16], DELTA, q[:16], steps[:16])        # compile small shapes
  calibrate.sigma(target[16:300], DELTA, q[16:300], steps[16:300])  # and the 256 chunk
  warmup = time.perf_counter() - t0
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    s = calibrate.sigma(target, DELTA, q, steps)
    times.append(time.perf_counter() - t0)
  t_jaxdp = statistics.median(times)
  eps = jaxdp.epsilon(q, s, steps, DELTA)
  feasible = bool(np.all(eps <= target))

  sample = np.linspace(0, n - 1, n_sample).astype(int)
  ref = []
  t0 = time.perf_counter()
  for i in sample:
    ref.append(dp_accounting_sigma(target[i], q[i], steps[i]))
  t_ref_each = (time.perf_counter() - t0) / n_sample
  ref = np.array(ref)
  rel = np.abs(s[sample] - ref) / ref
  fig = dict(
      n=n, n_sample=n_sample, reps=reps,
      jaxdp_seconds=t_jaxdp, jaxdp_warmup_seconds=warmup,
      jaxdp_per_second=n / t_jaxdp,
      dp_accounting_seconds_per_target=t_ref_each,
      dp_accounting_per_second=1.0 / t_ref_each,
      dp_accounting_extrapolated_seconds=t_ref_each * n,
      throughput_ratio=(n / t_jaxdp) * t_ref_each,
      max_rel_sigma_diff=float(rel.max()),
      mean_rel_sigma_diff=float(rel.mean()),
      jaxdp_sigma_smaller_fraction=float(np.mean(s[sample] <= ref)),
      all_feasible=feasible,
  )
  print(f"{'':16s}{'calibrations/s':>16s}{'time for N':>14s}")
  print(f"{'jaxdp':16s}{fig['jaxdp_per_second']:16.1f}{t_jaxdp:13.2f}s"
        f"   (warm-up/compile {warmup:.1f}s, excluded)")
  print(f"{'dp_accounting':16s}{fig['dp_accounting_per_second']:16.2f}"
        f"{fig['dp_accounting_extrapolated_seconds']:13.1f}s   (extrapolated from {n_sample})")
  print(f"throughput ratio: {fig['throughput_ratio']:.0f}x   (N = {n})")
  print(f"max relative sigma difference to dp_accounting: {fig['max_rel_sigma_diff']:.2e} "
        f"(jaxdp smaller or equal on {100 * fig['jaxdp_sigma_smaller_fraction']:.0f}%)")
  print(f"every jaxdp sigma meets its target: {feasible}")
  fig["pld"] = pld_figures(args.quick)
  fig.update(machine=platform.platform(), processor=platform.processor(), cpus=os.cpu_count(),
             jax_version=jax.__version__, device=str(jax.devices()[0]),
             quick=bool(args.quick))
  out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "calibration.json")
  os.makedirs(os.path.dirname(out), exist_ok=True)
  with open(out, "w") as f:
    json.dump(fig, f, indent=1)


if __name__ == "__main__":
  main()
