"""Models over sparse features (hashed, as Vowpal Wabbit's): `LinearModel` and
`FactorizationMachine`, and VW's update of a linear model compiled beside them (`_online`)."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.models.linear.factorization_machine import FactorizationMachine
from fastad.models.linear.linear_model import LinearModel

__all__ = ["LinearModel", "FactorizationMachine"]
