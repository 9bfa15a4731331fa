"""PAL: positive active learning (002, Cabannes et al. 2023).

One algorithm (Algorithm 1) for SSL, supervised and active learning: an
oracle reveals entries of the similarity graph G, and the embedding is fit
to the revealed graph, by SGD on a network (`run_pal`) or in closed form
with a kernel (`KernelPAL`).

Modules: `labeler` (answers and cost), `bookkeeping` (known positives /
negatives, transitive completion, views, components), `minibatch`
(unbiased degree-corrected minibatch loss), `oracles` (SSL, supervised,
NNCLR), `active` (captcha, data pruning, hierarchical), `loop` (`run_pal`),
`kernel` (closed-form kernel variant).
"""

from ssljax.pal.active import CaptchaOracle, HierarchicalOracle, PruningOracle
from ssljax.pal.bookkeeping import PairGraph, connected_components
from ssljax.pal.kernel import (KernelPAL, gaussian_kernel, laplacian_kernel,
                               readout_error)
from ssljax.pal.labeler import Cost, Labeler
from ssljax.pal.loop import PALNet, PALResult, embed, run_pal
from ssljax.pal.minibatch import (group_pair_weights, pal_minibatch_loss,
                                  paper_minibatch_loss, paper_pairwise_terms,
                                  uniform_pair_weights, vic2_offset_loss,
                                  vic2_pair_terms)
from ssljax.pal.oracles import (Minibatch, NNCLROracle, SSLOracle,
                                SupervisedOracle)

__all__ = [
    "CaptchaOracle", "HierarchicalOracle", "PruningOracle",
    "PairGraph", "connected_components",
    "KernelPAL", "gaussian_kernel", "laplacian_kernel", "readout_error",
    "Cost", "Labeler",
    "PALNet", "PALResult", "embed", "run_pal",
    "group_pair_weights", "pal_minibatch_loss", "paper_minibatch_loss",
    "paper_pairwise_terms", "uniform_pair_weights", "vic2_offset_loss",
    "vic2_pair_terms",
    "Minibatch", "NNCLROracle", "SSLOracle", "SupervisedOracle",
]
