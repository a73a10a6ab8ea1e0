"""The engine, fastad's ground floor: nodes, leaves (with the sparse gradient accumulator),
cached plans and their replay, storage, and the C support every compiled module shares
(loops, broadcasting walks, BLAS, random streams, CPU clones).

It knows nothing above it: no op family, optimizer, training loop, model or device. The op
families (`fastad.ops`) register Variable's operators with it, and a device package
registers its backend (`graph.register_backend`).
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py
