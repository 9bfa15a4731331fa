"""benchmarks/methods.py: the table from fake runs (no training).

Each run's results.json and config.json are written by hand; the runner
reads them, averages over seeds, computes the online-vs-offline gap and
writes the JSON and the Markdown. A missing run counts as failed, a
missing evaluator as "—", and one seed has no ±.
"""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import methods, methods_config  # noqa: E402


def _fake_run(out, config, seed, *, probe, online, knn=0.7, rank=40.0,
              seconds=100.0, steps=234, batch=256, raw=None, epochs=1.0,
              trained_epochs=None):
  workdir = methods.run_dir(str(out), config, seed)
  os.makedirs(workdir)
  evals = {"probe/test_accuracy": probe, "knn/test_accuracy": knn,
           "random_init_probe/test_accuracy": 0.8,
           "rankme/rankme": rank, "online_probe/test_accuracy": online}
  if raw is not None:
    evals["raw_pixel_probe/test_accuracy"] = raw
  with open(os.path.join(workdir, "results.json"), "w") as f:
    record = {"evals": evals, "steps": steps,
              "seconds": {"train_steps": seconds}}
    if trained_epochs is not None:  # results.json's epochs actually trained
      record["epochs"] = trained_epochs
    json.dump(record, f)
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"batch_size": batch, "epochs": epochs}, f)


def test_table_means_stds_gaps_and_failures(tmp_path):
  _fake_run(tmp_path, "vicreg", 0, probe=0.80, online=0.78, raw=0.84)
  _fake_run(tmp_path, "vicreg", 1, probe=0.82, online=0.76, raw=0.84,
            seconds=200.0)
  _fake_run(tmp_path, "lejepa:cnn", 0, probe=0.88, online=0.47, epochs=0.5)
  os.makedirs(methods.run_dir(str(tmp_path), "lejepa:cnn", 1))  # failed
  assert methods.main(["--configs", "vicreg", "lejepa:cnn", "lejepa", "dino",
                       "--seeds", "0", "1", "--out", str(tmp_path),
                       "--table-only", "--doc",
                       str(tmp_path / "page.md")]) == 0
  saved = json.loads((tmp_path / "methods.json").read_text())
  vicreg, lejepa = saved["table"]["vicreg"], saved["table"]["lejepa:cnn"]
  assert vicreg["seeds"] == [0, 1] and vicreg["failed"] == []
  assert vicreg["probe"]["mean"] == pytest.approx(0.81)
  assert vicreg["probe"]["std"] == pytest.approx(0.0141421, abs=1e-6)
  assert vicreg["online_gap"]["mean"] == pytest.approx(-0.04)
  assert vicreg["gap_ok"] is True
  # images/s = steps × batch / train seconds, averaged over seeds.
  assert vicreg["images_per_second"]["mean"] == pytest.approx(
      (234 * 256 / 100 + 234 * 256 / 200) / 2)
  assert lejepa["seeds"] == [0] and lejepa["failed"] == [1]
  assert lejepa["online_gap"]["mean"] == pytest.approx(-0.41)
  assert lejepa["online_gap"]["std"] is None and lejepa["gap_ok"] is False
  assert lejepa["raw_pixel_probe"] == {"mean": None, "std": None, "n": 0}
  # With --doc the page lists every ViT-Tiny config it did not run.
  assert saved["skipped"] == {c: methods.VIT_REASON
                              for c in methods.VIT_CONFIGS}
  page = (tmp_path / "page.md").read_text()
  assert page == (f"{methods.BEGIN}\n"
                  f"{(tmp_path / 'methods.md').read_text().rstrip()}\n"
                  f"{methods.END}\n")
  rows = {line.split(" | ")[0][2:]: line for line in page.splitlines()
          if line.startswith("| `")}
  assert rows["`vicreg`"].startswith(
      "| `vicreg` | 2 | 1.0 ± 0.0 | 0.8100 ± 0.0141 |")
  assert "| 1 (1 failed) | 0.5 | 0.8800 |" in rows["`lejepa:cnn`"]
  assert "| -0.4100 |" in rows["`lejepa:cnn`"]
  assert "not run: ViT-Tiny" in rows["`lejepa`"]
  assert rows["`dino`"].startswith("| `dino` | 0 (not run) | — | — |")
  assert saved["table"]["dino"]["failed"] == []
  assert "more than 0.08 from the offline probe: `lejepa:cnn`" in page
  assert "Machine: " in page and "Command: `python benchmarks/methods.py" \
      in page


def test_epochs_column_is_what_the_run_trained(tmp_path):
  # A :cpu variant sets num_steps: 300 steps of 128 are 0.64 epoch while
  # its config.epochs keeps the default 4; the column reads the run's own
  # results.json, and falls back to config.epochs without it.
  _fake_run(tmp_path, "ijepa:cpu", 0, probe=0.75, online=0.60, steps=300,
            batch=128, epochs=4.0, trained_epochs=0.6410256)
  _fake_run(tmp_path, "vicreg", 0, probe=0.88, online=0.80, epochs=1.0)
  record = methods.read_run(os.path.join(
      methods.run_dir(str(tmp_path), "ijepa:cpu", 0), "results.json"))
  assert record["epochs"] == pytest.approx(0.6410256)
  record = methods.read_run(os.path.join(
      methods.run_dir(str(tmp_path), "vicreg", 0), "results.json"))
  assert record["epochs"] == 1.0


def test_mean_std_and_bad_input():
  assert methods.mean_std([]) == (None, None, 0)
  assert methods.mean_std([None, 0.5]) == (0.5, None, 1)
  mean, std, n = methods.mean_std([1.0, 2.0, 3.0])
  assert (mean, n) == (2.0, 3) and std == pytest.approx(1.0)
  assert methods.read_run("/nonexistent/results.json") is None
  with pytest.raises(SystemExit):
    methods.main(["--configs", "no_such_method", "--table-only"])
  with pytest.raises(SystemExit):
    methods.main(["--epochs", "0", "--table-only"])


def test_job_command_and_benchmark_config():
  cmd = methods.job_command("py", "lejepa:cnn", 2, 1.0, "w")
  assert cmd == ["py", "-m", "ssljax.main", "--config",
                 "benchmarks/methods_config.py:lejepa:cnn",
                 "--config.epochs=1", "--config.seed=2", "--workdir", "w"]
  # The small-ViT variants keep their config's epochs.
  assert methods.job_command("py", "dinov2:cpu", 0, None, "w")[4:] == [
      "benchmarks/methods_config.py:dinov2:cpu", "--config.seed=0",
      "--workdir", "w"]
  for name in methods.ALL_CONFIGS:  # every row's config exists and builds
    assert methods_config.get_config(name).evals
  config = methods_config.get_config("lejepa:cnn")
  assert sorted(config.evals.keys()) == sorted(methods_config.KEPT)
  assert all(config.evals[k].every_steps is None for k in config.evals)
  assert config.model.encoder == "cnn" and config.method == "lejepa"
  with pytest.raises(ValueError, match="not a method config"):
    methods_config.get_config("common")
  with pytest.raises(ValueError, match="give a config name"):
    methods_config.get_config(None)


def test_doc_keeps_the_text_around_its_markers(tmp_path):
  path = tmp_path / "page.md"
  path.write_text(f"intro\n{methods.BEGIN}\nold table\n{methods.END}\n"
                  "notes\n")
  methods.write_doc(str(path), "new table\n")
  assert path.read_text() == (f"intro\n{methods.BEGIN}\nnew table\n"
                              f"{methods.END}\nnotes\n")


def test_rerun_trains_from_step_zero_and_keeps_the_earlier_run(tmp_path):
  # A stand-in for `python -m ssljax.main`: records whether the workdir it
  # is given already holds checkpoints (the job would resume from them),
  # then writes a run's files.
  fake = tmp_path / "fake_python"
  fake.write_text(f"""#!{sys.executable}
import json, os, sys
w = sys.argv[sys.argv.index("--workdir") + 1]
fresh = not os.path.exists(os.path.join(w, "checkpoints"))
os.makedirs(os.path.join(w, "checkpoints"), exist_ok=True)
json.dump({{"evals": {{"probe/test_accuracy": 0.9 if fresh else 0.1}},
           "steps": 234, "seconds": {{"train_steps": 1.0}}}},
          open(os.path.join(w, "results.json"), "w"))
json.dump({{"batch_size": 256, "epochs": 1.0}},
          open(os.path.join(w, "config.json"), "w"))
""")
  fake.chmod(0o755)
  out = tmp_path / "out"
  _fake_run(out, "vicreg", 0, probe=0.5, online=0.4)
  earlier = methods.run_dir(str(out), "vicreg", 0)
  os.makedirs(os.path.join(earlier, "checkpoints"))
  argv = ["--configs", "vicreg", "--seeds", "0", "--out", str(out),
          "--python", str(fake)]
  methods.main(argv)  # results.json exists: read, not run
  assert json.load(open(os.path.join(out, "methods.json")))
  with open(os.path.join(earlier, "results.json")) as f:
    assert json.load(f)["evals"]["probe/test_accuracy"] == 0.5
  methods.main(argv + ["--rerun"])
  with open(os.path.join(earlier, "results.json")) as f:
    assert json.load(f)["evals"]["probe/test_accuracy"] == 0.9  # step 0
  kept = [d for d in os.listdir(os.path.dirname(earlier))
          if d.startswith("seed0.before-rerun-")]
  assert len(kept) == 1
  with open(os.path.join(os.path.dirname(earlier), kept[0],
                         "results.json")) as f:
    assert json.load(f)["evals"]["probe/test_accuracy"] == 0.5


def test_doc_rows_are_kept_when_a_later_run_covers_only_some(tmp_path):
  doc = tmp_path / "page.md"
  out1, out2 = tmp_path / "first", tmp_path / "second"
  for seed, probe in ((0, 0.88), (1, 0.86)):
    _fake_run(out1, "vicreg", seed, probe=probe, online=0.8)
    _fake_run(out1, "simclr", seed, probe=0.87, online=0.8)
  methods.main(["--configs", "vicreg", "simclr", "--seeds", "0", "1",
                "--out", str(out1), "--doc", str(doc), "--table-only"])
  rows = json.load(open(methods.rows_path(str(doc))))
  assert list(rows) == ["vicreg", "simclr"]
  assert rows["vicreg"]["row"]["probe"]["mean"] == pytest.approx(0.87)
  assert "--out " + str(out1) in rows["vicreg"]["command"]
  first_page = doc.read_text()
  assert "Command: `python benchmarks/methods.py" in first_page

  # A later run of simclr alone (another seed, another out): its row is
  # replaced, vicreg's is kept as it was, and the page names both commands.
  _fake_run(out2, "simclr", 2, probe=0.80, online=0.75)
  methods.main(["--configs", "simclr", "--seeds", "2", "--out", str(out2),
                "--doc", str(doc), "--table-only"])
  rows2 = json.load(open(methods.rows_path(str(doc))))
  assert list(rows2) == ["vicreg", "simclr"]  # table order, not run order
  assert rows2["vicreg"] == rows["vicreg"]
  assert rows2["simclr"]["row"]["probe"]["mean"] == pytest.approx(0.80)
  assert rows2["simclr"]["row"]["seeds"] == [2]
  page = doc.read_text()
  assert "| `vicreg` | 2 | 1.0 ± 0.0 | 0.8700 ± 0.0141 |" in page
  assert "| `simclr` | 1 | 1.0 | 0.8000 |" in page
  assert "Rows made by each command" in page
  assert page.count("`python benchmarks/methods.py") == 2
  (line,) = [l for l in page.splitlines() if str(out2) in l]
  assert line.endswith(": `simclr`")


def test_a_corrupt_rows_file_stops_before_any_run(tmp_path, capsys):
  doc = tmp_path / "page.md"
  (tmp_path / "page.json").write_text("{not json")
  out = tmp_path / "out"
  with pytest.raises(SystemExit) as e:
    methods.main(["--configs", "vicreg", "--seeds", "0", "--out", str(out),
                  "--doc", str(doc), "--python", "/nonexistent/python"])
  assert e.value.code == 2
  assert "page.json is not JSON" in capsys.readouterr().err
  assert not out.exists()  # nothing ran, nothing written
  assert (tmp_path / "page.json").read_text() == "{not json"


def test_a_rows_date_is_when_its_last_run_finished(tmp_path):
  _fake_run(tmp_path, "vicreg", 0, probe=0.8, online=0.7)
  _fake_run(tmp_path, "vicreg", 1, probe=0.8, online=0.7)
  for seed, t in ((0, 1_700_000_000), (1, 1_700_003_600)):  # 22:13, 23:13
    path = os.path.join(methods.run_dir(str(tmp_path), "vicreg", seed),
                        "results.json")
    os.utime(path, (t, t))
  assert methods.finished(str(tmp_path), "vicreg", [0, 1, 2]) == (
      "2023-11-14 23:13 UTC")
  assert methods.finished(str(tmp_path), "simclr", [0]) is None


def test_the_page_lists_the_vit_configs_it_did_not_run(tmp_path):
  doc = tmp_path / "page.md"
  _fake_run(tmp_path / "out", "vicreg", 0, probe=0.8, online=0.7)
  methods.main(["--configs", "vicreg", "--seeds", "0", "--out",
                str(tmp_path / "out"), "--doc", str(doc), "--table-only"])
  page = doc.read_text()
  for config in methods.VIT_CONFIGS:
    assert f"| `{config}` | 0 | not run: ViT-Tiny" in page
  assert "`simclr`" not in page  # not asked for, no kept row: no row
