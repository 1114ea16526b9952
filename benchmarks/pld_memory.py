"""Benchmark: peak memory of the tight (PLD) path, one batch per fresh process.

Each batch size runs ``jaxdp.epsilon(q, σ, T, 1e-5, accountant="pld")`` on
configurations drawn from the broad DP-SGD distribution of issue 37 (q 10⁻⁴–0.3
log-uniform, σ 0.5–10, T 10–10⁵ log-uniform, seed 0) in a new Python process,
and reports that process's peak resident memory (``ru_maxrss``: imports,
JAX's runtime, compilation and the computation together) and wall time.

  python benchmarks/pld_memory.py [--sizes 32 1000]

Writes benchmarks/results/pld_memory.json.
"""

import argparse
import resource
import subprocess
import sys
import time

from _common import environment, write_result

_CHILD = """
import numpy as np, jaxdp
n = {n}
rng = np.random.default_rng(0)
q = 10 ** rng.uniform(-4, np.log10(0.3), n)
s = rng.uniform(0.5, 10, n)
t = np.round(10 ** rng.uniform(1, 5, n))
e = jaxdp.epsilon(q, s, t, 1e-5, accountant="pld")
assert np.all(np.isfinite(e))
"""


def peak(n):
  """(peak RSS in MiB, wall seconds) of one fresh process answering n configurations."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  t0 = time.perf_counter()
  subprocess.run([sys.executable, "-c", _CHILD.format(n=n)], check=True)
  wall = time.perf_counter() - t0
  after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  # ru_maxrss of the children is the largest child so far: run sizes in increasing order.
  return max(after, before) / 1024.0, wall


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--sizes", type=int, nargs="+", default=[32, 256, 1000])
  args = ap.parse_args()
  rows = []
  for n in sorted(args.sizes):
    mib, wall = peak(n)
    rows.append(dict(configurations=n, peak_rss_mib=round(mib), wall_s=round(wall, 1)))
    print(f"{n:6d} configurations: peak RSS {mib:7.0f} MiB, {wall:6.1f} s", flush=True)
  env = environment()
  print("wrote", write_result("pld_memory", dict(machine=env["platform"], cpus=env["cpu_count"],
                                                   jax=env["jax_version"], rows=rows)))


if __name__ == "__main__":
  main()
