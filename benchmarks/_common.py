"""Shared by the benchmark scripts: where and how results are written."""

import json
import os
import statistics
import time

import jax

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_result(name: str, result: dict) -> str:
  """Writes ``result`` to benchmarks/results/NAME.json and returns the path."""
  os.makedirs(RESULTS_DIR, exist_ok=True)
  path = os.path.join(RESULTS_DIR, f"{name}.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1, default=float)
  return path


def median_time(fn, reps: int) -> float:
  """Median wall time of ``fn()`` over ``reps`` runs, waiting for device results."""
  times = []
  for _ in range(reps):
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def environment() -> dict:
  """Where a benchmark ran: machine, platform, CPU count, JAX version, device."""
  import os
  import platform
  return dict(machine=platform.node(), platform=platform.platform(),
              processor=platform.processor(), cpu_count=os.cpu_count(),
              jax_version=jax.__version__, device=str(jax.devices()[0]))
