// compute/model/sampler.h: turns one row of logits into the next token.
// Deterministic for a given seed; never looks at anything but the logits and
// the tokens generated so far.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace sluice {

// Restricts which token may come next (structured output, compute/chat/
// json_constraint.h). The sampler draws as usual and asks allows(); only when
// the draw is refused does it call mask() and draw again from the same row,
// so a constraint never costs a forward pass. Stateful: one per generation.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Whether `token` may come next.
  virtual bool allows(int32_t token) = 0;
  // Sets the logit of every token that may not come next to -infinity.
  virtual void mask(std::span<float> logits) = 0;
  // `token` was chosen (allows(token) held): the state moves past it.
  virtual void accept(int32_t token) = 0;
};

struct SamplingParams {
  float temperature = 0.0f;         // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 0;                    // 0: off
  float top_p = 1.0f;               // 1: off
  float min_p = 0.0f;               // 0: off; keeps tokens with p >= min_p * p_max
  float repetition_penalty = 1.0f;  // 1: off; applied to every token already in the context
  uint64_t seed = 0;
  // Ids never sampled whatever their logits (Engine::never_sampled():
  // a media pad, ids the tokenizer has no text for). A row where every id
  // left is banned, or -infinity, is an Error.
  std::vector<int32_t> banned;
  // Not owned; outlives every Sampler made from these params. Null: no
  // constraint. A row where it allows nothing is an Error.
  TokenConstraint* constraint = nullptr;
};

// Checks ranges and throws Error naming the flag that is out of range.
void validate(const SamplingParams& params);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);

  // Order: banned ids out, repetition penalty, then greedy if temperature <= 0; otherwise
  // temperature, top-k, softmax, top-p, min-p, and a draw from what is left.
  // With a constraint, a refused draw is redone on the masked row and the
  // chosen token is passed to its accept().
  int32_t sample(std::span<const float> logits, std::span<const int32_t> context);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> scratch_;
  std::vector<int32_t> order_, spare_order_;
  std::vector<uint32_t> keys_, spare_keys_;
  std::vector<double> probs_;

  int32_t draw();        // from scratch_, without the constraint
  void rank_by_logit();  // order_: every id of scratch_, (logit desc, id asc)
};

}  // namespace sluice
