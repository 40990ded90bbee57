// compute/kernels/dispatch.h: which instruction set the kernels use (CPUID plus
// the SLUICE_KERNELS override) and the execution context every kernel takes.
// Never chooses an instruction set the CPU or the OS cannot run.
#pragma once

#include <string_view>

namespace sluice::kernels {

class ThreadPool;

enum class Isa { kScalar, kAvx2 };

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool os_saves_ymm = false;  // XGETBV says the OS preserves the upper halves of ymm
};

CpuFeatures detect_cpu_features();
const char* isa_name(Isa isa);

// The fastest instruction set this machine runs (AVX2 needs AVX2, FMA and OS
// support for ymm state).
Isa best_isa();

// best_isa(), unless SLUICE_KERNELS says otherwise: "scalar" forces the scalar
// path; "avx2" requests AVX2 and fails with an Error naming the variable when
// this machine cannot run it; any other value is an Error.
Isa isa_from_environment();
Isa parse_isa(std::string_view name, std::string_view what);

// How a kernel runs: the instruction set, and the pool that splits its rows
// (nullptr: everything on the calling thread). Results do not depend on the
// pool's size.
struct Exec {
  Isa isa = Isa::kScalar;
  ThreadPool* pool = nullptr;
};

}  // namespace sluice::kernels
