// The machine's dense matmul throughput, measured: the denominator of MFU (monitor/mfu.h), the
// evidence behind precision.mode = "auto" (train/precision.h) and a line of `frugal doctor`.
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace frugal {

// Measured dense matmul throughput (n x n x n) in GFLOP/s on the CPU, fp32 or bf16, over ~seconds
// (at least two products after a warm-up; one alone when the warm-up product outlasts `seconds`).
double measure_matmul_gflops(int64_t n, bool bf16, double seconds);
// The same in any dtype on any device (CUDA timings synchronise before and after).
double measure_matmul_gflops(int64_t n, c10::ScalarType dtype, c10::Device device, double seconds);

// fp32 against bf16 on the CPU, measured robustly: `rounds` alternating rounds of each (so that a
// burst of load from a neighbour hits both alike), ~seconds_per_probe each, medians.
struct CpuPrecisionSpeeds {
  double fp32_gflops = 0, bf16_gflops = 0;
  int rounds = 0;
  int64_t n = 0;
};
CpuPrecisionSpeeds measure_cpu_precision_speeds(int64_t n, int rounds, double seconds_per_probe);

}  // namespace frugal
