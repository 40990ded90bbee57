// compute/model/mla_mixer.cpp: multi-head latent attention in its absorbed
// form (architectures.md §3.4). A sequence's cache holds, per layer and position, the
// normed latent and the rotated shared rope key (as IEEE halves with int8
// trunk activations, half the bytes; in f32 on the exact f32 path; sums are
// f32 either way), never expanded keys or values: kv_b_proj's key half is folded into the query and its value half
// applied to the attention-weighted latent, both from its stored rows and
// split over the pool by head. Without rotary dims (Kimi-Linear's NoPE
// layers) the rope part is cached and dotted unrotated.
#include <algorithm>
#include <cmath>
#include <span>

#include "compute/kernels/attend.h"
#include "compute/kernels/thread_pool.h"
#include "compute/model/attention.h"
#include "compute/model/mixer.h"
#include "compute/model/ops.h"
#include "proto/error.h"

namespace sluice {
namespace {

class MlaMixer final : public Mixer {
 public:
  MlaMixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context, kernels::Exec exec)
      : m_(config.mla),
        weights_(weights),
        exec_(exec),
        rope_(config.rope, context),
        context_(context),
        scale_(config.attention_scale()),
        half_cache_(exec.trunk == kernels::TrunkActivations::kInt8),
        slot_(config.layers, UINT32_MAX) {
    // Only this mixer's layers hold a cache (Kimi-Linear interleaves KDA).
    for (uint32_t i = 0; i < config.layers; ++i) {
      if (!config.is_kda(i)) slot_[i] = slots_++;
    }
  }

  void forward(uint32_t layer, const float* normed, uint32_t tokens, uint32_t first_position,
               MixerState& cache, float* out) override {
    const MlaWeights& w = weights_.layers[layer].mla;
    const uint32_t heads = m_.heads, latent = m_.kv_lora_rank, nope = m_.nope_dim;
    const uint32_t qk = m_.qk_dim(), cached = m_.cached_width();
    queries(w, normed, tokens);
    kva_.resize(size_t{tokens} * cached);
    w.kv_a.apply(normed, tokens, kva_.data(), exec_);
    entry_.resize(cached);
    for (uint32_t t = 0; t < tokens; ++t) {
      const uint32_t position = first_position + t;
      const float* a = &kva_[size_t{t} * cached];
      rms_norm(a, w.kv_a_norm.data(), latent, m_.latent_norm_eps, entry_.data());
      std::copy(a + latent, a + cached, entry_.data() + latent);
      rope_.rotate(entry_.data() + latent, position);
      float* row = cache.row(slot_[layer], checked(position));
      if (half_cache_)
        kernels::to_half(entry_.data(), cached, reinterpret_cast<CachedHalf*>(row), exec_.isa);
      else
        std::copy(entry_.begin(), entry_.end(), row);
      for (uint32_t h = 0; h < heads; ++h) rope_.rotate(&q_[(size_t{t} * heads + h) * qk + nope], position);
    }
    absorb(w, tokens);
    attn_.resize(size_t{tokens} * heads * m_.v_dim);
    // Every head of every token reads the same latents: a pass's rows (token,
    // head) share each read of a cached entry, and each row's scores and
    // weights are the bits it gets alone.
    const uint32_t batch = tokens_per_pass(heads, heads, context_, first_position, tokens);
    for (uint32_t t0 = 0; t0 < tokens; t0 += batch) {
      const uint32_t pass_tokens = std::min(batch, tokens - t0);
      attend_pass(cache, layer, first_position, t0, pass_tokens);
      project_values(w, t0, pass_tokens);
    }
    if (m_.output_gate) {
      // K3: the concatenated heads ⊙ σ(g_proj x) before o_proj (k3.md §2.3).
      gate_.resize(attn_.size());
      w.gate.apply(normed, tokens, gate_.data(), exec_);
      for (size_t i = 0; i < attn_.size(); ++i) attn_[i] /= 1.0f + std::exp(-gate_[i]);
    }
    w.o.apply(attn_.data(), tokens, out, exec_);
  }

  // [slot][position][latent | rope key], f32 or two halves to a float.
  MixerState make_state() const override {
    const uint32_t width = m_.cached_width();
    return MixerState(slots_, context_, half_cache_ ? (width + kHalvesPerFloat - 1) / kHalvesPerFloat : width, 0);
  }

 private:
  // MixerState rows are floats; a half cache reads and writes them through
  // a type that may alias them.
  using CachedHalf [[gnu::may_alias]] = uint16_t;
  static constexpr uint32_t kHalvesPerFloat = 2;
  // Positions widened at a time: 72 KiB of f32 at DeepSeek-V3's 576-wide entries.
  static constexpr uint32_t kBlockPositions = 32;

  // Per worker of the pool: a block of widened entries and its rows' counts.
  struct AttendScratch {
    std::vector<float> block;
    std::vector<uint32_t> counts;
  };

  // Per worker of the pool: one head's read-outs and value outputs for a
  // pass's tokens, gathered so that its value rows are read once per pass.
  struct ValueScratch {
    std::vector<float> inputs, outputs;
  };

  size_t workers() const { return exec_.pool != nullptr ? exec_.pool->size() : 1; }

  // body(worker, begin, end) over [0, count), split over the pool when there is one.
  template <typename Body>
  void over_pool(uint32_t count, Body&& body) {
    if (exec_.pool == nullptr || count < 2) {
      body(size_t{0}, size_t{0}, size_t{count});
      return;
    }
    const size_t grain = std::max<size_t>(1, count / (4 * exec_.pool->size()));
    exec_.pool->parallel_for_workers(count, grain, body);
  }

  // Each (token, head) row's query as attention dots it with a cached
  // [latent | rope key] entry: q̄ = W_UKᵀ q_nope, straight from kv_b_proj's
  // stored key rows (never rebuilt as f32), then the rotated rope query.
  void absorb(const MlaWeights& w, uint32_t tokens) {
    const uint32_t heads = m_.heads, latent = m_.kv_lora_rank, nope = m_.nope_dim, rope = m_.rope_dim;
    const uint32_t qk = m_.qk_dim(), cached = m_.cached_width();
    packed_.assign(size_t{tokens} * heads * cached, 0.0f);
    over_pool(heads, [&](size_t, size_t begin, size_t end) {
      for (size_t h = begin; h < end; ++h) {
        w.kv_b.apply_transposed(static_cast<uint32_t>(h) * (nope + m_.v_dim), nope, &q_[h * qk], size_t{heads} * qk,
                                tokens, &packed_[h * cached], size_t{heads} * cached, exec_.isa);
        for (uint32_t t = 0; t < tokens; ++t) {
          const float* q_rope = &q_[(size_t{t} * heads + h) * qk + nope];
          std::copy(q_rope, q_rope + rope, &packed_[(size_t{t} * heads + h) * cached + latent]);
        }
      }
    });
  }

  // Softmax attention of the pass's rows over the cached entries, each
  // worker taking a run of rows, into read_out_: each row's attention-
  // weighted latent. The workers widen the cached halves a block of
  // positions at a time into their own scratch, once for all their rows; a
  // row's scores, weights and sums are the bits the whole context at once
  // gives (positions ascending).
  void attend_pass(MixerState& cache, uint32_t layer, uint32_t first_position, uint32_t t0, uint32_t pass_tokens) {
    const uint32_t heads = m_.heads, latent = m_.kv_lora_rank, cached = m_.cached_width();
    const uint32_t rows = pass_tokens * heads, longest = first_position + t0 + pass_tokens;
    counts_.resize(rows);
    for (uint32_t r = 0; r < rows; ++r) counts_[r] = first_position + t0 + r / heads + 1;
    scores_.resize(size_t{rows} * longest);
    read_out_.assign(size_t{rows} * latent, 0.0f);
    float* rows_f32 = cache.row(slot_[layer], 0);
    const auto* halves = reinterpret_cast<const CachedHalf*>(rows_f32);
    const size_t stride = cache.row_floats();
    const float* queries = &packed_[size_t{t0} * heads * cached];
    // An f32 cache is read in place, as one block.
    const uint32_t block = half_cache_ ? kBlockPositions : longest;
    if (attend_scratch_.size() < workers()) attend_scratch_.resize(workers());
    over_pool(rows, [&](size_t worker, size_t begin, size_t end) {
      AttendScratch& s = attend_scratch_[worker];
      if (half_cache_) s.block.resize(size_t{block} * cached);
      s.counts.resize(end - begin);
      // body(first, entries, entries_stride) for the block of positions from
      // `first`, its entries as f32 (widened, or the f32 cache's own rows),
      // s.counts each row's positions within it.
      const auto over_blocks = [&](auto&& body) {
        for (uint32_t first = 0; first < longest; first += block) {
          const uint32_t count = std::min(block, longest - first);
          for (size_t r = begin; r < end; ++r)
            s.counts[r - begin] = counts_[r] > first ? std::min(count, counts_[r] - first) : 0;
          if (!half_cache_) {
            body(first, rows_f32 + first * stride, stride);
            continue;
          }
          const size_t half_stride = stride * kHalvesPerFloat;
          kernels::from_half(halves + first * half_stride, half_stride, count, cached, s.block.data(), exec_.isa);
          body(first, s.block.data(), size_t{cached});
        }
      };
      over_blocks([&](uint32_t first, const float* entries, size_t entries_stride) {
        kernels::attention_scores(queries + begin * cached, s.counts, entries, entries_stride, cached, scale_,
                                  &scores_[begin * longest + first], longest, exec_.isa);
      });
      for (size_t r = begin; r < end; ++r) softmax_weights(&scores_[r * longest], counts_[r]);
      over_blocks([&](uint32_t first, const float* entries, size_t entries_stride) {
        kernels::attention_values(&scores_[begin * longest + first], longest, s.counts, entries, entries_stride,
                                  latent, &read_out_[begin * latent], exec_.isa);
      });
    });
  }

  // o[t][h] = W_UV[h] u[t][h]: head h's value rows of kv_b_proj applied as
  // stored, with f32 inputs in either activation mode (the reference's model
  // of these products, and a small share of the layer's weights).
  void project_values(const MlaWeights& w, uint32_t t0, uint32_t pass_tokens) {
    const uint32_t heads = m_.heads, latent = m_.kv_lora_rank, nope = m_.nope_dim, v_dim = m_.v_dim;
    const kernels::Exec one_thread{exec_.isa, nullptr, kernels::TrunkActivations::kF32};
    if (value_scratch_.size() < workers()) value_scratch_.resize(workers());
    over_pool(heads, [&](size_t worker, size_t begin, size_t end) {
      ValueScratch& s = value_scratch_[worker];
      for (size_t h = begin; h < end; ++h) {
        const uint32_t first_row = static_cast<uint32_t>(h) * (nope + v_dim) + nope;
        if (pass_tokens == 1) {
          w.kv_b.apply_rows(first_row, v_dim, &read_out_[h * latent], 1, &attn_[(size_t{t0} * heads + h) * v_dim],
                            one_thread);
          continue;
        }
        s.inputs.resize(size_t{pass_tokens} * latent);
        s.outputs.resize(size_t{pass_tokens} * v_dim);
        for (uint32_t t = 0; t < pass_tokens; ++t) {
          const float* u = &read_out_[(size_t{t} * heads + h) * latent];
          std::copy(u, u + latent, &s.inputs[size_t{t} * latent]);
        }
        w.kv_b.apply_rows(first_row, v_dim, s.inputs.data(), pass_tokens, s.outputs.data(), one_thread);
        for (uint32_t t = 0; t < pass_tokens; ++t) {
          const float* o = &s.outputs[size_t{t} * v_dim];
          std::copy(o, o + v_dim, &attn_[((size_t{t0} + t) * heads + h) * v_dim]);
        }
      }
    });
  }

  void queries(const MlaWeights& w, const float* normed, uint32_t tokens) {
    q_.resize(size_t{tokens} * m_.heads * m_.qk_dim());
    if (w.q_a.empty()) {
      w.q.apply(normed, tokens, q_.data(), exec_);
      return;
    }
    q_latent_.resize(size_t{tokens} * m_.q_lora_rank);
    w.q_a.apply(normed, tokens, q_latent_.data(), exec_);
    for (uint32_t t = 0; t < tokens; ++t) {
      float* row = &q_latent_[size_t{t} * m_.q_lora_rank];
      rms_norm(row, w.q_a_norm.data(), m_.q_lora_rank, m_.latent_norm_eps, row);
    }
    w.q_b.apply(q_latent_.data(), tokens, q_.data(), exec_);
  }

  uint32_t checked(uint32_t position) const {
    if (position >= context_) fail("position {} is past the context length {}", position, context_);
    return position;
  }

  const MlaConfig& m_;
  const ModelWeights& weights_;
  kernels::Exec exec_;
  RopeTable rope_;
  uint32_t context_;
  float scale_;
  // Entries cached as halves with int8 activations; f32 on the exact path.
  bool half_cache_;
  std::vector<uint32_t> slot_;  // model layer → cache slot
  uint32_t slots_ = 0;
  std::vector<float> q_, q_latent_, kva_, entry_, packed_, attn_, read_out_, gate_;
  std::vector<float> scores_;
  std::vector<uint32_t> counts_;
  std::vector<AttendScratch> attend_scratch_;
  std::vector<ValueScratch> value_scratch_;
};

}  // namespace

std::unique_ptr<Mixer> make_mla_mixer(const ModelConfig& config, const ModelWeights& weights, uint32_t context,
                                      kernels::Exec exec) {
  return std::make_unique<MlaMixer>(config, weights, context, exec);
}

}  // namespace sluice
