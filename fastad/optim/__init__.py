"""Optimizers, gradient clipping and learning-rate schedulers (`fa.optim`).

The optimizers and clipping functions are compiled (`optimizers.pyx`); the
schedulers (`schedulers.py`) set an optimizer's `lr` between steps, with torch's formulas, or inside
`fastad.train`'s compiled loop (`lr_schedule=`), by the same compiled rule.
On Parameters on a GPU the same classes and functions run fused kernels
(fastad.cuda.optim); the lr they set lives on the device, so it also reaches a
step captured with `fa.cuda.capture`.

>>> opt = fa.optim.Adam(model.parameters(), lr=1e-3)
>>> sched = fa.optim.CosineAnnealingLR(opt, T_max=100)
>>> for batch in batches:
...     loss = model(batch); loss.backward()
...     fa.optim.clip_grad_norm(model.parameters(), 1.0)
...     opt.step(); opt.zero_grad(); sched.step()
"""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)     # see fastad/__init__.py

from fastad.optim.optimizers import (Optimizer, SGD, Adagrad, Adam, AdamW, RMSprop, Adadelta, Adamax,
                                     NAdam, RAdam, FTRL, clip_grad_norm, clip_grad_value)
from fastad.optim.schedulers import LRScheduler, StepLR, CosineAnnealingLR, LinearWarmup, LinearDecay

__all__ = ["Optimizer", "SGD", "Adagrad", "Adam", "AdamW", "RMSprop", "Adadelta", "Adamax",
           "NAdam", "RAdam", "FTRL", "clip_grad_norm", "clip_grad_value", "LRScheduler", "StepLR",
           "CosineAnnealingLR", "LinearWarmup", "LinearDecay"]
