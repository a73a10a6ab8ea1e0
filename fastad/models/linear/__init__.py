"""Models over sparse features (hashed, as Vowpal Wabbit's): `LinearModel` and
`FactorizationMachine`."""
from fastad.models.linear.factorization_machine import FactorizationMachine
from fastad.models.linear.linear_model import LinearModel

__all__ = ["LinearModel", "FactorizationMachine"]
