"""fastad: reverse-mode, define-by-run automatic differentiation for small and sparse models."""
from fastad_cy.graph import (Variable, Parameter, Input, IndexInput, no_grad, detect_anomaly,
                             is_grad_enabled, set_default_dtype, get_default_dtype,
                             float32, float64)
from fastad_cy.elementwise import (add, sub, mul, div, neg, pow, exp, log, tanh, sigmoid, relu,
                                   softplus, logsigmoid, sqrt, square, abs)

__version__ = "0.1.0"
from fastad_cy.reduction import sum, mean, max, logsumexp, softmax, log_softmax
from fastad.gradcheck import finite_difference, gradcheck
from fastad_cy.sparse import take
from fastad_cy.train import train
