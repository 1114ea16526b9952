"""Every code block of README.md and docs/*.md runs, and prints what it shows.

The convention (also in ``docs/contributing.md``)
================================================

Every fenced block whose language is one of ``RUN_LANGUAGES`` (python, bash,
shell, sh, console) is an example, and becomes one test, named after its file
and the line of its opening fence (``README.md:14``), so a failure points at
the doc. It runs unless one of the markers below says otherwise. A marker is
an HTML comment (invisible on the rendered site, visible in the Markdown) on
the line(s) directly above the opening fence, no blank line between:

``<!-- not-run: REASON -->``
    the block is not run, and the test is skipped with REASON (a SLURM or TPU
    command, a fragment that needs a training loop around it, the test suite
    itself, ...). The reason is required.
``<!-- slow: REASON -->``
    the block runs only under ``pytest -m slow`` (REASON: why, e.g. "50 s of
    compilation"). Blocks of the default suite must stay cheap: together at
    most about 60 s on 2 CPU cores.
``<!-- file: NAME -->``
    the block (any language, e.g. ``text`` or ``python``) is the content of
    file NAME: it is written, not run, into the working folder of every later
    example of the same document (a ``grid.csv`` shown in the docs, a script
    that a shell example then runs).
``<!-- output -->`` / ``<!-- output: NAME -->``
    the block (usually ``text``) is what the nearest example above it prints
    on stdout (``output``) or writes to file NAME (``output: NAME``); it is
    compared as below. Prose may sit between the example and its output.

How examples run
----------------

* Python blocks run in this test process, each in a fresh namespace and a
  fresh temporary working folder (blocks are self-contained; a fragment is
  made self-contained in the doc or marked ``not-run``).
* Shell blocks run with ``bash -e`` in a fresh temporary working folder, with
  ``jaxdp`` and ``python`` on ``PATH`` meaning ``sys.executable -m jaxdp.cli``
  and ``sys.executable`` (the package under test, not whatever is installed
  elsewhere). ``console`` blocks: lines starting with ``$ `` are commands, the
  other lines are their expected stdout.
* A Python statement followed by ``# -> VALUE`` on its (last) line is checked:
  an expression statement compares its value (``print(x)`` compares ``x``), an
  assignment the value it assigned. Text after a second ``#`` is a free
  comment: ``jaxdp.epsilon(...)  # -> 2.5966…  # RDP``.

How values are compared
-----------------------

Every number of the expected text (annotation or output block) is compared
with the number at the same place of the actual text (the value's repr for
Python, flattened for tuples and arrays); the non-numeric text between
numbers must match exactly (runs of blanks are one blank), and both sides
must hold as many numbers. With ``u`` one unit in the last digit shown
(``2.3817`` -> ``1e-4``; ``1.3e9`` -> ``1e8``; ``18338`` -> 1):

* **shown with an ellipsis** (``2.3817…`` or ``2.3817...``): the value *starts
  with those digits*: ``2.3817 <= x < 2.3818`` (truncation, not rounding;
  mirrored for negative numbers);
* **shown without one** (``2.597``, ``18338``): the value *rounds to it*:
  ``|x - shown| <= u/2``, but never tighter than a relative 1e-12 (a full
  ``repr`` such as ``2.5966419171663917`` may move in its last bits between
  platforms, never more);
* ``inf``, ``nan``: exactly.

So a stale number, or a number the code no longer produces, fails its test.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import math
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import time
import tokenize
from typing import List, Optional

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]   # tests/package/ -> the repository
# docs/benchmark_results.md is written by docs/conf.py at build time (git-ignored).
GENERATED = ("benchmark_results.md",)
DOC_FILES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md")
                                          if p.name not in GENERATED)

PYTHON_LANGUAGES = ("python", "py", "python3")
SHELL_LANGUAGES = ("bash", "shell", "sh", "console")
RUN_LANGUAGES = PYTHON_LANGUAGES + SHELL_LANGUAGES
MARKER_KEYS = ("not-run", "slow", "file", "output")
SHELL_TIMEOUT_S = 600

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<key>[A-Za-z][\w-]*)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")
_NUMBER = re.compile(
    r"(?<![\w.])(?P<num>[-+]?(?:\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|inf|nan))"
    r"(?P<ellipsis>…|\.\.\.)?(?![\w])")
_ANNOTATION = re.compile(r"^#\s*->\s*(?P<expected>.*)$")


# ---------------------------------------------------------------------------
# Parsing the Markdown
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class Block:
  """One fenced block of a Markdown file."""
  path: pathlib.Path
  line: int                 # 1-based line of the opening fence
  language: str
  text: str
  markers: dict

  @property
  def name(self) -> str:
    return f"{self.path.relative_to(ROOT)}:{self.line}"

  @property
  def runs(self) -> bool:
    return self.language in RUN_LANGUAGES and "file" not in self.markers


def parse_blocks(path: pathlib.Path) -> List[Block]:
  """The fenced blocks of ``path`` with the markers directly above each.

  Raises:
    ValueError: an unknown marker directly above a fence, a marker without
      its required argument, or an unclosed fence.
  """
  lines = path.read_text(encoding="utf-8").splitlines()
  blocks, i = [], 0
  while i < len(lines):
    m = _FENCE.match(lines[i])
    if not m:
      i += 1
      continue
    fence, info = m.group("fence"), m.group("info").strip()
    language = info.split()[0].lower() if info else ""
    body, j = [], i + 1
    while j < len(lines) and not (lines[j].strip().startswith(fence[0] * len(fence))
                                  and lines[j].strip().strip(fence[0]) == ""):
      body.append(lines[j])
      j += 1
    if j == len(lines):
      raise ValueError(f"{path.name}:{i + 1}: unclosed code fence")
    blocks.append(Block(path, i + 1, language, textwrap.dedent("\n".join(body)) + "\n",
                        _markers_above(path, lines, i)))
    i = j + 1
  return blocks


def _markers_above(path, lines, i) -> dict:
  markers, k = {}, i - 1
  while k >= 0 and lines[k].strip().startswith("<!--"):
    m = _MARKER.match(lines[k])
    where = f"{path.name}:{k + 1}"
    if not m or m.group("key") not in MARKER_KEYS:
      raise ValueError(f"{where}: unknown marker {lines[k].strip()!r} above a code block; "
                       f"known: {', '.join(MARKER_KEYS)}")
    key, arg = m.group("key"), (m.group("arg") or "").strip()
    if key in ("not-run", "slow", "file") and not arg:
      raise ValueError(f"{where}: marker {key!r} needs its argument (a reason or a file name)")
    markers[key] = arg
    k -= 1
  return markers


@dataclasses.dataclass
class Example:
  """A block to run, with the files it gets and the outputs it must print."""
  block: Block
  files: dict               # name -> content, from earlier `file:` blocks
  outputs: list             # (file name or None for stdout, Block)


def collect_examples(paths=DOC_FILES) -> List[Example]:
  """Every runnable block of ``paths``, linked to its files and outputs.

  Raises:
    ValueError: an ``output`` block with no example above it.
  """
  examples = []
  for path in paths:
    files, last = {}, None
    for block in parse_blocks(path):
      if "output" in block.markers:
        if last is None:
          raise ValueError(f"{block.name}: an output block with no example above it")
        last.outputs.append((block.markers["output"] or None, block))
      elif "file" in block.markers:
        files[block.markers["file"]] = block.text
      elif block.runs:
        last = Example(block, dict(files), [])
        examples.append(last)
  return examples


# ---------------------------------------------------------------------------
# Comparing printed values
# ---------------------------------------------------------------------------


def _split_numbers(text: str):
  """(the text with every number replaced by a placeholder, the numbers)."""
  nums = []

  def keep(m):
    nums.append((m.group("num"), bool(m.group("ellipsis"))))
    return "\x00"
  skeleton = _NUMBER.sub(keep, text)
  return " ".join(skeleton.split()), nums


def _unit(shown: str) -> float:
  """One unit in the last digit of ``shown`` (a decimal literal)."""
  mantissa, _, exponent = shown.lower().lstrip("+-").partition("e")
  decimals = len(mantissa.partition(".")[2])
  return 10.0 ** (int(exponent or 0) - decimals)


def number_matches(shown: str, ellipsis: bool, actual: float) -> bool:
  """The comparison rule of the module docstring for one number."""
  if shown.lstrip("+-") in ("inf", "nan"):
    return str(float(actual)) == str(float(shown))
  if not math.isfinite(actual):
    return False
  value, unit = float(shown), _unit(shown)
  slack = 1e-12 * abs(value)
  if ellipsis:
    if value > 0 or (value == 0 and not shown.startswith("-")):
      return value - slack <= actual < value + unit + slack
    return value - unit - slack < actual <= value + slack
  return abs(actual - value) <= max(unit / 2 * (1 + 1e-9), slack)


def compare_text(expected: str, actual: str) -> Optional[str]:
  """None if ``actual`` shows ``expected`` under the rule; else why not."""
  exp_lines = [ln for ln in expected.strip().splitlines()]
  act_lines = [ln for ln in actual.strip().splitlines()]
  if len(exp_lines) != len(act_lines):
    return (f"{len(act_lines)} line(s) printed, {len(exp_lines)} shown\n--- shown:\n{expected}"
            f"\n--- printed:\n{actual}")
  bad = []
  for k, (e, a) in enumerate(zip(exp_lines, act_lines), 1):
    e_skel, e_nums = _split_numbers(e)
    a_skel, a_nums = _split_numbers(a)
    if e_skel != a_skel or len(e_nums) != len(a_nums):
      bad.append(f"line {k}: shown {e!r}, printed {a!r}")
      continue
    for (shown, ell), (act, _) in zip(e_nums, a_nums):
      if not number_matches(shown, ell, float(act)):
        bad.append(f"line {k}: shown {shown}{'…' if ell else ''}, printed {act} (in {a!r})")
  return "\n".join(bad) or None


def _flatten(value) -> list:
  if isinstance(value, (str, bytes)):
    raise TypeError(f"cannot compare a string value {value!r} with numbers")
  if isinstance(value, (tuple, list)):
    return [x for v in value for x in _flatten(v)]
  arr = np.asarray(value, dtype=np.float64)
  return [float(x) for x in arr.ravel()]


def compare_value(expected: str, value) -> Optional[str]:
  """None if the numbers of ``expected`` are the flattened numbers of ``value``."""
  _, nums = _split_numbers(expected)
  actual = _flatten(value)
  if len(nums) != len(actual):
    return f"{len(actual)} number(s) computed, {len(nums)} shown ({expected!r}): {actual}"
  for (shown, ell), act in zip(nums, actual):
    if not number_matches(shown, ell, act):
      return f"shown {shown}{'…' if ell else ''}, computed {act!r}"
  return None


# ---------------------------------------------------------------------------
# Running the examples
# ---------------------------------------------------------------------------


def _annotations(source: str) -> dict:
  """Line number -> expected text of every ``# -> ...`` comment."""
  found = {}
  for tok in tokenize.generate_tokens(io.StringIO(source).readline):
    if tok.type == tokenize.COMMENT:
      m = _ANNOTATION.match(tok.string)
      if m:
        found[tok.start[0]] = m.group("expected").split("#")[0].strip()
  return found


def run_python(block: Block, namespace: dict) -> list:
  """Runs ``block`` statement by statement.

  Returns:
    (doc line, expected text, value) for every ``# -> expected`` annotation.
  """
  source = block.text
  tree = ast.parse(source, filename=block.name)
  notes = _annotations(source)
  shown = []
  for stmt in tree.body:
    lines = [n for n in range(stmt.lineno, stmt.end_lineno + 1) if n in notes]
    if not lines:
      exec(compile(ast.Module([stmt], []), block.name, "exec"), namespace)  # noqa: S102
      continue
    if len(lines) > 1:
      raise ValueError(f"{block.name}: one '# ->' annotation per statement")
    value = _evaluate(stmt, namespace, block.name)
    shown.append((block.line + lines[0], notes.pop(lines[0]), value))
  if notes:
    raise ValueError(f"{block.name}: '# ->' inside compound statements: {sorted(notes)}")
  return shown


def _evaluate(stmt, namespace, filename):
  """Executes one annotated statement and returns the value it shows."""
  if isinstance(stmt, ast.Expr):
    expr = stmt.value
    is_print = (isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name)
                and expr.func.id == "print" and len(expr.args) == 1 and not expr.keywords)
    value = eval(compile(ast.Expression(expr.args[0] if is_print else expr),  # noqa: S307
                         filename, "eval"), namespace)
    if is_print:
      print(value)
    return value
  if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
    exec(compile(ast.Module([stmt], []), filename, "exec"), namespace)  # noqa: S102
    target = stmt.targets[0] if isinstance(stmt, ast.Assign) else stmt.target
    return eval(compile(ast.Expression(_as_load(target)), filename, "eval"), namespace)  # noqa: S307
  raise ValueError(f"{filename}: '# ->' on a statement that is neither an expression nor an "
                   f"assignment: {ast.unparse(stmt)[:60]}")


def _as_load(target):
  return ast.fix_missing_locations(ast.parse(ast.unparse(target), mode="eval")).body


def _shell_script(block: Block):
  """(the script to run, the stdout a console block shows or None)."""
  if block.language != "console":
    return block.text, None
  commands, shown = [], []
  for line in block.text.splitlines():
    (commands if line.startswith("$ ") else shown).append(line[2:] if line.startswith("$ ")
                                                           else line)
  return "\n".join(commands) + "\n", "\n".join(shown)


@pytest.fixture(scope="session")
def shell_env(tmp_path_factory):
  """PATH with ``jaxdp`` and ``python`` meaning this interpreter's."""
  bindir = tmp_path_factory.mktemp("doc-bin")
  for name, line in (("jaxdp", f'exec "{sys.executable}" -m jaxdp.cli "$@"'),
                     ("python", f'exec "{sys.executable}" "$@"')):
    (bindir / name).write_text(f"#!/bin/sh\n{line}\n")
    (bindir / name).chmod(0o755)
  env = dict(os.environ)
  env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
  env["JAXDP_CACHE_DIR"] = str(tmp_path_factory.mktemp("doc-jaxdp-cache"))
  env.setdefault("JAX_PLATFORMS", "cpu")
  env.pop("COLUMNS", None)
  return env


def _params():
  params = []
  for ex in collect_examples():
    marks, m = [], ex.block.markers
    if "slow" in m:
      marks.append(pytest.mark.slow)
    if "not-run" in m:
      marks.append(pytest.mark.skip(reason=f"{ex.block.name}: not run: {m['not-run']}"))
    params.append(pytest.param(ex, id=f"{ex.block.name}-{ex.block.language}", marks=marks))
  return params


@dataclasses.dataclass
class Run:
  """What an example printed: stdout, its annotated values, its output files."""
  stdout: str
  values: list              # (doc line, expected text, value)
  outputs: list             # (output Block, printed text or None if not written)
  seconds: float


def execute(example: Example, workdir: pathlib.Path, env: dict) -> Run:
  """Runs one example in ``workdir`` (with its files) and collects what it shows.

  Raises:
    AssertionError: a shell example exited with a non-zero status.
  """
  block = example.block
  for name, content in example.files.items():
    (workdir / name).write_text(content, encoding="utf-8")
  start, values = time.perf_counter(), []
  if block.language in PYTHON_LANGUAGES:
    out, cwd = io.StringIO(), os.getcwd()
    try:
      os.chdir(workdir)
      with contextlib.redirect_stdout(out):
        values = run_python(block, {"__name__": "__main__"})
    finally:
      os.chdir(cwd)
    stdout = out.getvalue()
  else:
    script, _ = _shell_script(block)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=SHELL_TIMEOUT_S, check=False)
    stdout = proc.stdout
    assert proc.returncode == 0, (f"{block.name}: exit status {proc.returncode}\n{script}\n"
                                  f"--- stderr:\n{proc.stderr[-4000:]}")
  outputs = []
  for target, shown in example.outputs:
    path = workdir / target if target else None
    if path is None:
      outputs.append((shown, stdout))
    else:
      outputs.append((shown, path.read_text(encoding="utf-8") if path.is_file() else None))
  return Run(stdout, values, outputs, time.perf_counter() - start)


@pytest.mark.parametrize("example", _params())
def test_doc_example(example, tmp_path, shell_env):
  """The block runs, and every value and output it shows is what it prints."""
  block = example.block
  run = execute(example, tmp_path, shell_env)
  failures = []
  for line, expected, value in run.values:
    why = compare_value(expected, value)
    failures.append(why and f"line {line}: {why}")
  _, console_shown = _shell_script(block)
  if console_shown is not None:
    failures.append(compare_text(console_shown, run.stdout))
  for shown, printed in run.outputs:
    target = shown.markers["output"] or "stdout"
    why = (f"{block.name} did not write {target}" if printed is None
           else compare_text(shown.text, printed))
    failures.append(why and f"output block {shown.name} ({target}): {why}")
  failures = [f for f in failures if f]
  print(f"{block.name}: {run.seconds:.1f} s")
  assert not failures, f"{block.name} shows stale values:\n" + "\n".join(failures)


# ---------------------------------------------------------------------------
# The harness itself
# ---------------------------------------------------------------------------


def test_every_code_block_is_an_example_or_data():
  """No code block escapes: each is run, marked, or a data/output block."""
  data_languages = ("", "text", "json", "csv", "toml", "yaml", "ini", "none")
  for path in DOC_FILES:
    for block in parse_blocks(path):
      lang = block.language
      assert (lang in RUN_LANGUAGES or lang in data_languages or lang.startswith("{")), (
          f"{block.name}: code block in unknown language {lang!r}; use one of "
          f"{RUN_LANGUAGES} (run) or {data_languages} (not run)")
  assert collect_examples(), "no examples found"


def test_markers_are_parsed(tmp_path):
  doc = tmp_path / "doc.md"
  doc.write_text(textwrap.dedent("""\
      <!-- file: grid.csv -->
      ```text
      a,b
      ```

      <!-- slow: 50 s of compilation -->
      ```python
      print(1.5)  # -> 1.5
      ```
      words
      <!-- output -->
      ```
      1.5
      ```
      <!-- not-run: SLURM -->
      ```bash
      srun x
      ```
      """))
  (ex1, ex2) = collect_examples([doc])
  assert ex1.files == {"grid.csv": "a,b\n"} and ex1.block.markers == {"slow": "50 s of compilation"}
  assert [(t, b.line) for t, b in ex1.outputs] == [(None, 12)]
  assert ex2.block.markers == {"not-run": "SLURM"} and ex2.block.line == 16
  doc.write_text("<!-- not run: typo -->\n```bash\nls\n```\n")
  with pytest.raises(ValueError, match="unknown marker"):
    parse_blocks(doc)
  doc.write_text("<!-- not-run -->\n```bash\nls\n```\n")
  with pytest.raises(ValueError, match="needs its argument"):
    parse_blocks(doc)


def test_comparison_rule():
  # ellipsis: the value starts with the digits shown (truncation)
  assert number_matches("2.3817", True, 2.3817202814408454)
  assert not number_matches("2.3817", True, 2.38169)
  assert not number_matches("1.01400", True, 1.0139957322672866)   # rounded, not truncated
  assert number_matches("-0.5", True, -0.5999)
  # no ellipsis: rounds to the value shown
  assert number_matches("2.597", False, 2.5966)
  assert not number_matches("2.597", False, 2.5964)
  assert number_matches("18338", False, 18338) and not number_matches("18285", False, 18338)
  assert number_matches("1.3e9", False, 1.34e9) and not number_matches("1.3e9", False, 1.36e9)
  # a full repr: relative 1e-12, no more
  assert number_matches("2.5966419171663917", False, 2.5966419171663917 * (1 + 1e-13))
  assert not number_matches("2.5966419171663917", False, 2.5966419171663917 * (1 + 1e-11))
  assert number_matches("inf", False, math.inf) and not number_matches("inf", False, 1e308)


def test_stale_sweep_output_is_caught():
  """docs/cli.md once showed this output of `jaxdp sweep grid.csv` (issue 34,
  row 9) while the code printed the second one: the harness must say so."""
  stale = ("256,60000,60,1.1,1e-05,2.597079519672551,14063,0.004266666666666667\n"
           "256,60000,60,1.0144944606056008,1e-05,3,14063,0.004266666666666667\n"
           "256,60000,,1.1,1e-05,3,18285,0.004266666666666667\n")
  today = ("256,60000,60,1.1,1e-05,2.5966419171663917,14063,0.004266666666666667\n"
           "256,60000,60,1.0140120034,1e-05,3,14063,0.004266666666666667\n"
           "256,60000,,1.1,1e-05,3,18338,0.004266666666666667\n")
  assert compare_text(stale, stale) is None
  why = compare_text(stale, today)
  assert why and "2.597079519672551" in why
  assert compare_text(stale.splitlines()[2], today.splitlines()[2]) is not None   # 18285
  assert compare_text("epsilon = 2.3817…", "epsilon = 2.3817202814408454") is None
  assert compare_text("epsilon = 2.3817…", "epsilon_lower = 2.3817") is not None
  assert compare_value("(2.38075, 2.38200)", (2.380751, 2.3820004)) is None
  assert compare_value("2.597", np.float64(2.5966)) is None
  assert compare_value("2.597", [2.5966, 1.0]) is not None


# ---------------------------------------------------------------------------
# Claims the docs make about dp_accounting
# ---------------------------------------------------------------------------


@pytest.mark.slow   # ~10 s (the general PLD engine on a two-block pair); keeps the
                    # default suite's doc examples near their 60 s budget
def test_truncated_poisson_docstring_against_dp_accounting():
  """Issue 34, row 10: ``events.TruncatedPoissonGaussian``'s docstring says
  dp_accounting's PLD for truncated Poisson uses a replace-one branch and is
  looser than jaxdp's one-sided pair, with an example. Checked here, one case:
  dp_accounting (pessimistic PLD) >= jaxdp's tight ε >= a certified lower
  bound of the true ε (an attained pair of neighbouring datasets, every other
  gradient 0: a Poisson-sampled Gaussian at the example's real inclusion
  rate, whose ε dp_accounting's *optimistic* PLD bounds from below), and the
  docstring prints these very numbers."""
  dpa = pytest.importorskip("dp_accounting")
  from dp_accounting.pld import pld_privacy_accountant, privacy_loss_distribution
  from scipy import stats
  import jaxdp
  from jaxdp import events, sampling
  n, q, cap, sigma, steps, delta = 1437, 64 / 1437, 80, 1.92, 660, 1e-5

  acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
  acc.compose(dpa.TruncatedSubsampledGaussianDpEvent(n, q, cap, sigma), steps)
  eps_dpa = acc.get_epsilon(delta)

  _, eps = jaxdp.pld.epsilon(sampling.poisson(n, q, capacity=cap), sigma, steps, delta,
                             return_bounds=True)
  k = np.arange(n)
  q_in = q * float(np.sum(stats.binom.pmf(k, n - 1, q) * np.minimum(1.0, cap / (k + 1.0))))
  attained = privacy_loss_distribution.from_gaussian_mechanism(
      sigma, sampling_prob=q_in, pessimistic_estimate=False, use_connect_dots=False,
      value_discretization_interval=2e-4).self_compose(steps)
  eps_lower = attained.get_epsilon_for_delta(delta)

  assert eps_lower <= float(eps) <= eps_dpa
  assert float(eps) < 0.95 * eps_dpa          # tighter: the docstring's "8% higher"
  doc = " ".join(events.TruncatedPoissonGaussian.__doc__.split())
  for shown in (f"jaxdp's tight ε is {float(eps):.2f}", f"dp_accounting's {eps_dpa:.2f}",
                f"ε ≥ {math.floor(eps_lower * 100) / 100:.2f}"):
    assert shown in doc, f"the docstring's example is stale: {shown!r} not in it"


def test_sixty_epochs_of_mnist_are_14040_steps():
  """Issue 34, row 7: one epoch rule (jaxdp.sampling.epochs_to_steps). The
  docs once gave 60 epochs of MNIST (B = 256 of N = 60000) as 14062 or 14063
  steps; it is 60 × round(60000/256) = 14040 everywhere."""
  from jaxdp import sampling
  assert sampling.epochs_to_steps(60, sampling.poisson(60000, 256 / 60000, 352)) == 14040
  for path in DOC_FILES:
    text = path.read_text(encoding="utf-8")
    for stale in ("14062", "14063"):
      assert stale not in text, f"{path.relative_to(ROOT)} still says {stale} steps"
