"""Every shipped method at one budget, several seeds: one table.

    python benchmarks/methods.py --epochs 1 --seeds 0 1 2 \\
        --out runs/methods_benchmark --doc docs/methods_benchmark.md
    python benchmarks/methods.py --configs vicreg lejepa:cnn --seeds 0

Each (config, seed) is one child process, one after the other::

    python -m ssljax.main --config benchmarks/methods_config.py:<config> \\
        --config.epochs=<E> --config.seed=<S> --workdir <out>/<config>/seed<S>

`benchmarks/methods_config.py` is the shipped ``configs/<config>.py``
unchanged but for its evaluators: the table's six (linear probe, 20-NN,
random-init probe, raw-pixel probe, RankMe, online probe), each once after
the last step. A run whose ``results.json`` exists is read, not rerun, so an
interrupted benchmark resumes; ``--rerun`` trains again from step 0, after
moving the run's earlier folder aside to ``<workdir>.before-rerun-<UTC
time>`` (kept, not deleted).

The table (``<out>/methods.json``, ``<out>/methods.md`` and, with
``--doc``, that Markdown page, between its markers `BEGIN` and `END` when
it has them) has one row per config. With ``--doc`` the page's rows are
also kept as JSON beside it (``docs/methods_benchmark.json`` for
``docs/methods_benchmark.md``), each with the command, machine and date
that made it; a later run that covers only some configs replaces their
rows and keeps the others, and the page lists which command made which
rows::

    python benchmarks/methods.py --configs mae:cpu --seeds 0 1 2 \\
        --out runs/mb_mae --doc docs/methods_benchmark.md

Each row has each metric's mean ±
sample standard deviation over the seeds that finished (± — with one seed),
the number of seeds, and the online probe's gap to the offline probe
(online − offline test accuracy, per seed, then mean ± std; the target is
|gap| <= 0.08). Metrics, all read from the run's ``results.json``:
test accuracies of ``probe``, ``knn``, ``random_init_probe``,
``raw_pixel_probe`` and ``online_probe`` (fractions in [0, 1]); RankMe of the
test representation h (``rankme/rankme``, an effective rank, no unit);
images/s = train steps × batch / ``seconds.train_steps`` (images per second
of the train loop, each image with all its views); train time =
``seconds.train_steps`` (s). The page also gives the command, the machine
(``lscpu``'s model name, the core count) and the date.

The ViT-Tiny and larger configs (``ijepa``, ``mae``, ``dinov2`` and
``lejepa`` without ``:cnn``) are left out unless ``--include-vit``: on 2 CPU
cores one epoch of them takes hours; the table says so. Their small-ViT
``:cpu`` variants (``CPU_VIT_CONFIGS``) run by default, each at its own
config's epochs (``--epochs`` does not apply to them). The runner needs only the standard library.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The shipped method configs (configs/<name>.py, optionally :variant), in
# table order: the 14 methods, then the graph variants of VICReg. Not here:
# the recipes for other datasets (cifar_resnet18, imagenet*, imagenette*),
# vicreg_fast (the main job tuned for speed) and pal_human (a service).
CNN_CONFIGS = ("vicreg", "simclr", "barlow_twins", "spectral_contrastive",
               "frossl", "wmse", "byol", "simsiam", "mocov3", "nnclr",
               "dino", "swav", "lejepa:cnn", "vicreg_knn_graph",
               "vicreg_mixed_graph", "vicreg_supervised_graph")
# The small-ViT variants made to run in minutes on a CPU: each at its own
# budget (its config's epochs; --epochs does not apply to them).
CPU_VIT_CONFIGS = ("lejepa:cpu", "ijepa:cpu", "mae:cpu", "dinov2:cpu")
VIT_CONFIGS = ("lejepa", "ijepa", "mae", "dinov2")
VIT_REASON = ("ViT-Tiny or larger: one epoch takes hours on 2 CPU cores; run "
              "with --include-vit on an accelerator")
ALL_CONFIGS = CNN_CONFIGS + CPU_VIT_CONFIGS + VIT_CONFIGS

# Table columns: (key in a run record, header, digits).
METRICS = (("epochs", "epochs", 1), ("probe", "linear probe", 4), ("knn", "20-NN", 4),
           ("random_init_probe", "random-init probe", 4),
           ("raw_pixel_probe", "raw-pixel probe", 4),
           ("rankme", "RankMe (h)", 1), ("online_probe", "online probe", 4),
           ("online_gap", "online − offline", 4),
           ("images_per_second", "images/s", 0),
           ("train_seconds", "train time (s)", 0))
_EVALS = {"probe": "probe/test_accuracy", "knn": "knn/test_accuracy",
          "random_init_probe": "random_init_probe/test_accuracy",
          "raw_pixel_probe": "raw_pixel_probe/test_accuracy",
          "rankme": "rankme/rankme",
          "online_probe": "online_probe/test_accuracy"}
MAX_GAP = 0.08  # the target: |online − offline| at most this


def set_aside_name(workdir: str) -> str:
  """Where ``--rerun`` moves an earlier run's folder: ``<workdir>.before-
  rerun-<UTC time>``, with a counter when that name is taken."""
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime(
      "%Y%m%dT%H%M%SZ")
  name = f"{workdir.rstrip(os.sep)}.before-rerun-{stamp}"
  candidate, n = name, 1
  while os.path.exists(candidate):
    candidate, n = f"{name}-{n}", n + 1
  return candidate


def run_dir(out: str, config: str, seed: int) -> str:
  """``<out>/<config with ':' as '_'>/seed<seed>``: one run's workdir."""
  return os.path.join(out, config.replace(":", "_"), f"seed{seed}")


def job_command(python: str, config: str, seed: int, epochs: float | None,
                workdir: str) -> list[str]:
  """The argv of one run (module docstring); ``epochs`` None keeps the
  config's own."""
  epochs_flag = [] if epochs is None else [f"--config.epochs={epochs:g}"]
  return [python, "-m", "ssljax.main", "--config",
          f"benchmarks/methods_config.py:{config}", *epochs_flag,
          f"--config.seed={seed}", "--workdir", workdir]


def read_run(results_path: str) -> dict | None:
  """One run's metrics from its ``results.json``.

  Args:
    results_path: path of a run's results.json.

  Returns:
    {"probe", "knn", "random_init_probe", "raw_pixel_probe", "rankme",
    "online_probe" (floats or None where the evaluator has no value),
    "online_gap" (online − offline probe, None without both),
    "images_per_second", "train_seconds", "steps", "batch_size", "epochs"
    (the epochs the run trained, results.json's "epochs": steps × batch /
    train split, which a config's ``num_steps`` sets apart from its
    ``epochs``; config.epochs for a results.json without it)}, or None
    when the file is missing or not JSON.
  """
  try:
    with open(results_path) as f:
      results = json.load(f)
  except (OSError, ValueError):
    return None
  evals = results.get("evals", {})
  record = {key: _number(evals.get(name)) for key, name in _EVALS.items()}
  record["online_gap"] = (record["online_probe"] - record["probe"]
                          if None not in (record["online_probe"],
                                          record["probe"]) else None)
  train_seconds = _number(results.get("seconds", {}).get("train_steps"))
  steps = results.get("steps")
  batch, epochs = _config_fields(results_path)
  trained = _number(results.get("epochs"))
  record["epochs"] = trained if trained is not None else epochs
  record["train_seconds"] = train_seconds
  record["steps"], record["batch_size"] = steps, batch
  record["images_per_second"] = (steps * batch / train_seconds
                                 if train_seconds and steps and batch
                                 else None)
  return record


def _number(v):
  return float(v) if isinstance(v, (int, float)) and not isinstance(
      v, bool) and math.isfinite(v) else None


def _config_fields(results_path: str) -> tuple[int | None, float | None]:
  """(batch_size, epochs) of the run's config.json; None where missing."""
  try:
    with open(os.path.join(os.path.dirname(results_path),
                           "config.json")) as f:
      config = json.load(f)
  except (OSError, ValueError):
    return None, None
  try:
    batch = int(config["batch_size"])
  except (KeyError, TypeError, ValueError):
    batch = None
  return batch, _number(config.get("epochs"))


def mean_std(values) -> tuple[float | None, float | None, int]:
  """(mean, sample standard deviation or None for n < 2, n) of the
  non-None values; (None, None, 0) when there is none."""
  values = [v for v in values if v is not None]
  if not values:
    return None, None, 0
  mean = sum(values) / len(values)
  if len(values) < 2:
    return mean, None, len(values)
  var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
  return mean, math.sqrt(var), len(values)


def summarise(records: dict) -> dict:
  """Per config: each metric's mean, std and n over its seeds.

  Args:
    records: {config: {seed (str or int): run record of `read_run`, or
      None for a run that failed}}; a seed not run has no entry.

  Returns:
    {config: {"seeds": [seeds that finished], "failed": [seeds without a
    results.json], metric: {"mean", "std", "n"} for each of ``METRICS``,
    "gap_ok": True / False (|mean online gap| <= MAX_GAP) or None}}.
  """
  table = {}
  for config, by_seed in records.items():
    done = {s: r for s, r in by_seed.items() if r is not None}
    row = {"seeds": sorted(done, key=str),
           "failed": sorted((s for s, r in by_seed.items() if r is None),
                            key=str)}
    for key, _, _ in METRICS:
      mean, std, n = mean_std(r.get(key) for r in done.values())
      row[key] = {"mean": mean, "std": std, "n": n}
    gap = row["online_gap"]["mean"]
    row["gap_ok"] = None if gap is None else abs(gap) <= MAX_GAP
    table[config] = row
  return table


def _cell(stat: dict, digits: int) -> str:
  if stat["mean"] is None:
    return "—"
  text = f"{stat['mean']:.{digits}f}"
  if stat["std"] is not None:
    text += f" ± {stat['std']:.{digits}f}"
  return text


def markdown_table(table: dict, skipped: dict | None = None) -> str:
  """The table as Markdown: one row per config of `summarise`'s output,
  the seed count, then one row per skipped config with its reason.

  Args:
    table: `summarise`'s output.
    skipped: {config: reason} of configs not run (optional).

  Returns:
    the Markdown text (a header row, a rule, the rows), ending in a newline.
  """
  headers = ["config", "seeds"] + [h for _, h, _ in METRICS]
  lines = ["| " + " | ".join(headers) + " |",
           "|" + "|".join(["---"] * 2 + ["---:"] * len(METRICS)) + "|"]
  for config, row in table.items():
    seeds = str(len(row["seeds"]))
    if row["failed"]:
      seeds += f" ({len(row['failed'])} failed)"
    elif not row["seeds"]:
      seeds += " (not run)"
    cells = [_cell(row[key], digits) for key, _, digits in METRICS]
    lines.append("| " + " | ".join([f"`{config}`", seeds] + cells) + " |")
  for config, reason in (skipped or {}).items():
    lines.append("| " + " | ".join([f"`{config}`", "0"]
                                   + [f"not run: {reason}"]
                                   + ["—"] * (len(METRICS) - 1)) + " |")
  return "\n".join(lines) + "\n"


def machine() -> str:
  """``lscpu``'s model name and the CPU count (else platform's names)."""
  model = None
  try:
    out = subprocess.run(["lscpu"], capture_output=True, text=True,
                         timeout=10, check=False).stdout
    for line in out.splitlines():
      if line.startswith("Model name:"):
        model = line.split(":", 1)[1].strip()
  except (OSError, subprocess.SubprocessError):
    pass
  return (f"{model or platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs")


def page(table: dict, skipped: dict, *, provenance: dict,
         epochs: float) -> str:
  """The Markdown document: what was run, where, when, then the table.

  Args:
    table: `summarise`'s output (rows in table order).
    skipped: {config: reason} of configs not run.
    provenance: {config: {"command", "machine", "date"}} of each row in
      ``table``: the invocation that made it.
    epochs: the ``--epochs`` of the CNN rows.
  """
  gaps = [c for c, r in table.items() if r["gap_ok"] is False]
  groups = {}  # (command, machine, date) -> its rows, in table order
  for config in table:
    p = provenance[config]
    groups.setdefault((p["command"], p["machine"], p["date"]),
                      []).append(config)
  if len(groups) == 1:
    (command, machine_line, date), = groups
    made = [f"Command: `{command}`  ", f"Machine: {machine_line}  ",
            f"Date: {date}"]
  else:
    made = ["Rows made by each command (machine, date):", ""]
    for (command, machine_line, date), rows in sorted(
        groups.items(), key=lambda g: g[0][2]):
      made.append(f"- `{command}` ({machine_line}, {date}): "
                  + ", ".join(f"`{c}`" for c in rows))
  return "\n".join([
      "# Every method at one budget",
      "",
      "Pretraining on Fashion-MNIST for every shipped method config (the "
      "config as shipped; only the evaluators are trimmed to the six below, "
      f"`benchmarks/methods_config.py`), {epochs:g} epoch(s) each except "
      "the small-ViT `:cpu` variants, which keep their own budget (the "
      "*epochs* column), then the "
      "linear probe, the 20-NN vote, the random-init and raw-pixel probes, "
      "RankMe of the test representation and the online probe's test "
      "accuracy. Each cell is the mean ± sample standard deviation over the "
      "row's seeds (seed count in the second column; one seed: no ±; "
      "*not run*: no run of that config was made for this table). "
      "*online − offline* is the online probe's test accuracy minus the "
      f"linear probe's on the same run (the target: at most {MAX_GAP} "
      "apart). images/s counts images (each with all its views) per second "
      "of the train loop; train time is that loop's seconds.",
      "",
      *made,
      "",
      markdown_table(table, skipped),
      ("Online probe more than {:.2f} from the offline probe: {}.".format(
          MAX_GAP, ", ".join(f"`{c}`" for c in gaps)) if gaps else
       f"Every row's online probe is within {MAX_GAP} of its offline "
       "probe."),
      ""])


def finished(out: str, config: str, seeds) -> str | None:
  """When the last of ``config``'s runs under ``out`` finished (the UTC
  time of its newest ``results.json``, as "YYYY-MM-DD HH:MM UTC"), or None
  without one: a row's date, also when ``--table-only`` reads old runs."""
  times = []
  for seed in seeds:
    try:
      times.append(os.path.getmtime(
          os.path.join(run_dir(out, config, seed), "results.json")))
    except OSError:
      pass
  if not times:
    return None
  return datetime.datetime.fromtimestamp(
      max(times), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def rows_path(doc: str) -> str:
  """The page's rows as JSON, beside it: ``<doc without .md>.json``."""
  return os.path.splitext(doc)[0] + ".json"


def read_rows(path: str) -> dict:
  """The rows kept beside a page (`rows_path`): {config: {"row" (a
  `summarise` row), "runs" (its per-seed records), "command", "machine",
  "date"}}; {} when the file does not exist.

  Raises:
    ValueError: the file exists but is not such a JSON object (named).
  """
  try:
    with open(path) as f:
      rows = json.load(f)
  except FileNotFoundError:
    return {}
  except ValueError as e:
    raise ValueError(f"{path} is not JSON ({e}); fix or delete it") from None
  if not isinstance(rows, dict) or not all(
      isinstance(v, dict) and {"row", "command", "machine", "date"} <= set(v)
      for v in rows.values()):
    raise ValueError(f"{path} is not a JSON object of rows, each with 'row', "
                     "'command', 'machine' and 'date'; fix or delete it")
  return rows


BEGIN, END = "<!-- methods.py: begin -->", "<!-- methods.py: end -->"


def write_doc(path: str, document: str) -> None:
  """Writes ``document`` into the Markdown file ``path``: between its lines
  `BEGIN` and `END` when it has both (the text around them, e.g. notes
  written by hand, is kept), else as the whole file between the two
  markers."""
  block = f"{BEGIN}\n{document.rstrip()}\n{END}\n"
  try:
    with open(path) as f:
      old = f.read()
  except FileNotFoundError:
    old = ""
  start, end = old.find(BEGIN), old.find(END)
  if 0 <= start < end:
    text = old[:start] + block + old[end + len(END):].lstrip("\n")
  else:
    text = block
  with open(path, "w") as f:
    f.write(text)


def main(argv=None) -> int:
  """Runs the missing runs, then writes the table; exit status 1 if a run
  failed."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--configs", nargs="+", default=None,
                      help="configs/<name>[:variant] (default: all)")
  parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
  parser.add_argument("--epochs", type=float, default=1.0)
  parser.add_argument("--out", default=os.path.join("runs",
                                                    "methods_benchmark"))
  parser.add_argument("--doc", default=None,
                      help="also write the Markdown page here (and its rows as "
                      "JSON beside it; rows not run now are kept)")
  parser.add_argument("--include-vit", action="store_true")
  parser.add_argument("--rerun", action="store_true")
  parser.add_argument("--table-only", action="store_true",
                      help="read the runs under --out, run nothing")
  parser.add_argument("--timeout", type=float, default=3600.0,
                      help="seconds per run before it is killed")
  parser.add_argument("--python", default=sys.executable)
  args = parser.parse_args(argv)
  if args.epochs <= 0:
    parser.error(f"--epochs must be > 0, got {args.epochs}")
  configs = list(args.configs or ALL_CONFIGS)
  unknown = [c for c in configs if c not in ALL_CONFIGS]
  if unknown:
    parser.error(f"unknown config(s) {unknown}; choose from "
                 f"{list(ALL_CONFIGS)}")
  # With --doc, the page's other rows are kept (read from their JSON beside
  # it, before anything runs): a config with no run under --out this time
  # keeps its row.
  try:
    rows = read_rows(rows_path(args.doc)) if args.doc else {}
  except ValueError as e:
    parser.error(str(e))
  skipped = {}
  if not args.include_vit:
    skipped = {c: VIT_REASON for c in configs if c in VIT_CONFIGS}
    configs = [c for c in configs if c not in VIT_CONFIGS]
  records = {}
  failed = False
  for config in configs:
    records[config] = {}
    for seed in args.seeds:
      workdir = run_dir(args.out, config, seed)
      results = os.path.join(workdir, "results.json")
      if not args.table_only and (args.rerun or not os.path.exists(results)):
        if args.rerun and os.path.isdir(workdir):
          # Else the job resumes from the earlier run's checkpoints.
          os.rename(workdir, set_aside_name(workdir))
        os.makedirs(workdir, exist_ok=True)
        cmd = job_command(args.python, config, seed,
                          None if config in CPU_VIT_CONFIGS else args.epochs,
                          workdir)
        print(f"{config} seed {seed}: {shlex.join(cmd)}", flush=True)
        start = time.time()
        with open(os.path.join(workdir, "log.txt"), "w") as log:
          try:
            rc = subprocess.run(cmd, cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT,
                                timeout=args.timeout, check=False).returncode
          except subprocess.TimeoutExpired:
            rc = None
        print(f"  exit {rc}, {time.time() - start:.0f} s", flush=True)
        failed |= rc != 0
      if os.path.isdir(workdir):  # else not run (--table-only): no entry
        records[config][seed] = read_run(results)
  # The command that ran the runs (--table-only only reads them).
  command = "python benchmarks/methods.py " + shlex.join(
      a for a in (sys.argv[1:] if argv is None else argv)
      if a != "--table-only")
  made = {"command": command, "machine": machine(),
          "date": datetime.datetime.now(datetime.timezone.utc).strftime(
              "%Y-%m-%d %H:%M UTC")}
  ran = summarise({c: r for c, r in records.items() if r})
  for config, row in ran.items():
    rows[config] = {"row": row, "runs": records[config], **made,
                    "date": finished(args.out, config, records[config])
                    or made["date"]}
  for config in configs:  # asked for, no run (--table-only): "not run"
    rows.setdefault(config, {"row": summarise({config: {}})[config],
                             "runs": {}, **made})
  order = [c for c in ALL_CONFIGS if c in rows]
  table = {c: rows[c]["row"] for c in order}
  # The page lists every config: the ViT-Tiny ones not run say why.
  skipped = {c: VIT_REASON for c in (ALL_CONFIGS if args.doc else skipped)
             if c in VIT_CONFIGS and c not in table and not args.include_vit}
  document = page(table, skipped, provenance={c: rows[c] for c in order},
                  epochs=args.epochs)
  os.makedirs(args.out, exist_ok=True)
  with open(os.path.join(args.out, "methods.json"), "w") as f:
    json.dump({**made, "epochs": args.epochs, "table": table,
               "skipped": skipped, "runs": records}, f, indent=2,
              default=str)
  with open(os.path.join(args.out, "methods.md"), "w") as f:
    f.write(document)
  if args.doc:
    write_doc(args.doc, document)
    with open(rows_path(args.doc), "w") as f:
      json.dump({c: rows[c] for c in order}, f, indent=1, default=str)
      f.write("\n")
  print(markdown_table(table, skipped))
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
