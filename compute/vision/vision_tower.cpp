// compute/vision/vision_tower.cpp: the tower's arithmetic in f32, step by step
// as k3.md §4.2 numbers it, checked against scripts/sluicepy/vision.py (f64).
// Shapes come from the tensor inventory; nothing here spells a tensor name.
#include "compute/vision/vision_tower.h"

#include <algorithm>
#include <cmath>

#include "compute/kernels/thread_pool.h"
#include "compute/model/ops.h"
#include "compute/vision/bilinear.h"
#include "proto/error.h"
#include "proto/tensor_inventory.h"

namespace sluice {
namespace {

// The tower's norms are built without an eps, so torch uses f32's machine
// epsilon; the projector's post-norm has 1e-5 (k3.md §4.2, §9 item 9).
constexpr float kTowerEps = 1.0f / (1 << 23);
constexpr float kProjectorEps = 1e-5f;
constexpr double kRopeTheta = 10000.0;

float gelu_tanh(float v) {
  constexpr float kSqrtTwoOverPi = 0.7978845608028654f;
  return 0.5f * v * (1.0f + std::tanh(kSqrtTwoOverPi * (v + 0.044715f * v * v * v)));
}

float gelu_erf(float v) {
  return 0.5f * v * (1.0f + std::erf(v * 0.7071067811865476f));
}

}  // namespace

VisionWeights VisionWeights::load(const Container& container, const ModelConfig& config) {
  if (!config.vision)
    fail("{}: the model has no vision tower (its config has no vision_config)", container.dir());
  TensorLoader t(container, vision_inventory(config));
  VisionWeights w;
  w.patch_embed = t.linear(TensorRole::kVisionPatchEmbed);
  w.pos_emb = t.linear(TensorRole::kVisionPosEmb);
  for (uint32_t b = 0; b < config.vision->blocks; ++b) {
    Block& block = w.blocks.emplace_back();
    block.norm0 = t.vector(TensorRole::kVisionNorm0, b);
    block.qkv = t.linear(TensorRole::kVisionQkv, b);
    block.o = t.linear(TensorRole::kVisionO, b);
    block.norm1 = t.vector(TensorRole::kVisionNorm1, b);
    block.fc0 = t.linear(TensorRole::kVisionFc0, b);
    block.fc1 = t.linear(TensorRole::kVisionFc1, b);
  }
  w.final_norm = t.vector(TensorRole::kVisionFinalNorm);
  w.projector_in = t.linear(TensorRole::kProjectorIn);
  w.projector_out = t.linear(TensorRole::kProjectorOut);
  w.projector_norm = t.vector(TensorRole::kProjectorNorm);
  w.bytes = t.bytes();
  return w;
}

VisionTower::VisionTower(const VisionConfig& config, const VisionWeights& weights,
                         kernels::Exec exec)
    : config_(config), weights_(weights), exec_(exec) {}

std::vector<float> VisionTower::encode(std::span<const float> pixels, PatchGrid grid) const {
  if (grid.height < 2 || grid.width < 2 || grid.height % 2 != 0 || grid.width % 2 != 0 ||
      grid.patches() > kMaxTowerPatches) {
    fail("vision tower: a grid of {}x{} patches is not two even sides of at most {} patches in all",
         grid.width, grid.height, kMaxTowerPatches);
  }
  const size_t expected = size_t{3} * config_.patch * grid.height * config_.patch * grid.width;
  if (pixels.size() != expected) {
    fail("vision tower: {} pixel values for a {}x{} grid, which needs {}", pixels.size(),
         grid.width, grid.height, expected);
  }
  std::vector<float> x(size_t{grid.patches()} * config_.hidden);
  patch_embed(pixels, grid, x.data());
  add_positions(grid, x.data());
  for (const VisionWeights::Block& b : weights_.blocks) block(b, grid, x);
  for (uint32_t p = 0; p < grid.patches(); ++p) {
    float* row = &x[size_t{p} * config_.hidden];
    rms_norm(row, weights_.final_norm.data(), config_.hidden, kTowerEps, row);
  }
  return project(grid, x);
}

// Step 1: each patch's 3p² values in [channel][row][col] order, times the kernel.
void VisionTower::patch_embed(std::span<const float> pixels, PatchGrid grid, float* x) const {
  const uint32_t p = config_.patch, values = config_.patch_values();
  const size_t image_width = size_t{p} * grid.width, plane = image_width * p * grid.height;
  std::vector<float> patches(size_t{grid.patches()} * values);
  for (uint32_t py = 0; py < grid.height; ++py) {
    for (uint32_t px = 0; px < grid.width; ++px) {
      float* out = &patches[(size_t{py} * grid.width + px) * values];
      for (uint32_t c = 0; c < 3; ++c) {
        for (uint32_t r = 0; r < p; ++r) {
          const float* line =
              &pixels[c * plane + (size_t{py} * p + r) * image_width + size_t{px} * p];
          std::copy_n(line, p, out);
          out += p;
        }
      }
    }
  }
  weights_.patch_embed.apply(patches.data(), grid.patches(), x, exec_);
}

// Step 2: the learned grid resized to the image's.
void VisionTower::add_positions(PatchGrid grid, float* x) const {
  const uint32_t hidden = config_.hidden, in_h = config_.pos_height, in_w = config_.pos_width;
  std::vector<float> corner(size_t{4} * hidden);
  for (uint32_t y = 0; y < grid.height; ++y) {
    const BilinearTap ty = bilinear_tap(y, in_h, grid.height);
    for (uint32_t col = 0; col < grid.width; ++col) {
      const BilinearTap tx = bilinear_tap(col, in_w, grid.width);
      weights_.pos_emb.row(ty.lo * in_w + tx.lo, &corner[0]);
      weights_.pos_emb.row(ty.lo * in_w + tx.hi, &corner[hidden]);
      weights_.pos_emb.row(ty.hi * in_w + tx.lo, &corner[2 * hidden]);
      weights_.pos_emb.row(ty.hi * in_w + tx.hi, &corner[3 * hidden]);
      float* row = &x[(size_t{y} * grid.width + col) * hidden];
      for (uint32_t i = 0; i < hidden; ++i) {
        const float top = (1.0f - tx.frac) * corner[i] + tx.frac * corner[hidden + i];
        const float bottom =
            (1.0f - tx.frac) * corner[2 * hidden + i] + tx.frac * corner[3 * hidden + i];
        row[i] += (1.0f - ty.frac) * top + ty.frac * bottom;
      }
    }
  }
}

// Step 3: one pre-norm block.
void VisionTower::block(const VisionWeights::Block& b, PatchGrid grid,
                        std::vector<float>& x) const {
  const uint32_t n = grid.patches(), hidden = config_.hidden, width = config_.qkv_width;
  std::vector<float> normed(x.size()), proj(x.size());
  for (uint32_t p = 0; p < n; ++p) {
    rms_norm(&x[size_t{p} * hidden], b.norm0.data(), hidden, kTowerEps,
             &normed[size_t{p} * hidden]);
  }
  std::vector<float> qkv(size_t{n} * 3 * width), heads(size_t{n} * width);
  b.qkv.apply(normed.data(), n, qkv.data(), exec_);
  attention(grid, qkv.data(), heads.data());
  b.o.apply(heads.data(), n, proj.data(), exec_);
  for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
  for (uint32_t p = 0; p < n; ++p) {
    rms_norm(&x[size_t{p} * hidden], b.norm1.data(), hidden, kTowerEps,
             &normed[size_t{p} * hidden]);
  }
  std::vector<float> inner(size_t{n} * config_.intermediate);
  b.fc0.apply(normed.data(), n, inner.data(), exec_);
  for (float& v : inner) v = gelu_tanh(v);
  b.fc1.apply(inner.data(), n, proj.data(), exec_);
  for (size_t i = 0; i < x.size(); ++i) x[i] += proj[i];
}

// 2-D RoPE on q and k, then bidirectional softmax attention per head. Pair j
// = elements (2j, 2j+1) turns by col·ω for even j and row·ω for odd j, with
// ω = θ^(−4⌊j/2⌋/d) (k3.md §4.2: width on even pairs).
void VisionTower::attention(PatchGrid grid, float* qkv, float* out) const {
  const uint32_t n = grid.patches(), width = config_.qkv_width, d = config_.head_dim(),
                 heads = config_.heads;
  const size_t stride = size_t{3} * width;
  for (uint32_t p = 0; p < n; ++p) {
    const uint32_t row = p / grid.width, col = p % grid.width;
    for (uint32_t j = 0; j < d / 2; ++j) {
      const double omega = std::pow(kRopeTheta, -4.0 * (j / 2) / d);
      const double angle = (j % 2 == 0 ? col : row) * omega;
      const auto c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
      for (uint32_t h = 0; h < heads; ++h) {
        for (float* v :
             {&qkv[p * stride + h * d + 2 * j], &qkv[p * stride + width + h * d + 2 * j]}) {
          const float a = v[0], b = v[1];
          v[0] = a * c - b * s;
          v[1] = a * s + b * c;
        }
      }
    }
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto rows = [&](size_t begin, size_t end) {
    std::vector<float> scores(n);
    for (size_t job = begin; job < end; ++job) {
      const auto h = static_cast<uint32_t>(job / n), query = static_cast<uint32_t>(job % n);
      const float* q = &qkv[query * stride + h * d];
      float top = -INFINITY;
      for (uint32_t key = 0; key < n; ++key) {
        const float* k = &qkv[key * stride + width + h * d];
        float dot = 0.0f;
        for (uint32_t i = 0; i < d; ++i) dot += q[i] * k[i];
        scores[key] = dot * scale;
        top = std::max(top, scores[key]);
      }
      float sum = 0.0f;
      for (float& s : scores) sum += (s = std::exp(s - top));
      float* o = &out[size_t{query} * width + h * d];
      std::fill_n(o, d, 0.0f);
      for (uint32_t key = 0; key < n; ++key) {
        const float weight = scores[key] / sum;
        const float* v = &qkv[key * stride + 2 * width + h * d];
        for (uint32_t i = 0; i < d; ++i) o[i] += weight * v[i];
      }
    }
  };
  const size_t jobs = size_t{heads} * n;
  if (exec_.pool != nullptr) {
    exec_.pool->parallel_for(jobs, 16, rows);
  } else {
    rows(0, jobs);
  }
}

// Steps 5 and 6: the 2×2 merge, then the projector with exact-erf GELU and its post-norm.
std::vector<float> VisionTower::project(PatchGrid grid, const std::vector<float>& x) const {
  const uint32_t hidden = config_.hidden, merged = config_.merged(), tokens = grid.tokens();
  std::vector<float> m(size_t{tokens} * merged);
  for (uint32_t a = 0; a < grid.height / 2; ++a) {
    for (uint32_t b = 0; b < grid.width / 2; ++b) {
      float* out = &m[(size_t{a} * (grid.width / 2) + b) * merged];
      for (uint32_t dy = 0; dy < 2; ++dy) {
        for (uint32_t dx = 0; dx < 2; ++dx) {
          const size_t patch = size_t{2 * a + dy} * grid.width + 2 * b + dx;
          out = std::copy_n(&x[patch * hidden], hidden, out);
        }
      }
    }
  }
  std::vector<float> inner(m.size());
  weights_.projector_in.apply(m.data(), tokens, inner.data(), exec_);
  for (float& v : inner) v = gelu_erf(v);
  const uint32_t text = text_hidden();
  std::vector<float> rows(size_t{tokens} * text);
  weights_.projector_out.apply(inner.data(), tokens, rows.data(), exec_);
  for (uint32_t t = 0; t < tokens; ++t) {
    float* row = &rows[size_t{t} * text];
    rms_norm(row, weights_.projector_norm.data(), text, kProjectorEps, row);
  }
  return rows;
}

}  // namespace sluice
