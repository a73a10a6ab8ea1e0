"""Type stubs for fastad/ops/ranking.pyx: ranking_margin, ranking_loss and margin_loss."""
from collections.abc import Callable
from typing import Literal

from numpy.typing import ArrayLike

from fastad._engine.graph import IndexInput, RowGather, Variable

RANKING_LOSSES: dict[str, tuple[int, Callable[..., Variable]]]

class Ranking(RowGather): ...

def ranking_margin(user_table: Variable, users: IndexInput | ArrayLike, item_table: Variable,
                   pos: IndexInput | ArrayLike, neg: IndexInput | ArrayLike,
                   item_bias: Variable | None = None) -> Variable: ...
def ranking_loss(user_table: Variable, users: IndexInput | ArrayLike, item_table: Variable,
                 pos: IndexInput | ArrayLike, neg: IndexInput | ArrayLike,
                 item_bias: Variable | None = None, reduction: str = "mean",
                 regularization: float = 0.0, loss: Literal["bpr", "hinge"] = "bpr",
                 weights: Variable | None = None) -> Variable: ...
def margin_loss(margins: Variable, loss: Literal["bpr", "hinge"] = "bpr",
                reduction: str = "sum") -> Variable: ...
