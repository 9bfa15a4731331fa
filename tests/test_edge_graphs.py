"""Whole-dataset graphs as edge lists, the edge sampler and the VIC² edge loss."""

import itertools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssljax import data, graphs, losses, methods, train
from ssljax.pal.minibatch import vic2_offset_loss

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))
from configs import vicreg_knn_graph  # noqa: E402


def _dense(g):
  dense = np.zeros((g.n, g.n))
  dense[g.rows, g.cols] = g.weights
  return dense


# ------------------------------------------------------------ construction --
def test_knn_edges_match_brute_force_knn_graph():
  x = np.random.default_rng(0).normal(size=(60, 5)).astype(np.float32)
  g = graphs.knn_edges(x, 3)
  ref = graphs.knn_graph(jnp.asarray(x), 3, metric="euclidean")  # union
  np.testing.assert_array_equal(_dense(g), np.asarray(ref))
  # Brute force in numpy: the 3 nearest other rows of every row are edges.
  d = ((x[:, None] - x[None]) ** 2).sum(-1)
  np.fill_diagonal(d, np.inf)
  nbr = np.argsort(d, axis=1)[:, :3]
  assert all(_dense(g)[i, j] == 1 for i in range(60) for j in nbr[i])
  assert g.num_entries == 2 * g.num_edges and 60 * 3 <= g.num_entries <= 360


def test_knn_edges_sum_mode_weights_mutual_pairs_twice():
  x = np.random.default_rng(1).normal(size=(30, 4))
  a = _dense(graphs.knn_edges(x, 2, mode="sum"))
  directed = (_dense(graphs.knn_edges(x, 2)) > 0) & (a > 0)
  assert set(np.unique(a)) <= {0.0, 1.0, 2.0} and np.all(directed == (a > 0))
  np.testing.assert_array_equal(a, a.T)
  assert a.sum() == 30 * 2 * 2  # Σ(A + Aᵀ) = 2·N·k


def test_to_bcoo_matches_the_edge_list():
  g = graphs.symmetrize_edges(3, [0, 1], [1, 2], [1.0, 2.0])
  np.testing.assert_array_equal(np.asarray(g.to_bcoo().todense()), _dense(g))


def test_symmetrize_union_and_sum():
  g = graphs.symmetrize_edges(4, [0, 1, 2, 0], [1, 0, 3, 1], [1.0, 3.0, 2.0, 0.5])
  dense = _dense(g)
  np.testing.assert_array_equal(dense, dense.T)
  assert dense[0, 1] == 3.0 and dense[2, 3] == 2.0 and g.num_edges == 2
  assert list(zip(g.rows, g.cols)) == sorted(zip(g.rows, g.cols))
  s = _dense(graphs.symmetrize_edges(4, [0, 1], [1, 0], [1.0, 3.0], mode="sum"))
  assert s[0, 1] == s[1, 0] == 4.0
  np.testing.assert_array_equal(g.degree(), dense.sum(1))


@pytest.mark.parametrize("rows, cols, w, match", [
    ([0, 5], [1, 2], None, r"\[0, 4\)"), ([0], [1], [0.0], "weights"),
    ([0, 1], [1], None, "one shape"), ([-1], [1], None, "endpoints")])
def test_symmetrize_rejects_bad_input(rows, cols, w, match):
  with pytest.raises(ValueError, match=match):
    graphs.symmetrize_edges(4, rows, cols, w)


def test_supervised_edges_are_same_label_and_deterministic():
  y = np.repeat(np.arange(5), 40)
  y[::17] = -1  # unknown labels get no edge
  g = graphs.supervised_edges(y, 3, seed=2)
  assert np.all(y[g.rows] == y[g.cols]) and np.all(y[g.rows] >= 0)
  assert np.all(g.rows != g.cols)
  dense = _dense(g)
  np.testing.assert_array_equal(dense, dense.T)
  assert np.all(g.degree()[y >= 0] >= 3)
  again = graphs.supervised_edges(y, 3, seed=2)
  np.testing.assert_array_equal(g.cols, again.cols)
  assert not np.array_equal(_dense(graphs.supervised_edges(y, 3, seed=3)), dense)
  with pytest.raises(ValueError, match="per_node"):
    graphs.supervised_edges(y, 0)


def test_load_edge_list_npy_npz_and_errors(tmp_path):
  np.save(tmp_path / "e.npy", np.array([[0, 1], [2, 3]]))
  g = graphs.load_edge_list(str(tmp_path / "e.npy"), 5)
  assert g.num_entries == 4 and _dense(g)[3, 2] == 1
  np.savez(tmp_path / "w.npz", edges=np.array([[0, 1]]), weights=np.array([2.5]))
  assert _dense(graphs.load_edge_list(str(tmp_path / "w.npz"), 2))[1, 0] == 2.5
  np.savez(tmp_path / "bad.npz", pairs=np.array([[0, 1]]))
  np.save(tmp_path / "f.npy", np.array([[0.0, 1.0]]))
  for name, match in [("bad.npz", "'edges'"), ("f.npy", "integer"),
                      ("e.npy", r"\[0, 3\)"), ("e.txt", "npy")]:
    with pytest.raises(ValueError, match=match):
      graphs.load_edge_list(str(tmp_path / name), 3)


# ------------------------------------------------------------------ sampler --
def _toy():
  g = graphs.symmetrize_edges(6, [0, 0, 1, 2, 3, 4], [1, 2, 2, 3, 4, 5],
                              [1.0, 0.5, 2.0, 1.0, 0.3, 1.0])
  images = (np.arange(6 * 4 * 4) % 251).astype(np.uint8).reshape(6, 4, 4, 1)
  return g, images


def test_edge_batches_are_a_pure_function_of_seed_and_step():
  g, images = _toy()
  kw = dict(batch_size=4, seed=7)
  full = list(data.edge_batches(images, g, start_step=0, num_steps=5, **kw))
  resumed = list(data.edge_batches(images, g, start_step=3, num_steps=2, **kw))
  for a, b in zip(full[3:], resumed):
    np.testing.assert_array_equal(a["edge_images"], b["edge_images"])
    np.testing.assert_array_equal(a["indices"], b["indices"])
  again = list(data.edge_batches(images, g, start_step=0, num_steps=5, **kw))
  for a, b in zip(full, again):
    np.testing.assert_array_equal(a["edge_images"], b["edge_images"])
  assert not np.array_equal(full[0]["indices"], full[1]["indices"])


def test_edge_batches_ship_edge_endpoints_and_processes_split():
  g, images = _toy()
  labels = np.arange(6, dtype=np.int32) % 3
  source = data.ArraySource(images, labels)
  idx = data.sample_edges(g, batch_size=4, seed=1, step=2)
  batch, = data.edge_batches(source, g, batch_size=4, seed=1, start_step=2,
                             num_steps=1, with_info=True)
  assert batch["edge_images"].dtype == np.uint8
  np.testing.assert_array_equal(batch["edge_images"][0], images[g.rows[idx]])
  np.testing.assert_array_equal(batch["edge_images"][1], images[g.cols[idx]])
  np.testing.assert_array_equal(batch["labels"], labels[g.rows[idx]])
  assert batch["edge_info"].shape == (3, 2, 4)
  assert batch["edge_info"].dtype == np.float32
  halves = [next(data.edge_batches(source, g, batch_size=4, seed=1,
                                   start_step=2, num_steps=1, with_info=True,
                                   process_index=p, process_count=2))
            for p in range(2)]
  for key, axis in (("edge_images", 1), ("edge_info", 2), ("labels", 0)):
    np.testing.assert_array_equal(
        np.concatenate([h[key] for h in halves], axis=axis), batch[key])
  with pytest.raises(ValueError, match="graph 6 nodes"):
    data.edge_batches(images[:5], g, batch_size=4, seed=1, num_steps=1)


def test_weighted_sampling_frequencies_follow_weights():
  g, _ = _toy()
  idx = np.concatenate([data.sample_edges(g, batch_size=2000, seed=0, step=s)
                        for s in range(5)])
  freq = np.bincount(idx, minlength=g.num_entries) / idx.size
  np.testing.assert_allclose(freq, g.weights / g.weights.sum(), atol=0.01)


# ---------------------------------------------------------- unbiasedness --
@pytest.mark.parametrize("sampling", ["weighted", "uniform"])
def test_edge_vic2_is_unbiased_by_enumeration(x64, sampling):
  """E over all E^B ordered draws (probability Π p_e) = full VIC² / N²."""
  g = graphs.symmetrize_edges(5, [0, 0, 1, 2, 3], [1, 2, 2, 3, 4],
                              [1.0, 0.5, 2.0, 1.0, 0.3])
  t = data.edge_tables(g, sampling)
  p_E = np.diff(np.r_[0.0, t["cdf"]])
  z_NxK = np.random.default_rng(0).normal(size=(5, 3))
  batch = 3
  draws = np.array(list(itertools.product(range(g.num_entries), repeat=batch)))
  i, j = g.rows[draws], g.cols[draws]  # (D, B)
  info = np.stack([np.stack([t["degree"][i], t["degree"][j]], 1),
                   np.stack([t["inv_q"][i], t["inv_q"][j]], 1),
                   np.stack([t["pos"][draws]] * 2, 1)], 1)  # (D, 3, 2, B)
  z = np.stack([z_NxK[i], z_NxK[j]], 1)  # (D, 2, B, K)
  vals = jax.jit(jax.vmap(lambda a, b: losses.edge_vic2_terms(a, b)["loss"]))(
      z, info)
  mean = float(np.sum(np.prod(p_E[draws], axis=1) * np.asarray(vals)))
  exact = float(vic2_offset_loss(z_NxK, _dense(g))) / 25
  assert abs(mean - exact) <= 1e-12 * max(1.0, abs(exact))


def test_edge_vic2_checks_shapes_and_has_finite_grads():
  z = jnp.ones((2, 4, 3))
  info = jnp.ones((3, 2, 4))
  grad = jax.grad(lambda z: losses.edge_vic2_terms(z, info)["loss"])(z)
  assert np.all(np.isfinite(grad))
  with pytest.raises(ValueError, match="info"):
    losses.edge_vic2_terms(z, jnp.ones((3, 4)))
  with pytest.raises(ValueError, match=r"\(2, B, K\)"):
    losses.edge_vic2_terms(jnp.ones((3, 4, 3)), info)


# ----------------------------------------------------------- loop and config --
def test_dataset_graph_combinations_are_checked_per_method():
  def problems(name, form, num_global, kind):
    module = __import__(f"configs.{name}", fromlist=["get_config"])
    config = module.get_config("smoke")
    config.loss.form, config.views.num_global = form, num_global
    config.graph.kind = kind
    return " ".join(methods.config_problems(config))

  assert problems("vicreg", "two_view", 2, "dataset_knn") == ""
  assert problems("spectral_contrastive", "graph", 2, "edge_list") == ""
  for args, match in [(("vicreg", "graph", 2, "dataset_knn"), "spectral"),
                      (("vicreg", "two_view", 3, "dataset_knn"), "2 views"),
                      (("frossl", "multi_view", 2, "edge_list"), "multi_view"),
                      (("vicreg", "two_view", 2, "dataset_knnn"),
                       "graph.kind='dataset_knnn'")]:
    assert match in problems(*args), args


def test_knn_graph_config_rejects_unknown_keys():
  config = vicreg_knn_graph.get_config("smoke")
  assert config.graph.kind == "dataset_knn"
  config.lock()  # as main loads it (lock_config=True)
  with pytest.raises(AttributeError):
    config.graph.knn_kk = 3


def _smoke(data_dir, **overrides):
  config = vicreg_knn_graph.get_config("smoke")
  config.dataset.data_dir = data_dir
  config.eval_inputs.baselines = False
  config.num_steps = 3
  config.checkpoint_every_steps = 3
  for key, value in overrides.items():
    parent, leaf = key.split(".")
    config[parent][leaf] = value
  return config


@pytest.mark.slow  # 73-164 s (+ the data fixture) on the loaded 2-core machine
def test_knn_graph_smoke_run_end_to_end(fmnist_data_dir, tmp_path):
  config = _smoke(fmnist_data_dir)
  results = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert results["graph"] == "dataset_knn" and results["steps"] == 3
  assert results["graph_nodes"] == 512 and results["graph_entries"] >= 512 * 4
  assert 0.1 < results["evals"]["probe/test_accuracy"] <= 1.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["dataset_supervised", "edge_list"])
def test_vic2_edge_estimate_trains_on_dataset_graphs(fmnist_data_dir, tmp_path,
                                                     kind):
  path = tmp_path / "edges.npy"
  np.save(path, np.stack([np.arange(511), np.arange(1, 512)], 1))
  own = ({"graph.edge_list_path": str(path)} if kind == "edge_list"
         else {"graph.supervised_per_node": 4})
  config = _smoke(fmnist_data_dir, **{
      "graph.kind": kind, "loss.form": "graph", "graph.knn_k": 16,
      "graph.knn_pca_dim": 50, **own})  # the k-NN fields back at neutral
  config.method = "spectral_contrastive"
  for name in ("inv_weight", "var_weight", "cov_weight", "eps"):
    del config.loss[name]
  results = train.train_and_evaluate(config, str(tmp_path / "run"))
  assert results["graph"] == kind and np.isfinite(results["evals"]["probe/test_accuracy"])
