// See CUDAGeneratorImpl.h beside this file.
#pragma once
#include "CUDAGeneratorImpl.h"
