"""benchmarks/probe_representations.py: a trained ViT run probed on other
representations reproduces the run's own probe and random-init probe on its
own representation."""

import json
import os
import sys

import pytest

from ssljax import train

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from benchmarks import probe_representations as tool  # noqa: E402  pylint: disable=g-import-not-at-top
from configs import mae as mae_config  # noqa: E402  pylint: disable=g-import-not-at-top


@pytest.fixture(scope="module")
def vit_run(fmnist_data_dir, tmp_path_factory):
  """A finished smoke run of MAE (a 2-block ViT) probed on its class token,
  with the linear probe and the random-init probe only."""
  workdir = str(tmp_path_factory.mktemp("mae_run"))
  config = mae_config.get_config("smoke")
  config.dataset.data_dir = fmnist_data_dir
  config.model.encoder_kwargs.representation = "cls"
  config.eval_inputs.baseline_cache = ""
  for name in list(config.evals.keys()):
    if name not in ("probe", "random_init_probe"):
      del config.evals[name]
  train.train_and_evaluate(config, workdir)
  with open(os.path.join(workdir, "final_evals.json")) as f:
    evals = json.load(f)["evaluators"]
  return workdir, evals


def test_reproduces_the_runs_probes_and_probes_other_representations(vit_run):
  workdir, evals = vit_run
  lines = []
  results = tool.probe_representations(
      workdir, ["cls", "avg_tokens"], random_init=True, cv_folds=2,
      out=lines.append)
  assert [json.loads(line) for line in lines] == results
  got = {(r["encoder"], r["representation"]): r for r in results}
  assert set(got) == {("trained", "cls"), ("trained", "avg_tokens"),
                      ("random_init", "cls"), ("random_init", "avg_tokens")}
  # The run's own representation: its evaluators' features and probe, for
  # the trained and the step-0 encoder (256 test images: one image is
  # 1/256; allow one, for features computed in another order).
  assert abs(got["trained", "cls"]["test_accuracy"]
             - evals["probe"]["probe/test_accuracy"]) <= 1 / 256
  assert abs(got["random_init", "cls"]["test_accuracy"]
             - evals["random_init_probe"]["random_init_probe/test_accuracy"]
             ) <= 1 / 256
  assert got["random_init", "cls"]["step"] == 0
  assert got["trained", "cls"]["step"] == 6
  for r in results:
    assert r["dim"] == 8 and 0.0 <= r["cv_accuracy"] <= 1.0


def test_refusals(vit_run, capsys):
  workdir, _ = vit_run
  with pytest.raises(ValueError, match="unknown representation"):
    tool.probe_representations(workdir, ["cls_last3"])
  # The smoke ViT has 2 blocks: the module's own one-line error.
  assert tool.main([workdir, "--representations", "cls_last4",
                    "--cv-folds", "0"]) == 2
  err = capsys.readouterr().err
  assert err.startswith("error: ") and "needs depth >= 4, got 2" in err
  assert tool.main([workdir, "--representations", "cls",
                    "--cv-folds", "1"]) == 2
