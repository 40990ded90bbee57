// compute/kernels/rvq_crossover.h: how many tokens of one expert make decoding
// its weights once (rvq_decoded.h) cheaper than table lookups (rvq.h), chosen
// by timing both on a synthetic expert of the model's shape at load. Never
// changes what either path computes; only which one a caller picks.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <span>
#include <string>

#include "compute/kernels/dispatch.h"

namespace sluice::kernels {

// Token counts the calibration tries, ascending, up to a whole default
// prefill chunk: with format 3's tables a token costs about what it costs
// through int8 tiles, so decoding once may not win below 64 tokens at all.
inline constexpr uint32_t kRvqCrossoverCandidates[] = {1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64};
// The largest crossover rvq_decode_crossover returns, pinned or measured: an
// expert serves at most kRvqCrossoverMax - 1 tokens through tables, which the
// memory plan counts (ioworker/memory_plan.h, kPlanTableTokensPerExpert).
inline constexpr uint32_t kRvqCrossoverMax = std::end(kRvqCrossoverCandidates)[-1] + 1;
// Experts smaller than this (weights per matrix) take the instruction set's
// default: their timings are microseconds of noise, and both paths cost little.
inline constexpr uint64_t kRvqCalibrateFromWeights = uint64_t{1} << 20;

// The time of one expert through each path at n tokens, in any unit.
struct RvqPathSeconds {
  double tables = 0;
  double decoded = 0;
};

// The smallest candidate at which the decoded path is no slower than the
// tables, or one past the last candidate when it never is.
uint32_t rvq_crossover_from(std::span<const uint32_t> candidates,
                            const std::function<RvqPathSeconds(uint32_t tokens)>& measure);

// Tokens per expert from which the caller decodes once (n >= the result) for
// experts of gate/up [width × hidden] and down [hidden × width] at exec.isa
// with exec.trunk's activations.
// The two paths round differently, so the choice changes logits slightly:
//   - SLUICE_RVQ_CROSSOVER=N (N >= 1) pins it;
//   - else the machine's cache file for this build (rvq_crossover_cache_path)
//     gives it, so every run of one build on one machine takes the same paths;
//   - else it is measured (single-threaded, a fraction of a second at real
//     shapes) and written there; an unwritable cache only loses the reuse.
// A cache file that does not hold a count is measured again and replaced. An
// unparsable SLUICE_RVQ_CROSSOVER is an Error naming the variable.
uint32_t rvq_decode_crossover(const Exec& exec, uint32_t hidden, uint32_t width);

// $XDG_CACHE_HOME/sluice/rvq-crossover-ISA-ACTIVATIONS-HIDDENxWIDTH-BUILD
// (ACTIVATIONS: f32 or int8, which picks the decode-once tiles; BUILD: the
// commit of this build, sluice_build_id.h, since other kernels cross over
// elsewhere), or under $HOME/.cache when XDG_CACHE_HOME is unset; empty when
// neither is set.
std::string rvq_crossover_cache_path(Isa isa, TrunkActivations activations, uint32_t hidden,
                                     uint32_t width);

// What rvq_decode_crossover returns for shapes too small to measure.
uint32_t rvq_default_crossover(Isa isa);

}  // namespace sluice::kernels
