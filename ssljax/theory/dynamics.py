"""Learning dynamics of linear SSL models (both papers, one namespace).

Kept so that `ssljax.theory.dynamics.X` keeps working: the code lives in
`ssljax.theory.data_matrix` and `ssljax.theory.stiefel` (Esser, Mukherjee
& Ghoshdastidar 2023, arXiv 2309.02011) and `ssljax.theory.frossl_dynamics`
(Skean et al. 2023, arXiv 2310.02903); see those modules for the maths and
references.
"""

from ssljax.theory.data_matrix import contrastive_data_matrix
from ssljax.theory.frossl_dynamics import frossl_linear_dynamics
from ssljax.theory.frossl_dynamics import frossl_linear_loss
from ssljax.theory.frossl_dynamics import frossl_symmetric_singular_values
from ssljax.theory.stiefel import projected_gradient_descent
from ssljax.theory.stiefel import stiefel_flow
from ssljax.theory.stiefel import stiefel_flow_euler
from ssljax.theory.stiefel import stiefel_flow_velocity
from ssljax.theory.stiefel import stiefel_weight_flow

__all__ = [
    "contrastive_data_matrix",
    "stiefel_flow_velocity",
    "stiefel_flow",
    "stiefel_weight_flow",
    "stiefel_flow_euler",
    "projected_gradient_descent",
    "frossl_linear_loss",
    "frossl_linear_dynamics",
    "frossl_symmetric_singular_values",
]
