import numpy as np

import teir_plan as tp

rng = np.random.default_rng(0)
a = rng.standard_normal((8, 24, 48, 48), dtype=np.float32)  # indices t r u s
b = rng.standard_normal((8, 48, 8, 48), dtype=np.float32)   # indices p q t u
c = tp.einsum("trus,pqtu->pqrs", a, b)                      # numpy.einsum's convention
print(c.shape, np.allclose(c, np.einsum("trus,pqtu->pqrs", a, b), atol=1e-3))
plan = tp.plan("trus,pqtu->pqrs", a, b)                     # the cached plan behind it
print(plan.steps[0].describe())
print(plan.format_teir())                                   # the TEIR program it runs
