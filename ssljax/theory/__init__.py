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
