"""benchmarks/vs_pytorch.py: the runner's bookkeeping, and the PyTorch
evaluation against ours when torch is importable.

The runner needs only the standard library: its medians and ratios on fake
records, its table, and run_child on tiny Python children (a timeout is
recorded, not raised; the exit status, CPU time and the memory of a
grandchild are counted). The PyTorch job's probe and k-NN are checked
against ssljax.probes on the same features only where torch is installed
(the ``bench`` extra); elsewhere that test is skipped. No speed is asserted.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import vs_pytorch  # noqa: E402


def record(framework, pair, wall, *, epochs=1, rc=0, pss=None, rss=2 << 30,
           probe=0.8, knn=0.7):
  return {"framework": framework, "pair": pair, "epochs": epochs,
          "returncode": rc, "timed_out": False, "wall_seconds": wall,
          "cpu_seconds": 2 * wall, "train_seconds": wall / 2,
          "peak_rss_bytes": rss, "peak_tree_rss_bytes": pss,
          "peak_tree_pss_bytes": pss, "probe": probe, "knn": knn,
          "load_before": 1.0}


def test_aggregate_medians_ratios_and_failures():
  records = [record("ssljax", 0, 10.0), record("pytorch", 0, 20.0),
             record("ssljax", 1, 30.0), record("pytorch", 1, 40.0),
             record("ssljax", 2, 20.0), record("pytorch", 2, 10.0),
             # A failed run is left out of the medians and counted.
             record("pytorch", 3, 1000.0, rc=1),
             record("ssljax", 3, 5.0, epochs=4)]
  summary = vs_pytorch.aggregate(records)
  assert set(summary) == {"1", "4"}
  one = summary["1"]
  assert one["failed"] == 1
  assert one["ssljax"]["runs"] == 3 and one["pytorch"]["runs"] == 3
  assert one["ssljax"]["wall_seconds"] == 20.0
  assert one["pytorch"]["wall_seconds"] == 20.0
  assert one["ratio"]["wall_seconds"] == pytest.approx(1.0)
  assert one["ratio"]["cpu_seconds"] == pytest.approx(1.0)
  # Per-pair ratios 0.5, 0.75, 2.0; pair 3 has no successful ssljax run.
  assert one["wall_ratio_range"] == pytest.approx([0.5, 2.0])
  # Only one side at 4 epochs: no ratio, no range.
  four = summary["4"]
  assert four["pytorch"]["wall_seconds"] is None
  assert four["ratio"]["wall_seconds"] is None
  assert four["wall_ratio_range"] is None


def test_memory_prefers_the_sampled_tree_pss():
  assert vs_pytorch.memory_of(record("ssljax", 0, 1.0, pss=3 << 30)) == (
      3 << 30, "tree PSS")
  assert vs_pytorch.memory_of(record("ssljax", 0, 1.0)) == (2 << 30,
                                                            "ru_maxrss")


def test_markdown_table_shows_medians_and_ratios():
  records = [record("ssljax", 0, 50.0, probe=0.87, knn=0.83),
             record("pytorch", 0, 100.0, probe=0.88, knn=0.82)]
  table = vs_pytorch.markdown_table(vs_pytorch.aggregate(records))
  assert "| wall (median) | 50.0 s | 100.0 s | 0.50 (0.50–0.50) |" in table
  assert "| probe | 0.8700 | 0.8800 | |" in table
  assert "peak memory (ru_maxrss)" in table


def test_run_child_records_a_timeout(tmp_path):
  # The child would print "finished" after its sleep: killed at the timeout,
  # it never does (a kill that missed would let it finish, then fail here).
  # Whether it got to "started" within the 1 s is the machine's speed.
  child = ("import time; print('started', flush=True); time.sleep(60);"
           " print('finished', flush=True)")
  log = tmp_path / "log.txt"
  out = vs_pytorch.run_child([sys.executable, "-c", child],
                             log_path=str(log), timeout=1.0,
                             sample_seconds=0.2)
  assert out["timed_out"] and out["returncode"] is None
  assert "finished" not in log.read_text()


def test_run_child_counts_a_grandchild(tmp_path):
  # The grandchild touches 200 MiB and lives 1.5 s; the child exits 3.
  grandchild = ("b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]);"
                " import time; time.sleep(1.5)")
  child = (f"import subprocess, sys; subprocess.run([sys.executable, '-c', "
           f"{grandchild!r}]); sys.exit(3)")
  out = vs_pytorch.run_child([sys.executable, "-c", child],
                             log_path=str(tmp_path / "log.txt"), timeout=60,
                             sample_seconds=0.1)
  assert out["returncode"] == 3 and not out["timed_out"]
  assert out["peak_rss_bytes"] >= 200 << 20  # ru_maxrss of the largest
  if out["peak_tree_rss_bytes"] is not None:  # psutil importable
    assert out["peak_tree_rss_bytes"] >= 200 << 20


def test_torch_probe_and_knn_follow_our_protocol():
  torch = pytest.importorskip(
      "torch", reason="torch is not installed (the optional bench extra)")
  from ssljax import probes  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  centres = 1.5 * rng.normal(size=(4, 16))
  y_train, y_test = rng.integers(0, 4, 800), rng.integers(0, 4, 400)
  x_train = (centres[y_train] + rng.normal(size=(800, 16))).astype(np.float32)
  x_test = (centres[y_test] + rng.normal(size=(400, 16))).astype(np.float32)
  ours = probes.linear_probe(x_train, y_train, x_test, y_test,
                               l2_grid=vs_pytorch.L2_GRID, max_iter=100,
                               max_search_rows=20000, seed=0)
  t = lambda a: torch.from_numpy(np.asarray(a))
  theirs = vs_pytorch.linear_probe(t(x_train), t(y_train), t(x_test),
                                   t(y_test), seed=0)
  # Same split, standardisation and objective; L-BFGS runs differ slightly.
  assert abs(theirs["test_accuracy"] - ours["test_accuracy"]) <= 0.02
  knn = probes.knn_accuracy(x_train, y_train, x_test, y_test, k=20,
                              temperature=0.07)
  assert vs_pytorch.knn_accuracy(t(x_train), t(y_train), t(x_test),
                                 t(y_test)) == pytest.approx(knn, abs=1e-9)


def test_torch_job_mirrors_the_main_jobs_views():
  # The transform is built from VIEWS, which must follow configs/vicreg.py;
  # the ops the mirror does not build must stay off in the main job.
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  views = vicreg.get_config().views
  assert {k: (tuple(views[k]) if isinstance(views[k], tuple) else views[k])
          for k in vs_pytorch.VIEWS} == vs_pytorch.VIEWS
  assert views.crop == "random_resized" and views.num_local == 0
  assert views.num_global == 2 and views.size == 0
  assert views.blur_prob == views.solarize_prob == views.noise_std == 0


def test_torch_job_mirrors_the_main_jobs_optimiser_and_schedule():
  # The PyTorch job is only a fair comparison while it trains with the main
  # job's optimiser: OPTIM must follow configs/vicreg.py, and its LambdaLR
  # factor must be our optax schedule divided by the peak, step by step.
  from configs import vicreg  # pylint: disable=import-outside-toplevel
  from ssljax import optimizers  # pylint: disable=import-outside-toplevel
  config = vicreg.get_config()
  assert config.optim.name == "adamw" and config.batch_size == 256
  assert {k: config.optim[k] for k in vs_pytorch.OPTIM} == vs_pytorch.OPTIM
  optim = config.optim
  for epochs in (4, 1):  # 1: the warm-up is cut to total - 1 steps
    total = epochs * 234
    lr_fn = optimizers.create_learning_rate_fn(optim, 256, 234, total)
    steps = np.arange(total + 1)
    ours = np.asarray([float(lr_fn(s)) for s in steps])
    theirs = np.asarray([vs_pytorch.schedule_factor(int(s), dict(optim), 234,
                                                    total) for s in steps])
    np.testing.assert_allclose(theirs * optim.learning_rate, ours, rtol=1e-5,
                               atol=1e-9)


def test_torch_command_passes_seed_and_optimiser_to_the_job(monkeypatch):
  """`vs_pytorch.py torch --seed S --learning-rate X` reaches torch_job (so a
  seed of the PyTorch job pairs with the main job's --config.seed)."""
  calls = []
  monkeypatch.setattr(vs_pytorch, "torch_job",
                      lambda epochs, **kw: calls.append((epochs, kw)) or {})
  vs_pytorch.main(["torch", "--epochs", "1", "--seed", "2",
                   "--learning-rate", "1e-3"])
  ((epochs, kw),) = calls
  assert epochs == 1 and kw["seed"] == 2
  assert kw["optim"] == {**vs_pytorch.OPTIM, "learning_rate": 1e-3}
