// router/trace.h: recorded routing as JSON lines, one object per token:
// {"tok": N, "layers": [[expert ids of MoE layer 0], [MoE layer 1], ...]},
// MoE layers in model order, experts in routing order; the writer adds
// "weights" (the same shape, the routing weights) when it has them, which
// readers ignore. Reading checks every line; it never guesses at a malformed one.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace sluice::router {

struct TraceToken {
  uint64_t tok = 0;                            // position of the token in its sequence
  std::vector<std::vector<uint32_t>> layers;  // by MoE layer ordinal
  std::vector<std::vector<float>> weights;    // the experts' routing weights; empty: not recorded
};

class TraceWriter {
 public:
  // Truncates `path`; throws Error naming it when it cannot be written.
  explicit TraceWriter(const std::string& path);
  void write(const TraceToken& token);
  // Flushes; throws Error when the file could not be written.
  void close();

 private:
  std::string path_;
  std::ofstream out_;
};

// Reads a whole trace; throws Error naming the file and line of the first
// malformed line. Blank lines are skipped.
std::vector<TraceToken> read_trace(const std::string& path);

}  // namespace sluice::router
