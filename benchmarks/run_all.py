"""Run every benchmark script and collect benchmarks/results/*.json into one table.

  python benchmarks/run_all.py [--quick] [--only NAME ...] [--skip NAME ...] [--collect-only]

Runs each ``benchmarks/NAME.py`` (every script here except this one and files
starting with ``_``) in its own process with the same Python, one after the
other (timings are only meaningful on an otherwise idle machine), with
``--quick`` when given. A failing script is reported and the others still
run; the exit status is non-zero if any failed. Then reads every
``results/*.json`` and prints a summary: speed ratios against the anchors
(``speed_ratio*`` fields) and accuracy (``max_rel_diff*`` fields), as a plain
table and as Markdown (also written to ``results/summary.md``; paste it into
``benchmarks/README.md`` between the ``<!-- figures -->`` markers).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
# Result fields summarised (by prefix): speed ratios jaxdp/anchor and accuracy.
SPEED_KEYS = ("speed_ratio", "speedup", "throughput_ratio")
ACCURACY_KEYS = ("max_rel_diff", "max_rel")


def scripts():
  names = []
  for path in sorted(glob.glob(os.path.join(HERE, "*.py"))):
    name = os.path.splitext(os.path.basename(path))[0]
    if name == "run_all" or name.startswith("_"):
      continue
    names.append(name)
  return names


def run(name, quick, timeout):
  cmd = [sys.executable, os.path.join(HERE, name + ".py")] + (["--quick"] if quick else [])
  print(f"=== {name}: {' '.join(cmd[1:])}", flush=True)
  t0 = time.perf_counter()
  try:
    proc = subprocess.run(cmd, cwd=os.path.dirname(HERE), timeout=timeout, check=False)
    rc = proc.returncode
  except subprocess.TimeoutExpired:
    rc = "timeout"
  wall = time.perf_counter() - t0
  print(f"=== {name}: exit {rc} after {wall:.1f} s\n", flush=True)
  return dict(name=name, returncode=rc, wall_s=wall)


def _fmt(x):
  if x is None:
    return "-"
  if isinstance(x, tuple):
    return f"{_fmt(x[0])}-{_fmt(x[1])}"
  if isinstance(x, bool):
    return str(x)
  if isinstance(x, (int, float)):
    if x == 0:
      return "0"
    return f"{x:.3g}" if abs(x) >= 1e-2 else f"{x:.1e}"
  return str(x)


def collect():
  """One summary row per results/*.json (summary.json itself excluded)."""
  rows = []
  for path in sorted(glob.glob(os.path.join(RESULTS, "*.json"))):
    name = os.path.splitext(os.path.basename(path))[0]
    if name == "summary":
      continue
    try:
      with open(path) as f:
        res = json.load(f)
    except (OSError, ValueError) as e:
      rows.append(dict(name=name, error=str(e)))
      continue
    speed = _pick(res, SPEED_KEYS)
    acc = _pick(res, ACCURACY_KEYS)
    rows.append(dict(name=name, quick=res.get("quick"), device=res.get("device"),
                     jax_version=res.get("jax_version"), machine=res.get("machine"),
                     cpu_count=res.get("cpu_count"),
                     mtime=time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(path))),
                     speed=speed, accuracy=acc))
  return rows


def _is_figure(key, value, prefixes):
  return (any(key.startswith(p) for p in prefixes) and not key.endswith("_note")
          and (value is None or isinstance(value, (int, float))))


def _pick(res, prefixes):
  """Top-level figures with these prefixes; else their range over ``rows``."""
  top = {k: v for k, v in res.items() if _is_figure(k, v, prefixes)}
  if top or not isinstance(res.get("rows"), list):
    return top
  found = {}
  for row in res["rows"]:
    if isinstance(row, dict):
      for k, v in row.items():
        if _is_figure(k, v, prefixes) and v is not None:
          found.setdefault(k, []).append(v)
  return {k: (min(v), max(v)) if min(v) != max(v) else v[0] for k, v in found.items()}


def _short(key, prefixes):
  for p in prefixes:
    if key.startswith(p):
      key = key[len(p):].lstrip("_")
      break
  return key.replace("vs_", "") or "anchor"


def table(rows):
  lines = []
  for r in rows:
    if "error" in r:
      lines.append((r["name"], "-", "-", "unreadable: " + r["error"], ""))
      continue
    speed = ", ".join(f"{_short(k, SPEED_KEYS)} {_fmt(v)}x" for k, v in r["speed"].items()
                      if v is not None)
    acc = ", ".join(f"{_short(k, ACCURACY_KEYS)} {_fmt(v)}" for k, v in r["accuracy"].items())
    mode = "quick" if r["quick"] else "full"
    lines.append((r["name"], mode, str(r["device"]), speed or "-", acc or "-"))
  return lines


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
  parser.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
  parser.add_argument("--skip", nargs="*", default=(), help="do not run these benchmarks")
  parser.add_argument("--collect-only", action="store_true",
                      help="run nothing; only summarise results/*.json")
  parser.add_argument("--timeout", type=float, default=3600.0,
                      help="seconds allowed per script (default 3600)")
  args = parser.parse_args()

  runs = []
  if not args.collect_only:
    names = scripts()
    if args.only:
      unknown = sorted(set(args.only) - set(names))
      if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; available: {names}")
      names = [n for n in names if n in args.only]
    names = [n for n in names if n not in set(args.skip)]
    for name in names:
      runs.append(run(name, args.quick, args.timeout))

  rows = collect()
  lines = table(rows)
  head = ("benchmark", "mode", "device", "speed ratio vs anchor", "max rel. diff to anchor")
  widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h)
            for i, h in enumerate(head)]
  print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
  for l in lines:
    print("  ".join(c.ljust(w) for c, w in zip(l, widths)))
  md = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  md += ["| " + " | ".join(l) + " |" for l in lines]
  os.makedirs(RESULTS, exist_ok=True)
  with open(os.path.join(RESULTS, "summary.md"), "w") as f:
    f.write("\n".join(md) + "\n")
  with open(os.path.join(RESULTS, "summary.json"), "w") as f:
    json.dump(dict(runs=runs, results=rows), f, indent=1)
  print("\n" + "\n".join(md))

  failed = [r for r in runs if r["returncode"] != 0]
  if failed:
    print("\nFAILED: " + ", ".join(f"{r['name']} ({r['returncode']})" for r in failed))
    sys.exit(1)


if __name__ == "__main__":
  main()
