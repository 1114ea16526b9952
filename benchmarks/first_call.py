"""Benchmark: every runnable example of README.md and docs/ in a fresh process.

The examples are the ones the documentation test runs
(``tests/package/test_doc_examples.py``: same parser, same markers; blocks
marked ``not-run`` are left out). Each one runs in a new Python process
(Python blocks) or ``bash -e`` (shell blocks, ``jaxdp`` on PATH), in a fresh
working folder with the files the docs give it, twice:

* **empty cache**: ``JAXDP_CACHE_DIR`` is a new empty folder (nothing
  compiled before; JAX's own persistent cache variables removed);
* **warm cache**: the same folder again (a later process: jaxdp loads the
  executables the first run stored).

Where one exists, the dp_accounting equivalent (``EQUIVALENTS`` below, its
settings named) runs in a fresh process too. Wall times include interpreter
start and imports.

  python benchmarks/first_call.py [--only README.md:65] [--skip-slow]

Writes benchmarks/results/first_call.json (a partial run, with ``--only`` or
``--skip-slow``: first_call_partial.json, so the full table stays).
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "package"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import test_doc_examples as docs  # noqa: E402  (the documentation test's parser)
from _common import environment, write_result  # noqa: E402

# dp_accounting scripts answering the same questions as an example (what a
# user of dp_accounting would run instead), with the settings they use. Keyed
# by a whole line of the example's text (line numbers move when the docs
# change); a block answering more questions than its key is not compared.
EQUIVALENTS = {
    "jaxdp epsilon --q 0.0042667 --sigma 1.1 --steps 14040 --delta 1e-5": (
        "PLDAccountant (its default value_discretization_interval 1e-4), MNIST tight ε",
        """
import dp_accounting as dpa
from dp_accounting import pld
a = pld.PLDAccountant()
a.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.0042667, dpa.GaussianDpEvent(1.1)), 14040))
print(a.get_epsilon(1e-5))
"""),
    "jaxdp calibrate --target-epsilon 3 --q 0.0042667 --steps 14040 --delta 1e-5": (
        "calibrate_dp_mechanism with PLDAccountant (default discretisation), tol 1e-3, "
        "LowerEndpointAndGuess(0.3, 1.0)",
        """
import dp_accounting as dpa
from dp_accounting import pld
def ev(s):
  return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.0042667, dpa.GaussianDpEvent(s)), 14040)
print(dpa.calibrate_dp_mechanism(pld.PLDAccountant, ev, 3.0, 1e-5,
                                 dpa.LowerEndpointAndGuess(0.3, 1.0), tol=1e-3))
"""),
    ("eps = jaxdp.epsilon(np.geomspace(1e-4, 0.1, 100)[:, None], np.linspace(0.6, 6, 100), "
     "1000, 1e-5)"): ("RdpAccountant (its default orders) over the 100x100 grid; PLDAccountant "
                     "(value_discretization_interval 1e-4) for the tight ε; calibrate_dp_mechanism "
                     "with RdpAccountant, tol 1e-3, LowerEndpointAndGuess(0.3, 1.0) for 3 targets; "
                     "RdpAccountant for the 1000 composed steps",
                     """
import numpy as np
import dp_accounting as dpa
from dp_accounting import rdp, pld
def rdp_eps(q, s, t, d):
  a = rdp.RdpAccountant()
  a.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(s)), t))
  return a.get_epsilon(d)
eps = [[rdp_eps(q, s, 1000, 1e-5) for s in np.linspace(0.6, 6, 100)]
       for q in np.geomspace(1e-4, 0.1, 100)]
a = pld.PLDAccountant(value_discretization_interval=1e-4)
a.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(256 / 60000, dpa.GaussianDpEvent(1.1)), 14040))
tight = a.get_epsilon(1e-5)
def ev(s):
  return dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(s)), 5000)
sig = [dpa.calibrate_dp_mechanism(rdp.RdpAccountant, ev, t, 1e-5,
                                  dpa.LowerEndpointAndGuess(0.3, 1.0), tol=1e-3)
       for t in (1.0, 3.0, 8.0)]
a = rdp.RdpAccountant()
a.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 1000))
print(tight, sig, a.get_epsilon(1e-5))
"""),
}


def _env(cache_dir):
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("JAX_COMPILATION_CACHE", "JAX_PERSISTENT_CACHE"))}
  env["JAXDP_CACHE_DIR"] = str(cache_dir)
  env["PYTHONPATH"] = str(ROOT)
  return env


def _shell_bin(folder):
  """A ``jaxdp`` and ``python`` on PATH meaning this interpreter and checkout."""
  folder.mkdir(exist_ok=True)
  (folder / "jaxdp").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m jaxdp.cli "$@"\n')
  (folder / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
  for name in ("jaxdp", "python"):
    (folder / name).chmod(0o755)
  return folder


def run_example(example, cache_dir, bin_dir, timeout):
  """Wall seconds of one example in a fresh process, and its return code."""
  block = example.block
  work = pathlib.Path(tempfile.mkdtemp(prefix="jaxdp-first-call-"))
  try:
    for name, content in example.files.items():
      (work / name).write_text(content)
    env = _env(cache_dir)
    if block.language in docs.PYTHON_LANGUAGES:
      (work / "example.py").write_text(block.text)
      cmd = [sys.executable, "example.py"]
    else:
      env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
      lines = [ln[2:] if ln.startswith("$ ") else ln for ln in block.text.splitlines()
               if block.language != "console" or ln.startswith("$ ")]
      (work / "example.sh").write_text("\n".join(lines) + "\n")
      cmd = ["bash", "-e", "example.sh"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, out.returncode
  finally:
    shutil.rmtree(work, ignore_errors=True)


def run_equivalent(script, timeout):
  t0 = time.perf_counter()
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=timeout)
  return time.perf_counter() - t0, out.returncode


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--only", action="append", help="example name(s), e.g. README.md:65")
  ap.add_argument("--skip-slow", action="store_true", help="leave out blocks marked slow")
  ap.add_argument("--no-equivalents", action="store_true")
  ap.add_argument("--timeout", type=float, default=900)
  args = ap.parse_args()
  examples = [e for e in docs.collect_examples() if "not-run" not in e.block.markers]
  if args.only:
    examples = [e for e in examples if e.block.name in args.only]
  if args.skip_slow:
    examples = [e for e in examples if "slow" not in e.block.markers]
  scratch = pathlib.Path(tempfile.mkdtemp(prefix="jaxdp-first-call-cache-"))
  bin_dir = _shell_bin(scratch / "bin")
  rows = []
  try:
    for ex in examples:
      cache = scratch / ex.block.name.replace("/", "_").replace(":", "_")
      cold, rc_cold = run_example(ex, cache, bin_dir, args.timeout)
      warm, rc_warm = run_example(ex, cache, bin_dir, args.timeout)
      row = dict(example=ex.block.name, language=ex.block.language,
                 empty_cache_s=round(cold, 2), warm_cache_s=round(warm, 2),
                 ok=rc_cold == 0 and rc_warm == 0)
      eq = None if args.no_equivalents else next(
          (v for k, v in EQUIVALENTS.items()
           if any(k in (ln.strip(), ln.strip()[2:]) for ln in ex.block.text.splitlines())), None)
      if eq is not None:
        t, rc = run_equivalent(eq[1], args.timeout)
        row.update(dp_accounting_s=round(t, 2), dp_accounting_settings=eq[0],
                   ratio_empty=round(cold / t, 2), ok=row["ok"] and rc == 0)
      rows.append(row)
      print(f"{row['example']:32s} empty {cold:7.2f} s  warm {warm:7.2f} s"
            + (f"  dp_accounting {row['dp_accounting_s']:7.2f} s" if "dp_accounting_s" in row
               else "") + ("" if row["ok"] else "  FAILED"), flush=True)
  finally:
    shutil.rmtree(scratch, ignore_errors=True)
  env = environment()
  # A partial run (--only, --skip-slow) must not replace the full table that
  # the README quotes: it goes to first_call_partial.json.
  partial = bool(args.only or args.skip_slow)
  path = write_result("first_call_partial" if partial else "first_call",
                      dict(machine=env["platform"], cpus=env["cpu_count"],
                           jax=env["jax_version"], device=env["device"], rows=rows))
  print("wrote", path)


if __name__ == "__main__":
  main()
