"""Evaluators rankme, lidar, alpha_req, spectrum, few_shot and theory on a
fake EvalContext built from small NumPy arrays (no training run)."""

import importlib

import numpy as np
import pytest

from ssljax.evaluators import base
from ssljax.theory import spectral
from ssljax.graphs import views_graph

pytestmark = pytest.mark.usefixtures("fast_compiles")

V, B, K, D, C = 2, 12, 4, 6, 3


def _context(z_VxBxK=None, *, features=True, num_classes=C, **extra):
  rng = np.random.default_rng(0)
  h = rng.normal(size=(V, B, D)).astype(np.float32)
  z = (rng.normal(size=(V, B, K)) if z_VxBxK is None
       else z_VxBxK).astype(np.float32)
  y = np.repeat(np.arange(C), 20).astype(np.int32)
  mix = rng.normal(size=(C, D))  # every column carries the class
  split = {s: ((mix[y] + 0.01 * rng.normal(size=(y.size, D))
                ).astype(np.float32), y) for s in ("train", "test")}
  ctx = base.EvalContext(
      config=None, mesh=None, total_steps=10, num_classes=num_classes,
      features=(lambda state, s: split[s]) if features else None,
      view_embeddings=lambda state: (h, z, np.arange(B, dtype=np.int32)),
      raw_pixels=lambda s: None, initial_state=lambda: None)
  for name, value in extra.items():
    setattr(ctx, name, value)
  return ctx


def _run(kind, ctx, **options):
  module = importlib.import_module(f"ssljax.evaluators.{kind}")
  return dict(module.Evaluator("ev", ctx, **options).run(state=object()))


def test_rankme_alpha_req_spectrum_yield_their_metrics():
  ctx = _context()
  got = _run("rankme", ctx)
  assert set(got) == {"ev/rankme", "ev/rankme_z"}
  assert 1 <= got["ev/rankme"] <= D and 1 <= got["ev/rankme_z"] <= K
  got = _run("alpha_req", ctx, fit_range=[1, 3])
  assert set(got) == {"ev/alpha_req", "ev/alpha_req_z"}
  assert all(np.isfinite(v) for v in got.values())
  got = _run("spectrum", ctx, top_k=2)
  assert set(got) == {"ev/eigenvalues", "ev/top_fraction",
                      "ev/eigenvalues_z", "ev/top_fraction_z"}
  lam = got["ev/eigenvalues"]
  assert isinstance(lam, np.ndarray) and lam.shape == (D,)
  assert np.all(np.diff(lam) <= 0)
  assert got["ev/top_fraction"] == pytest.approx(lam[:2].sum() / lam.sum())
  # No labelled split: only the z metrics.
  assert set(_run("rankme", _context(features=False))) == {"ev/rankme_z"}


def test_rankme_z_of_equal_singular_values():
  z = np.broadcast_to(np.eye(B, K) * 3.0, (V, B, K))
  assert _run("rankme", _context(z))["ev/rankme_z"] == pytest.approx(K,
                                                                     rel=1e-4)


def test_lidar_uses_the_images_as_classes():
  means = np.eye(B, K)  # K images on orthogonal axes, the rest at 0
  z = np.broadcast_to(means, (V, B, K))
  spread = _run("lidar", _context(z))["ev/lidar"]
  assert spread > K - 1  # K distinct class means: near the LDA rank K
  collapsed = np.broadcast_to(np.ones(K), (V, B, K))
  assert _run("lidar", _context(collapsed))["ev/lidar"] == pytest.approx(
      1.0, abs=1e-3)
  assert set(_run("lidar", _context(), representation="h")) == {"ev/lidar"}


def test_few_shot_yields_mean_and_std_per_shot():
  got = _run("few_shot", _context(), shots=(1, 5), draws=2)
  assert got == {"ev/1shot": 1.0, "ev/1shot_std": 0.0,
                 "ev/5shot": 1.0, "ev/5shot_std": 0.0}
  ev = importlib.import_module("ssljax.evaluators.few_shot").Evaluator(
      "ev", _context(), shots=(16,))
  with pytest.raises(ValueError, match=r"evals\.ev: shots=16 exceeds class"):
    list(ev.run(object()))


def test_theory_vanishes_at_the_optimum():
  z_star = np.asarray(spectral.optimal_embedding(views_graph(B, V), K))
  z = z_star.reshape(V, B, K)  # view-major rows back to (V, B, K)
  got = _run("theory", _context(z))
  assert set(got) == {"ev/gram_gap", "ev/principal_angle_max",
                      "ev/top_eigenspace_fraction"}
  assert got["ev/gram_gap"] < 1e-5
  assert got["ev/principal_angle_max"] < 1e-3
  assert got["ev/top_eigenspace_fraction"] == pytest.approx(1.0, abs=1e-6)
  far = _run("theory", _context())  # random z: about B / (V·B) = 1/2
  assert far["ev/gram_gap"] > 0.1 and far["ev/top_eigenspace_fraction"] < 0.9


def test_theory_supervised_reads_view_labels():
  labels = np.arange(B) % 3
  got = _run("theory", _context(view_labels=lambda state: labels),
             graph="supervised")
  assert 0 <= got["ev/top_eigenspace_fraction"] <= 1


@pytest.mark.parametrize("kind, options, match", [
    ("rankme", dict(eps=0.0), r"evals\.ev\.eps"),
    ("rankme", dict(split="val"), r"evals\.ev\.split"),
    ("alpha_req", dict(fit_range=[3, 2]), r"evals\.ev\.fit_range"),
    ("spectrum", dict(top_k=0), r"evals\.ev\.top_k"),
    ("lidar", dict(representation="x"), r"evals\.ev\.representation"),
    ("lidar", dict(delta=-1.0), r"evals\.ev\.delta"),
    ("few_shot", dict(shots=(0, 5)), r"evals\.ev\.shots"),
    ("few_shot", dict(draws=0), r"evals\.ev\.draws"),
    ("few_shot", dict(l2_grid=()), r"evals\.ev\.l2_grid"),
    ("theory", dict(graph="dense"), r"evals\.ev\.graph"),
    ("theory", dict(graph="supervised"), r"evals\.ev\.graph"),
    ("theory", dict(loss="simclr"), r"evals\.ev\.loss"),
])
def test_bad_options_fail_before_running(kind, options, match):
  module = importlib.import_module(f"ssljax.evaluators.{kind}")
  with pytest.raises(ValueError, match=match):
    module.Evaluator("ev", _context(), **options)


def test_few_shot_needs_labels():
  module = importlib.import_module("ssljax.evaluators.few_shot")
  with pytest.raises(ValueError, match="labelled"):
    module.Evaluator("ev", _context(features=False, num_classes=0))
