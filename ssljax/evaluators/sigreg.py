"""SIGReg statistic of the projector outputs z: distance to N(0, I_K).

Label-free. Reads the V·B projector outputs z of `EvalContext.view_embeddings`
(the fixed sample of ``eval_inputs.view_samples`` train images, each global
view), computes the SIGReg statistic of each view (`ssljax.losses.sigreg`:
the Epps–Pulley statistic of M projections against N(0, 1), the official
quadrature) with M directions fixed by the run's seed, and averages over the
views, as LeJEPA's loss does. Yields

* "<name>/sigreg_z": the statistic of z as it is;
* "<name>/sigreg_z_standardized": the statistic of (z − mean) / s, s² the
  mean over the K coordinates of their variances: one location and one
  scale removed, so it measures shape and isotropy only (an embedding on a
  sphere of any radius, as SimCLR's, is judged by its shape).

What the number means: LeJEPA's theory (Balestriero & LeCun 2025, arXiv
2511.08544, §3) shows that the isotropic Gaussian is the embedding
distribution that minimises the worst-case risk of downstream linear and
k-NN probes; SIGReg measures how far z is from it. For an exactly Gaussian
N(0, I_K) sample its expectation is `ssljax.losses.sigreg_null_mean` (≈ 1.05)
whatever the sample size; otherwise it grows in proportion to the number of
images B (the statistic is B times a squared distance between characteristic
functions), so compare runs at equal ``eval_inputs.view_samples``. Only z is
measured: SIGReg is applied to z in LeJEPA, and the representation h (e.g.
post-ReLU CNN features, all >= 0) has no reason to be centred Gaussian.

Cost: one jitted statistic of (V, B, K) — milliseconds at the defaults
(2 × 512 rows, M = 256); the view embeddings are the forward pass the other
label-free evaluators share.

Options:
  num_slices: M fixed directions (default 256).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ssljax import losses
from ssljax.evaluators import base

__all__ = ["Evaluator", "sigreg_of_views"]


@jax.jit
def sigreg_of_views(z_VxBxK, directions_KxM):
  """(raw, standardised): the mean over the V views of SIGReg(z_v), float32,
  for z as it is and for z centred per coordinate over all V·B rows and
  divided by the root of its mean coordinate variance. One program."""
  z = z_VxBxK.astype(jnp.float32)
  flat = z.reshape(-1, z.shape[-1])
  scale = jnp.sqrt(jnp.maximum(jnp.mean(jnp.var(flat, axis=0)), 1e-12))
  standardized = (z - jnp.mean(flat, axis=0)) / scale
  stat = lambda x: losses.lejepa_terms(x, num_global=x.shape[0], lam=1.0,
                                       directions=directions_KxM)["sigreg"]
  return stat(z), stat(standardized)


class Evaluator(base.Evaluator):
  """SIGReg of the view embeddings z, raw and standardised."""

  def __init__(self, name, ctx, *, every_steps=None, num_slices: int = 256):
    super().__init__(name, ctx, every_steps=every_steps)
    if (isinstance(num_slices, bool) or not isinstance(num_slices, int)
        or num_slices < 1):
      raise ValueError(f"evals.{name}.num_slices must be an int >= 1, got "
                       f"{num_slices!r}")
    self.num_slices = num_slices
    self.directions = None

  def run(self, state):
    _, z_VxBxK, _ = self.ctx.view_embeddings(state)
    z_VxBxK = np.asarray(z_VxBxK, np.float32)
    if self.directions is None or self.directions.shape[0] != z_VxBxK.shape[-1]:
      key = jax.random.fold_in(jax.random.key(int(self.ctx.config.seed)), 23)
      self.directions = losses.sigreg_directions(key, z_VxBxK.shape[-1],
                                                 self.num_slices)
    raw, standardized = sigreg_of_views(jnp.asarray(z_VxBxK), self.directions)
    yield f"{self.name}/sigreg_z", float(raw)
    yield f"{self.name}/sigreg_z_standardized", float(standardized)
