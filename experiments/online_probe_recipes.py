"""Online-probe recipes replayed on one run's feature trajectory.

    python experiments/online_probe_recipes.py dump vicreg /tmp/op_vicreg
    python experiments/online_probe_recipes.py replay /tmp/op_vicreg

``dump`` trains ``benchmarks/methods_config.py:<config>`` (1 epoch unless
``--epochs``; evaluators trimmed to the offline probe and the online probe)
and, in every train step, saves what an online probe could train on, all
computed from the state *before* the step (as `ssljax.train.train_step`
does): the evaluated representation (``state.representation``, BatchNorm
in inference mode) of the augmented first global view ("aug") and of the
un-augmented image ("clean", the train image as the evaluators see it),
with the labels; after training, the final encoder's evaluated features of
the train and test splits. The encoder's training is the config's: the
extra forward passes are detached and feed nothing back.

``replay`` then trains linear probes on that trajectory with several
recipes (input, standardisation, optimiser, learning rate, averaging) and
prints each one's test accuracy against the run's offline probe. The
features of the moving encoder are the ones the run's online probe saw, so
the replay includes the drift of the encoder, exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir))


def dump(config_name: str, workdir: str, epochs: int, num_steps: int = -1
         ) -> None:
  """Trains the run and writes ``trajectory.npz`` and ``final.npz``."""
  from benchmarks import methods_config  # pylint: disable=import-outside-toplevel
  from ssljax import inputs, pretrained, train  # pylint: disable=import-outside-toplevel
  config = methods_config.get_config(config_name)
  config.epochs = epochs
  if num_steps > 0:
    config.num_steps = num_steps
  for key in list(config.evals.keys()):
    if key not in ("probe", "online_probe"):
      del config.evals[key]
  saved = []

  def save(h_aug, h_clean, labels):
    saved.append((np.asarray(h_aug, np.float16), np.asarray(h_clean, np.float16),
                  np.asarray(labels, np.int16)))

  original = train.train_step

  def recording_step(state, batch, **kwargs):
    new, metrics = original(state, batch, **kwargs)
    if "images" in batch and "labels" in batch:
      key = jax.random.fold_in(jax.random.key(kwargs["seed"]), state.step)
      from ssljax import data  # pylint: disable=import-outside-toplevel
      views = data.device_views(batch, key, kwargs["spec"])
      h_aug = state.representation(jax.lax.stop_gradient(views[0]))
      h_clean = state.representation(batch["images"] / 255.0)
      jax.debug.callback(save, h_aug, h_clean, batch["labels"])
    return new, metrics

  train.train_step = recording_step
  os.makedirs(workdir, exist_ok=True)
  train.train_and_evaluate(config, workdir)
  train.train_step = original
  h_aug, h_clean, labels = map(np.stack, zip(*saved))
  np.savez(os.path.join(workdir, "trajectory.npz"), aug=h_aug, clean=h_clean,
           labels=labels)
  model = pretrained.load(os.path.abspath(workdir))
  train_source, test_source = inputs.open_sources(model.config)
  x_train, y_train = model.embed_source(train_source)
  x_test, y_test = model.embed_source(test_source)
  np.savez(os.path.join(workdir, "final.npz"), x_train=x_train,
           y_train=y_train, x_test=x_test, y_test=y_test)


def _probe(traj, final, *, source="aug", norm="batch", opt="adamw", lr=1e-2,
           wd=0.0, momentum=0.9, average=None, schedule="constant",
           nesterov=False, with_train=False):
  """Test accuracy of one recipe replayed on the trajectory ((train, test)
  accuracy with ``with_train``: train is the final encoder's features of
  the train split, the selection criterion)."""
  h_all = jnp.asarray(traj[source], jnp.float32)
  labels = jnp.asarray(traj["labels"], jnp.int32)
  steps, _, dim = h_all.shape
  classes = int(final["y_test"].max()) + 1
  if schedule == "cosine":
    lr_fn = optax.cosine_decay_schedule(lr, steps)
  else:
    lr_fn = lr
  if opt == "adamw":
    tx = optax.adamw(lr_fn, weight_decay=wd)
  elif opt == "sgd":
    tx = optax.chain(optax.add_decayed_weights(wd),
                     optax.sgd(lr_fn, momentum=0.9, nesterov=nesterov))
  params = {"kernel": jnp.zeros((dim, classes)), "bias": jnp.zeros(classes)}
  state = {"params": params, "opt": tx.init(params),
           "mean": jnp.zeros(dim), "var": jnp.ones(dim), "avg": params,
           "n": jnp.zeros(())}

  def step(state, xs):
    h, y = xs
    mean, var = jnp.mean(h, 0), jnp.var(h, 0)
    if norm == "batch":
      x = (h - mean) * jax.lax.rsqrt(var + 1e-5)
    elif norm == "running":  # standardise by the running stats (updated first)
      m = momentum * state["mean"] + (1 - momentum) * mean
      v = momentum * state["var"] + (1 - momentum) * var
      x = (h - m) * jax.lax.rsqrt(v + 1e-5)
    else:
      x = h

    def loss(p):
      logits = x @ p["kernel"] + p["bias"]
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    g = jax.grad(loss)(state["params"])
    upd, opt_state = tx.update(g, state["opt"], state["params"])
    p = optax.apply_updates(state["params"], upd)
    n = state["n"] + 1
    if average == "polyak":
      avg = jax.tree.map(lambda a, b: a + (b - a) / n, state["avg"], p)
    elif isinstance(average, float):
      avg = jax.tree.map(lambda a, b: average * a + (1 - average) * b,
                         state["avg"], p)
    else:
      avg = p
    return {"params": p, "opt": opt_state,
            "mean": momentum * state["mean"] + (1 - momentum) * mean,
            "var": momentum * state["var"] + (1 - momentum) * var,
            "avg": avg, "n": n}, None

  state, _ = jax.lax.scan(step, state, (h_all, labels))
  p = state["avg"]

  def score(split):
    x = jnp.asarray(final["x_" + split], jnp.float32)
    if norm in ("batch", "running"):
      x = (x - state["mean"]) * jax.lax.rsqrt(state["var"] + 1e-5)
    pred = jnp.argmax(x @ p["kernel"] + p["bias"], -1)
    return float(jnp.mean(pred == jnp.asarray(final["y_" + split])))

  return (score("train"), score("test")) if with_train else score("test")


RECIPES = {
    "aug, adamw 1e-2 (the old inference default)": {},
    "aug, adamw 3e-3": {"lr": 3e-3},
    "aug, adamw 1e-2, ema .9": {"average": 0.9},
    "aug, adamw 3e-2, ema .9": {"lr": 3e-2, "average": 0.9},
    "aug, adamw 1e-2, no std": {"norm": "none"},
    "aug, adamw 1e-2, running std": {"norm": "running"},
    "aug, adamw 1e-2, stats momentum .99": {"momentum": 0.99},
    "aug, sgd 0.1": {"opt": "sgd", "lr": 0.1},
    "aug, sgd 0.3": {"opt": "sgd", "lr": 0.3},
    "aug, sgd 1.0": {"opt": "sgd", "lr": 1.0},
    "aug, adamw 1e-2, polyak": {"average": "polyak"},
    "aug, adamw 1e-2, cosine": {"schedule": "cosine"},
    "clean, adamw 1e-2": {"source": "clean"},
    "clean, adamw 1e-2, ema .9 (the new default)": {"source": "clean",
                                                    "average": 0.9},
    "clean, adamw 1e-2, ema .8": {"source": "clean", "average": 0.8},
    "clean, adamw 1e-2, ema .98": {"source": "clean", "average": 0.98},
    "clean, adamw 3e-2, ema .9": {"source": "clean", "lr": 3e-2,
                                  "average": 0.9},
    "clean, adamw 3e-3, ema .9": {"source": "clean", "lr": 3e-3,
                                  "average": 0.9},
    "clean, adamw 1e-2, polyak": {"source": "clean", "average": "polyak"},
    "clean, adamw 1e-2, cosine": {"source": "clean", "schedule": "cosine"},
}


def replay(workdir: str, recipes=None) -> dict:
  """Each recipe's (train, test) accuracy and test − offline probe, and
  two recipes on the final encoder (clean images, no drift)."""
  traj = dict(np.load(os.path.join(workdir, "trajectory.npz")))
  final = dict(np.load(os.path.join(workdir, "final.npz")))
  with open(os.path.join(workdir, "results.json")) as f:
    evals = json.load(f)["evals"]
  offline = evals["probe/test_accuracy"]
  out = {"offline": offline, "online (run)": evals["online_probe/test_accuracy"],
         "steps": int(traj["labels"].shape[0])}
  print(f"{'recipe':46s} train  test   online-offline")
  for name, kw in (recipes or RECIPES).items():
    train_acc, test_acc = _probe(traj, final, with_train=True, **kw)
    out[name] = [round(train_acc, 4), round(test_acc, 4),
                 round(test_acc - offline, 4)]
    print(f"{name:46s} {train_acc:.4f} {test_acc:.4f} "
          f"{test_acc - offline:+.4f}", flush=True)
  # The same probe on the final encoder, which no longer moves: clean train
  # images drawn at random, as many steps and rows as the run's.
  rows = np.random.default_rng(0).integers(0, len(final["x_train"]),
                                           traj["labels"].shape)
  frozen = {"clean": final["x_train"][rows], "labels": final["y_train"][rows]}
  for name, kw in (("frozen final encoder, clean, adamw 1e-2", {}),
                   ("frozen final encoder, clean, adamw 1e-2, ema .9",
                    {"average": 0.9})):
    train_acc, test_acc = _probe(frozen, final, source="clean",
                                 with_train=True, **kw)
    out[name] = [round(train_acc, 4), round(test_acc, 4),
                 round(test_acc - offline, 4)]
    print(f"{name:46s} {train_acc:.4f} {test_acc:.4f} "
          f"{test_acc - offline:+.4f}", flush=True)
  return out


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  sub = parser.add_subparsers(dest="cmd", required=True)
  d = sub.add_parser("dump")
  d.add_argument("config")
  d.add_argument("workdir")
  d.add_argument("--epochs", type=int, default=1)
  d.add_argument("--num-steps", type=int, default=-1)
  r = sub.add_parser("replay")
  r.add_argument("workdir")
  args = parser.parse_args(argv)
  if args.cmd == "dump":
    dump(args.config, args.workdir, args.epochs, args.num_steps)
  else:
    found = replay(args.workdir)
    with open(os.path.join(args.workdir, "replay.json"), "w") as f:
      json.dump(found, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())
