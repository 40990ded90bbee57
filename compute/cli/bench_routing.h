// compute/cli/bench_routing.h: the routing a bench takes in place of the
// model's router: `--routing synthetic[:SEED]` (the statistics of real models
// for the container's geometry) or a recorded trace file. Reading and naming
// only; the generator is router/synthetic_routing, the format router/trace.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "proto/container.h"
#include "router/routing_profile.h"
#include "router/trace.h"

namespace sluice::cli {

struct BenchRouting {
  std::vector<router::TraceToken> trace;
  std::string label;  // "synthetic:SEED (profile)" or the trace's path
};

// The container's MoE layers as one geometry: the fewest experts of any
// layer, so a synthetic id fits every bank. Error when it has no MoE layer.
router::RoutingGeometry moe_geometry(const Container& container);

// `source` is "synthetic", "synthetic:SEED" (`tokens` tokens of `geometry`)
// or a trace path. A malformed seed is an argument error (exit status 2); a
// trace that cannot be read or holds no tokens is an Error naming it. Traces
// are not checked against a model here.
BenchRouting load_bench_routing(const std::string& source, const router::RoutingGeometry& geometry,
                                uint32_t tokens);

}  // namespace sluice::cli
