// compute/cli/routing_fit.h: fits a routing shape (compute/convert/
// routing_shape.h) so that the routing its weights give when decoding has a
// recorded profile's statistics (router/routing_profile.h). It simulates and
// measures; it never writes weights.
#pragma once

#include <cstdint>

#include "compute/convert/routing_shape.h"
#include "proto/model_config.h"

namespace sluice::cli {

// The shape for `config`, fitted to profile_for(its MoE geometry): per
// layer the slow/fast mix to the next-token repeat and the bias to the
// popularity curve, in rounds of simulated decode. Deterministic for a seed;
// `threads` only changes how fast.
convert::RoutingShape fit_routing_shape(const ModelConfig& config, uint64_t seed, int threads);

}  // namespace sluice::cli
