// compute/capi/handles.cpp: the registry of open handles, the per-handle and
// per-thread error messages, and what each kind of handle holds.
#include "compute/capi/handles.h"

#include <algorithm>
#include <map>
#include <random>
#include <utility>

#include "proto/error.h"

namespace sluice::capi {
namespace {

struct Registry {
  std::mutex lock;
  std::map<uintptr_t, std::shared_ptr<Object>> open;
  // Never reused, so a closed handle cannot come back as another one.
  uintptr_t next = 0x5100;
};

Registry& registry() {
  static Registry* instance = new Registry;  // outlives every static destructor that might close a handle
  return *instance;
}

thread_local std::string thread_error;

}  // namespace

[[noreturn]] void refuse(sluice_status status, std::string message) {
  throw ApiError{status, std::move(message)};
}

void require(const void* pointer, const char* name) {
  if (pointer == nullptr) refuse(SLUICE_ERROR_INVALID_ARGUMENT, std::string(name) + " is NULL");
}

sluice_status record(Object* object, sluice_status status, const std::string& message) {
  try {
    thread_error = message;
    if (object != nullptr) object->error = message;
  } catch (...) {
    // No room for the message: the status still says what kind of failure it was.
  }
  return status;
}

const char* last_error(const void* handle) {
  if (handle != nullptr) {
    const std::shared_ptr<Object> object = find_handle(handle);
    // The registry keeps the object, and so its message, alive after `object` goes.
    if (object != nullptr) {
      const std::lock_guard guard(object->model().lock);
      return object->error.c_str();
    }
  }
  return thread_error.c_str();
}

uintptr_t register_handle(std::shared_ptr<Object> object) {
  Registry& r = registry();
  const std::lock_guard guard(r.lock);
  r.next += 16;
  r.open.emplace(r.next, std::move(object));
  return r.next;
}

void close_handle(uintptr_t handle, Object& object) {
  {
    Registry& r = registry();
    const std::lock_guard guard(r.lock);
    r.open.erase(handle);
  }
  object.closed = true;
  object.release();
}

std::shared_ptr<Object> find_handle(const void* handle) {
  Registry& r = registry();
  const std::lock_guard guard(r.lock);
  const auto found = r.open.find(reinterpret_cast<uintptr_t>(handle));
  return found == r.open.end() ? nullptr : found->second;
}

ModelObject::ModelObject(const std::string& model_path, const EngineFlags& flags,
                         const RoutingOptions& routing)
    : path(model_path), hosted_(std::make_unique<HostedModel>(model_path, flags, routing)) {}

void ModelObject::release() {
  // Every child first: a sequence may be the engine's own.
  std::vector<std::shared_ptr<Object>> alive;
  for (const std::weak_ptr<Object>& child : children) {
    if (auto object = child.lock()) alive.push_back(std::move(object));
  }
  {
    Registry& r = registry();
    const std::lock_guard guard(r.lock);
    for (auto it = r.open.begin(); it != r.open.end();) {
      const bool mine = std::find(alive.begin(), alive.end(), it->second) != alive.end();
      it = mine ? r.open.erase(it) : std::next(it);
    }
  }
  for (const std::shared_ptr<Object>& object : alive) {
    object->closed = true;
    object->release();
  }
  children.clear();
  trie_.reset();
  chat_format_.reset();
  if (!hosted_) return;
  std::unique_ptr<HostedModel> hosted = std::move(hosted_);
  hosted->routing().finish();  // rethrows what stopped the embedded router, if anything

}

const chat::ChatFormat& ModelObject::chat_format() {
  if (!chat_format_) {
    chat_format_ = chat::chat_format_for(engine().container(), tokenizer());
    if (!chat_format_) {
      fail("{}: the container has no chat template (tokenizer.chat_template is null in manifest.json)",
           path);
    }
  }
  return *chat_format_;
}

std::shared_ptr<const chat::TokenTrie> ModelObject::trie() {
  if (!trie_) trie_ = std::make_shared<const chat::TokenTrie>(tokenizer());
  return trie_;
}

std::vector<int32_t> ModelObject::end_ids() const {
  // The config's, which `sluice run` stops at; the tokenizer's eos only when the config names none.
  std::vector<int32_t> ids = hosted_->engine().config().eos_ids;
  const auto eos = tokenizer().eos_id();
  if (ids.empty() && eos) ids.push_back(*eos);
  return ids;
}

SequenceObject::SequenceObject(std::shared_ptr<ModelObject> model) : model_(std::move(model)) {
  Engine& engine = model_->engine();
  if (!model_->default_sequence_taken) {
    // The engine's own sequence is already allocated (and counted by the plan): use it first.
    model_->default_sequence_taken = true;
    uses_default_ = true;
    state_ = &engine.sequence();
    state_->reset();
  } else {
    own_.emplace(engine.new_sequence());
    state_ = &*own_;
  }
  logits.resize(engine.config().vocab);
}

void SequenceObject::release() {
  if (uses_default_) model_->default_sequence_taken = false;
  uses_default_ = false;
  state_ = nullptr;
  own_.reset();
  logits = {};
}

void SequenceObject::run_pending() {
  if (!pending) return;
  model_->engine().advance(*state_, *pending, logits);
  pending.reset();
  have_logits = true;
}

SamplerObject::SamplerObject(std::shared_ptr<ModelObject> model, const sluice_sampler_config& config)
    : model_(std::move(model)) {
  SamplingParams params;
  params.temperature = config.temperature;
  params.top_k = config.top_k;
  params.top_p = config.top_p;
  params.min_p = config.min_p;
  params.repetition_penalty = config.repeat_penalty;
  if (config.seed < -1) refuse(SLUICE_ERROR_INVALID_ARGUMENT, "seed must be -1 (random) or at least 0");
  seed_ = config.seed >= 0 ? static_cast<uint64_t>(config.seed) : std::random_device{}();
  params.seed = seed_;
  try {
    validate(params);
  } catch (const Error& e) {
    // Its message names sluice run's flag: name the config's field instead.
    std::string message = e.what();
    for (const auto& [flag, field] : {std::pair{"--temp", "temperature"}, {"--top-k", "top_k"},
                                      {"--top-p", "top_p"}, {"--min-p", "min_p"},
                                      {"--repeat-penalty", "repeat_penalty"}}) {
      if (message.starts_with(flag)) message = field + message.substr(std::string_view(flag).size());
    }
    refuse(SLUICE_ERROR_INVALID_ARGUMENT, "sampler config: " + message);
  }
  if (config.json_schema != nullptr) {
    const nlohmann::json schema = nlohmann::json::parse(config.json_schema, nullptr, false);
    if (schema.is_discarded()) refuse(SLUICE_ERROR_INVALID_ARGUMENT, "json_schema is not valid JSON");
    chat::ConstraintOptions frame;
    frame.end_ids = model_->end_ids();
    constraint_ = std::make_unique<chat::JsonConstraint>(chat::JsonGrammar::from_schema(schema),
                                                         model_->trie(), frame);
    params.constraint = constraint_.get();
  }
  sampler_.emplace(model_->engine().make_sampler(params));
}

void SamplerObject::release() {
  sampler_.reset();
  constraint_.reset();
}

}  // namespace sluice::capi
