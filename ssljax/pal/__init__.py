"""PAL: positive active learning (Cabannes et al. 2023, arXiv 2303.15256).

One algorithm (Algorithm 1) for SSL, supervised and active learning: an
oracle reveals entries of the similarity graph G, and the embedding is fit
to the revealed graph, by SGD on a network (`run_pal`) or in closed form
with a kernel (`KernelPAL`).

Modules: `labeler` (answers and cost), `bookkeeping` (known positives /
negatives, transitive completion, views, components), `minibatch`
(unbiased degree-corrected minibatch loss), `oracles` (SSL, supervised,
NNCLR), `active` (captcha, data pruning, hierarchical), `mixed` (SSL graph
mixed with label answers), `loop` (`run_pal`),
`kernel` (closed-form kernel variant), `weights` (inclusion weights).

Names are imported lazily (PEP 562): the NumPy-only parts (labeler,
bookkeeping, oracles, kernel) load without importing JAX, flax or optax.
"""

from ssljax import extras

_EXPORTS = {
    "active": ["CaptchaOracle", "HierarchicalOracle", "PruningOracle"],
    "bookkeeping": ["PairGraph", "connected_components"],
    "kernel": ["KernelPAL", "gaussian_kernel", "laplacian_kernel",
               "readout_error"],
    "labeler": ["Cost", "Labeler"],
    "loop": ["PALNet", "PALResult", "ScaledMLP", "embed", "run_pal"],
    "mixed": ["MixedOracle"],
    "minibatch": ["pal_minibatch_loss", "paper_minibatch_loss",
                  "paper_pairwise_terms", "vic2_offset_loss",
                  "vic2_pair_terms"],
    "oracles": ["Minibatch", "NNCLROracle", "SSLOracle", "SupervisedOracle"],
    "weights": ["group_pair_weights", "uniform_pair_weights"],
}
_MODULE_OF = {name: mod for mod, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name):
  if name in _MODULE_OF:
    # loop and active need optax / scikit-learn (the 'train' extra): a
    # missing one is a one-line MissingExtraError.
    module = extras.import_module(f"ssljax.pal.{_MODULE_OF[name]}",
                                  f"ssljax.pal.{name}")
    value = getattr(module, name)
    globals()[name] = value
    return value
  raise AttributeError(f"module 'ssljax.pal' has no attribute {name!r}")


def __dir__():
  return sorted(list(globals()) + __all__)
