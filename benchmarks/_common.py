"""Shared by the benchmark scripts: where and how results are written."""

import json
import os

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def write_result(name: str, result: dict) -> str:
  """Writes ``result`` to benchmarks/results/NAME.json and returns the path."""
  os.makedirs(RESULTS_DIR, exist_ok=True)
  path = os.path.join(RESULTS_DIR, f"{name}.json")
  with open(path, "w") as f:
    json.dump(result, f, indent=1, default=float)
  return path
