// tests/compute/model/chunked_prefill_test.cpp: a prompt prefilled in chunks
// gives the logits of prefilling it one token at a time, bit for bit, for GQA
// (OLMoE, Qwen3-MoE's grouped heads) and MLA (DeepSeek-V3) attention, which
// attend a chunk's tokens in one pass over the cache. The experts take their
// tables for every token count (the decode-once path would round otherwise
// from the crossover on, rvq_decoded.h), so only attention could differ.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "compute/kernels/rvq_crossover.h"
#include "compute/model/engine.h"
#include "tests/compute/model/tiny_models.h"
#include "tests/proto/pinned_environment.h"

using namespace sluice;
using namespace sluice::testing;

namespace {

const std::vector<int32_t> kPrompt = {400, 2, 33, 17, 210, 9, 71, 5, 120, 66, 8, 250, 31};

std::vector<float> prefill_logits(const std::string& model, uint32_t chunk) {
  EngineOptions options = small_options();
  options.prefill_chunk = chunk;
  Engine engine(model, options);
  std::vector<float> rows;
  continue_greedy(engine, engine.sequence(), kPrompt, 2, rows);
  return rows;
}

void check_chunks(const std::string& family) {
  const PinnedEnvironment tables_for_every_token("SLUICE_RVQ_CROSSOVER",
                                                 std::to_string(kernels::kRvqCrossoverMax));
  const std::string& model = tiny_model(family);
  const std::vector<float> one_by_one = prefill_logits(model, 1);
  for (uint32_t chunk : {3u, 4u}) {
    CAPTURE(chunk);
    CHECK(bit_identical(prefill_logits(model, chunk), one_by_one));
  }
}

}  // namespace

TEST_CASE("OLMoE: chunked prefill is bit-identical to one token at a time") {
  check_chunks("olmoe");
}

TEST_CASE("Qwen3-MoE (two query heads per kv head): chunked prefill is bit-identical") {
  check_chunks("qwen3_moe");
}

TEST_CASE("DeepSeek-V3 (MLA): chunked prefill is bit-identical to one token at a time") {
  check_chunks("deepseek_v3");
}
