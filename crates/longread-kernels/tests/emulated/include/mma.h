// Host stand-in for CUDA's <mma.h>: empty (kernels.cu leaves its WMMA kernels out when emulated).
#pragma once
