"""benchmarks/vs_lightly.py: the twins read our configs' recipes, and where
torch and lightly are importable (the ``bench`` extra), their losses,
target momentum and parameter shapes are ssljax's.

Without torch: every value the twin trains with equals the config's, the
config checks refuse what the twin does not build, the runner's means,
standard deviations, verdicts, table and commands, and the reuse of a
methods-benchmark run only when its config.json is this config. With torch
(skipped elsewhere): on a fixed batch each twin's loss (lightly's
VICRegLoss, NTXentLoss, BarlowTwinsLoss, and NegativeCosineSimilarity as
BYOL's and SimSiam's losses) equals ssljax's method loss in value and gradient; the
twin's trainable parameters have ssljax's count, and its target momentum
(lightly's cosine_schedule) is ssljax's at every step. No accuracy is
asserted.
"""

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from benchmarks import vs_lightly, vs_pytorch  # noqa: E402


@pytest.mark.parametrize("method", vs_lightly.METHODS)
def test_recipe_is_the_configs(method):
  config = vs_lightly.method_config(method)
  assert vs_lightly.mirror_problems(config) == []
  rec = vs_lightly.recipe(method)
  model = config.model
  assert rec["projector"] == tuple(model.projector)
  assert rec["predictor"] == (tuple(model.predictor) if "predictor" in model
                              else None)
  assert rec["head_last_bias"] == model.get("head_last_bias", True)
  assert rec["optim"] == {k: config.optim[k] for k in vs_pytorch.OPTIM}
  assert rec["views"] == {
      k: tuple(v) if isinstance(v, tuple) else v
      for k, v in ((k, config.views[k]) for k in vs_pytorch.VIEWS)}
  assert rec["loss"] == {k: v for k, v in config.loss.items() if k != "form"}
  assert rec["batch_size"] == config.batch_size == 256
  assert rec["representation_dim"] == model.encoder_kwargs.channels[-1]
  if method == "byol":
    assert rec["teacher"] == {"momentum": config.teacher.momentum,
                              "final_momentum": config.teacher.final_momentum}
  else:
    assert rec["teacher"] is None


def test_recipes_differ_where_the_configs_do():
  # Not one shared recipe: VICReg's lr and crops are its own, BYOL's heads,
  # end lr and teacher are its own.
  vicreg, simclr, byol = (vs_lightly.recipe(m)
                          for m in ("vicreg", "simclr", "byol"))
  assert vicreg["optim"]["learning_rate"] == 2 * simclr["optim"][
      "learning_rate"]
  assert vicreg["views"]["crop_scale"] == (0.4, 1.0)
  assert simclr["views"]["crop_scale"] == (0.2, 1.0)
  assert byol["projector"] == byol["predictor"] == (2048, 256)
  assert byol["head_last_bias"] is False
  assert byol["optim"]["end_lr_factor"] == 0.0


@pytest.mark.parametrize("field,value,expect", [
    ("optim.name", "lars", "optim.name"),
    ("views.blur_prob", 0.5, "views.blur_prob"),
    ("views.num_local", 2, "views.num_local"),
    ("views.flip_prob", (0.5, 0.0), "views.flip_prob"),
    ("model.encoder_kwargs.channels", (16, 32), "channels"),
    ("optim.clip_grad_norm", 1.0, "clip_grad_norm"),
    ("loss.form", "graph", "loss.form"),
])
def test_mirror_problems_refuse_what_the_twin_does_not_build(field, value,
                                                             expect):
  config = vs_lightly.method_config("simclr")
  node = config
  *parents, leaf = field.split(".")
  for part in parents:
    node = node[part]
  with config.unlocked(), node.ignore_type():
    node[leaf] = value
  problems = vs_lightly.mirror_problems(config)
  assert any(expect in p for p in problems), problems
  with pytest.raises(ValueError, match="cannot mirror"):
    vs_lightly.recipe("simclr", config)


def test_mirror_problems_of_an_extra_loss_field_and_another_method():
  config = vs_lightly.method_config("vicreg")
  with config.unlocked():
    config.loss.new_term = 1.0
  assert any("new_term" in p for p in vs_lightly.mirror_problems(config))
  config.method = "dino"
  assert "no twin" in vs_lightly.mirror_problems(config)[0]
  with pytest.raises(ValueError, match="unknown method"):
    vs_lightly.method_config("dino")


def record(method, side, seed, probe, knn, rc=0, seconds=60.0):
  return {"method": method, "framework": side, "seed": seed,
          "returncode": rc, "probe": probe, "knn": knn,
          "train_seconds": seconds}


def test_aggregate_means_stds_paired_differences_and_verdicts():
  records = [
      record("simclr", "ssljax", 0, 0.880, 0.83),
      record("simclr", "lightly", 0, 0.884, 0.84),
      record("simclr", "ssljax", 1, 0.882, 0.83),
      record("simclr", "lightly", 1, 0.880, 0.82),
      record("simclr", "ssljax", 2, 0.884, 0.83),
      record("simclr", "lightly", 2, 0.888, 0.86),
      record("simclr", "lightly", 3, 0.5, 0.5, rc=1),  # failed: left out
      record("vicreg", "ssljax", 0, 0.87, 0.80),
      record("vicreg", "lightly", 0, 0.88, 0.79),
  ]
  summary = vs_lightly.aggregate(records)
  assert list(summary) == ["vicreg", "simclr"]  # METHODS order
  s = summary["simclr"]
  assert s["failed"] == 1
  assert s["ssljax"]["probe"] == pytest.approx([0.882, 0.002, 3])
  assert s["lightly"]["probe"] == pytest.approx([0.884, 0.004, 3])
  # 0.882 >= 0.884 - 0.004: within lightly's spread.
  assert s["verdict"]["probe"] is True
  # 20-NN: 0.83 against 0.84 ± 0.02: within.
  assert s["verdict"]["knn"] is True
  assert s["diff"]["probe"][0] == pytest.approx(-0.002)
  assert s["diff"]["probe"][2] == 3
  assert not s["one_seed"]
  assert s["ssljax"]["seeds"] == [0, 1, 2]
  v = summary["vicreg"]
  # One seed: no spread, the verdict is the plain comparison.
  assert v["one_seed"] and v["lightly"]["probe"][1] is None
  assert v["verdict"] == {"probe": False, "knn": True}


def test_markdown_table_rows_and_notes():
  records = [record("byol", "ssljax", 0, 0.8695, 0.8173),
             record("byol", "lightly", 0, 0.8700, 0.8100, seconds=120.0)]
  table = vs_lightly.markdown_table(vs_lightly.aggregate(records))
  assert ("| `byol` | 0 / 0 | 0.8695 | 0.8700 | 0.8173 | 0.8100 | "
          "-0.0005 / +0.0073 | **no** / yes (1 seed: no spread) | 60 / 120 |"
          in table)
  assert "head_last_bias" in table  # the method's note
  assert "`vicreg`" not in table


def test_write_doc_replaces_only_its_section(tmp_path):
  page = tmp_path / "page.md"
  page.write_text("# Title\n\nkept\n")
  vs_lightly.write_doc(str(page), "one")
  page.write_text(page.read_text() + "\n## After\n")
  vs_lightly.write_doc(str(page), "two")
  text = page.read_text()
  assert text.startswith("# Title\n\nkept\n")
  assert text.endswith(f"{vs_lightly.END}\n\n## After\n")
  assert "two" in text and "one" not in text
  assert text.count(vs_lightly.BEGIN) == 1


def test_commands_are_the_methods_benchmarks_and_the_twins(tmp_path):
  cmd = vs_lightly.ssljax_command("py", "barlow_twins", 1, 2, "d")
  assert cmd == ["py", "-m", "ssljax.main", "--config",
                 "benchmarks/methods_config.py:barlow_twins",
                 "--config.epochs=1", "--config.seed=2", "--workdir", "d"]
  twin = vs_lightly.twin_command("tpy", "byol", 1, 2, str(tmp_path),
                                 ["--steps=3"])
  assert twin[0] == "tpy" and twin[1].endswith("vs_lightly.py")
  assert twin[2:] == ["twin", "--method", "byol", "--epochs", "1", "--seed",
                      "2", "--out-json", str(tmp_path / "results.json"),
                      "--steps=3"]


def test_twin_command_reaches_twin_job(monkeypatch):
  calls = []
  monkeypatch.setattr(vs_lightly, "twin_job",
                      lambda method, epochs, **kw: calls.append(
                          (method, epochs, kw)) or {})
  vs_lightly.main(["twin", "--method", "simclr", "--epochs", "1", "--seed",
                   "2", "--steps", "5", "--rows", "512"])
  ((method, epochs, kw),) = calls
  assert (method, epochs) == ("simclr", 1)
  assert kw["seed"] == 2 and kw["steps"] == 5 and kw["rows"] == 512


def test_reuse_only_a_run_of_the_same_config(tmp_path):
  from benchmarks import methods_config  # pylint: disable=import-outside-toplevel
  config = methods_config.get_config("simclr")
  config.epochs, config.seed = 1, 2
  run = tmp_path / "simclr" / "seed2"
  run.mkdir(parents=True)
  assert not vs_lightly.reusable(str(run), "simclr", 1, 2)[0]  # no files
  (run / "config.json").write_text(config.to_json(indent=2))
  (run / "results.json").write_text(json.dumps(
      {"evals": {"probe/test_accuracy": 0.88, "knn/test_accuracy": 0.83},
       "train_seconds": 50.0}))
  assert vs_lightly.reusable(str(run), "simclr", 1, 2) == (True, "")
  assert not vs_lightly.reusable(str(run), "simclr", 1, 0)[0]  # other seed
  config.optim.learning_rate = 1e-3
  (run / "config.json").write_text(config.to_json(indent=2))
  ok, why = vs_lightly.reusable(str(run), "simclr", 1, 2)
  assert not ok and "optim" in why
  assert vs_lightly.read_run(str(run)) == {"probe": 0.88, "knn": 0.83,
                                           "train_seconds": 50.0}


# --------------------------------------------------------------------------
# With torch and lightly (the bench extra).


def _torch_and_lightly():
  torch = pytest.importorskip(
      "torch", reason="torch is not installed (the optional bench extra)")
  pytest.importorskip("lightly", reason="lightly is not installed")
  return torch


@pytest.mark.parametrize("method", vs_lightly.METHODS)
def test_twin_loss_is_ssljaxs_loss_value_and_gradient(method):
  """On one fixed batch of embeddings, the twin's lightly loss equals
  ssljax's method loss (the config's form and hyper-parameters) in value
  and in gradient with respect to the student's outputs."""
  torch = _torch_and_lightly()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax import methods  # pylint: disable=import-outside-toplevel
  config = vs_lightly.method_config(method)
  rec = vs_lightly.recipe(method)
  ours = methods.get(method)(config)
  criterion = vs_lightly.lightly_criterion(rec)
  rng = np.random.default_rng(0)
  k = rec["projector"][-1]
  # Correlated views, as after training: view 1 = view 0 + noise.
  a = rng.normal(size=(64, k)).astype(np.float32)
  b = (a + 0.5 * rng.normal(size=(64, k))).astype(np.float32)
  ta, tb = (torch.tensor(x, requires_grad=True) for x in (a, b))
  if method in ("byol", "simsiam"):
    t0 = rng.normal(size=(64, k)).astype(np.float32) + a
    t1 = rng.normal(size=(64, k)).astype(np.float32) + b
    combine = (vs_lightly.byol_loss if method == "byol"
               else vs_lightly.simsiam_loss)
    theirs = combine(criterion, ta, tb, torch.tensor(t0), torch.tensor(t1))
    form = ours.FORMS[config.loss.form]

    def our_loss(p0, p1):
      return form(jnp.stack([p0, p1]), jnp.stack([t0, t1]))
  else:
    theirs = criterion(ta, tb)
    form = ours.FORMS[config.loss.form]

    def our_loss(z0, z1):
      return form(z0, z1, **ours.hparams)["loss"]
  theirs.backward()
  value, grads = jax.value_and_grad(our_loss, argnums=(0, 1))(
      jnp.asarray(a), jnp.asarray(b))
  assert float(theirs.detach()) == pytest.approx(float(value), rel=1e-5, abs=1e-6)
  for g_ours, g_theirs in zip(grads, (ta.grad, tb.grad)):
    np.testing.assert_allclose(g_theirs.numpy(), np.asarray(g_ours),
                               rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("method", ("simclr", "byol", "simsiam"))
def test_twin_has_ssljaxs_trainable_parameters(method):
  """The twin's student (encoder, heads) has as many trainable parameters,
  and as many weight-decayed ones (ndim > 1), as ssljax's network."""
  _torch_and_lightly()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from ssljax.methods import networks  # pylint: disable=import-outside-toplevel
  config = vs_lightly.method_config(method)
  net = (networks.predictor_network(config) if "predictor" in config.model
         else networks.projector_network(config))
  variables = jax.eval_shape(
      lambda: net.init(jax.random.key(0), jnp.zeros((2, 28, 28, 1)),
                       train=True))
  leaves = jax.tree.leaves(variables["params"])
  student, teacher = vs_lightly.build_twin(vs_lightly.recipe(method))
  params = list(student.parameters())
  assert sum(p.numel() for p in params) == sum(x.size for x in leaves)
  assert (sum(p.numel() for p in params if p.ndim > 1)
          == sum(x.size for x in leaves if x.ndim > 1))
  if method == "byol":
    assert all(not p.requires_grad for p in teacher.parameters())
    assert (sum(p.numel() for p in teacher.parameters())
            == sum(p.numel() for n, p in student.named_parameters()
                   if not n.startswith("predictor")))
  else:
    assert teacher is None


def test_twin_target_momentum_is_ssljaxs():
  _torch_and_lightly()
  from ssljax.methods import ema  # pylint: disable=import-outside-toplevel
  rec = vs_lightly.recipe("byol")
  total = 234
  theirs = [vs_lightly.target_momentum(rec, k, total) for k in range(total)]
  ours = [float(ema.momentum("cosine", k, total, base=0.996, final=1.0))
          for k in range(total)]
  np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-7)
  assert theirs[0] == pytest.approx(0.996)


def test_twin_job_trains_and_scores_a_few_steps():
  """A 2-step BYOL twin on 512 images (the target moves, the probe and
  20-NN run on the frozen encoder); no accuracy is asserted."""
  _torch_and_lightly()
  summary = vs_lightly.twin_job("byol", 1, seed=0, num_workers=0, steps=2,
                                rows=512)
  assert summary["framework"] == "lightly" and summary["steps"] == 2
  assert summary["recipe"] == vs_lightly.recipe("byol")
  assert set(summary["evals"]) == {
      "probe/test_accuracy", "probe/val_accuracy", "probe/l2",
      "probe/iterations", "knn/test_accuracy"}
  assert 0.0 <= summary["evals"]["knn/test_accuracy"] <= 1.0
  assert np.isfinite(summary["final_loss"])


@pytest.mark.parametrize("method", vs_lightly.METHODS)
def test_twin_steps_are_ssljaxs_steps(method):
  """From the same weights on the same views (batch 32), the twin's first
  3 train steps and ssljax's give the same losses to float32 rounding: the
  heads, loss, optimiser, schedule (and BYOL's target update) agree, not
  only the loss of one batch."""
  _torch_and_lightly()
  result = vs_lightly.parity(method, steps=3, batch_size=32)
  assert len(result["ssljax_loss"]) == 3
  assert max(result["relative_difference"]) < 1e-4, result
  drift = result["final_weights_relative_difference"]
  assert max(v for k, v in drift.items() if "kernel" in k) < 1e-2, drift


def test_shown_command_hides_the_bench_interpreters_path():
  shown = vs_lightly.shown_command(
      ["compare", "--torch-python", "/x/bin/python", "--seeds", "0", "1"],
      "/x/bin/python")
  assert shown == ("python benchmarks/vs_lightly.py compare --torch-python "
                   "<bench interpreter> --seeds 0 1")
