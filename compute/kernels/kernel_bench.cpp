// compute/kernels/kernel_bench.cpp: times the kernels the way the engine calls
// them, on synthetic records of the real model shapes, and measures memory read
// bandwidth in the same run so every speed has a ceiling next to it. Never
// asserts on a time; it only reports medians.
#include "compute/kernels/kernel_bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include "compute/kernels/attend.h"
#include "compute/kernels/quant.h"
#include "compute/kernels/rvq.h"
#include "compute/kernels/rvq_crossover.h"
#include "compute/kernels/rvq_decoded.h"
#include "compute/kernels/rvq_kernels.h"
#include "compute/kernels/thread_pool.h"
#include "proto/f16.h"

namespace sluice::kernels {

namespace {

using Clock = std::chrono::steady_clock;

// Each kind's synthetic records alone overflow a 32 MiB last-level cache, so
// a case that walks one kind (the single-matrix ones) reads from memory as
// the engine does from its slot cache. 24 records a kind left OLMoE's gate
// matrices (19 MiB) in L3 on Zen 3: they read at 0.80 of the memory's
// bandwidth while the expert step, from memory, gave 0.64.
constexpr uint64_t kBankBytesPerKind = uint64_t{64} << 20;
constexpr uint64_t kMemoryBufferBytes = uint64_t{512} << 20;

struct TrunkShape {
  const char* name;
  QuantFormat format;
  uint32_t rows, cols;
};

// Kimi-Linear's MLA layers, in their absorbed form, dot every head with one
// 512-wide latent per position and weigh the same latent: timed here as one kv
// head of 512 whose keys and values are separate rows (twice the bytes).
struct AttentionShape {
  uint32_t heads, kv_heads, head_dim;
};

struct ModelShape {
  const char* name;
  uint32_t hidden, width, top_k;
  TrunkShape trunk[3];
  AttentionShape attention;
};

constexpr ModelShape kModels[] = {
    {"olmoe-1b-7b",
     2048,
     1024,
     8,
     {{"q_proj", QuantFormat::kQ4G128, 2048, 2048},
      {"lm_head", QuantFormat::kQ8G128, 50304, 2048},
      {"lm_head", QuantFormat::kQ6G128, 50304, 2048}},
     {16, 16, 128}},
    {"qwen3-30b-a3b",
     2048,
     768,
     8,
     {{"q_proj", QuantFormat::kQ4G128, 4096, 2048},
      {"lm_head", QuantFormat::kQ8G128, 151936, 2048},
      {"lm_head", QuantFormat::kQ6G128, 151936, 2048}},
     {32, 4, 128}},
    {"kimi-linear-48b",
     2304,
     1024,
     8,
     {{"q_proj", QuantFormat::kQ4G128, 4096, 2304},
      {"lm_head", QuantFormat::kQ8G128, 163840, 2304},
      {"lm_head", QuantFormat::kQ6G128, 163840, 2304}},
     {32, 1, 512}},
};

void fill_random(uint8_t* out, size_t n, uint64_t seed) {
  uint64_t state = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    out[i] = static_cast<uint8_t>(state >> 24);
  }
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::vector<uint8_t> bytes(n);
  fill_random(bytes.data(), n, seed);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = (static_cast<float>(bytes[i]) - 127.5f) / 128.0f;
  return out;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

struct Timing {
  double wall = 0;  // median wall-clock seconds of one run
  double cpu = 0;   // median CPU seconds of the whole process during one run
  size_t runs = 0;
};

template <typename F>
Timing time_runs(double budget, F&& f) {
  f();  // warm-up: first-touch pages, caches, thread wake-up
  std::vector<double> wall, cpu;
  const auto start = Clock::now();
  while (wall.size() < 3 || (std::chrono::duration<double>(Clock::now() - start).count() < budget &&
                             wall.size() < 10000)) {
    const double c0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    f();
    wall.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    cpu.push_back(process_cpu_seconds() - c0);
  }
  return {median(wall), median(cpu), wall.size()};
}

// SwiGLU between an expert's up and down matrices: h = silu(gate) · up.
void swiglu(const float* gate, const float* up, float* h, size_t n) {
  for (size_t i = 0; i < n; ++i) h[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// STREAM-style read: sum a buffer larger than the last-level cache.
double memory_read_bandwidth(ThreadPool& pool, double budget) {
  const size_t words = kMemoryBufferBytes / sizeof(uint64_t);
  std::vector<uint64_t> buffer(words);
  pool.parallel_for(words, words / 64, [&](size_t b, size_t e) {
    for (size_t i = b; i < e; ++i) buffer[i] = i * 2654435761u;
  });
  constexpr size_t kChunks = 256;
  std::vector<uint64_t> sums(kChunks);
  const double seconds = time_runs(std::max(budget, 0.5), [&] {
                           pool.parallel_for(kChunks, 1, [&](size_t b, size_t e) {
                             for (size_t c = b; c < e; ++c) {
                               uint64_t s = 0;
                               const uint64_t* p = buffer.data() + c * (words / kChunks);
                               for (size_t i = 0; i < words / kChunks; ++i) s += p[i];
                               sums[c] = s;
                             }
                           });
                         }).wall;
  volatile uint64_t sink = 0;
  for (uint64_t s : sums) sink = sink + s;
  return static_cast<double>(kMemoryBufferBytes) / seconds;
}

// Synthetic records of one layer's experts, `experts` of them, plus a pair of
// codebooks for each of gate, up and down.
struct ExpertBank {
  uint32_t hidden, width, experts;
  std::array<RvqMatrixShape, 3> shapes;
  std::array<std::vector<uint8_t>, 3> indices;  // `experts` matrices each
  std::array<std::vector<uint16_t>, 3> scales;  // shared by the experts: scales do not change speed
  std::vector<RvqCodebooks> books;

  ExpertBank(uint32_t h, uint32_t w) : hidden(h), width(w) {
    shapes = {RvqMatrixShape{w, h}, RvqMatrixShape{w, h}, RvqMatrixShape{h, w}};
    experts = static_cast<uint32_t>(kBankBytesPerKind / shapes[0].index_bytes() + 1);
    for (int k = 0; k < 3; ++k) {
      indices[k].resize(shapes[k].index_bytes() * experts);
      fill_random(indices[k].data(), indices[k].size(), 11 + k);
      const std::vector<float> s = random_floats(shapes[k].rows_padded(), 21 + k);
      for (float v : s) scales[k].push_back(f32_to_f16(std::fabs(v) + 0.01f));
      const std::vector<float> cb = random_floats(size_t{2} * kRvqEntries * kRvqVecDim, 31 + k);
      books.emplace_back(cb.data(), cb.data() + kRvqEntries * kRvqVecDim);
    }
  }
  RvqMatrixView view(int kind, uint32_t expert) const {
    return {shapes[kind],
            indices[kind].data() + shapes[kind].index_bytes() * (expert % experts),
            scales[kind].data()};
  }
  uint64_t packed_bytes(int kind) const {
    return shapes[kind].index_bytes() + shapes[kind].rows_padded() * 2;
  }
};

struct ExpertRun {
  const char* name;
  Isa isa;
  bool shared_tables;
  bool by_matrix;  // all experts' gate, then all up, then each down: the shared table stays in L2
  bool decoded;    // no tables: rvq_decoded.h, as the engine runs when its crossover is 1
  // The engine's default, int8 activations, takes int8 table codes; f32 ones int16.
  TrunkActivations activations = TrunkActivations::kInt8;
};

class Bench {
 public:
  explicit Bench(const KernelBenchOptions& o)
      : options_(o), pool_(o.threads) {}

  KernelBenchReport run() {
    report_.isa = isa_name(options_.isa);
    report_.threads = pool_.size();
    report_.memory_buffer_bytes = kMemoryBufferBytes;
    report_.memory_read_bytes_per_second = memory_read_bandwidth(pool_, options_.seconds_per_case);
    for (const ModelShape& model : kModels) {
      bench_experts(model);
      bench_prefill_expert(model);
      for (const TrunkShape& t : model.trunk) bench_trunk(model, t);
      bench_attention(model);
    }
    return std::move(report_);
  }

 private:
  template <typename F>
  void time_case(const ModelShape& m, std::string kernel, std::string shape, std::string variant,
                 Isa isa, uint64_t weights, uint64_t bytes, F&& f) {
    KernelBenchCase c{
        m.name, std::move(kernel), std::move(shape), std::move(variant), isa_name(isa), weights,
        bytes};
    const Timing t = time_runs(options_.seconds_per_case, f);
    c.median_seconds = t.wall;
    c.median_cpu_seconds = t.cpu;
    c.runs = t.runs;
    c.compute_bound_ratio =
        static_cast<double>(bytes) / t.wall / report_.memory_read_bytes_per_second;
    if (options_.on_case) options_.on_case(c);
    report_.cases.push_back(std::move(c));
  }

  // As the engine builds a layer's shared tables: both in one call.
  void build_gate_up(const ExpertBank& bank, const float* x, uint32_t tokens, const Exec& exec) {
    const RvqTableBuild builds[] = {{&gate_table_, &bank.books[0]}, {&up_table_, &bank.books[1]}};
    build_rvq_tables(builds, x, bank.hidden, tokens, exec);
  }

  // The engine's instruction set first, then (when asked) every other one this CPU runs.
  std::vector<Isa> isas() const {
    std::vector<Isa> out{options_.isa};
    if (options_.every_isa)
      for (Isa isa : supported_isas())
        if (isa != options_.isa) out.push_back(isa);
    return out;
  }

  void bench_experts(const ModelShape& m) {
    const ExpertBank bank(m.hidden, m.width);
    const std::vector<float> x = random_floats(m.hidden, 41);
    std::vector<float> g(m.width), u(m.width), h(m.width), out(m.hidden);
    std::vector<float> gk(size_t{m.width} * m.top_k), uk(size_t{m.width} * m.top_k);
    const uint32_t token = 0;
    uint32_t next_expert = 0;
    const uint64_t expert_weights = uint64_t{3} * m.hidden * m.width;
    const uint64_t expert_bytes =
        bank.packed_bytes(0) + bank.packed_bytes(1) + bank.packed_bytes(2);

    // A decode step's experts serve one token each: the engine takes the
    // decode-once path for them where its measured crossover is 1.
    auto engine_decodes = [&](Isa isa) {
      return rvq_decode_crossover(Exec{isa, nullptr, TrunkActivations::kInt8}, m.hidden,
                                  m.width) <= 1;
    };
    std::vector<ExpertRun> runs;
    for (Isa isa : isas()) runs.push_back({"engine", isa, true, false, engine_decodes(isa)});
    if (options_.alternatives) {
      if (engine_decodes(options_.isa))
        runs.push_back({"tables", options_.isa, true, false, false});
      else
        runs.push_back({"decode once", options_.isa, false, false, true});
      runs.push_back({"tables per expert", options_.isa, false, false, false});
      runs.push_back({"gate all, up all, then downs", options_.isa, true, true, false});
      runs.push_back({"int16 codes (f32 activations)", options_.isa, true, false, false,
                      TrunkActivations::kF32});
    }
    for (const ExpertRun& run : runs) {
      const Exec exec{run.isa, &pool_, run.activations};
      time_case(m, "rvq expert", fmt::format("3x[{}x{}] top-{}", m.width, m.hidden, m.top_k),
                run.name, run.isa, expert_weights * m.top_k, expert_bytes * m.top_k, [&] {
                  const uint32_t first = next_expert;
                  next_expert += m.top_k;
                  if (run.decoded) {
                    for (uint32_t e = first; e < first + m.top_k; ++e) {
                      rvq_matmul_decoded(bank.books[0], bank.view(0, e), x.data(), 1, g.data(), exec);
                      rvq_matmul_decoded(bank.books[1], bank.view(1, e), x.data(), 1, u.data(), exec);
                      swiglu(g.data(), u.data(), h.data(), m.width);
                      rvq_matmul_decoded(bank.books[2], bank.view(2, e), h.data(), 1, out.data(), exec);
                    }
                    return;
                  }
                  if (run.shared_tables) build_gate_up(bank, x.data(), 1, exec);
                  if (run.by_matrix) {
                    for (uint32_t k = 0; k < m.top_k; ++k)
                      rvq_matmul(gate_table_, {&token, 1}, bank.view(0, first + k),
                                 gk.data() + k * m.width, exec);
                    for (uint32_t k = 0; k < m.top_k; ++k)
                      rvq_matmul(up_table_, {&token, 1}, bank.view(1, first + k),
                                 uk.data() + k * m.width, exec);
                  }
                  for (uint32_t k = 0; k < m.top_k; ++k) {
                    const uint32_t e = first + k;
                    float* gate_out = run.by_matrix ? gk.data() + k * m.width : g.data();
                    float* up_out = run.by_matrix ? uk.data() + k * m.width : u.data();
                    if (!run.shared_tables) build_gate_up(bank, x.data(), 1, exec);
                    if (!run.by_matrix) {
                      rvq_matmul(gate_table_, {&token, 1}, bank.view(0, e), gate_out, exec);
                      rvq_matmul(up_table_, {&token, 1}, bank.view(1, e), up_out, exec);
                    }
                    swiglu(gate_out, up_out, h.data(), m.width);
                    const RvqMatrixView down = bank.view(2, e);
                    down_table_.build(bank.books[2], h.data(), m.width, 1, exec, &down);
                    rvq_matmul(down_table_, {&token, 1}, down, out.data(), exec);
                  }
                });
    }
    const char* names[3] = {"rvq gate", "rvq up", "rvq down"};
    for (Isa isa : isas()) {
      const Exec exec{isa, &pool_, TrunkActivations::kInt8};
      for (int kind = 0; kind < 3; ++kind) {
        const RvqMatrixShape s = bank.shapes[kind];
        RvqTable& table = kind == 2 ? down_table_ : kind == 0 ? gate_table_ : up_table_;
        table.build(bank.books[kind], kind == 2 ? h.data() : x.data(), s.cols, 1, exec);
        float* y = kind == 2 ? out.data() : g.data();
        time_case(m, names[kind], fmt::format("[{}x{}]", s.rows, s.cols), "engine", isa,
                  uint64_t{s.rows} * s.cols, bank.packed_bytes(kind),
                  [&] { rvq_matvec(table, 0, bank.view(kind, next_expert++), y, exec); });
      }
      for (const uint32_t cols : {m.hidden, m.width}) {
        const std::vector<float> in = random_floats(cols, 51);
        time_case(m, "rvq table build", fmt::format("{} inputs", cols), "engine", isa, 0, 0,
                  [&] { gate_table_.build(bank.books[0], in.data(), cols, 1, exec); });
      }
    }
  }

  // One expert applied to n prefill tokens: the table path (gate and up tables
  // prebuilt, as the engine shares them across a layer's experts; the down
  // table per expert) against decoding the weights once. The engine measures
  // their crossover at load (rvq_crossover.h).
  void bench_prefill_expert(const ModelShape& m) {
    const ExpertBank bank(m.hidden, m.width);
    constexpr uint32_t kMaxTokens = 64;
    const std::vector<float> x = random_floats(size_t{m.hidden} * kMaxTokens, 43);
    std::vector<float> g(size_t{m.width} * kMaxTokens), u(g.size()), h(g.size()),
        out(size_t{m.hidden} * kMaxTokens);
    std::vector<uint32_t> all(kMaxTokens);
    for (uint32_t t = 0; t < kMaxTokens; ++t) all[t] = t;
    uint32_t expert = 0;
    const uint64_t expert_weights = uint64_t{3} * m.hidden * m.width;
    const uint64_t expert_bytes =
        bank.packed_bytes(0) + bank.packed_bytes(1) + bank.packed_bytes(2);
    for (Isa isa : isas()) {
      const Exec exec{isa, &pool_, TrunkActivations::kInt8};
      for (const uint32_t n : {1u, 2u, 4u, 8u, 16u, 32u, 64u}) {
        build_gate_up(bank, x.data(), n, exec);
        const std::span<const uint32_t> tokens(all.data(), n);
        const std::string shape = fmt::format("3x[{}x{}] x{} tokens", m.width, m.hidden, n);
        time_case(m, "rvq prefill expert", shape, "tables", isa, expert_weights * n, expert_bytes,
                  [&] {
                    const uint32_t e = expert++;
                    rvq_matmul(gate_table_, tokens, bank.view(0, e), g.data(), exec);
                    rvq_matmul(up_table_, tokens, bank.view(1, e), u.data(), exec);
                    swiglu(g.data(), u.data(), h.data(), size_t{n} * m.width);
                    const RvqMatrixView down = bank.view(2, e);
                    down_table_.build(bank.books[2], h.data(), m.width, n, exec, &down);
                    rvq_matmul(down_table_, tokens, down, out.data(), exec);
                  });
        // "decode once" as the engine runs it by default, with int8
        // activations (int8 tiles), and with f32 activations (f32 tiles).
        for (const TrunkActivations activations :
             {TrunkActivations::kInt8, TrunkActivations::kF32}) {
          const Exec decoded{isa, &pool_, activations};
          const char* variant =
              activations == TrunkActivations::kInt8 ? "decode once" : "decode once, f32";
          time_case(
              m, "rvq prefill expert", shape, variant, isa, expert_weights * n, expert_bytes, [&] {
                const uint32_t e = expert++;
                rvq_matmul_decoded(bank.books[0], bank.view(0, e), x.data(), n, g.data(), decoded);
                rvq_matmul_decoded(bank.books[1], bank.view(1, e), x.data(), n, u.data(), decoded);
                swiglu(g.data(), u.data(), h.data(), size_t{n} * m.width);
                rvq_matmul_decoded(bank.books[2], bank.view(2, e), h.data(), n, out.data(),
                                   decoded);
              });
        }
      }
    }
  }

  void bench_trunk(const ModelShape& m, const TrunkShape& t) {
    const QuantMatrixView shape{t.format, t.rows, t.cols, nullptr, nullptr};
    std::vector<uint8_t> data(shape.row_bytes() * t.rows);
    fill_random(data.data(), data.size(), 61);
    if (t.format == QuantFormat::kQ8G128)  // -128 is outside the format's range
      for (uint8_t& b : data) b = b == 0x80 ? 0 : b;
    std::vector<uint16_t> scales(size_t{t.rows} * shape.groups(), f32_to_f16(0.01f));
    const QuantMatrixView view{t.format, t.rows, t.cols, data.data(), scales.data()};
    const char* fmt_name = trunk_format_name(stored_format(t.format));
    const uint64_t bytes = data.size() + scales.size() * 2;
    const uint64_t weights = uint64_t{t.rows} * t.cols;
    constexpr uint32_t kPrefillTokens = 64;  // the chunk the side by side prefills
    const std::vector<float> x = random_floats(size_t{t.cols} * kPrefillTokens, 71);
    std::vector<float> y(size_t{t.rows} * kPrefillTokens);
    // "engine" is what the engine runs by default, int8 activations, "f32
    // activations" the other mode.
    std::vector<std::pair<Isa, TrunkActivations>> runs;
    for (Isa isa : isas()) {
      runs.emplace_back(isa, TrunkActivations::kF32);
      runs.emplace_back(isa, TrunkActivations::kInt8);
    }
    for (const auto& [isa, activations] : runs) {
      const Exec exec{isa, &pool_, activations};
      const char* variant = activations == TrunkActivations::kInt8 ? "engine" : "f32 activations";
      time_case(m, fmt::format("{} {}", fmt_name, t.name), fmt::format("[{}x{}]", t.rows, t.cols), variant,
                isa, weights, bytes, [&] { quant_matvec(view, x.data(), y.data(), exec); });
      if (t.rows <= 8192)
        time_case(m, fmt::format("{} {}", fmt_name, t.name),
                  fmt::format("[{}x{}] x{} tokens", t.rows, t.cols, kPrefillTokens), variant, isa,
                  weights * kPrefillTokens, bytes,
                  [&] { quant_matmul(view, x.data(), kPrefillTokens, y.data(), exec); });
    }
  }

  // One decode step's attention over a long context: every head's scores,
  // then the weighted values (attend.h), as the engine runs them on one
  // thread; the softmax between them is left out, so the weights are uniform.
  // The bytes are the cached keys and values it reads.
  void bench_attention(const ModelShape& m) {
    const AttentionShape& a = m.attention;
    const uint32_t group = a.heads / a.kv_heads;
    const size_t row = size_t{2} * a.kv_heads * a.head_dim;  // a position's keys, then values
    for (const uint32_t count : {1024u, 4096u}) {
      const std::vector<float> cache = random_floats(row * count, 81);
      const std::vector<float> q = random_floats(size_t{a.heads} * a.head_dim, 83);
      std::vector<float> scores(size_t{a.heads} * count), out(size_t{a.heads} * a.head_dim);
      const std::vector<float> weights(size_t{a.heads} * count, 1.0f / static_cast<float>(count));
      const float* values = cache.data() + row / 2;
      const std::vector<uint32_t> counts(group, count);
      for (Isa isa : isas())
        time_case(m, "attention",
                  fmt::format("{} heads, {} kv of {}, {} positions", a.heads, a.kv_heads,
                              a.head_dim, count),
                  "engine", isa, uint64_t{2} * a.heads * a.head_dim * count,
                  uint64_t{row} * count * sizeof(float), [&] {
                    for (uint32_t kv = 0; kv < a.kv_heads; ++kv)
                      attention_scores(q.data() + size_t{kv} * group * a.head_dim, counts,
                                       cache.data() + size_t{kv} * a.head_dim, row, a.head_dim,
                                       0.088f, scores.data() + size_t{kv} * group * count, count,
                                       isa);
                    for (uint32_t kv = 0; kv < a.kv_heads; ++kv)
                      attention_values(weights.data() + size_t{kv} * group * count, count, counts,
                                       values + size_t{kv} * a.head_dim, row, a.head_dim,
                                       out.data() + size_t{kv} * group * a.head_dim, isa);
                  });
    }
  }

  KernelBenchOptions options_;
  ThreadPool pool_;
  KernelBenchReport report_;
  RvqTable gate_table_, up_table_, down_table_;
};

}  // namespace

KernelBenchReport run_kernel_bench(const KernelBenchOptions& options) {
  return Bench(options).run();
}

}  // namespace sluice::kernels
