// compute/capi/handles.h: libsluice's handles and its boundary. A handle is
// an id (never a pointer the library dereferences) looked up in one registry,
// so a closed or made-up handle is refused, never used; every entry point
// runs its body through call(), which turns every exception into a status
// and a message. Nothing here may let an exception out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "compute/capi/sluice.h"
#include "compute/chat/chat_format.h"
#include "compute/chat/json_constraint.h"
#include "compute/chat/token_grammar.h"
#include "compute/host/hosted_model.h"
#include "compute/model/sampler.h"
#include "compute/model/sequence_state.h"

namespace sluice::capi {

// A failure the boundary reports with its own status (a bad argument, a
// small buffer); everything else the engine throws is SLUICE_ERROR_FAILED.
struct ApiError {
  sluice_status status;
  std::string message;
};
[[noreturn]] void refuse(sluice_status status, std::string message);
// Throws ApiError(SLUICE_ERROR_INVALID_ARGUMENT) naming `name` when `pointer` is null.
void require(const void* pointer, const char* name);

class ModelObject;

// What every handle has: its model (whose lock serializes calls), its last
// error and whether it is closed. Guarded by the model's lock.
class Object {
 public:
  virtual ~Object() = default;
  virtual const char* kind() const = 0;
  // Frees what the handle holds (its close, or its model's).
  virtual void release() = 0;
  virtual ModelObject& model() = 0;
  std::string error;
  bool closed = false;
};

class ModelObject final : public Object {
 public:
  ModelObject(const std::string& path, const EngineFlags& flags, const RoutingOptions& routing);
  const char* kind() const override { return "model"; }
  void release() override;
  ModelObject& model() override { return *this; }

  HostedModel& hosted() { return *hosted_; }
  Engine& engine() { return hosted_->engine(); }
  const tokenizer::Tokenizer& tokenizer() const { return hosted_->tokenizer(); }
  // The container's chat format; Error when it has none.
  const chat::ChatFormat& chat_format();
  // The vocabulary's bytes as a trie (structured output), built at its first use.
  std::shared_ptr<const chat::TokenTrie> trie();
  // The ids a generation ends at (and a structured value is followed by).
  std::vector<int32_t> end_ids() const;

  // Recursive: a token callback may call sluice_last_error (and is refused
  // anything else on this model, see in_callback) on the generating thread.
  std::recursive_mutex lock;
  bool in_callback = false;
  std::string path;
  std::string returned;  // the last string handed out
  std::optional<nlohmann::json> last_generation;
  bool default_sequence_taken = false;
  std::vector<std::weak_ptr<Object>> children;

 private:
  std::unique_ptr<HostedModel> hosted_;
  std::unique_ptr<chat::ChatFormat> chat_format_;
  std::shared_ptr<const chat::TokenTrie> trie_;
};

class SequenceObject final : public Object {
 public:
  explicit SequenceObject(std::shared_ptr<ModelObject> model);
  const char* kind() const override { return "sequence"; }
  void release() override;
  ModelObject& model() override { return *model_; }

  SequenceState& state() { return *state_; }
  // Runs the token sampled last, if it has not run yet: what comes next
  // needs its logits (or a saved file needs it in the state).
  void run_pending();
  std::vector<float> logits;
  bool have_logits = false;  // `logits` is the row after the state's last token
  std::optional<int32_t> pending;  // sampled (and in no state yet)

 private:
  std::shared_ptr<ModelObject> model_;
  std::optional<SequenceState> own_;  // unless it drives the engine's default sequence
  SequenceState* state_ = nullptr;
  bool uses_default_ = false;
};

class SamplerObject final : public Object {
 public:
  SamplerObject(std::shared_ptr<ModelObject> model, const sluice_sampler_config& config);
  const char* kind() const override { return "sampler"; }
  void release() override;
  ModelObject& model() override { return *model_; }
  Sampler& sampler() { return *sampler_; }
  uint64_t seed() const { return seed_; }

 private:
  std::shared_ptr<ModelObject> model_;
  std::unique_ptr<chat::JsonConstraint> constraint_;  // outlives sampler_, which points at it
  std::optional<Sampler> sampler_;
  uint64_t seed_ = 0;
};

// Registers `object` and returns its handle value.
uintptr_t register_handle(std::shared_ptr<Object> object);
// Marks `object` closed, frees it and forgets its handle (its model's lock held).
void close_handle(uintptr_t handle, Object& object);
std::shared_ptr<Object> find_handle(const void* handle);

// The handle's last error when it is open, else the thread's; never null.
const char* last_error(const void* handle);
// Records a failure on the thread (and on `object` when given); returns `status`.
sluice_status record(Object* object, sluice_status status, const std::string& message);

// Runs `body(T&)` on the open handle `handle` of kind T under its model's lock.
template <typename T, typename Body>
sluice_status call(const void* handle, const char* kind, Body&& body) {
  Object* object = nullptr;
  try {
    if (handle == nullptr)
      return record(nullptr, SLUICE_ERROR_INVALID_HANDLE, std::string("the ") + kind + " handle is NULL");
    const std::shared_ptr<Object> found = find_handle(handle);
    T* typed = dynamic_cast<T*>(found.get());
    if (found == nullptr) {
      return record(nullptr, SLUICE_ERROR_INVALID_HANDLE,
                    std::string("the ") + kind + " handle is closed or was never opened");
    }
    if (typed == nullptr) {
      return record(found.get(), SLUICE_ERROR_INVALID_HANDLE,
                    std::string("a ") + found->kind() + " handle was given where a " + kind + " was expected");
    }
    const std::lock_guard guard(found->model().lock);
    if (found->closed)
      return record(nullptr, SLUICE_ERROR_INVALID_HANDLE, std::string("the ") + kind + " handle is closed");
    if (found->model().in_callback) {
      return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT,
                    std::string("the ") + kind + " was called from inside a token callback of its model");
    }
    object = typed;
    body(*typed);
    return SLUICE_OK;
  } catch (const ApiError& e) {
    return record(object, e.status, e.message);
  } catch (const Error& e) {
    return record(object, SLUICE_ERROR_FAILED, e.what());
  } catch (const std::bad_alloc&) {
    return record(object, SLUICE_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return record(object, SLUICE_ERROR_INTERNAL, e.what());
  } catch (...) {
    return record(object, SLUICE_ERROR_INTERNAL, "an unknown exception");
  }
}

// Copies `values` into the caller's buffer, or refuses with the size needed.
template <typename Value>
void hand_out(const std::vector<Value>& values, Value* out, size_t capacity, size_t* count) {
  require(count, "count");
  *count = values.size();
  if (values.size() > capacity) {
    refuse(SLUICE_ERROR_BUFFER_TOO_SMALL,
           "the buffer holds " + std::to_string(capacity) + " values; " + std::to_string(values.size()) + " are needed");
  }
  if (!values.empty()) {
    require(out, "the output buffer");
    std::copy(values.begin(), values.end(), out);
  }
}

}  // namespace sluice::capi
