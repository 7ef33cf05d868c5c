"""What the cost model knows about the machine: its parameters, where they come from,
their cache on disk and the parameters in force (the calibrations that measure them are
:mod:`teir_plan.planner.calibrate`).

Four sources of parameters, recorded in every plan (``MachineParams.source``) and named by
``plan.explain()``:

* ``"calibrated"``: ``tp.calibrate()`` measured them (15-40 seconds, every field below
  that matters most, the BLAS efficiency table included).
* ``"first-use"``: nothing was cached for this machine, so the first planning call
  measured what plans depend on most in about a second (``calibrate.quick_calibrate``: BLAS'
  float32/float64 peak, the vector kernel's rate and K steps, memory bandwidth, the copy
  rate, the call overhead, the idle threads' wake cost, the cross-core handoff, L2 from
  sysfs), scaled the rest from the reference machine, cached it and warned once.
* ``"isa"``: nothing measured (``TEIR_PLAN_AUTOCALIBRATE=0``): rates derived from the
  vector ISA (:func:`default_params`: vector width, FMA, threads).
* ``"reference"``: ``MachineParams.reference()``, one 2-core Intel Xeon's calibration
  (AVX-512), fixed: the test suite and the docs' example plan against these so that their
  outcomes do not depend on the machine (``TEIR_PLAN_AUTOCALIBRATE=reference``).

Calibrations are cached on disk (``$TEIR_PLAN_CACHE_DIR`` or ``~/.cache/teir_plan``),
keyed by the CPU model, the vector ISA, the BLAS kernels and the thread count; later
processes load them, and a full calibration replaces a first-use one.
``TEIR_PLAN_AUTOCALIBRATE``: unset (or ``quick``) measures on first use, ``0`` never
measures, ``1`` runs the full calibration on first use, ``reference`` plans against the
reference parameters and ignores the cache.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from teir_plan.errors import PlanError
from teir_plan.forks import renew_after_fork
from teir_plan.tiles import real_dtype

if TYPE_CHECKING:
    from teir_plan.isa import VectorTarget

# Tile extents (per axis) at which calibration measures BLAS on one core.  A product
# of per-axis saturation curves missed by 1.6x on tiles with one short axis
# (384 x 24 x 384 ran at 57% of peak, the fit said 92%), so the model reads a table.
GEMM_GRID = (8, 24, 64, 192, 512, 4096)
# Tiles of more flops than this are not measured (seconds each); they take the value
# of the same tile with its 4096s cut to 512, where BLAS is near its peak anyway.
GRID_MAX_FLOPS = 4e9
# BLAS' operand forms (transA, transB), each a table of its own: OpenBLAS runs the same
# tile at very different rates by form.  Measured on one core, 9 interleaved rounds:
# 64 x 128 x 64 at 190 GFLOP/s N,N, 0.57 of that T,N, 0.89 N,T, 0.72 T,T; 512 x 24 x 24
# T,N at 0.51; but 192^3 and 512 x 512 x 64 at 0.91-1.01 in every form.  One table (N,N)
# rated bhqd,bhkd->bhqk's T,N tiles 1.7x too fast, and the plan ran 1.4x slower than
# packing an operand for the vector kernel would have.
GEMM_FORMS = ("NN", "TN", "NT", "TT")  # index = (transA == 'T') + 2 * (transB == 'T')

# The reference machine's tables (2-core Xeon, AVX-512, numpy's OpenBLAS 0.3.31): one row per
# form and (m, n), the six k of GEMM_GRID across; each entry the median of three
# calibrations, as are MachineParams' other measured defaults.
DEFAULT_GEMM_EFFICIENCY: tuple[float, ...] = (
    0.214, 0.171, 0.195, 0.229, 0.244, 0.174,  # NN m=8, n=8
    0.202, 0.284, 0.266, 0.314, 0.295, 0.257,  # NN m=8, n=24
    0.259, 0.296, 0.307, 0.310, 0.344, 0.268,  # NN m=8, n=64
    0.276, 0.318, 0.298, 0.337, 0.366, 0.275,  # NN m=8, n=192
    0.273, 0.302, 0.318, 0.352, 0.261, 0.272,  # NN m=8, n=512
    0.271, 0.300, 0.245, 0.257, 0.245, 0.259,  # NN m=8, n=4096
    0.321, 0.378, 0.359, 0.401, 0.304, 0.315,  # NN m=24, n=8
    0.378, 0.483, 0.465, 0.527, 0.485, 0.465,  # NN m=24, n=24
    0.322, 0.464, 0.483, 0.502, 0.451, 0.481,  # NN m=24, n=64
    0.253, 0.454, 0.484, 0.524, 0.517, 0.512,  # NN m=24, n=192
    0.255, 0.438, 0.486, 0.508, 0.518, 0.483,  # NN m=24, n=512
    0.254, 0.381, 0.476, 0.508, 0.472, 0.471,  # NN m=24, n=4096
    0.468, 0.826, 0.968, 0.713, 0.688, 0.292,  # NN m=64, n=8
    0.450, 0.891, 0.978, 0.734, 0.685, 0.601,  # NN m=64, n=24
    0.466, 0.831, 0.989, 0.736, 0.694, 0.586,  # NN m=64, n=64
    0.471, 0.927, 0.980, 0.735, 0.784, 0.754,  # NN m=64, n=192
    0.473, 0.881, 0.668, 0.749, 0.790, 0.803,  # NN m=64, n=512
    0.286, 0.517, 0.675, 0.778, 0.778, 0.731,  # NN m=64, n=4096
    0.376, 0.887, 0.839, 0.702, 0.695, 0.217,  # NN m=192, n=8
    0.344, 0.824, 0.906, 0.709, 0.665, 0.515,  # NN m=192, n=24
    0.333, 0.789, 0.947, 0.766, 0.799, 0.685,  # NN m=192, n=64
    0.326, 0.794, 0.748, 0.888, 0.914, 0.880,  # NN m=192, n=192
    0.326, 0.565, 0.758, 0.903, 0.934, 0.922,  # NN m=192, n=512
    0.256, 0.561, 0.762, 0.921, 0.932, 0.934,  # NN m=192, n=4096
    0.355, 0.667, 0.625, 0.656, 0.345, 0.209,  # NN m=512, n=8
    0.348, 0.699, 0.619, 0.693, 0.685, 0.491,  # NN m=512, n=24
    0.367, 0.728, 0.715, 0.835, 0.814, 0.717,  # NN m=512, n=64
    0.300, 0.558, 0.770, 0.914, 0.899, 0.917,  # NN m=512, n=192
    0.265, 0.557, 0.785, 0.941, 0.953, 0.968,  # NN m=512, n=512
    0.223, 0.536, 0.786, 0.948, 1.000, 0.953,  # NN m=512, n=4096
    0.426, 0.540, 0.349, 0.230, 0.219, 0.191,  # NN m=4096, n=8
    0.347, 0.396, 0.565, 0.480, 0.477, 0.449,  # NN m=4096, n=24
    0.167, 0.424, 0.644, 0.696, 0.718, 0.680,  # NN m=4096, n=64
    0.161, 0.427, 0.692, 0.842, 0.889, 0.899,  # NN m=4096, n=192
    0.161, 0.414, 0.691, 0.890, 0.932, 0.953,  # NN m=4096, n=512
    0.154, 0.430, 0.716, 0.941, 0.953, 0.953,  # NN m=4096, n=4096
    0.049, 0.088, 0.300, 0.366, 0.397, 0.345,  # TN m=8, n=8
    0.110, 0.167, 0.313, 0.376, 0.344, 0.335,  # TN m=8, n=24
    0.121, 0.187, 0.327, 0.351, 0.356, 0.238,  # TN m=8, n=64
    0.107, 0.197, 0.246, 0.250, 0.251, 0.266,  # TN m=8, n=192
    0.141, 0.208, 0.252, 0.258, 0.261, 0.265,  # TN m=8, n=512
    0.142, 0.190, 0.250, 0.258, 0.243, 0.231,  # TN m=8, n=4096
    0.102, 0.166, 0.395, 0.543, 0.532, 0.396,  # TN m=24, n=8
    0.181, 0.292, 0.401, 0.543, 0.476, 0.305,  # TN m=24, n=24
    0.171, 0.334, 0.385, 0.385, 0.400, 0.407,  # TN m=24, n=64
    0.220, 0.373, 0.455, 0.471, 0.482, 0.503,  # TN m=24, n=192
    0.231, 0.385, 0.475, 0.497, 0.512, 0.514,  # TN m=24, n=512
    0.243, 0.385, 0.491, 0.516, 0.478, 0.418,  # TN m=24, n=4096
    0.155, 0.227, 0.429, 0.571, 0.537, 0.139,  # TN m=64, n=8
    0.217, 0.389, 0.343, 0.341, 0.354, 0.342,  # TN m=64, n=24
    0.257, 0.461, 0.487, 0.523, 0.541, 0.488,  # TN m=64, n=64
    0.281, 0.502, 0.612, 0.683, 0.694, 0.680,  # TN m=64, n=192
    0.296, 0.507, 0.649, 0.707, 0.758, 0.724,  # TN m=64, n=512
    0.284, 0.503, 0.661, 0.777, 0.772, 0.739,  # TN m=64, n=4096
    0.186, 0.219, 0.146, 0.152, 0.154, 0.135,  # TN m=192, n=8
    0.241, 0.396, 0.354, 0.387, 0.382, 0.280,  # TN m=192, n=24
    0.272, 0.493, 0.526, 0.585, 0.608, 0.557,  # TN m=192, n=64
    0.294, 0.546, 0.603, 0.786, 0.798, 0.636,  # TN m=192, n=192
    0.257, 0.439, 0.674, 0.751, 0.886, 0.876,  # TN m=192, n=512
    0.219, 0.483, 0.619, 0.827, 0.801, 0.886,  # TN m=192, n=4096
    0.177, 0.220, 0.156, 0.163, 0.157, 0.139,  # TN m=512, n=8
    0.205, 0.395, 0.361, 0.391, 0.384, 0.341,  # TN m=512, n=24
    0.249, 0.474, 0.550, 0.606, 0.598, 0.575,  # TN m=512, n=64
    0.253, 0.538, 0.700, 0.787, 0.805, 0.838,  # TN m=512, n=192
    0.260, 0.547, 0.758, 0.895, 0.920, 0.911,  # TN m=512, n=512
    0.221, 0.522, 0.777, 0.958, 0.928, 0.920,  # TN m=512, n=4096
    0.150, 0.204, 0.159, 0.142, 0.139, 0.123,  # TN m=4096, n=8
    0.144, 0.338, 0.327, 0.329, 0.323, 0.319,  # TN m=4096, n=24
    0.161, 0.405, 0.496, 0.574, 0.567, 0.551,  # TN m=4096, n=64
    0.153, 0.401, 0.614, 0.748, 0.812, 0.805,  # TN m=4096, n=192
    0.156, 0.426, 0.683, 0.873, 0.901, 0.920,  # TN m=4096, n=512
    0.151, 0.433, 0.722, 0.895, 0.920, 0.920,  # TN m=4096, n=4096
    0.089, 0.158, 0.193, 0.212, 0.218, 0.225,  # NT m=8, n=8
    0.142, 0.190, 0.243, 0.264, 0.239, 0.263,  # NT m=8, n=24
    0.182, 0.309, 0.375, 0.405, 0.423, 0.212,  # NT m=8, n=64
    0.159, 0.269, 0.323, 0.352, 0.361, 0.234,  # NT m=8, n=192
    0.167, 0.258, 0.333, 0.364, 0.239, 0.235,  # NT m=8, n=512
    0.162, 0.271, 0.227, 0.182, 0.176, 0.146,  # NT m=8, n=4096
    0.216, 0.334, 0.406, 0.439, 0.381, 0.393,  # NT m=24, n=8
    0.265, 0.409, 0.475, 0.492, 0.416, 0.426,  # NT m=24, n=24
    0.206, 0.504, 0.601, 0.511, 0.503, 0.432,  # NT m=24, n=64
    0.211, 0.474, 0.541, 0.520, 0.506, 0.482,  # NT m=24, n=192
    0.197, 0.412, 0.487, 0.485, 0.480, 0.481,  # NT m=24, n=512
    0.178, 0.390, 0.469, 0.433, 0.416, 0.303,  # NT m=24, n=4096
    0.441, 0.794, 0.808, 0.708, 0.709, 0.287,  # NT m=64, n=8
    0.452, 0.654, 0.907, 0.822, 0.880, 0.559,  # NT m=64, n=24
    0.447, 0.783, 0.837, 0.788, 0.659, 0.575,  # NT m=64, n=64
    0.441, 0.791, 0.854, 0.672, 0.748, 0.710,  # NT m=64, n=192
    0.437, 0.769, 0.655, 0.729, 0.756, 0.735,  # NT m=64, n=512
    0.282, 0.524, 0.665, 0.699, 0.688, 0.545,  # NT m=64, n=4096
    0.344, 0.811, 0.855, 0.659, 0.674, 0.216,  # NT m=192, n=8
    0.328, 0.784, 0.917, 0.863, 0.665, 0.468,  # NT m=192, n=24
    0.307, 0.759, 0.907, 0.757, 0.783, 0.655,  # NT m=192, n=64
    0.302, 0.746, 0.688, 0.874, 0.913, 0.839,  # NT m=192, n=192
    0.306, 0.400, 0.529, 0.605, 0.635, 0.639,  # NT m=192, n=512
    0.203, 0.394, 0.525, 0.599, 0.638, 0.635,  # NT m=192, n=4096
    0.300, 0.462, 0.473, 0.471, 0.264, 0.180,  # NT m=512, n=8
    0.312, 0.514, 0.579, 0.522, 0.462, 0.381,  # NT m=512, n=24
    0.359, 0.731, 0.494, 0.600, 0.529, 0.695,  # NT m=512, n=64
    0.289, 0.550, 0.760, 0.918, 0.883, 0.774,  # NT m=512, n=192
    0.249, 0.508, 0.750, 0.922, 0.881, 0.853,  # NT m=512, n=512
    0.196, 0.458, 0.703, 0.849, 0.952, 0.881,  # NT m=512, n=4096
    0.394, 0.512, 0.324, 0.221, 0.212, 0.177,  # NT m=4096, n=8
    0.367, 0.399, 0.525, 0.445, 0.470, 0.360,  # NT m=4096, n=24
    0.159, 0.369, 0.587, 0.659, 0.607, 0.544,  # NT m=4096, n=64
    0.156, 0.372, 0.537, 0.831, 0.847, 0.883,  # NT m=4096, n=192
    0.154, 0.390, 0.664, 0.814, 0.927, 0.881,  # NT m=4096, n=512
    0.140, 0.409, 0.682, 0.922, 0.881, 0.881,  # NT m=4096, n=4096
    0.185, 0.163, 0.302, 0.279, 0.309, 0.230,  # TT m=8, n=8
    0.170, 0.213, 0.228, 0.250, 0.225, 0.234,  # TT m=8, n=24
    0.222, 0.291, 0.331, 0.319, 0.363, 0.169,  # TT m=8, n=64
    0.200, 0.304, 0.341, 0.383, 0.382, 0.190,  # TT m=8, n=192
    0.223, 0.287, 0.303, 0.214, 0.191, 0.187,  # TT m=8, n=512
    0.246, 0.363, 0.174, 0.165, 0.146, 0.090,  # TT m=8, n=4096
    0.139, 0.186, 0.213, 0.226, 0.251, 0.219,  # TT m=24, n=8
    0.209, 0.329, 0.289, 0.303, 0.278, 0.237,  # TT m=24, n=24
    0.196, 0.401, 0.451, 0.453, 0.614, 0.284,  # TT m=24, n=64
    0.176, 0.350, 0.382, 0.417, 0.359, 0.365,  # TT m=24, n=192
    0.185, 0.366, 0.422, 0.379, 0.376, 0.456,  # TT m=24, n=512
    0.167, 0.296, 0.375, 0.357, 0.351, 0.308,  # TT m=24, n=4096
    0.222, 0.301, 0.321, 0.339, 0.340, 0.139,  # TT m=64, n=8
    0.233, 0.365, 0.463, 0.487, 0.464, 0.322,  # TT m=64, n=24
    0.198, 0.432, 0.681, 0.735, 0.510, 0.488,  # TT m=64, n=64
    0.172, 0.472, 0.660, 0.618, 0.684, 0.648,  # TT m=64, n=192
    0.183, 0.451, 0.608, 0.678, 0.687, 0.713,  # TT m=64, n=512
    0.275, 0.481, 0.629, 0.670, 0.671, 0.550,  # TT m=64, n=4096
    0.232, 0.294, 0.338, 0.362, 0.369, 0.138,  # TT m=192, n=8
    0.247, 0.403, 0.488, 0.529, 0.378, 0.352,  # TT m=192, n=24
    0.211, 0.492, 0.793, 0.557, 0.598, 0.536,  # TT m=192, n=64
    0.166, 0.463, 0.686, 0.806, 0.773, 0.777,  # TT m=192, n=192
    0.164, 0.527, 0.728, 0.849, 0.803, 0.839,  # TT m=192, n=512
    0.262, 0.552, 0.752, 0.844, 0.888, 0.803,  # TT m=192, n=4096
    0.236, 0.291, 0.320, 0.359, 0.148, 0.131,  # TT m=512, n=8
    0.194, 0.411, 0.488, 0.342, 0.362, 0.342,  # TT m=512, n=24
    0.154, 0.450, 0.544, 0.615, 0.601, 0.575,  # TT m=512, n=64
    0.136, 0.539, 0.699, 0.799, 0.810, 0.824,  # TT m=512, n=192
    0.259, 0.546, 0.721, 0.900, 0.899, 0.880,  # TT m=512, n=512
    0.218, 0.526, 0.758, 0.940, 0.954, 0.899,  # TT m=512, n=4096
    0.241, 0.297, 0.156, 0.145, 0.142, 0.125,  # TT m=4096, n=8
    0.148, 0.344, 0.332, 0.339, 0.328, 0.322,  # TT m=4096, n=24
    0.161, 0.412, 0.491, 0.575, 0.563, 0.552,  # TT m=4096, n=64
    0.159, 0.421, 0.575, 0.760, 0.825, 0.810,  # TT m=4096, n=192
    0.161, 0.442, 0.696, 0.864, 0.897, 0.899,  # TT m=4096, n=512
    0.153, 0.427, 0.732, 0.900, 0.899, 0.899,  # TT m=4096, n=4096
)


# The same table measured with BLAS kernels of 32-byte vectors (numpy's OpenBLAS 0.3.31
# running its Haswell kernels, on a 2-core AMD EPYC, Zen 5, with teir_plan's kernels at
# AVX2 width too): the median of three calibrations.  The fractions of peak are the BLAS
# kernels' own: against the reference's, small tiles with a short N run at less of the
# peak (96 x 32 x 32 N,N 0.67 against 0.88) and long calls with a short K at more
# (96 x 9216 x 32 0.85 against 0.58; docs/decisions.md).
AVX2_BLAS_GEMM_EFFICIENCY: tuple[float, ...] = (
    0.144, 0.294, 0.395, 0.191, 0.244, 0.294,  # NN m=8, n=8
    0.297, 0.472, 0.437, 0.214, 0.278, 0.322,  # NN m=8, n=24
    0.345, 0.531, 0.438, 0.214, 0.282, 0.322,  # NN m=8, n=64
    0.317, 0.525, 0.435, 0.228, 0.288, 0.334,  # NN m=8, n=192
    0.240, 0.459, 0.473, 0.225, 0.286, 0.379,  # NN m=8, n=512
    0.242, 0.524, 0.482, 0.231, 0.269, 0.212,  # NN m=8, n=4096
    0.288, 0.467, 0.556, 0.383, 0.465, 0.490,  # NN m=24, n=8
    0.415, 0.622, 0.647, 0.471, 0.584, 0.658,  # NN m=24, n=24
    0.298, 0.681, 0.651, 0.615, 0.649, 0.750,  # NN m=24, n=64
    0.351, 0.519, 0.613, 0.550, 0.704, 0.719,  # NN m=24, n=192
    0.381, 0.587, 0.665, 0.617, 0.621, 0.747,  # NN m=24, n=512
    0.356, 0.567, 0.683, 0.606, 0.615, 0.384,  # NN m=24, n=4096
    0.355, 0.564, 0.654, 0.569, 0.558, 0.554,  # NN m=64, n=8
    0.391, 0.705, 0.771, 0.683, 0.777, 0.755,  # NN m=64, n=24
    0.479, 0.682, 0.835, 0.802, 0.815, 0.874,  # NN m=64, n=64
    0.489, 0.656, 0.842, 0.866, 0.895, 0.835,  # NN m=64, n=192
    0.516, 0.741, 0.807, 0.908, 0.929, 0.816,  # NN m=64, n=512
    0.554, 0.820, 0.890, 0.840, 0.726, 0.319,  # NN m=64, n=4096
    0.341, 0.582, 0.590, 0.587, 0.485, 0.579,  # NN m=192, n=8
    0.499, 0.800, 0.805, 0.849, 0.768, 0.822,  # NN m=192, n=24
    0.446, 0.800, 0.841, 0.881, 0.814, 0.811,  # NN m=192, n=64
    0.503, 0.782, 0.853, 0.956, 0.933, 0.854,  # NN m=192, n=192
    0.544, 0.862, 0.912, 0.992, 0.985, 0.429,  # NN m=192, n=512
    0.603, 0.892, 0.913, 0.902, 0.416, 0.985,  # NN m=192, n=4096
    0.463, 0.654, 0.606, 0.611, 0.483, 0.552,  # NN m=512, n=8
    0.577, 0.732, 0.842, 0.861, 0.750, 0.675,  # NN m=512, n=24
    0.531, 0.797, 0.910, 0.926, 0.895, 0.847,  # NN m=512, n=64
    0.672, 0.853, 0.957, 0.932, 0.959, 0.420,  # NN m=512, n=192
    0.619, 0.850, 0.949, 0.976, 0.925, 0.385,  # NN m=512, n=512
    0.588, 0.778, 0.816, 0.325, 0.658, 0.925,  # NN m=512, n=4096
    0.476, 0.614, 0.570, 0.581, 0.476, 0.200,  # NN m=4096, n=8
    0.541, 0.763, 0.807, 0.803, 0.659, 0.347,  # NN m=4096, n=24
    0.481, 0.791, 0.882, 0.854, 0.834, 0.473,  # NN m=4096, n=64
    0.567, 0.871, 0.955, 0.935, 0.925, 0.959,  # NN m=4096, n=192
    0.607, 0.873, 0.957, 0.933, 0.963, 0.925,  # NN m=4096, n=512
    0.304, 0.414, 0.532, 0.976, 0.925, 0.925,  # NN m=4096, n=4096
    0.134, 0.263, 0.342, 0.177, 0.219, 0.264,  # TN m=8, n=8
    0.291, 0.473, 0.456, 0.215, 0.288, 0.330,  # TN m=8, n=24
    0.342, 0.493, 0.461, 0.222, 0.273, 0.317,  # TN m=8, n=64
    0.346, 0.540, 0.426, 0.223, 0.273, 0.322,  # TN m=8, n=192
    0.235, 0.461, 0.445, 0.236, 0.281, 0.383,  # TN m=8, n=512
    0.249, 0.538, 0.508, 0.239, 0.309, 0.237,  # TN m=8, n=4096
    0.237, 0.392, 0.447, 0.319, 0.388, 0.433,  # TN m=24, n=8
    0.383, 0.600, 0.613, 0.468, 0.555, 0.597,  # TN m=24, n=24
    0.314, 0.592, 0.592, 0.512, 0.590, 0.750,  # TN m=24, n=64
    0.366, 0.533, 0.557, 0.491, 0.557, 0.614,  # TN m=24, n=192
    0.372, 0.570, 0.634, 0.590, 0.639, 0.726,  # TN m=24, n=512
    0.348, 0.560, 0.727, 0.592, 0.670, 0.379,  # TN m=24, n=4096
    0.292, 0.431, 0.445, 0.438, 0.491, 0.466,  # TN m=64, n=8
    0.325, 0.609, 0.727, 0.623, 0.768, 0.741,  # TN m=64, n=24
    0.398, 0.612, 0.695, 0.751, 0.820, 0.833,  # TN m=64, n=64
    0.487, 0.722, 0.811, 0.876, 0.903, 0.837,  # TN m=64, n=192
    0.571, 0.673, 0.807, 0.833, 0.854, 0.807,  # TN m=64, n=512
    0.448, 0.789, 0.850, 0.743, 0.294, 0.622,  # TN m=64, n=4096
    0.297, 0.452, 0.511, 0.529, 0.534, 0.484,  # TN m=192, n=8
    0.484, 0.698, 0.768, 0.784, 0.769, 0.754,  # TN m=192, n=24
    0.465, 0.778, 0.856, 0.887, 0.877, 0.869,  # TN m=192, n=64
    0.594, 0.849, 0.929, 0.969, 0.984, 0.875,  # TN m=192, n=192
    0.646, 0.802, 0.883, 0.946, 0.990, 0.567,  # TN m=192, n=512
    0.583, 0.875, 0.957, 0.877, 0.556, 0.990,  # TN m=192, n=4096
    0.363, 0.517, 0.502, 0.535, 0.517, 0.454,  # TN m=512, n=8
    0.468, 0.729, 0.794, 0.800, 0.802, 0.709,  # TN m=512, n=24
    0.579, 0.804, 0.887, 0.905, 0.919, 0.797,  # TN m=512, n=64
    0.588, 0.809, 0.925, 0.963, 0.955, 0.600,  # TN m=512, n=192
    0.525, 0.846, 0.950, 0.977, 0.949, 0.628,  # TN m=512, n=512
    0.562, 0.845, 0.877, 0.562, 0.753, 0.949,  # TN m=512, n=4096
    0.351, 0.495, 0.536, 0.536, 0.483, 0.185,  # TN m=4096, n=8
    0.502, 0.717, 0.766, 0.804, 0.603, 0.387,  # TN m=4096, n=24
    0.478, 0.791, 0.866, 0.819, 0.712, 0.566,  # TN m=4096, n=64
    0.552, 0.850, 0.933, 0.951, 0.568, 0.955,  # TN m=4096, n=192
    0.536, 0.836, 0.868, 0.661, 0.658, 0.949,  # TN m=4096, n=512
    0.351, 0.434, 0.552, 0.977, 0.949, 0.949,  # TN m=4096, n=4096
    0.138, 0.279, 0.388, 0.292, 0.264, 0.266,  # NT m=8, n=8
    0.301, 0.389, 0.371, 0.380, 0.366, 0.365,  # NT m=8, n=24
    0.309, 0.220, 0.299, 0.327, 0.349, 0.336,  # NT m=8, n=64
    0.052, 0.173, 0.281, 0.313, 0.307, 0.305,  # NT m=8, n=192
    0.065, 0.257, 0.279, 0.310, 0.305, 0.304,  # NT m=8, n=512
    0.245, 0.265, 0.261, 0.300, 0.307, 0.177,  # NT m=8, n=4096
    0.273, 0.463, 0.566, 0.440, 0.510, 0.481,  # NT m=24, n=8
    0.413, 0.563, 0.710, 0.633, 0.665, 0.670,  # NT m=24, n=24
    0.301, 0.395, 0.554, 0.615, 0.668, 0.596,  # NT m=24, n=64
    0.186, 0.413, 0.575, 0.691, 0.621, 0.538,  # NT m=24, n=192
    0.260, 0.525, 0.598, 0.594, 0.636, 0.599,  # NT m=24, n=512
    0.404, 0.529, 0.535, 0.554, 0.520, 0.398,  # NT m=24, n=4096
    0.391, 0.580, 0.646, 0.542, 0.550, 0.539,  # NT m=64, n=8
    0.399, 0.648, 0.841, 0.775, 0.772, 0.789,  # NT m=64, n=24
    0.401, 0.637, 0.800, 0.847, 0.847, 0.850,  # NT m=64, n=64
    0.435, 0.703, 0.823, 0.873, 0.894, 0.816,  # NT m=64, n=192
    0.404, 0.620, 0.789, 0.865, 0.859, 0.783,  # NT m=64, n=512
    0.555, 0.750, 0.809, 0.787, 0.767, 0.547,  # NT m=64, n=4096
    0.354, 0.568, 0.544, 0.582, 0.469, 0.557,  # NT m=192, n=8
    0.486, 0.724, 0.820, 0.862, 0.755, 0.844,  # NT m=192, n=24
    0.523, 0.792, 0.879, 0.840, 0.890, 0.801,  # NT m=192, n=64
    0.571, 0.879, 0.949, 0.981, 0.930, 0.891,  # NT m=192, n=192
    0.594, 0.860, 0.912, 0.949, 0.918, 0.567,  # NT m=192, n=512
    0.602, 0.843, 0.939, 0.912, 0.596, 0.918,  # NT m=192, n=4096
    0.408, 0.604, 0.603, 0.578, 0.464, 0.454,  # NT m=512, n=8
    0.474, 0.776, 0.830, 0.845, 0.754, 0.664,  # NT m=512, n=24
    0.491, 0.796, 0.882, 0.938, 0.862, 0.773,  # NT m=512, n=64
    0.513, 0.845, 0.928, 0.962, 0.925, 0.572,  # NT m=512, n=192
    0.510, 0.832, 0.932, 0.993, 0.919, 0.498,  # NT m=512, n=512
    0.551, 0.796, 0.760, 0.572, 0.487, 0.919,  # NT m=512, n=4096
    0.371, 0.476, 0.517, 0.511, 0.374, 0.215,  # NT m=4096, n=8
    0.460, 0.735, 0.737, 0.757, 0.641, 0.422,  # NT m=4096, n=24
    0.491, 0.704, 0.756, 0.828, 0.762, 0.470,  # NT m=4096, n=64
    0.478, 0.840, 0.909, 0.966, 0.554, 0.925,  # NT m=4096, n=192
    0.346, 0.818, 0.884, 0.587, 0.656, 0.919,  # NT m=4096, n=512
    0.227, 0.403, 0.494, 0.993, 0.919, 0.919,  # NT m=4096, n=4096
    0.129, 0.248, 0.340, 0.278, 0.240, 0.231,  # TT m=8, n=8
    0.260, 0.393, 0.373, 0.339, 0.314, 0.339,  # TT m=8, n=24
    0.247, 0.193, 0.280, 0.325, 0.301, 0.296,  # TT m=8, n=64
    0.052, 0.159, 0.270, 0.320, 0.329, 0.302,  # TT m=8, n=192
    0.065, 0.237, 0.281, 0.275, 0.256, 0.303,  # TT m=8, n=512
    0.229, 0.230, 0.257, 0.270, 0.284, 0.176,  # TT m=8, n=4096
    0.235, 0.352, 0.444, 0.336, 0.351, 0.337,  # TT m=24, n=8
    0.337, 0.477, 0.584, 0.579, 0.552, 0.603,  # TT m=24, n=24
    0.277, 0.371, 0.525, 0.572, 0.605, 0.612,  # TT m=24, n=64
    0.178, 0.403, 0.620, 0.580, 0.590, 0.605,  # TT m=24, n=192
    0.234, 0.485, 0.542, 0.596, 0.558, 0.570,  # TT m=24, n=512
    0.386, 0.498, 0.516, 0.490, 0.515, 0.386,  # TT m=24, n=4096
    0.302, 0.426, 0.436, 0.423, 0.470, 0.442,  # TT m=64, n=8
    0.366, 0.525, 0.712, 0.701, 0.708, 0.699,  # TT m=64, n=24
    0.389, 0.634, 0.744, 0.809, 0.806, 0.813,  # TT m=64, n=64
    0.360, 0.714, 0.831, 0.889, 0.894, 0.823,  # TT m=64, n=192
    0.388, 0.758, 0.850, 0.797, 0.906, 0.783,  # TT m=64, n=512
    0.561, 0.716, 0.778, 0.758, 0.738, 0.402,  # TT m=64, n=4096
    0.300, 0.449, 0.465, 0.507, 0.515, 0.493,  # TT m=192, n=8
    0.395, 0.685, 0.755, 0.804, 0.794, 0.768,  # TT m=192, n=24
    0.490, 0.781, 0.835, 0.883, 0.907, 0.872,  # TT m=192, n=64
    0.485, 0.825, 0.905, 0.949, 0.947, 0.739,  # TT m=192, n=192
    0.485, 0.748, 0.802, 0.914, 0.888, 0.562,  # TT m=192, n=512
    0.485, 0.830, 0.862, 0.901, 0.556, 0.888,  # TT m=192, n=4096
    0.350, 0.502, 0.518, 0.522, 0.531, 0.431,  # TT m=512, n=8
    0.488, 0.668, 0.773, 0.795, 0.783, 0.665,  # TT m=512, n=24
    0.479, 0.738, 0.876, 0.910, 0.884, 0.730,  # TT m=512, n=64
    0.522, 0.794, 0.887, 0.913, 0.946, 0.555,  # TT m=512, n=192
    0.539, 0.799, 0.883, 0.913, 0.897, 0.488,  # TT m=512, n=512
    0.535, 0.791, 0.856, 0.605, 0.481, 0.897,  # TT m=512, n=4096
    0.364, 0.521, 0.524, 0.546, 0.494, 0.179,  # TT m=4096, n=8
    0.428, 0.691, 0.756, 0.737, 0.591, 0.408,  # TT m=4096, n=24
    0.527, 0.787, 0.872, 0.790, 0.691, 0.280,  # TT m=4096, n=64
    0.606, 0.834, 0.911, 0.903, 0.448, 0.946,  # TT m=4096, n=192
    0.468, 0.785, 0.813, 0.587, 0.655, 0.897,  # TT m=4096, n=512
    0.181, 0.349, 0.536, 0.913, 0.897, 0.897,  # TT m=4096, n=4096
)

def blas_efficiency_table(blas_vector_bytes: int | None) -> tuple[float, ...]:
    """The measured efficiency table that fits a BLAS whose GEMM kernels use vectors of
    ``blas_vector_bytes`` (None or 0: not known): the one measured with 32-byte kernels
    for kernels of 32 bytes or fewer (16-byte kernels are not measured: the nearer table),
    else the reference's (64-byte kernels).  Fractions of peak carry over between
    machines whose BLAS runs kernels of one width, not between widths: narrower kernels
    spend more cycles on each flop, so a call's fixed costs weigh less."""
    if blas_vector_bytes and blas_vector_bytes <= 32:
        return AVX2_BLAS_GEMM_EFFICIENCY
    return DEFAULT_GEMM_EFFICIENCY


# Where a MachineParams' values come from (see the module docstring).
SOURCES = ("reference", "isa", "first-use", "calibrated")


@dataclass(frozen=True)
class MachineParams:
    """Parameters of the cost model (all per core unless stated).

    The field defaults are the reference parameters (``MachineParams.reference()``): the
    median of three ``tp.calibrate()`` runs on a 2-core Intel Xeon (Emerald Rapids,
    AVX-512, numpy's OpenBLAS 0.3.31), not a description of any other machine."""

    gemm_flops_f32: float = 188e9  # BLAS sgemm peak on large tiles, one core
    gemm_flops_f64: float = 89e9
    # BLAS' measured fraction of peak on tiles of GEMM_GRID extents in each of the
    # GEMM_FORMS, call included (index ((form * G + i_m) * G + i_n) * G + i_k for
    # G = len(GEMM_GRID)); see cost.gemm_efficiency.
    gemm_efficiency: tuple[float, ...] = DEFAULT_GEMM_EFFICIENCY
    loop_flops: float = 1.5e9  # strided jitted loops (BLAS-illegal or tiny tiles)
    # The vector kernel (executor/microkernel.py) on full micro-tiles and a long K, one
    # core (calibration: a 432 x 24 x 36 tile's rate over its modelled efficiency,
    # executor.lower.vec_efficiency; float64 at half the float32 rate, not measured).
    vec_flops_f32: float = 185e9
    vec_flops_f64: float = 92e9
    # The vector kernel's micro-tile output loads and stores, in K steps (vec.k_share):
    # measured by both calibrations from its rates at K 36 and 192 (0.2-2.7 on an AMD
    # EPYC Zen 5 virtual machine with AVX-512 code, by the hour; 0 with AVX2 code); the
    # reference's fitted value.
    vec_k_steps: float = 8.0
    # The vector kernel's set-up per tile and per strip of micro-tiles along its vector
    # axis (vec.vec_overhead_seconds), beyond tile_seconds: measured by both
    # calibrations from tiles of few and many rows (26-51 ns and 2-3 ns on an AMD EPYC
    # Zen 5 with AVX-512 code); 0 on the reference, which did not measure them.
    vec_tile_seconds: float = 0.0
    vec_strip_seconds: float = 0.0
    tile_seconds: float = 15e-9  # loop-nest bookkeeping per tile
    pack_bytes_per_second: float = 6e9  # packing a strided operand into scratch
    copy_bytes_per_second: float = 24e9  # Copy/ReLU tiles and packs in cache, one core
    dram_bytes_per_second: float = 20e9  # aggregate, both cores
    llc_bytes_per_second: float = 60e9  # aggregate
    l2_bytes: int = 2 * 1024 * 1024  # per core
    llc_bytes: int = 32 * 1024 * 1024
    call_seconds: float = 1.9e-6  # Python-side cost of one executor call
    parallel_seconds: float = 6e-6  # starting a parallel region
    # The executor's worker threads spin for ``spin_seconds`` after a parallel region
    # (executor/threads.py: OMP_SPIN_COUNT), then sleep; a region that must wake them
    # costs ``wake_seconds`` more (a call after a millisecond or two of other work: more
    # after longer).  Both calibrations measure them; these defaults are a 2-core AMD
    # EPYC (Zen 5) virtual machine's, 20-50 us and 0.2-0.25 ms, not the reference Xeon's.
    wake_seconds: float = 3e-5
    spin_seconds: float = 2e-4
    # A core's wait for a cache line another core just wrote (planner/handoff.py: a tree
    # step reading what the step before wrote on other workers).  Both calibrations
    # measure it; the default is the same AMD EPYC virtual machine's, 136-141 ns (a line
    # in its own L3: 87), not the reference Xeon's.
    handoff_seconds: float = 1.4e-7
    calibrated: bool = False  # measured by the full tp.calibrate()
    # Where the values come from (one of SOURCES), when they were measured (UTC, "" if
    # not), and for which machine (CPU / vector ISA / threads): recorded in every plan,
    # so that explain() says which parameters ranked it.
    source: str = "reference"
    measured_at: str = ""
    machine: str = ""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise PlanError(f"MachineParams: source must be one of {SOURCES}, "
                            f"got {self.source!r}")
        table = tuple(float(v) for v in self.gemm_efficiency)
        size = len(GEMM_GRID) ** 3
        if len(table) == size:  # an N,N table alone (a calibration from before the forms)
            table = with_default_forms(table)
        if len(table) != len(GEMM_FORMS) * size:
            raise PlanError(
                f"MachineParams: gemm_efficiency must have {len(GEMM_FORMS) * size} entries "
                f"({len(GEMM_FORMS)} forms x {size} tile shapes), or {size} (N,N alone), "
                f"got {len(table)}")
        object.__setattr__(self, "gemm_efficiency", table)

    @classmethod
    def reference(cls) -> MachineParams:
        """The reference parameters: one 2-core Intel Xeon's calibration (AVX-512), the
        same on every machine (what the test suite and the docs' example plan against)."""
        return cls()

    def __hash__(self) -> int:
        # The planner's memos are keyed by the parameters; hashing every field (the
        # efficiency table is 864 floats) on each lookup cost more than some lookups save.
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    def describe_source(self) -> str:
        """One line: which parameters these are (what explain() prints)."""
        where = f" for {self.machine}" if self.machine else ""
        when = f" at {self.measured_at}" if self.measured_at else ""
        if self.source == "calibrated":
            return f"calibrated by tp.calibrate(){when}{where} (full measurement)"
        if self.source == "first-use":
            return (f"first-use estimate measured{when}{where} (BLAS peak, memory, copy "
                    f"rate, call overhead; the rest scaled from the reference; "
                    f"tp.calibrate() measures fully)")
        if self.source == "isa":
            return (f"defaults derived from the vector ISA{where} (nothing measured; "
                    f"TEIR_PLAN_AUTOCALIBRATE=0)")
        return ("reference parameters (a 2-core Intel Xeon's calibration, AVX-512; fixed, "
                "not measured on this machine)")

    def first_read_rate(self, nbytes: float) -> float:
        """Bytes per second of the first reads of ``nbytes`` that a call runs on again and
        again (a loop, a layer run every step, a benchmark): from the LLC if they fit
        there, else from DRAM."""
        return self.llc_bytes_per_second if nbytes <= self.llc_bytes else (
            self.dram_bytes_per_second)

    def gemm_flops(self, dtype: np.dtype) -> float:
        """BLAS' rate in real flops: complex64's cgemm runs at about sgemm's, complex128's
        zgemm at dgemm's (tiles.flop_factor prices the complex multiply-add)."""
        return self.gemm_flops_f32 if real_dtype(dtype).itemsize == 4 else self.gemm_flops_f64

    def vec_flops(self, dtype: np.dtype) -> float:
        return self.vec_flops_f32 if real_dtype(dtype).itemsize == 4 else self.vec_flops_f64


# ---- defaults derived from the vector ISA -------------------------------------------
# Two FMA pipes per core on the cores teir_plan targets (Intel's AVX-512 server and
# AVX2 client cores, AMD Zen 2-5, Arm Neoverse N1/N2): the lanes are what differ.  (Zen 1
# splits 256-bit FMAs in two, Neoverse V1 and Apple cores have four 128-bit pipes: a
# calibration corrects those.)
FMA_PIPES = 2
# Cycles per second times BLAS' share of the theoretical peak on large tiles, as one
# number: the reference Xeon's 188 GFLOP/s over its 2 pipes x 16 float32 lanes x 2 flops.
# The same assumption gives 94 GFLOP/s a core for AVX2, as calibrated on a 2-core AMD
# EPYC (docs/cost-model.md).
EFFECTIVE_CLOCK_HZ = 188e9 / (FMA_PIPES * 16 * 2)
# Aggregate memory rates grow with the cores that share them, up to what one socket's
# channels give: the reference's 10 GB/s of DRAM and 30 GB/s of LLC per core, up to 16.
BANDWIDTH_CORES_CAP = 16


def _flops_per_cycle(target: VectorTarget, itemsize: int) -> float:
    """Peak flops per cycle of one core for elements of ``itemsize`` bytes: FMA pipes x
    lanes x 2.  Without an FMA vector ISA (``none``) BLAS runs 16-byte SSE vectors on a
    multiply and an add pipe: lanes x 2 flops, one pipe's worth."""
    if not target.enabled:
        return 16 // itemsize * 2
    return FMA_PIPES * target.lanes(itemsize) * 2


def default_params(target: VectorTarget | None = None, threads: int | None = None,
                   l2_bytes: int | None = None, blas_target: VectorTarget | None = None
                   ) -> MachineParams:
    """Parameters derived from the vector ISA when nothing is measured: peak =
    FMA pipes x lanes x 2 x an effective clock; the reference's ratios for what hangs on
    the peak (the vector kernel's rate, float64's), the efficiency table measured with
    BLAS kernels of ``blas_target``'s width (:func:`blas_efficiency_table`), the
    reference's per-core memory rates times the threads.  The
    Python-side, loop and copy costs are the reference's: they depend on the interpreter
    and the caches more than on the vector width.

    ``target`` is the vector kernels' (this process's, narrowed by
    ``TEIR_PLAN_VECTOR_BYTES``, by default), ``blas_target`` BLAS' (the widest the CPU
    runs, by default: ``TEIR_PLAN_VECTOR_BYTES`` narrows teir_plan's kernels, not BLAS;
    ``target`` when that is given); ``threads`` and ``l2_bytes`` default to this
    process's (L2 from sysfs)."""
    from teir_plan.executor.threads import get_num_threads
    from teir_plan.isa import target as host_target
    from teir_plan.isa import widest_target

    ref = MachineParams.reference()
    host = target is None
    tgt = host_target() if target is None else target
    blas = blas_target or (widest_target() if host else tgt)
    n = get_num_threads() if threads is None else threads
    if n < 1:
        raise PlanError(f"default_params: threads must be at least 1, got {n}")
    f64_of_half = ref.gemm_flops_f64 / (ref.gemm_flops_f32 / 2)  # dgemm's share of half
    ref_cores = 2  # the reference machine's
    share = min(n, BANDWIDTH_CORES_CAP) / ref_cores
    l2 = l2_bytes if l2_bytes is not None else ((_l2_bytes() if host else None) or ref.l2_bytes)
    llc = (_llc_bytes() if host else None) or ref.llc_bytes
    return replace(
        ref,
        gemm_flops_f32=_flops_per_cycle(blas, 4) * EFFECTIVE_CLOCK_HZ,
        gemm_flops_f64=_flops_per_cycle(blas, 8) * EFFECTIVE_CLOCK_HZ * f64_of_half,
        gemm_efficiency=blas_efficiency_table(blas.vector_bytes),
        vec_flops_f32=_flops_per_cycle(tgt, 4) * EFFECTIVE_CLOCK_HZ * (
            ref.vec_flops_f32 / ref.gemm_flops_f32),
        vec_flops_f64=_flops_per_cycle(tgt, 8) * EFFECTIVE_CLOCK_HZ * f64_of_half * (
            ref.vec_flops_f64 / ref.gemm_flops_f64),
        dram_bytes_per_second=ref.dram_bytes_per_second * share,
        llc_bytes_per_second=ref.llc_bytes_per_second * share,
        l2_bytes=l2,
        llc_bytes=llc,
        source="isa",
        machine=f"{tgt.describe()} ({tgt.cpu}), {n} threads",
    )


# ---- the parameters in force ----------------------------------------------------------
_lock = threading.Lock()
# Held while a calibration measures: a second thread that plans meanwhile waits for its
# result rather than measuring the machine at the same time (and reading it half as fast).
_measuring = threading.Lock()
_current: MachineParams | None = None
renew_after_fork(sys.modules[__name__], "_lock", threading.Lock)
renew_after_fork(sys.modules[__name__], "_measuring", threading.Lock)


@contextmanager
def first_use_measurement() -> Iterator[MachineParams | None]:
    """Held while a first-use measurement runs (calibrate.quick_calibrate): yields the
    parameters in force if another thread measured them while this one waited (then
    there is nothing to measure), else None."""
    with _measuring:
        with _lock:
            current = _current
        yield current

AUTOCALIBRATE_MODES = {"": "quick", "quick": "quick", "0": "off", "1": "full",
                       "reference": "reference"}


def autocalibrate_mode() -> str:
    """``TEIR_PLAN_AUTOCALIBRATE`` read: "quick" (unset, the default), "off" (0), "full"
    (1) or "reference"."""
    value = os.environ.get("TEIR_PLAN_AUTOCALIBRATE", "").strip().lower()
    mode = AUTOCALIBRATE_MODES.get(value)
    if mode is None:
        raise PlanError(f"TEIR_PLAN_AUTOCALIBRATE must be unset, 'quick', 0, 1 or "
                        f"'reference', got {value!r}")
    return mode


def cache_dir() -> Path:
    return Path(os.environ.get("TEIR_PLAN_CACHE_DIR", Path.home() / ".cache" / "teir_plan"))


def _cpu_model() -> str:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return model


def machine_key() -> str:
    """What a calibration is valid for: the CPU model, the vector ISA the kernels are
    generated for (its key names the compile target's CPU and vector shape: the same
    model under TEIR_PLAN_VECTOR_BYTES=32 runs other kernels), the BLAS kernels the
    GEMM tiles call (``OPENBLAS_CORETYPE=Haswell`` on an AVX-512 CPU halves their rate:
    rates measured with one set of kernels mis-rank plans run on the other) and the
    thread count."""
    from teir_plan.blaslib import blas_kernels
    from teir_plan.executor.threads import get_num_threads
    from teir_plan.isa import target

    return (f"{_cpu_model()} / {target().key} / {blas_kernels()} / "
            f"{get_num_threads()} threads")


def cache_file() -> Path:
    return cache_dir() / "machine.json"


def machine_params() -> MachineParams:
    """The parameters in force: a cached calibration (full or first-use), else a first-use
    measurement, the ISA-derived defaults or the reference, by ``TEIR_PLAN_AUTOCALIBRATE``.

    The first-use measurement runs here, in the first planning call, not on a background
    thread with the defaults meanwhile: the first plans are then ranked with this
    machine's numbers (plans made with the defaults would stay in the plan cache, or be
    dropped and made again); the outcome does not depend on thread timing; and a
    measurement that ran beside the user's first einsum would compete with it for the
    cores (two here), reading both the machine and the einsum slow."""
    global _current
    current = _current  # one reference read: no lock needed on the cached path
    if current is not None:
        return current
    mode = autocalibrate_mode()
    with _lock:
        if _current is not None:
            return _current
        if mode == "reference":
            _current = MachineParams.reference()
            return _current
        loaded = _load()
        if loaded is not None:
            _current = loaded
            return _current
    if mode in ("full", "quick"):
        # Measuring times programs on the executor: imported only when nothing is
        # cached, so that planning with known parameters never loads it from here.
        from teir_plan.planner import calibrate as measure

        return measure.calibrate() if mode == "full" else measure.quick_calibrate()
    with _lock:
        if _current is None:
            _current = default_params()
        return _current


# The form of a cached first-use estimate: 2 since its efficiency table is the one of
# BLAS' kernel width (blas_efficiency_table), 3 since it measures the idle threads' wake
# cost and spin time, 4 since its DRAM rate is the cores' aggregate
# (calibrate.bandwidth_threads), 5 since it measures the cross-core handoff latency
# (calibrate._handoff_latency) and the vector kernel's rate and K steps
# (calibrate._vector_kernel), 6 since it measures the vector kernel's set-up per tile
# and per strip (calibrate._vector_overheads).  An estimate cached in an earlier form is
# not used: the first planning call measures a new one (a second or so), as on a new
# machine, so that a user who planned before gets the same plans as a new one.  A full
# calibration measures its table and stays.
FIRST_USE_FORM = 6


def _load() -> MachineParams | None:
    try:
        data = json.loads(cache_file().read_text())
        entry = data.get(machine_key())
        if entry is None:
            return None
        fields = MachineParams.__dataclass_fields__
        known = {k: v for k, v in entry.items() if k in fields}
        if "source" not in known:  # cached before sources were recorded: a full run
            known["source"] = "calibrated" if known.get("calibrated") else "first-use"
        if known["source"] == "first-use" and entry.get("first_use_form") != FIRST_USE_FORM:
            return None
        # An N,N table alone (calibrated before forms were measured) is completed by
        # MachineParams; a table of another grid raises PlanError: not usable.
        return MachineParams(**known)
    except (OSError, ValueError, TypeError):
        return None


def with_default_forms(nn: Sequence[float]) -> tuple[float, ...]:
    """A full table from an N,N table alone (a calibration cached by a version that
    measured no other form): each other form is N,N times the defaults' ratio of that form
    to N,N, capped at 1, so the machine's own N,N measurements still count."""
    size = len(GEMM_GRID) ** 3
    d = DEFAULT_GEMM_EFFICIENCY
    return tuple(nn) + tuple(min(1.0, v * d[form * size + i] / d[i])
                             for form in range(1, len(GEMM_FORMS)) for i, v in enumerate(nn))


def save_params(params: MachineParams) -> bool:
    """Cache ``params`` under this machine's key (False when the cache cannot be
    written, or when a first-use estimate would replace a full calibration another
    process saved meanwhile)."""
    path = cache_file()
    key = machine_key()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        old = data.get(key)
        if params.source == "first-use" and isinstance(old, dict) and old.get("calibrated"):
            return False
        data[key] = asdict(params)
        if params.source == "first-use":
            data[key]["first_use_form"] = FIRST_USE_FORM
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=2))
        tmp.replace(path)
        return True
    except OSError:
        return False  # a read-only home: calibration still applies to this process


def _cache_bytes(level: int) -> int | None:
    """The size of cpu0's cache of ``level`` as Linux reports it (L2: a core's; the last
    level: what cpu0 shares), or None."""
    try:
        for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
            if (index / "level").read_text().strip() == str(level):
                text = (index / "size").read_text().strip().upper()
                scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
                return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return None


def _l2_bytes() -> int | None:
    """This CPU's L2 cache per core as Linux reports it, or None."""
    return _cache_bytes(2)


def _llc_bytes() -> int | None:
    """This CPU's last-level cache (L3, else L2) as Linux reports it, or None."""
    return _cache_bytes(3) or _cache_bytes(2)


def set_machine_params(params: MachineParams | None) -> None:
    """Use ``params`` for planning (None: reload the cached calibration or defaults)."""
    global _current
    with _lock:
        _current = params
