// compute/host/engine_setup.h: how a program that hosts a model (the sluice
// CLI, libsluice) chooses where routed experts come from and what the memory
// plan counts for it. Parses no command line; the CLI's flags fill it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "compute/model/engine.h"
#include "ioworker/memory_plan.h"

namespace sluice {

// By default an in-process cache (the same worker sluice-io runs, over an
// anonymous segment, sized by the plan rule); `attach` joins a running
// sluice-io; `no_cache` reads each record directly.
struct EngineFlags {
  uint32_t context = 0;
  size_t threads = 0;
  uint32_t chunk = 64;
  bool verify = false;
  std::string attach;  // a socket path or an instance name
  std::string budget;  // K/M/G/T; empty: the plan rule
  bool force = false;  // a budget above the usable memory
  uint32_t readers = 4;
  bool no_cache = false;
  double read_timeout = 60;  // seconds: shm::Client::kDefaultReadTimeout
  bool images = false;       // the prompt has images: the plan counts the vision tower
  // What the program holds besides one sequence, for the plan: sequences
  // decoded together (serve --parallel) and copies of a sequence's state
  // kept at once (a session loaded or saved, serve's saved prompts).
  uint32_t sequences = 1;
  uint32_t saved_states = 0;
  // The options for these flags. An attached session lives as long as the
  // returned options (it detaches when they are destroyed). Throws Error
  // when attach excludes no_cache or budget.
  EngineOptions options() const;
};

// Whether the container's model has a vision tower: a command that may load
// it at any turn (serve, chat's /image) plans for it from the start.
bool has_vision_tower(const std::string& model_dir);
// The plan's picture of this process: its threads (`threads` as --threads
// gives it, 0: SLUICE_THREADS or every core) and its RVQ table layout; the
// EngineFlags overload adds the chunk, sequences, saved states, force and images.
PlanRequest plan_shape(size_t threads);
PlanRequest plan_shape(const EngineFlags& flags);

}  // namespace sluice
