"""Type stubs for fastad_cy/model_losses.pyx: ranking_margin, ranking_loss and gather_dot
(fused model losses with sparse gradients)."""
from numpy.typing import ArrayLike

from fastad_cy.graph import IndexInput, Variable

class RankingMargin(Variable): ...
class GatherDot(Variable): ...

def ranking_margin(user_table: Variable, users: IndexInput | ArrayLike, item_table: Variable,
                   pos: IndexInput | ArrayLike, neg: IndexInput | ArrayLike,
                   item_bias: Variable | None = None) -> Variable: ...
def ranking_loss(user_table: Variable, users: IndexInput | ArrayLike, item_table: Variable,
                 pos: IndexInput | ArrayLike, neg: IndexInput | ArrayLike,
                 item_bias: Variable | None = None, reduction: str = "mean",
                 regularization: float = 0.0) -> Variable: ...
def gather_dot(a_table: Variable, a_ids: IndexInput | ArrayLike, b_table: Variable,
               b_ids: IndexInput | ArrayLike) -> Variable: ...
