// tests/compute/model/k3_parts_test.cpp: Kimi K3's elementwise and depth
// pieces against k3.md's equations evaluated here in double: SiTU (§2.5) and
// Attention Residuals (§2.1) over a 3-layer stack with blocks of 2, which
// stores the embedding at layer 0, closes a block at layer 2 (whose mixer
// input mixes completed blocks only) and ends on a partial block.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compute/model/activation.h"
#include "compute/model/attn_res.h"

using namespace sluice;

namespace {

using Vec = std::vector<double>;

// AR(V; n, p) = Σ softmax(p · RMSNorm(V_i; n))_i V_i.
Vec mixture(const std::vector<Vec>& sources, const std::vector<float>& norm,
            const std::vector<float>& query, double eps) {
  std::vector<double> scores;
  double best = -1e300;
  for (const Vec& v : sources) {
    double squares = 0, dot = 0;
    for (size_t j = 0; j < v.size(); ++j) squares += v[j] * v[j], dot += v[j] * norm[j] * query[j];
    scores.push_back(dot / std::sqrt(squares / v.size() + eps));
    best = std::max(best, scores.back());
  }
  double total = 0;
  for (double& s : scores) total += s = std::exp(s - best);
  Vec out(sources[0].size(), 0.0);
  for (size_t i = 0; i < sources.size(); ++i) {
    for (size_t j = 0; j < out.size(); ++j) out[j] += scores[i] / total * sources[i][j];
  }
  return out;
}

void check_close(const float* got, const Vec& want) {
  for (size_t j = 0; j < want.size(); ++j) CHECK(got[j] == doctest::Approx(want[j]).epsilon(1e-5));
}

Vec as_vec(const std::vector<float>& v) {
  return Vec(v.begin(), v.end());
}

}  // namespace

TEST_CASE("SiTU: β·tanh(g/β)·σ(g) · β_L·tanh(u/β_L), and u unchanged without β_L") {
  const ActivationConfig k3{Activation::kSitu, 4.0f, 25.0f};
  for (double g : {-30.0, -1.3, -0.2, 0.0, 0.7, 3.0, 30.0}) {
    for (double u : {-60.0, -2.0, 0.5, 24.0, 80.0}) {
      const double want =
          4.0 * std::tanh(g / 4.0) / (1.0 + std::exp(-g)) * 25.0 * std::tanh(u / 25.0);
      CAPTURE(g);
      CAPTURE(u);
      CHECK(situ(static_cast<float>(g), static_cast<float>(u), k3) ==
            doctest::Approx(want).epsilon(1e-6));
    }
  }
  // Saturation: the gate half tends to β, the up half to ±β_L.
  CHECK(situ(50.0f, 500.0f, k3) == doctest::Approx(100.0).epsilon(1e-6));
  const ActivationConfig no_linear{Activation::kSitu, 4.0f, 0.0f};
  CHECK(situ(2.0f, 7.0f, no_linear) ==
        doctest::Approx(4.0 * std::tanh(0.5) / (1.0 + std::exp(-2.0)) * 7.0));
  float gate[2] = {1.0f, -2.0f};
  const float up[2] = {3.0f, 0.5f};
  gated_activation(ActivationConfig{}, gate, up, gate, 2);
  CHECK(gate[0] == doctest::Approx(3.0 / (1.0 + std::exp(-1.0))));
  CHECK(gate[1] == doctest::Approx(-2.0 * 0.5 / (1.0 + std::exp(2.0))));
}

TEST_CASE("AttnRes: stored blocks, per-site mixtures, the block boundary and the final mixture") {
  ModelConfig config;
  config.hidden = 3;
  config.layers = 3;
  config.attn_res_block = 2;
  config.rms_eps = 1e-5f;
  ModelWeights weights;
  weights.layers.resize(3);
  float seed = 0.3f;
  const auto next = [&](float scale) {
    std::vector<float> v(3);
    for (float& x : v) x = scale * std::sin(seed += 1.7f);
    return v;
  };
  for (LayerWeights& l : weights.layers) {
    l.attn_res_norm = next(0.5f), l.attn_res_proj = next(2.0f);
    l.mlp_res_norm = next(0.5f), l.mlp_res_proj = next(2.0f);
  }
  weights.final_res_norm = next(0.5f), weights.final_res_proj = next(2.0f);
  const double eps = config.rms_eps;

  AttnRes res(config, weights);
  std::vector<float> partial = {0.4f, -1.2f, 0.9f};  // the embedding
  const Vec embedding = as_vec(partial);
  const float* in = res.before_mixer(0, partial.data(), 1);
  check_close(in, embedding);  // no block stored yet: the mixer reads the embedding
  CHECK(res.stored_blocks() == 1);
  CHECK(partial == std::vector<float>{0, 0, 0});  // the partial restarts after B0

  const auto add = [&](const std::vector<float>& out) {
    for (int j = 0; j < 3; ++j) partial[j] += out[j];
  };
  add(next(1.0f));  // layer 0's mixer
  check_close(res.before_ffn(0, partial.data(), 1),
              mixture({embedding, as_vec(partial)}, weights.layers[0].mlp_res_norm,
                      weights.layers[0].mlp_res_proj, eps));
  add(next(1.0f));  // layer 0's FFN
  check_close(res.before_mixer(1, partial.data(), 1),
              mixture({embedding, as_vec(partial)}, weights.layers[1].attn_res_norm,
                      weights.layers[1].attn_res_proj, eps));
  CHECK(res.stored_blocks() == 1);
  add(next(1.0f));
  add(next(1.0f));
  // Layer 2 starts a block: its mixer mixes B0 and the just-completed block B1 only.
  const Vec block1 = as_vec(partial);
  check_close(res.before_mixer(2, partial.data(), 1),
              mixture({embedding, block1}, weights.layers[2].attn_res_norm,
                      weights.layers[2].attn_res_proj, eps));
  CHECK(res.stored_blocks() == 2);
  CHECK(partial == std::vector<float>{0, 0, 0});
  add(next(1.0f));
  check_close(res.before_ffn(2, partial.data(), 1),
              mixture({embedding, block1, as_vec(partial)}, weights.layers[2].mlp_res_norm,
                      weights.layers[2].mlp_res_proj, eps));
  add(next(1.0f));
  // The final mixture covers every stored block and the partial last block.
  const Vec final_want = mixture({embedding, block1, as_vec(partial)}, weights.final_res_norm,
                                 weights.final_res_proj, eps);
  check_close(res.final_mixture(partial.data(), 1), final_want);
  double moved = 0;
  for (int j = 0; j < 3; ++j) moved = std::max(moved, std::fabs(final_want[j] - partial[j]));
  CHECK(moved > 0.05);  // reading the partial alone would be a different model
  // A new pass starts over at layer 0.
  partial = {1.0f, 2.0f, 3.0f};
  res.before_mixer(0, partial.data(), 1);
  CHECK(res.stored_blocks() == 1);
}
