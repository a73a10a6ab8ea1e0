"""Training by replay: `loop.train` (the compiled per-example loop), the sampler protocol
it draws examples through (`sampler.Sampler`), feeds of given rows (`feeds`), graphs
kept per structure (`graph_cache.GraphCache`) and batched recording (`autobatch`)."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py
