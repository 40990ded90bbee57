// compute/capi/capi_sequence.cpp: libsluice's samplers and sequences: feed,
// step, logits, generate (Engine::generate through generate_text, as `sluice
// run` runs it) and session files. A sequence holds the token it sampled last
// until something needs it run, as the engine's generation leaves it.
#include <string>
#include <vector>

#include "compute/capi/handles.h"
#include "compute/model/session_file.h"
#include "proto/error.h"

using sluice::capi::call;
using sluice::capi::ModelObject;
using sluice::capi::refuse;
using sluice::capi::require;
using sluice::capi::SamplerObject;
using sluice::capi::SequenceObject;

namespace {

// Adds `object` under its model and hands out its handle.
template <typename Handle>
Handle* open_child(ModelObject& model, std::shared_ptr<sluice::capi::Object> object) {
  std::erase_if(model.children, [](const std::weak_ptr<sluice::capi::Object>& child) { return child.expired(); });
  model.children.push_back(object);
  return reinterpret_cast<Handle*>(sluice::capi::register_handle(std::move(object)));
}

std::shared_ptr<ModelObject> shared_model(sluice_model* handle) {
  return std::static_pointer_cast<ModelObject>(sluice::capi::find_handle(handle));
}

// Refuses a sampler of another model than the sequence's.
void same_model(SequenceObject& sequence, sluice_sampler* handle, SamplerObject*& sampler) {
  const std::shared_ptr<sluice::capi::Object> found = sluice::capi::find_handle(handle);
  sampler = dynamic_cast<SamplerObject*>(found.get());
  if (handle == nullptr || sampler == nullptr || sampler->closed)
    refuse(SLUICE_ERROR_INVALID_HANDLE, "the sampler handle is NULL, closed or not a sampler");
  if (&sampler->model() != &sequence.model())
    refuse(SLUICE_ERROR_INVALID_ARGUMENT, "the sampler belongs to another model than the sequence");
}

void check_room(SequenceObject& s, size_t count) {
  const uint32_t context = s.state().context();
  const size_t held = s.state().position() + (s.pending ? 1 : 0);
  if (count > context - held) {
    refuse(SLUICE_ERROR_FAILED, std::to_string(count) + " tokens do not fit: the sequence holds " +
                                    std::to_string(held) + " of its context of " + std::to_string(context));
  }
}

void check_ids(SequenceObject& s, const int32_t* tokens, size_t count) {
  const uint32_t vocab = s.model().engine().config().vocab;
  for (size_t i = 0; i < count; ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= vocab) {
      refuse(SLUICE_ERROR_INVALID_ARGUMENT, "tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                                " is not an id of the model's vocabulary of " + std::to_string(vocab));
    }
  }
}

}  // namespace

extern "C" {

void sluice_sampler_config_init(sluice_sampler_config* config) {
  if (config == nullptr) return;
  const sluice::SamplingParams defaults;
  *config = sluice_sampler_config{};
  config->temperature = defaults.temperature;
  config->top_k = defaults.top_k;
  config->top_p = defaults.top_p;
  config->min_p = defaults.min_p;
  config->repeat_penalty = defaults.repetition_penalty;
  config->seed = -1;
}

sluice_status sluice_sampler_new(sluice_model* model, const sluice_sampler_config* config,
                                 sluice_sampler** sampler) {
  if (sampler != nullptr) *sampler = nullptr;
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(sampler, "sampler (the output)");
    require(config, "config");
    auto object = std::make_shared<SamplerObject>(shared_model(model), *config);
    *sampler = open_child<sluice_sampler>(m, std::move(object));
  });
}

sluice_status sluice_sampler_seed(sluice_sampler* sampler, uint64_t* seed) {
  return call<SamplerObject>(sampler, "sampler", [&](SamplerObject& s) {
    require(seed, "seed");
    *seed = s.seed();
  });
}

sluice_status sluice_sampler_close(sluice_sampler* sampler) {
  return call<SamplerObject>(sampler, "sampler", [&](SamplerObject& s) {
    sluice::capi::close_handle(reinterpret_cast<uintptr_t>(sampler), s);
  });
}

sluice_status sluice_sequence_new(sluice_model* model, sluice_sequence** sequence) {
  if (sequence != nullptr) *sequence = nullptr;
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(sequence, "sequence (the output)");
    auto object = std::make_shared<SequenceObject>(shared_model(model));
    *sequence = open_child<sluice_sequence>(m, std::move(object));
  });
}

sluice_status sluice_sequence_close(sluice_sequence* sequence) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    sluice::capi::close_handle(reinterpret_cast<uintptr_t>(sequence), s);
  });
}

sluice_status sluice_sequence_reset(sluice_sequence* sequence) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    s.state().reset();
    s.pending.reset();
    s.have_logits = false;
  });
}

sluice_status sluice_sequence_position(sluice_sequence* sequence, uint32_t* position) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    require(position, "position");
    *position = s.state().position() + (s.pending ? 1 : 0);
  });
}

sluice_status sluice_sequence_feed(sluice_sequence* sequence, const int32_t* tokens, size_t count) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    if (count == 0) return;
    require(tokens, "tokens");
    check_ids(s, tokens, count);
    check_room(s, count);
    s.run_pending();
    s.have_logits = false;  // a failed prefill leaves no row to sample from
    s.model().engine().prefill(s.state(), std::span<const int32_t>(tokens, count), s.logits);
    s.have_logits = true;
  });
}

sluice_status sluice_sequence_logits(sluice_sequence* sequence, const float** logits, size_t* count) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    require(logits, "logits");
    require(count, "count");
    s.run_pending();
    if (!s.have_logits) refuse(SLUICE_ERROR_FAILED, "the sequence has no logits yet: feed it at least one token");
    *logits = s.logits.data();
    *count = s.logits.size();
  });
}

sluice_status sluice_sequence_step(sluice_sequence* sequence, sluice_sampler* sampler, int32_t* token,
                                   int* end) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    require(token, "token");
    SamplerObject* drawing = nullptr;
    same_model(s, sampler, drawing);
    s.run_pending();
    if (!s.have_logits) refuse(SLUICE_ERROR_FAILED, "the sequence has no logits yet: feed it at least one token");
    if (s.state().position() == s.state().context())
      refuse(SLUICE_ERROR_FAILED, "the context of " + std::to_string(s.state().context()) + " is full");
    const sluice::GenerationStats stats = s.model().engine().decode(
        s.state(), s.logits, 1, drawing->sampler(), s.model().end_ids(), false, [&](int32_t drawn, std::span<const float>) {
          *token = drawn;
          return true;
        });
    s.pending = *token;
    if (end != nullptr) *end = stats.finish == sluice::FinishReason::kStop ? 1 : 0;
  });
}

sluice_status sluice_generate(sluice_sequence* sequence, sluice_sampler* sampler, const int32_t* prompt,
                              size_t count, uint32_t max_tokens, sluice_token_callback callback,
                              void* user_data) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    if (count > 0) require(prompt, "prompt");
    SamplerObject* drawing = nullptr;
    same_model(s, sampler, drawing);
    check_ids(s, prompt, count);
    check_room(s, count);
    // The token sampled last goes first: the engine never ran it.
    std::vector<int32_t> tokens;
    if (s.pending) tokens.push_back(*s.pending);
    if (count > 0) tokens.insert(tokens.end(), prompt, prompt + count);
    if (tokens.empty() && !s.have_logits)
      refuse(SLUICE_ERROR_FAILED, "nothing to continue: give prompt tokens (or feed some first)");
    if (tokens.empty() && s.state().position() == s.state().context())
      refuse(SLUICE_ERROR_FAILED, "the context of " + std::to_string(s.state().context()) + " is full");
    s.pending.reset();
    s.have_logits = false;
    std::optional<int32_t> last;
    ModelObject& m = s.model();
    const sluice::GenerationStats stats = sluice::generate_text(
        m.engine(), m.tokenizer(), s.state(), tokens, s.logits, max_tokens, drawing->sampler(), m.end_ids(), false,
        [&](int32_t token, std::string_view piece, std::span<const float>) {
          if (token != sluice::kTextTail) last = token;
          if (callback == nullptr) return true;
          struct InCallback {
            bool& flag;
            explicit InCallback(bool& f) : flag(f) { flag = true; }
            ~InCallback() { flag = false; }
          } inside(m.in_callback);
          return callback(user_data, token, piece.data(), piece.size()) == 0;
        });
    s.have_logits = last.has_value() || stats.finish != sluice::FinishReason::kCancelled;
    s.pending = last;
    m.last_generation = sluice::generation_json(stats, s.state().context());
  });
}

sluice_status sluice_sequence_save(sluice_sequence* sequence, const char* path) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    require(path, "path");
    // A full context cannot take the last sampled token; it stays pending, as `sluice run` leaves it.
    if (s.state().position() < s.state().context()) s.run_pending();
    sluice::save_session(path, s.model().engine().container().identity(), s.state());
  });
}

sluice_status sluice_sequence_load(sluice_sequence* sequence, const char* path) {
  return call<SequenceObject>(sequence, "sequence", [&](SequenceObject& s) {
    require(path, "path");
    s.pending.reset();
    s.have_logits = false;
    try {
      sluice::load_session(path, s.model().engine().container().identity(), s.state());
    } catch (...) {
      s.state().reset();  // never half a sequence
      throw;
    }
  });
}

}  // extern "C"
