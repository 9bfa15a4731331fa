"""Theory side of ssljax: closed forms and ODEs that replace encoder + optimiser.

Each module maps arrays to arrays (no flax, no state). See DESIGN.md.
"""

from ssljax.theory import dynamics
from ssljax.theory.dynamics import (
    contrastive_data_matrix,
    frossl_linear_dynamics,
    frossl_linear_loss,
    frossl_paper_eq34,
    frossl_symmetric_singular_values,
    projected_gradient_descent,
    stiefel_flow,
    stiefel_flow_euler,
    stiefel_flow_velocity,
    stiefel_weight_flow,
)
from ssljax.theory import spectral
from ssljax.theory import supervised
from ssljax.theory.spectral import (
    CLOSED_FORM_LOSSES,
    KernelEmbedding,
    gaussian_kernel,
    kernel_embedding,
    kernel_embedding_features,
    laplacian_kernel,
    linear_optimal_weights,
    optimal_embedding,
)
from ssljax.theory.supervised import (
    lemma1_objective,
    orthogonal_head_objective,
    ridge_head,
    ridge_head_loss,
    sigma_gradient,
)
