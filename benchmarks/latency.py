"""Benchmark: fresh-process latency of one question, jaxdp's CLI against dp_accounting.

A person asking one question pays process start, imports, compilation and the
query. For each of four questions (the README's MNIST configuration) this
script times, in fresh subprocesses:

* ``jaxdp ...`` with an EMPTY persistent compilation cache (first-ever call),
* ``jaxdp ...`` again with the cache the first run filled (every later call),
* an equivalent dp_accounting script (import + the same query), which has
  no compilation step.

Each figure is the median of ``--reps`` runs (a new empty cache directory for
every first-call run). The answers are printed beside the times so a reader
can see that the same question was answered.

  python benchmarks/latency.py [--reps 3] [--quick]

Writes benchmarks/results/latency.json.
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import jax

from _common import write_result  # noqa: E402  (benchmarks/ is on sys.path)

# The README's MNIST configuration (batch 256 of 60 000, 60 epochs).
Q, SIGMA, STEPS, DELTA, TARGET = 0.0042667, 1.1, 14040, 1e-5, 3.0   # 60 epochs: 60 x round(1/q)

_MECH = ["--q", str(Q), "--steps", str(STEPS), "--delta", str(DELTA)]
QUERIES = {
    "epsilon (default)": (["epsilon", "--sigma", str(SIGMA)] + _MECH, "pld_epsilon"),
    "epsilon (RDP)": (["epsilon", "--sigma", str(SIGMA)] + _MECH + ["--accountant", "rdp"],
                      "rdp_epsilon"),
    "epsilon (PLD)": (["epsilon", "--sigma", str(SIGMA)] + _MECH + ["--accountant", "pld"],
                      "pld_epsilon"),
    "calibrate sigma (RDP)": (["calibrate", "--target-epsilon", str(TARGET)] + _MECH
                              + ["--accountant", "rdp"], "rdp_sigma"),
    "calibrate sigma (PLD)": (["calibrate", "--target-epsilon", str(TARGET)] + _MECH
                              + ["--accountant", "pld"], "pld_sigma"),
}

_DPA = f"""
import sys
import dp_accounting as dpa
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
q, sigma, steps, delta, target = {Q}, {SIGMA}, {STEPS}, {DELTA}, {TARGET}
event = lambda s: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)), steps)
rdp = lambda: rdp_privacy_accountant.RdpAccountant()
pld = lambda: pld_privacy_accountant.PLDAccountant()
what = sys.argv[1]
if what == "rdp_epsilon":
  print(rdp().compose(event(sigma)).get_epsilon(delta))
elif what == "pld_epsilon":
  print(pld().compose(event(sigma)).get_epsilon(delta))
else:
  make = rdp if what == "rdp_sigma" else pld
  print(dpa.calibrate_dp_mechanism(make, event, target, delta,
                                   dpa.LowerEndpointAndGuess(0.1, 1.0), tol=1e-3))
"""


def _run(cmd, env):
  t0 = time.perf_counter()
  out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
  wall = time.perf_counter() - t0
  if out.returncode != 0:
    raise RuntimeError(f"{cmd} failed ({out.returncode}): {out.stderr[-2000:]}")
  return wall, out.stdout.strip().splitlines()[0] if out.stdout.strip() else ""


def _jaxdp_cmd(args):
  exe = shutil.which("jaxdp")
  return [exe] + args if exe else [sys.executable, "-m", "jaxdp.cli"] + args


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--quick", action="store_true", help="one repetition, RDP questions only")
  args = ap.parse_args()
  reps = 1 if args.quick else args.reps
  names = [k for k in QUERIES if not args.quick or "RDP" in k]
  base_env = dict(os.environ)
  base_env.pop("JAX_COMPILATION_CACHE_DIR", None)
  rows = []
  for name in names:
    cli_args, dpa_what = QUERIES[name]
    first, warm, ref = [], [], []
    answer = ref_answer = ""
    for _ in range(reps):
      cache = tempfile.mkdtemp(prefix="jaxdp-latency-")
      env = dict(base_env, JAXDP_CACHE_DIR=cache)
      try:
        t, answer = _run(_jaxdp_cmd(cli_args), env)
        first.append(t)
        t, answer = _run(_jaxdp_cmd(cli_args), env)
        warm.append(t)
      finally:
        shutil.rmtree(cache, ignore_errors=True)
      t, ref_answer = _run([sys.executable, "-c", _DPA, dpa_what], base_env)
      ref.append(t)
    row = dict(query=name, command="jaxdp " + " ".join(cli_args),
               jaxdp_first_s=statistics.median(first), jaxdp_warm_cache_s=statistics.median(warm),
               dp_accounting_s=statistics.median(ref), jaxdp_answer=answer,
               dp_accounting_answer=ref_answer)
    row["ratio_warm"] = row["dp_accounting_s"] / row["jaxdp_warm_cache_s"]
    rows.append(row)
    print(f"{name:24s} first {row['jaxdp_first_s']:6.2f} s   warm cache "
          f"{row['jaxdp_warm_cache_s']:6.2f} s   dp_accounting {row['dp_accounting_s']:6.2f} s   "
          f"({answer!r} vs {ref_answer!r})", flush=True)
  path = write_result("latency", dict(
      machine=platform.platform(), cpus=os.cpu_count(), jax=jax.__version__,
      device=str(jax.devices()[0]), reps=reps, rows=rows))
  print("wrote", path)


if __name__ == "__main__":
  main()
