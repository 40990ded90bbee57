// compute/kernels/rvq_crossover.cpp: the run-time choice between the RVQ
// table path and the decode-once path: the environment pin, the machine's
// cache file, the measurement on a synthetic expert. Never asserts on a time,
// and never fails a run over the cache file.
#include "compute/kernels/rvq_crossover.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "compute/kernels/rvq.h"
#include "compute/kernels/rvq_decoded.h"
#include "proto/error.h"
#include "proto/f16.h"
#include "sluice_build_id.h"

namespace sluice::kernels {

namespace {

constexpr int kTimedRuns = 3;  // the fastest of three: load only ever adds time

// Deterministic bytes: the timing does not depend on the values, only their spread.
void fill_bytes(std::vector<uint8_t>& out, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint8_t& b : out) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    b = static_cast<uint8_t>(state >> 24);
  }
}

std::vector<float> signed_floats(size_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(n);
  fill_bytes(bytes, seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = (static_cast<float>(bytes[i]) - 127.5f) / 128.0f;
  return out;
}

// One synthetic expert and everything both paths need, run as the engine runs
// an expert: gate and up tables prebuilt (the engine shares them among a
// token's experts), the down table built per expert.
class SyntheticExpert {
 public:
  // Runs serially with exec's other settings (the activations pick the tiles).
  SyntheticExpert(uint32_t hidden, uint32_t width, uint32_t max_tokens, const Exec& exec)
      : hidden_(hidden), width_(width), exec_(exec) {
    exec_.pool = nullptr;
    const RvqMatrixShape shapes[3] = {{width, hidden}, {width, hidden}, {hidden, width}};
    for (int k = 0; k < 3; ++k) {
      indices_[k].resize(shapes[k].index_bytes());
      fill_bytes(indices_[k], 11 + k);
      scales_[k].assign(shapes[k].rows_padded(), f32_to_f16(0.02f));
      const std::vector<float> cb = signed_floats(size_t{2} * kRvqEntries * kRvqVecDim, 31 + k);
      books_.emplace_back(cb.data(), cb.data() + kRvqEntries * kRvqVecDim);
      views_[k] = {shapes[k], indices_[k].data(), scales_[k].data()};
    }
    x_ = signed_floats(size_t{hidden} * max_tokens, 41);
    gate_.resize(size_t{width} * max_tokens);
    up_.resize(gate_.size());
    out_.resize(size_t{hidden} * max_tokens);
    for (uint32_t t = 0; t < max_tokens; ++t) rows_.push_back(t);
  }

  RvqPathSeconds measure(uint32_t tokens) {
    gate_table_.build(books_[0], x_.data(), hidden_, tokens, exec_);
    up_table_.build(books_[1], x_.data(), hidden_, tokens, exec_);
    const std::span<const uint32_t> rows(rows_.data(), tokens);
    RvqPathSeconds best{std::numeric_limits<double>::max(), std::numeric_limits<double>::max()};
    for (int run = 0; run <= kTimedRuns; ++run) {  // run 0 warms caches and grows the tables
      const double tables = seconds([&] {
        rvq_matmul(gate_table_, rows, views_[0], gate_.data(), exec_);
        rvq_matmul(up_table_, rows, views_[1], up_.data(), exec_);
        down_table_.build(books_[2], gate_.data(), width_, tokens, exec_);
        rvq_matmul(down_table_, rows, views_[2], out_.data(), exec_);
      });
      const double decoded = seconds([&] {
        rvq_matmul_decoded(books_[0], views_[0], x_.data(), tokens, gate_.data(), exec_);
        rvq_matmul_decoded(books_[1], views_[1], x_.data(), tokens, up_.data(), exec_);
        rvq_matmul_decoded(books_[2], views_[2], gate_.data(), tokens, out_.data(), exec_);
      });
      if (run == 0) continue;
      best.tables = std::min(best.tables, tables);
      best.decoded = std::min(best.decoded, decoded);
    }
    return best;
  }

 private:
  template <typename F>
  static double seconds(F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  uint32_t hidden_, width_;
  Exec exec_;
  std::vector<uint8_t> indices_[3];
  std::vector<uint16_t> scales_[3];
  std::vector<RvqCodebooks> books_;
  RvqMatrixView views_[3];
  std::vector<float> x_, gate_, up_, out_;
  std::vector<uint32_t> rows_;
  RvqTable gate_table_, up_table_, down_table_;
};

// A crossover from 1 to kRvqCrossoverMax written in decimal, or 0.
uint32_t parse_count(std::string_view text) {
  if (text.empty() || text.size() > 6 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  const auto count = static_cast<uint32_t>(std::stoul(std::string(text)));
  return count <= kRvqCrossoverMax ? count : 0;
}

// SLUICE_RVQ_CROSSOVER, or 0 when unset.
uint32_t crossover_from_environment() {
  const char* value = std::getenv("SLUICE_RVQ_CROSSOVER");
  if (value == nullptr || *value == '\0') return 0;
  const uint32_t count = parse_count(value);
  if (count == 0)
    fail("SLUICE_RVQ_CROSSOVER={}: expected a token count from 1 to {}", value, kRvqCrossoverMax);
  return count;
}

// The count a cache file holds (one line), or 0 when it is missing or holds anything else.
uint32_t read_cached(const std::string& path) {
  std::ifstream in(path);
  std::string line, rest;
  if (!in || !std::getline(in, line) || std::getline(in, rest)) return 0;
  return parse_count(line);
}

// Best effort: written beside, then renamed over, so no reader sees half a file.
void write_cached(const std::string& path, uint32_t crossover) {
  std::error_code error;
  const std::filesystem::path target(path);
  std::filesystem::create_directories(target.parent_path(), error);
  const std::string temporary = fmt::format("{}.{}.tmp", path, getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << crossover << '\n';
    if (!out.flush()) {
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, target, error);
  if (error) std::filesystem::remove(temporary, error);
}

}  // namespace

uint32_t rvq_crossover_from(std::span<const uint32_t> candidates,
                            const std::function<RvqPathSeconds(uint32_t tokens)>& measure) {
  for (uint32_t n : candidates) {
    const RvqPathSeconds s = measure(n);
    if (s.decoded <= s.tables) return n;
  }
  return candidates.empty() ? 1 : candidates.back() + 1;
}

// Measured with `sluice bench kernels --threads 1` ("rvq prefill expert",
// OLMoE and Qwen3 shapes, format 3, int8 activations) on a Zen 3 core:
// tables and int8 tiles cross between 16 and 32 tokens with AVX2 tables
// (which AVX-512 machines run too), near 4 for scalar tables.
uint32_t rvq_default_crossover(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
    case Isa::kAvx2:
      return 24;
    case Isa::kScalar:
      break;
  }
  return 4;
}

std::string rvq_crossover_cache_path(Isa isa, TrunkActivations activations, uint32_t hidden,
                                     uint32_t width) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  std::string root;
  if (xdg != nullptr && *xdg != '\0')
    root = xdg;
  else if (home != nullptr && *home != '\0')
    root = std::string(home) + "/.cache";
  else
    return {};
  return fmt::format("{}/sluice/rvq-crossover-{}-{}-{}x{}-{}", root, isa_name(isa),
                     trunk_activations_name(activations), hidden, width, SLUICE_BUILD_ID);
}

uint32_t rvq_decode_crossover(const Exec& exec, uint32_t hidden, uint32_t width) {
  if (const uint32_t pinned = crossover_from_environment(); pinned > 0) return pinned;
  if (hidden == 0 || width == 0 || hidden % kRvqColsMultiple != 0 || width % kRvqColsMultiple != 0 ||
      hidden > kRvqMaxCols || width > kRvqMaxCols)
    fail("rvq crossover: expert shape {} × {} is not two multiples of 8 up to {}", hidden, width,
         kRvqMaxCols);
  if (uint64_t{hidden} * width < kRvqCalibrateFromWeights) return rvq_default_crossover(exec.isa);
  static std::mutex mutex;
  static std::map<std::tuple<Isa, TrunkActivations, uint32_t, uint32_t>, uint32_t> measured;
  std::lock_guard lock(mutex);
  const auto key = std::tuple{exec.isa, exec.trunk, hidden, width};
  if (const auto found = measured.find(key); found != measured.end()) return found->second;
  const std::string cache = rvq_crossover_cache_path(exec.isa, exec.trunk, hidden, width);
  uint32_t crossover = cache.empty() ? 0 : read_cached(cache);
  if (crossover == 0) {
    SyntheticExpert expert(hidden, width, std::end(kRvqCrossoverCandidates)[-1], exec);
    crossover =
        rvq_crossover_from(kRvqCrossoverCandidates, [&](uint32_t n) { return expert.measure(n); });
    if (!cache.empty()) write_cached(cache, crossover);
  }
  measured.emplace(key, crossover);
  return crossover;
}

}  // namespace sluice::kernels
