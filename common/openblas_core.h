// OpenBLAS picks its kernels by CPU model when it loads. A model newer than its release is
// not known to it and gets its generic Prescott (SSE3) kernels: Debian 12's OpenBLAS 0.3.21
// on a Sapphire Rapids Xeon multiplies fp32 matrices at 31 GFLOP/s on 2 threads instead of
// 108 with its AVX-512 kernels (docs/references.md, "Sizing on a 2-core machine"). Torch-free.
#pragma once

#include <string>

namespace saccade {

// The core OpenBLAS chose in this process, e.g. "SkylakeX"; "" without OpenBLAS.
std::string openblas_core();

// The OPENBLAS_CORETYPE this process should have had: "SkylakeX" (AVX-512 F, CD, BW, DQ,
// VL), "Haswell" (AVX2 and FMA) or "Sandybridge" (AVX) when OpenBLAS chose a core without
// AVX on a CPU that has it; "" when its choice stands, OpenBLAS is absent or
// OPENBLAS_CORETYPE is set (the user's choice, or this fix already applied).
std::string openblas_core_fix();

// With a fix: sets OPENBLAS_CORETYPE (and SACCADE_OPENBLAS_DETECTED to the core OpenBLAS
// had chosen, for `saccade info`) and re-executes this program with `argv`, keeping its
// process id, before anything else has started; returns only when there is nothing to fix
// or the exec failed. Children inherit the variable, so each process fixes at most once.
void reexec_with_openblas_core_fix(char** argv);

}  // namespace saccade
