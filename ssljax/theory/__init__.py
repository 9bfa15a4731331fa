"""Theory side of ssljax: closed forms and ODEs that replace encoder + optimiser.

Each module maps arrays to arrays (no flax, no state).
"""

from ssljax.theory import data_matrix
from ssljax.theory import dynamics
from ssljax.theory import frossl_dynamics
from ssljax.theory import kernel
from ssljax.theory import linalg
from ssljax.theory import ode
from ssljax.theory import stiefel
from ssljax.theory.dynamics import (
    contrastive_data_matrix,
    frossl_linear_dynamics,
    frossl_linear_loss,
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
    kernel_embedding_eigh,
    kernel_embedding_features,
    kernel_embedding_subspace,
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
