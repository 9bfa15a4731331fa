"""One PNG that summarises a run: ``write_report(workdir)``.

Reads ``workdir/metrics.jsonl`` (lines ``{"step": s, name: value, ...}``
written by `ssljax.monitor.MetricWriter`) and, when present,
``workdir/results.json``, and draws with matplotlib (Agg, no display):

- the loss and each loss term (the train step's scalars; log scale when
  positive), and the learning rate;
- one panel per evaluator (metrics ``"<evaluator>/<metric>"``): its scalar
  curves against the step; a metric logged once is a marker;
- the embedding spectrum: the last logged 1-D ``".../eigenvalues"``, sorted,
  on log-log axes;
- measured against predicted eigenvalues, when metrics named
  ``".../eigenvalue_<i>"`` (measured) and ``".../ode_eigenvalue_<i>"``
  (predicted by the linearised dynamics) exist: solid measured, dashed
  predicted, one colour per index.

Missing pieces are skipped: a run without evaluators still gets loss and
learning-rate panels.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

__all__ = ["write_report", "read_metrics"]

# Train-loop bookkeeping, not worth a panel.
_SKIPPED = ("host_peak_rss_mib", "grad_norm")
_MEASURED = re.compile(r"(.*)/eigenvalue_(\d+)$")
_PREDICTED = re.compile(r"(.*)/ode_eigenvalue_(\d+)$")


def read_metrics(path: str) -> list[dict]:
  """The JSON lines of a metrics.jsonl file (a line cut short is skipped)."""
  rows = []
  if not os.path.exists(path):
    return rows
  with open(path) as f:
    for line in f:
      try:
        row = json.loads(line)
      except json.JSONDecodeError:
        continue
      if isinstance(row, dict) and "step" in row:
        rows.append(row)
  return rows


def _series(rows: list[dict]) -> tuple[dict, dict]:
  """name -> (steps, values) of scalars; name -> (step, array) of the last
  logged 1-D array."""
  scalars, arrays = {}, {}
  for row in rows:
    step = row["step"]
    for name, value in row.items():
      if name == "step":
        continue
      if isinstance(value, list):
        arrays[name] = (step, np.asarray(value, np.float64))
      elif isinstance(value, (int, float)) and not isinstance(value, bool):
        steps, values = scalars.setdefault(name, ([], []))
        steps.append(step)
        values.append(float(value))
  return scalars, arrays


def _plot_curves(ax, curves: dict, title: str, last_step: int,
                 logy: bool = False):
  for label, (steps, values) in sorted(curves.items()):
    style = "o" if len(steps) == 1 else "-"
    ax.plot(steps, values, style, label=label, markersize=5)
  finite = [v for _, values in curves.values() for v in values
            if math.isfinite(v)]
  if logy and finite and min(finite) > 0:
    ax.set_yscale("log")
  ax.set_xlim(0, max(last_step, 1) * 1.03)  # final-only markers at the end
  ax.set_title(title)
  ax.set_xlabel("step")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)


def _panels(scalars: dict, arrays: dict) -> list[tuple]:
  """(kind, title, data) per panel, in drawing order."""
  train = {n: v for n, v in scalars.items() if "/" not in n
           and n not in _SKIPPED and n != "learning_rate"}
  groups = {}
  for name, curve in scalars.items():
    if "/" in name and not (_MEASURED.match(name) or _PREDICTED.match(name)):
      group, metric = name.split("/", 1)
      if metric == "l2":  # a chosen hyper-parameter, not a quality curve
        continue
      groups.setdefault(group, {})[metric] = curve
  panels = []
  loss = {n: v for n, v in train.items() if n == "loss"}
  terms = {n: v for n, v in train.items() if n != "loss"}
  if loss:
    panels.append(("curves_log", "loss", loss))
  if terms:
    panels.append(("curves", "loss terms", terms))
  if "learning_rate" in scalars:
    panels.append(("curves", "learning rate",
                   {"learning_rate": scalars["learning_rate"]}))
  for group in sorted(groups):
    panels.append(("curves", group, groups[group]))
  spectra = {n: a for n, a in arrays.items() if n.endswith("/eigenvalues")}
  for name in sorted(spectra):
    panels.append(("spectrum", name, spectra[name]))
  pairs = {}
  for name, curve in scalars.items():
    for pattern, role in ((_MEASURED, "measured"), (_PREDICTED, "predicted")):
      match = pattern.match(name)
      if match and not (role == "measured" and _PREDICTED.match(name)):
        pairs.setdefault(match.group(1), {}).setdefault(
            int(match.group(2)), {})[role] = curve
  for prefix in sorted(pairs):
    both = {i: c for i, c in pairs[prefix].items() if len(c) == 2}
    if both:
      panels.append(("theory", f"{prefix}: measured vs predicted", both))
  return panels


def _plot_spectrum(ax, title, data):
  step, values = data
  values = np.sort(values[np.isfinite(values) & (values > 0)])[::-1]
  if len(values):
    ax.loglog(np.arange(1, len(values) + 1), values, ".-")
  ax.set_title(f"{title} (step {step})")
  ax.set_xlabel("rank")
  ax.set_ylabel("eigenvalue")
  ax.grid(alpha=0.3, which="both")


def _plot_theory(ax, title, pairs):
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
  for j, index in enumerate(sorted(pairs)):
    colour = colours[j % len(colours)]
    steps, values = pairs[index]["measured"]
    ax.plot(steps, values, "-", color=colour, label=f"λ{index} measured")
    steps, values = pairs[index]["predicted"]
    ax.plot(steps, values, "--", color=colour, label=f"λ{index} predicted")
  ax.set_title(title)
  ax.set_xlabel("step")
  ax.legend(fontsize=7)
  ax.grid(alpha=0.3)


def write_report(workdir: str, path: str | None = None) -> str:
  """Draws the run's curves into one PNG.

  Args:
    workdir: the run's directory (holds metrics.jsonl; results.json is
      optional: its top-level numbers are printed in the figure title).
    path: where to write; None: ``workdir/report.png``.

  Returns:
    the path of the PNG.

  Raises:
    FileNotFoundError: ``workdir`` does not exist.
  """
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  if not os.path.isdir(workdir):
    raise FileNotFoundError(f"no run directory {workdir}")
  path = path or os.path.join(workdir, "report.png")
  rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
  scalars, arrays = _series(rows)
  last_step = max((row["step"] for row in rows), default=0)
  panels = _panels(scalars, arrays) or [("empty", "no metrics logged", None)]
  columns = min(3, len(panels))
  rows = -(-len(panels) // columns)
  fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows),
                           squeeze=False)
  for ax, (kind, title, data) in zip(axes.flat, panels):
    if kind in ("curves", "curves_log"):
      _plot_curves(ax, data, title, last_step, logy=kind == "curves_log")
    elif kind == "spectrum":
      _plot_spectrum(ax, title, data)
    elif kind == "theory":
      _plot_theory(ax, title, data)
    else:
      ax.text(0.5, 0.5, title, ha="center", va="center")
  for ax in list(axes.flat)[len(panels):]:
    ax.axis("off")
  fig.suptitle(_title(workdir))
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path


def _title(workdir: str) -> str:
  """The run's name and headline numbers of results.json, if any."""
  title = os.path.basename(os.path.normpath(workdir))
  results_path = os.path.join(workdir, "results.json")
  if not os.path.exists(results_path):
    return title
  try:
    with open(results_path) as f:
      results = json.load(f)
  except (OSError, json.JSONDecodeError):
    return title
  words = [str(results[k]) for k in ("method", "dataset") if k in results]
  numbers_ = [f"{k}={v:.4g}" for k, v in results.items()
              if k.endswith("accuracy") and isinstance(v, (int, float))]
  return " · ".join([title] + words + numbers_[:4])
