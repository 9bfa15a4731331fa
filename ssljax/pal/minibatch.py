"""Unbiased minibatch form of the VIC² loss ‖ZZᵀ − G‖² for PAL (Algorithm 1).

The degree-corrected pairwise form (an exact identity for any symmetric G)

    ‖ZZᵀ − G‖² − ‖G‖² = Σ_ij ℓ_ij,
    ℓ_ij = G_ij‖z_i − z_j‖² + (z_iᵀz_j)² − (d_i‖z_i‖² + d_j‖z_j‖²)/N,

with d = G1 the degrees of the FULL N-sample graph, needs only the entries
G_ij of the pairs in a minibatch plus the degrees of its rows. A minibatch S
drawn with inclusion probabilities π_ij (pairs, i ≠ j) and π_i (singletons)
gives the Horvitz–Thompson estimate

    L̂(S) = Σ_{i≠j∈S} ℓ_ij / π_ij + Σ_{i∈S} ℓ_ii / π_i,

whose expectation is exactly ‖ZZᵀ − G‖² − ‖G‖². `pair_weights` holds
1/π for each entry of the minibatch block: `uniform_pair_weights` for B of
N samples drawn uniformly without replacement, `group_pair_weights` when
whole groups (e.g. all V views of a sample, the SSL oracle) are drawn.

The paper's form eqs. (9)–(10), `paper_pairwise_terms`, uses
R(a, b) = (aᵀb)² − ‖a‖² − ‖b‖² in place of the degree term. Summed over
[N]² it equals ‖ZZᵀ − G‖² − ‖G‖² + 2Tr(Zᵀ(D − NI)Z), i.e. VIC² + const only
when every degree is N (Cabannes et al. 2023 App. B.1.1 state it for any G); it
is kept to show that bias.

References:
  Cabannes et al. 2023, "Active Self-Supervised Learning: A Few Low-Cost
  Relationships Are All You Need", arXiv 2303.15256, eqs. (9)–(11), Algorithm 1,
  App. B.1.1 (with R(a, b) = (aᵀb)² − ‖a‖² − ‖b‖², not the printed (aᵀb)ᵀ; Σ_ij
  R(z_i, z_j) = ‖ZᵀZ − NI_K‖² − N²K).
"""

from __future__ import annotations

# The pairwise maths is loss code (ssljax.losses.pairwise); PAL uses it with
# the inclusion weights of ssljax.pal.weights.
from ssljax.losses.pairwise import pal_minibatch_loss
from ssljax.losses.pairwise import paper_minibatch_loss
from ssljax.losses.pairwise import paper_pairwise_terms
from ssljax.losses.pairwise import vic2_offset_loss
from ssljax.losses.pairwise import vic2_pair_terms
from ssljax.pal.weights import group_pair_weights, uniform_pair_weights

__all__ = [
    "vic2_pair_terms",
    "paper_pairwise_terms",
    "pal_minibatch_loss",
    "paper_minibatch_loss",
    "vic2_offset_loss",
    "uniform_pair_weights",
    "group_pair_weights",
]
