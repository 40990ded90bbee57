// compute/capi/capi_model.cpp: libsluice's entry points for the library
// itself, opening and describing a model, and text (tokenizer, chat
// template). Each runs its body through call(): no exception leaves here.
#include <cstring>
#include <string>
#include <vector>

#include "compute/capi/handles.h"
#include "compute/chat/chat_format.h"
#include "ioworker/memory_plan.h"
#include "proto/error.h"
#include "router/lookahead.h"
#include "sluice_version.h"

using sluice::capi::ApiError;
using sluice::capi::call;
using sluice::capi::ModelObject;
using sluice::capi::record;
using sluice::capi::refuse;
using sluice::capi::require;

namespace {

// The prompt `request_json` renders to on `model`'s chat format.
sluice::chat::Rendered render_request(ModelObject& model, const char* request_json,
                                      int add_generation_prompt) {
  require(request_json, "request_json");
  nlohmann::ordered_json request = nlohmann::ordered_json::parse(request_json, nullptr, false);
  if (request.is_discarded()) refuse(SLUICE_ERROR_INVALID_ARGUMENT, "request_json is not valid JSON");
  sluice::chat::ChatInput input = sluice::chat::chat_input_from_request(std::move(request), "request_json");
  input.add_generation_prompt = add_generation_prompt != 0;
  return model.chat_format().render(input);
}

const char* hand_out_text(ModelObject& model, std::string text) {
  model.returned = std::move(text);
  return model.returned.c_str();
}

}  // namespace

extern "C" {

const char* sluice_version(void) { return SLUICE_VERSION; }

int sluice_abi_version(void) { return SLUICE_ABI_VERSION; }

const char* sluice_status_name(sluice_status status) {
  switch (status) {
    case SLUICE_OK:
      return "ok";
    case SLUICE_ERROR_INVALID_HANDLE:
      return "invalid handle";
    case SLUICE_ERROR_INVALID_ARGUMENT:
      return "invalid argument";
    case SLUICE_ERROR_BUFFER_TOO_SMALL:
      return "buffer too small";
    case SLUICE_ERROR_FAILED:
      return "failed";
    case SLUICE_ERROR_OUT_OF_MEMORY:
      return "out of memory";
    case SLUICE_ERROR_INTERNAL:
      return "internal error";
  }
  return "unknown status";
}

const char* sluice_last_error(const void* handle) {
  return sluice::capi::last_error(handle);
}

void sluice_open_options_init(sluice_open_options* options) {
  if (options == nullptr) return;
  const sluice::EngineFlags defaults;
  *options = sluice_open_options{};
  options->chunk = defaults.chunk;
  options->readers = defaults.readers;
  options->lookahead = -1;
  options->sequences = defaults.sequences;
  options->sessions = defaults.saved_states;
  options->read_timeout = defaults.read_timeout;
}

sluice_status sluice_model_open(const char* path, const sluice_open_options* given,
                                sluice_model** model) {
  try {
    if (model == nullptr) return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "model (the output) is NULL");
    *model = nullptr;
    if (path == nullptr) return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "path is NULL");
    sluice_open_options options;
    sluice_open_options_init(&options);
    if (given != nullptr) options = *given;
    if (options.chunk == 0) return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "chunk must be at least 1");
    if (options.readers == 0 || options.readers > 64)
      return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "readers must be in 1..64");
    if (options.sequences == 0) return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "sequences must be at least 1");
    if (!(options.read_timeout >= 0.1 && options.read_timeout <= 86400))
      return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "read_timeout must be in 0.1..86400 seconds");
    if (options.lookahead < -1) return record(nullptr, SLUICE_ERROR_INVALID_ARGUMENT, "lookahead must be -1 or at least 0");
    sluice::EngineFlags flags;
    flags.context = options.context;
    flags.threads = options.threads;
    flags.chunk = options.chunk;
    flags.readers = options.readers;
    flags.verify = options.verify != 0;
    flags.no_cache = options.no_cache != 0;
    flags.force = options.force != 0;
    flags.read_timeout = options.read_timeout;
    flags.sequences = options.sequences;
    flags.saved_states = options.sessions;
    if (options.attach != nullptr) flags.attach = options.attach;
    if (options.budget != nullptr) {
      flags.budget = options.budget;
      if (!flags.budget.empty()) sluice::parse_size(flags.budget, "budget");
    }
    sluice::RoutingOptions routing;
    routing.lookahead = options.lookahead >= 0 ? static_cast<uint32_t>(options.lookahead)
                                               : sluice::router::lookahead_from_environment();
    auto object = std::make_shared<ModelObject>(path, flags, routing);
    *model = reinterpret_cast<sluice_model*>(sluice::capi::register_handle(object));
    return SLUICE_OK;
  } catch (const ApiError& e) {
    return record(nullptr, e.status, e.message);
  } catch (const sluice::Error& e) {
    return record(nullptr, SLUICE_ERROR_FAILED, e.what());
  } catch (const std::bad_alloc&) {
    return record(nullptr, SLUICE_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return record(nullptr, SLUICE_ERROR_INTERNAL, e.what());
  } catch (...) {
    return record(nullptr, SLUICE_ERROR_INTERNAL, "an unknown exception");
  }
}

sluice_status sluice_model_close(sluice_model* model) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    sluice::capi::close_handle(reinterpret_cast<uintptr_t>(model), m);
  });
}

sluice_status sluice_model_info(sluice_model* model, const char** json) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(json, "json");
    sluice::Engine& engine = m.engine();
    const sluice::ModelConfig& config = engine.config();
    const sluice::EngineFlags& flags = m.hosted().flags();
    const auto bos = m.tokenizer().bos_id();
    const sluice::MemoryPlan plan = sluice::plan_for(engine.container(), flags.attach.empty() ? flags.budget : "",
                                                     flags.context, sluice::plan_shape(flags));
    const nlohmann::json info = {
        {"path", m.path},
        {"family", config.arch},
        {"layers", config.layers},
        {"moe_layers", config.moe_layers()},
        {"experts", config.experts},
        {"top_k", config.top_k},
        {"hidden", config.hidden},
        {"context", engine.transformer().context()},
        {"max_positions", config.max_positions},
        {"vocab", config.vocab},
        {"tokenizer_vocab", m.tokenizer().vocab_size()},
        {"bos_id", bos ? nlohmann::json(*bos) : nlohmann::json(nullptr)},
        {"eos_ids", m.end_ids()},
        {"chat_template", sluice::chat::chat_format_for(engine.container(), m.tokenizer()) != nullptr},
        {"cache", !flags.attach.empty() ? "attached" : flags.no_cache ? "none" : "embedded"},
        {"lookahead", m.hosted().lookahead()},
        {"plan", sluice::plan_to_json(plan)}};
    *json = hand_out_text(m, info.dump());
  });
}

sluice_status sluice_model_stats(sluice_model* model, const char** json) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(json, "json");
    nlohmann::json stats = {{"experts", sluice::experts_json(m.engine().experts().stats())},
                            {"last_generation", m.last_generation ? *m.last_generation : nlohmann::json(nullptr)},
                            {"lookahead", nullptr}};
    sluice::RoutingSession& routing = m.hosted().routing();
    if (routing.runs_router()) {
      const sluice::shm::GuessStats guesses = routing.guesses();
      stats["lookahead"] = {{"k", m.hosted().lookahead()},
                            {"precision_at_1", guesses.precision_at_1()},
                            {"recall", guesses.recall()}};
    }
    *json = hand_out_text(m, stats.dump());
  });
}

sluice_status sluice_tokenize(sluice_model* model, const char* text, size_t length, int add_bos,
                              int32_t* tokens, size_t capacity, size_t* count) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    if (length > 0) require(text, "text");
    const std::vector<int32_t> ids =
        sluice::prompt_ids(m.tokenizer(), std::string_view(text == nullptr ? "" : text, length), add_bos != 0);
    sluice::capi::hand_out(ids, tokens, capacity, count);
  });
}

sluice_status sluice_detokenize(sluice_model* model, const int32_t* tokens, size_t count,
                                const char** text, size_t* length) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(text, "text");
    if (count > 0) require(tokens, "tokens");
    const size_t vocab = m.tokenizer().vocab_size();
    for (size_t i = 0; i < count; ++i) {
      if (tokens[i] < 0 || static_cast<size_t>(tokens[i]) >= vocab) {
        refuse(SLUICE_ERROR_INVALID_ARGUMENT, "tokens[" + std::to_string(i) + "] = " + std::to_string(tokens[i]) +
                                                  " is not an id of the tokenizer's " + std::to_string(vocab));
      }
    }
    *text = hand_out_text(m, m.tokenizer().decode(std::span<const int32_t>(tokens, count)));
    if (length != nullptr) *length = m.returned.size();
  });
}

sluice_status sluice_chat_template(sluice_model* model, const char* request_json,
                                   int add_generation_prompt, const char** prompt) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    require(prompt, "prompt");
    *prompt = hand_out_text(m, render_request(m, request_json, add_generation_prompt).text());
  });
}

sluice_status sluice_chat_tokens(sluice_model* model, const char* request_json,
                                 int add_generation_prompt, int32_t* tokens, size_t capacity,
                                 size_t* count) {
  return call<ModelObject>(model, "model", [&](ModelObject& m) {
    const std::vector<int32_t> ids =
        m.chat_format().tokenize(render_request(m, request_json, add_generation_prompt));
    sluice::capi::hand_out(ids, tokens, capacity, count);
  });
}

}  // extern "C"
