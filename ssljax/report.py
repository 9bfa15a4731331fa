"""One PNG that summarises a run: ``write_report(workdir)``.

Reads ``workdir/metrics.jsonl`` (lines ``{"step": s, name: value, ...}``
written by `ssljax.monitor.MetricWriter`) and, when present,
``workdir/config.json`` and ``workdir/results.json``, and draws with
matplotlib (Agg, no display) one panel per kind of quantity, so that no two
quantities of different units share an axis:

- "loss terms": the loss and each term of the train step (log scale when
  all are positive; an evaluator's own train-step scalars, such as the
  online probe's loss, are left out, its accuracies join the accuracies);
- "learning rate": the learning rate, and the methods' schedules
  (``*_momentum``, ``*_temperature``) on a second axis;
- "accuracies": the final value of every metric of the evaluators that
  score against labels (``uses_labels`` of `ssljax.evaluators.Evaluator`),
  as labelled horizontal bars, a ``<metric>_std`` drawn as its error bar;
  a second panel draws those logged more than once against the step;
- "label-free metrics": the evaluators that do not use labels (RankMe,
  LiDAR, any new one), each curve divided by its final value (the legend
  gives the final value); their final values, including the evaluators
  that run only after the last step, are listed in the "final values" table;
- "spectrum": every logged 1-D array (eigenvalues), the last of each,
  divided by its largest value, on log-log axes;
- measured against predicted eigenvalues, when metrics named
  ``".../eigenvalue_<i>"`` and ``".../ode_eigenvalue_<i>"`` exist.

An evaluator's kind comes from its type in config.json; without one (a
metrics file alone) a metric whose name contains "accuracy" is an accuracy.
Kinds without metrics get no panel; a run without metrics gets one panel
saying so.
"""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np

__all__ = ["write_report", "draw_report", "read_metrics", "metric_kinds",
           "PANEL_KINDS"]

PANEL_KINDS = ("loss terms", "learning rate", "accuracies",
               "accuracies during training", "label-free metrics",
               "final values", "spectrum", "measured vs predicted")
# Train-loop bookkeeping, not worth a panel.
_SKIPPED = ("host_peak_rss_mib", "grad_norm")
_SCHEDULE = re.compile(r".*_(momentum|temperature)$")
_MEASURED = re.compile(r"(.*)/eigenvalue_(\d+)$")
_PREDICTED = re.compile(r"(.*)/ode_eigenvalue_(\d+)$")
_TABLE_ROWS = 18


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


def metric_kinds(workdir: str) -> dict[str, bool]:
  """Evaluator entry name -> whether it scores against labels, from the
  types of ``config.json``'s ``evals`` ({} without a readable config)."""
  try:
    with open(os.path.join(workdir, "config.json")) as f:
      evals = json.load(f).get("evals") or {}
  except (OSError, json.JSONDecodeError, AttributeError):
    return {}
  from ssljax import evaluators  # pylint: disable=import-outside-toplevel
  kinds = {}
  for name, entry in evals.items():
    try:
      kinds[name] = bool(evaluators.load_type(entry["type"]).uses_labels)
    except (ValueError, KeyError, TypeError):
      continue
  return kinds


def _panels(scalars: dict, arrays: dict, labelled: dict) -> list[tuple]:
  """(kind, title, data) per panel, in drawing order."""
  train = {n: c for n, c in scalars.items() if "/" not in n
           and n not in _SKIPPED}
  # An evaluator's train-step scalars ("online_probe_train_accuracy"): its
  # accuracies join the accuracies, the rest (its own loss) stays out.
  own = {n for n in train if any(n.startswith(e + "_") for e in labelled)}
  train_accuracies = {n: train.pop(n) for n in list(train)
                      if "accuracy" in n}
  for n in own:
    train.pop(n, None)
  panels = []
  terms = {n: c for n, c in train.items()
           if n != "learning_rate" and not _SCHEDULE.match(n)}
  if terms:
    panels.append(("curves", "loss terms", terms))
  if "learning_rate" in train:
    panels.append(("schedule", "learning rate", (
        train["learning_rate"],
        {n: c for n, c in train.items() if _SCHEDULE.match(n)})))
  accuracies, label_free, stds = dict(train_accuracies), {}, {}
  for name, curve in scalars.items():
    if "/" not in name or _MEASURED.match(name) or _PREDICTED.match(name):
      continue
    group, metric = name.split("/", 1)
    if metric == "l2":  # a chosen hyper-parameter, not a quality
      continue
    if metric.endswith("_std") and f"{group}/{metric[:-4]}" in scalars:
      stds[f"{group}/{metric[:-4]}"] = curve[1][-1]
      continue
    uses_labels = labelled.get(group, "accuracy" in metric)
    (accuracies if uses_labels else label_free)[name] = curve
  if accuracies:
    panels.append(("bars", "accuracies", (accuracies, stds)))
    moving = {n: c for n, c in accuracies.items() if len(c[0]) > 1}
    if moving:
      panels.append(("curves", "accuracies during training", moving))
  if label_free:
    moving = {n: c for n, c in label_free.items() if len(c[0]) > 1}
    if moving:
      panels.append(("relative", "label-free metrics", moving))
    panels.append(("table", "final values", label_free))
  if arrays:
    panels.append(("spectrum", "spectrum", arrays))
  pairs = {}
  for name, curve in scalars.items():
    for pattern, role in ((_MEASURED, "measured"), (_PREDICTED, "predicted")):
      match = pattern.match(name)
      if match and not (role == "measured" and _PREDICTED.match(name)):
        pairs.setdefault(match.group(1), {}).setdefault(
            int(match.group(2)), {})[role] = curve
  both = {(p, i): c for p in sorted(pairs) for i, c in pairs[p].items()
          if len(c) == 2}
  if both:
    panels.append(("theory", "measured vs predicted", both))
  return panels


def _finish(ax, title, xlabel="step"):
  ax.set_title(title, fontsize=10)
  ax.set_xlabel(xlabel, fontsize=8)
  ax.tick_params(labelsize=7)
  ax.grid(alpha=0.3, which="both")
  if ax.get_legend_handles_labels()[0]:
    ax.legend(fontsize=6)


def _plot_curves(ax, title, curves, last_step):
  for label, (steps, values) in sorted(curves.items()):
    ax.plot(steps, values, "-" if len(steps) > 1 else "o", label=label,
            lw=2.0 if label == "loss" else 1.2, markersize=4)
  finite = [v for _, values in curves.values() for v in values
            if math.isfinite(v)]
  if finite and min(finite) > 0 and max(finite) > 20 * min(finite):
    ax.set_yscale("log")
  ax.set_xlim(0, max(last_step, 1) * 1.02)
  _finish(ax, title)


def _plot_schedule(ax, title, data, last_step):
  (steps, values), schedules = data
  ax.plot(steps, values, "-", color="C0")
  ax.set_ylabel("learning rate", fontsize=8, color="C0")
  ax.set_xlim(0, max(last_step, 1) * 1.02)
  ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
  if schedules:
    twin = ax.twinx()
    for j, (label, (s, v)) in enumerate(sorted(schedules.items())):
      twin.plot(s, v, "--", color=f"C{j + 1}", label=label)
    twin.tick_params(labelsize=7)
    twin.legend(fontsize=6, loc="lower right")
  _finish(ax, title)


def _plot_bars(ax, title, data):
  accuracies, stds = data
  names = sorted(accuracies)
  finals = [accuracies[n][1][-1] for n in names]
  errors = [stds.get(n, 0.0) for n in names]
  y = np.arange(len(names))
  ax.barh(y, finals, xerr=errors, color="C2", alpha=0.8, capsize=2)
  for yi, value, error in zip(y, finals, errors):
    ax.text(min(value + error, 1.0) + 0.01, yi, f"{value:.4f}", va="center",
            fontsize=6)
  ax.set_yticks(y, names, fontsize=6)
  ax.invert_yaxis()
  ax.set_xlim(0, 1.2)
  _finish(ax, title + " (final)", xlabel="accuracy")


def _plot_relative(ax, title, curves, last_step):
  for label, (steps, values) in sorted(curves.items()):
    final = values[-1]
    scaled = [v / final if final else v for v in values]
    ax.plot(steps, scaled, "-", label=f"{label} (final {final:.4g})")
  ax.set_xlim(0, max(last_step, 1) * 1.02)
  ax.set_ylabel("value / final value", fontsize=8)
  _finish(ax, title)


def _plot_table(ax, title, values):
  rows = [(n, f"{c[1][-1]:.4g}", str(c[0][-1]))
          for n, c in sorted(values.items())]
  if len(rows) > _TABLE_ROWS:
    rows = rows[:_TABLE_ROWS - 1] + [(f"... {len(rows) - _TABLE_ROWS + 1} "
                                      "more in metrics.jsonl", "", "")]
  ax.axis("off")
  table = ax.table(cellText=rows, colLabels=("metric", "final", "step"),
                   colWidths=(0.64, 0.2, 0.16), loc="upper center",
                   cellLoc="left", bbox=(0, 0, 1, 1))
  table.auto_set_font_size(False)
  table.set_fontsize(6)
  ax.set_title(title + " (label-free)", fontsize=10)


def _plot_spectrum(ax, title, arrays):
  for label, (step, values) in sorted(arrays.items()):
    values = np.sort(values[np.isfinite(values) & (values > 0)])[::-1]
    if len(values):
      ax.loglog(np.arange(1, len(values) + 1), values / values[0], ".-",
                markersize=3, label=f"{label} (step {step})")
  ax.set_ylabel("eigenvalue / largest", fontsize=8)
  _finish(ax, title, xlabel="rank")


def _plot_theory(ax, title, pairs):
  for j, ((prefix, index), pair) in enumerate(sorted(pairs.items())):
    colour = f"C{j % 10}"
    ax.plot(*pair["measured"], "-", color=colour,
            label=f"{prefix} λ{index} measured")
    ax.plot(*pair["predicted"], "--", color=colour, label="predicted")
  _finish(ax, title)


def draw_report(workdir: str):
  """The report figure of a run (see the module docstring).

  Returns:
    (matplotlib Figure, list of the panel titles in drawing order).

  Raises:
    FileNotFoundError: ``workdir`` does not exist.
  """
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel

  if not os.path.isdir(workdir):
    raise FileNotFoundError(f"no run directory {workdir}")
  rows = read_metrics(os.path.join(workdir, "metrics.jsonl"))
  scalars, arrays = _series(rows)
  last_step = max((row["step"] for row in rows), default=0)
  panels = _panels(scalars, arrays, metric_kinds(workdir))
  panels = panels or [("empty", "no metrics logged", None)]
  columns = min(3, len(panels))
  lines = -(-len(panels) // columns)
  fig, axes = plt.subplots(lines, columns, squeeze=False,
                           figsize=(5.2 * columns, 3.8 * lines),
                           layout="constrained")
  for ax, (kind, title, data) in zip(axes.flat, panels):
    if kind == "curves":
      _plot_curves(ax, title, data, last_step)
    elif kind == "schedule":
      _plot_schedule(ax, title, data, last_step)
    elif kind == "bars":
      _plot_bars(ax, title, data)
    elif kind == "relative":
      _plot_relative(ax, title, data, last_step)
    elif kind == "table":
      _plot_table(ax, title, data)
    elif kind == "spectrum":
      _plot_spectrum(ax, title, data)
    elif kind == "theory":
      _plot_theory(ax, title, data)
    else:
      ax.axis("off")
      ax.text(0.5, 0.5, title, ha="center", va="center")
  for ax in list(axes.flat)[len(panels):]:
    ax.remove()
  fig.suptitle(_title(workdir), fontsize=11)
  return fig, [title for _, title, _ in panels]


def write_report(workdir: str, path: str | None = None) -> str:
  """Draws the run's report (`draw_report`) into one PNG.

  Args:
    workdir: the run's directory (holds metrics.jsonl; config.json and
      results.json are optional: the evaluators' kinds, and the title).
    path: where to write; None: ``workdir/report.png``.

  Returns:
    the path of the PNG.

  Raises:
    FileNotFoundError: ``workdir`` does not exist.
  """
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, _ = draw_report(workdir)
  path = path or os.path.join(workdir, "report.png")
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return path


def _title(workdir: str) -> str:
  """The run's name, method, dataset and length (results.json, if any)."""
  title = os.path.basename(os.path.normpath(workdir))
  try:
    with open(os.path.join(workdir, "results.json")) as f:
      results = json.load(f)
  except (OSError, json.JSONDecodeError):
    return title
  words = [str(results[k]) for k in ("method", "dataset", "graph")
           if k in results]
  if "steps" in results:
    words.append(f"{results['steps']} steps")
  return " · ".join([title] + words)
