"""Where the main job's wall time and memory go: phases and an RSS timeline.

    python benchmarks/main_job_breakdown.py --epochs 1 --out /tmp/after.json
    python benchmarks/main_job_breakdown.py --compare /tmp/before.json /tmp/after.json

Runs ``python -m ssljax.main --config configs/vicreg.py`` (``--config`` and
``--epochs`` change it; extra ``--config.x=y`` overrides are passed on) in a
child process started through this file, which records the start of each
phase in the child: imports (process start to ``train_and_evaluate``),
setup (data, model, evaluators), compile (the first train step, blocked
on), train (the other steps, periodic evaluators included), final
``eval/<name>`` for each evaluator after the last step, and shutdown (from
``train_and_evaluate``'s return to process exit). JAX's compile events are
summed (seconds of XLA compilation, persistent-cache hits and misses).

A thread of this process samples the child's resident set size
(``/proc/PID/status`` VmRSS) every ``--interval`` seconds and tags each
sample with the phase running then; the report gives, per phase, its wall
seconds and its highest RSS, and the process's peak RSS
(``getrusage(RUSAGE_CHILDREN)``). ``--out`` writes everything as JSON
(the timeline included); ``--compare`` prints two such files side by side.

``--tf-import`` only measures what importing TensorFlow (and
tensorflow_datasets) costs a fresh process in RSS and seconds, next to
importing JAX alone. Linux only (/proc). Run it on a machine as quiet as you
can: the load average at start and end is in the report.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENTS_ENV = "SSLJAX_BREAKDOWN_EVENTS"


# ------------------------------------------------------------------ child --
def _child(argv):
  """Runs ssljax.main with hooks that append "time phase" lines to a file."""
  path = os.environ[EVENTS_ENV]
  events = open(path, "a", buffering=1)  # pylint: disable=consider-using-with
  mark = lambda phase: events.write(f"{time.time():.4f} {phase}\n")
  sys.path.insert(0, os.environ.get("SSLJAX_BREAKDOWN_ROOT", ROOT))
  sys.argv = ["ssljax.main"] + argv
  from ssljax import main as job  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  from ssljax import evaluators, train  # pylint: disable=import-outside-toplevel

  compile_s = {"backend_compile": 0.0, "count": 0}
  cache = {"hits": 0, "misses": 0}

  def on_duration(event, secs, **_):
    if event.endswith("backend_compile_duration"):
      compile_s["backend_compile"] += secs
      compile_s["count"] += 1

  def on_event(event, **_):
    if event.endswith("compilation_cache/cache_hits"):
      cache["hits"] += 1
    elif event.endswith("compilation_cache/cache_misses"):
      cache["misses"] += 1

  jax.monitoring.register_event_duration_secs_listener(on_duration)
  jax.monitoring.register_event_listener(on_event)

  run_job = train.train_and_evaluate
  make_step = train.sharded_train_step
  build = evaluators.build

  def train_and_evaluate(*a, **k):
    mark("setup")
    try:
      return run_job(*a, **k)
    finally:
      mark("shutdown")
      events.write(f"# {json.dumps({'compile': compile_s, 'cache': cache})}\n")

  def sharded_train_step(*a, **k):
    step = make_step(*a, **k)
    calls = [0]

    def wrapped(*sa, **sk):
      calls[0] += 1
      if calls[0] == 1:
        mark("compile")
        out = jax.block_until_ready(step(*sa, **sk))
        mark("train")
        return out
      return step(*sa, **sk)
    return wrapped

  def build_evaluators(*a, **k):
    built = build(*a, **k)
    total = a[1].total_steps
    for ev in built:
      def run(state, _run=ev.run, _name=ev.name):
        final = int(jax.device_get(state.step)) >= total
        if final:
          mark(f"eval/{_name}")
        yield from _run(state)
      ev.run = run
    return built

  train.train_and_evaluate = train_and_evaluate
  train.sharded_train_step = sharded_train_step
  evaluators.build = build_evaluators
  from absl import app  # pylint: disable=import-outside-toplevel
  app.run(job.main, flags_parser=job.parse_flags)


# ----------------------------------------------------------------- parent --
def _rss_bytes(pid):
  try:
    with open(f"/proc/{pid}/status") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except OSError:
    return None
  return None


def run_job(args, extra) -> dict:
  """Runs the job once; phases, compile stats, RSS timeline and results."""
  workdir = args.workdir or tempfile.mkdtemp(prefix="breakdown_")
  events_path = os.path.join(workdir, "breakdown_events.txt")
  os.makedirs(workdir, exist_ok=True)
  if os.path.exists(events_path):
    os.remove(events_path)
  cmd = [sys.executable, os.path.abspath(__file__), "--child", "--",
         f"--config={args.config}", f"--workdir={workdir}",
         f"--config.epochs={args.epochs}"] + extra
  env = dict(os.environ, **{EVENTS_ENV: events_path})
  root = os.path.abspath(args.root)
  env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
  env["SSLJAX_BREAKDOWN_ROOT"] = root
  load_start = os.getloadavg()
  samples = []
  start = time.time()
  proc = subprocess.Popen(cmd, env=env, cwd=root, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
  done = threading.Event()

  def sample():
    while not done.is_set():
      rss = _rss_bytes(proc.pid)
      if rss is not None:
        samples.append((time.time(), rss))
      done.wait(args.interval)

  sampler = threading.Thread(target=sample, daemon=True)
  sampler.start()
  output = proc.stdout.read()
  proc.wait()
  end = time.time()
  done.set()
  sampler.join()
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
  if proc.returncode != 0:
    sys.stderr.write(output[-4000:])
    raise SystemExit(f"the job failed with status {proc.returncode}")
  marks, extra_info = [(start, "imports")], {}
  with open(events_path) as f:
    for line in f:
      if line.startswith("# "):
        extra_info = json.loads(line[2:])
        continue
      t, phase = line.split(maxsplit=1)
      marks.append((float(t), phase.strip()))
  marks.append((end, "exit"))
  phases = {}
  for (t0, name), (t1, _) in zip(marks, marks[1:]):
    rss = [r for t, r in samples if t0 <= t < t1]
    phases.setdefault(name, {"seconds": 0.0, "max_rss_gib": 0.0})
    phases[name]["seconds"] += t1 - t0
    phases[name]["max_rss_gib"] = max(phases[name]["max_rss_gib"],
                                      max(rss, default=0) / 2**30)
  timeline = []
  for t, r in samples:
    phase = [name for t0, name in marks if t0 <= t][-1]
    timeline.append((round(t - start, 3), round(r / 2**30, 4), phase))
  with open(os.path.join(workdir, "results.json")) as f:
    results = json.load(f)
  if args.workdir is None:  # a folder of our own: its checkpoints go too
    shutil.rmtree(workdir, ignore_errors=True)
  evals = results.get("evals", {})
  return {
      "command": " ".join(cmd[3:]),
      "wall_seconds": end - start,
      "peak_rss_gib": peak / 2**30,
      "peak_phase": max(timeline, key=lambda s: s[1])[2] if timeline else None,
      "phases": phases,
      "compile": extra_info.get("compile", {}),
      "cache": extra_info.get("cache", {}),
      "job_seconds": results.get("seconds", {}),
      "accuracy": {k: v for k, v in evals.items()
                   if k.endswith("test_accuracy")},
      "load_average": {"start": load_start, "end": os.getloadavg()},
      "timeline": timeline,
  }


def tf_import_cost() -> dict:
  """RSS and seconds of a fresh process after importing JAX alone, and after
  JAX + TensorFlow + tensorflow_datasets."""
  code = ("import resource, sys, time; t = time.time(); "
          "[__import__(m) for m in sys.argv[1:]]; "
          "print(time.time() - t, resource.getrusage("
          "resource.RUSAGE_SELF).ru_maxrss * 1024)")
  out = {}
  for label, mods in (("python", []), ("jax", ["jax", "jax.numpy"]),
                      ("jax+tensorflow+tfds", ["jax", "jax.numpy",
                                               "tensorflow",
                                               "tensorflow_datasets"])):
    text = subprocess.run([sys.executable, "-c", code] + mods, check=True,
                          capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
                          ).stdout.split()
    out[label] = {"seconds": float(text[0]),
                  "max_rss_gib": float(text[1]) / 2**30}
  return out


def _table(reports: list[tuple[str, dict]]) -> str:
  names = []
  for _, r in reports:
    names += [n for n in r["phases"] if n not in names]
  head = "| phase | " + " | ".join(
      f"{label} s | {label} max RSS GiB" for label, _ in reports) + " |"
  lines = [head, "|---" * (1 + 2 * len(reports)) + "|"]
  for n in names:
    cells = []
    for _, r in reports:
      p = r["phases"].get(n)
      cells += ([f"{p['seconds']:.1f}", f"{p['max_rss_gib']:.2f}"] if p
                else ["–", "–"])
    lines.append(f"| {n} | " + " | ".join(cells) + " |")
  rows = [("wall (process)", lambda r: f"{r['wall_seconds']:.1f}"),
          ("peak RSS GiB (getrusage)", lambda r: f"{r['peak_rss_gib']:.2f}"),
          ("phase at peak", lambda r: str(r["peak_phase"])),
          ("XLA compile s (count)", lambda r: "{:.1f} ({})".format(
              r["compile"].get("backend_compile", 0),
              r["compile"].get("count", 0))),
          ("cache hits / misses", lambda r: "{} / {}".format(
              r["cache"].get("hits", 0), r["cache"].get("misses", 0))),
          ("outside training / wall", lambda r: f"{outside_share(r):.2f}"),
          ("load average start/end", lambda r: "{:.1f}/{:.1f}".format(
              r["load_average"]["start"][0], r["load_average"]["end"][0]))]
  rows += [(k, (lambda k: lambda r: f"{r['accuracy'].get(k, float('nan')):.4f}")(k))
           for k in sorted({k for _, r in reports for k in r["accuracy"]})]
  for label, fn in rows:
    lines.append(f"| {label} | " + " | ".join(
        f"{fn(r)} | " for _, r in reports) + " |")
  return "\n".join(lines)


def outside_share(r: dict) -> float:
  """(start-up to first step + compile + final evaluators + shutdown) / wall."""
  inside = r["phases"].get("train", {}).get("seconds", 0.0)
  return 1.0 - inside / r["wall_seconds"]


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--config", default="configs/vicreg.py")
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--workdir", default=None)
  parser.add_argument("--root", default=ROOT,
                      help="the checkout whose ssljax runs (e.g. an older "
                      "commit's, for a before/after table)")
  parser.add_argument("--interval", type=float, default=0.05)
  parser.add_argument("--out", default=None, help="write the report as JSON")
  parser.add_argument("--label", default="run")
  parser.add_argument("--compare", nargs="+", metavar="JSON",
                      help="print the tables of earlier --out files")
  parser.add_argument("--tf-import", action="store_true")
  args, extra = parser.parse_known_args()
  if args.tf_import:
    print(json.dumps(tf_import_cost(), indent=2))
    return
  if args.compare:
    reports = []
    for path in args.compare:
      with open(path) as f:
        reports.append((os.path.splitext(os.path.basename(path))[0],
                        json.load(f)))
    print(_table(reports))
    return
  report = run_job(args, extra)
  if args.out:
    with open(args.out, "w") as f:
      json.dump(report, f, indent=1)
  print(_table([(args.label, report)]))


if __name__ == "__main__":
  if len(sys.argv) > 1 and sys.argv[1] == "--child":
    _child(sys.argv[3:] if sys.argv[2:3] == ["--"] else sys.argv[2:])
  else:
    main()
