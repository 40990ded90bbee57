// compute/cli/bench_routing.cpp: parsing `--routing` for the benches.
#include "compute/cli/bench_routing.h"

#include <fmt/format.h>

#include <algorithm>

#include "compute/cli/commands.h"
#include "proto/error.h"
#include "router/synthetic_routing.h"

namespace sluice::cli {

router::RoutingGeometry moe_geometry(const Container& container) {
  const auto& layers = container.moe_layers();
  if (layers.empty()) fail("{}: the container has no expert layers", container.dir());
  uint32_t experts = layers.front().experts;
  for (const MoeLayerInfo& info : layers) experts = std::min(experts, info.experts);
  return {static_cast<uint32_t>(layers.size()), experts, container.top_k()};
}

BenchRouting load_bench_routing(const std::string& source, const router::RoutingGeometry& geometry,
                                uint32_t tokens) {
  constexpr std::string_view kSynthetic = "synthetic";
  if (source.starts_with(kSynthetic) &&
      (source.size() == kSynthetic.size() || source[kSynthetic.size()] == ':')) {
    uint64_t seed = 1;
    if (source.size() > kSynthetic.size()) {
      const std::string digits = source.substr(kSynthetic.size() + 1);
      // 19 digits always fit in 64 bits.
      if (digits.empty() || digits.size() > 19 ||
          digits.find_first_not_of("0123456789") != std::string::npos)
        usage_error("--routing: '{}' is not synthetic, synthetic:SEED or a trace file", source);
      seed = std::stoull(digits);
    }
    return {router::synthetic_trace(geometry, tokens, seed),
            fmt::format("synthetic:{} ({})", seed, router::profile_for(geometry).name)};
  }
  std::vector<router::TraceToken> trace = router::read_trace(source);
  if (trace.empty()) fail("{}: the trace holds no tokens", source);
  return {std::move(trace), source};
}

}  // namespace sluice::cli
