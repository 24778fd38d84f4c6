#pragma once
// XMC_HOST_DEVICE marks an inline function compiled for the host and, under nvcc, for the
// device too: the one definition of a formula that both halves of an op use (a ranking
// rule, a rounding rule, a counter-based random draw).
#if defined(__CUDACC__)
#define XMC_HOST_DEVICE __host__ __device__
#else
#define XMC_HOST_DEVICE
#endif
