// compute/host/engine_setup.cpp: the expert source an engine reads through —
// the embedded cache sized by the memory plan, a running sluice-io joined by
// socket (reattached when it restarts), or none — and the plan's picture of
// the process. Parses no command line: the CLI and the C API fill EngineFlags.
#include "compute/host/engine_setup.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "compute/kernels/thread_pool.h"
#include "compute/model/cached_expert_source.h"
#include "ioworker/rpc_client.h"
#include "ioworker/rpc_socket.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice {

namespace {

constexpr auto kRetryPause = std::chrono::milliseconds(100);
constexpr auto kMinCallTimeout = std::chrono::milliseconds(1000);
constexpr auto kMaxCallTimeout = std::chrono::milliseconds(10000);
// A restart by sluice-up takes a second or two; a socket left by a daemon
// that nobody restarts should not hold a new client for long.
constexpr auto kFirstAttachWait = std::chrono::milliseconds(15000);

// Runs calls one at a time on a thread of its own. A kj event loop (each
// RpcClient has one) belongs to the thread that made it, and a reattach runs
// on whichever compute thread finds the daemon gone.
class RpcThread {
 public:
  RpcThread() : thread_([this] { serve(); }) {}
  ~RpcThread() {
    {
      const std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  // Runs `body` on the thread and waits for it; its exception is rethrown here.
  void run(const std::function<void()>& body) {
    const std::lock_guard one_caller(caller_);
    std::unique_lock lock(mutex_);
    std::exception_ptr error;
    bool done = false;
    task_ = [&] {
      try {
        body();
      } catch (...) {
        error = std::current_exception();
      }
      done = true;
    };
    wake_.notify_all();
    wake_.wait(lock, [&] { return done; });
    if (error) std::rethrow_exception(error);
  }

 private:
  void serve() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || task_ != nullptr; });
      if (task_) {
        const std::function<void()> task = std::move(task_);
        task_ = nullptr;
        lock.unlock();
        task();
        lock.lock();
        wake_.notify_all();
      } else {
        return;
      }
    }
  }

  std::mutex caller_, mutex_;
  std::condition_variable wake_;
  std::function<void()> task_;
  bool stopping_ = false;
  std::thread thread_;
};

// A session with a running sluice-io, detached when the last copy of the
// engine options holding it goes away. Every RPC runs on its RpcThread.
struct DaemonSession {
  std::unique_ptr<ioworker::RpcClient> client;
  uint32_t session = 0;
  bool attached_once = false;
  RpcThread rpc;

  std::string attach(const std::string& socket, uint64_t identity, bool verify,
                     std::chrono::steady_clock::time_point deadline) {
    std::string segment;
    rpc.run([&] { segment = attach_here(socket, identity, verify, deadline); });
    return segment;
  }

  // Connects and attaches, trying again until `deadline` while a daemon is
  // being restarted (its socket is there but nothing listens yet); returns
  // the segment to map. The first attach waits only for a socket that
  // exists, at most kFirstAttachWait, and never after a refusal: no daemon,
  // or one serving another model, is the user's error to hear at once.
  std::string attach_here(const std::string& socket, uint64_t identity, bool verify,
                          std::chrono::steady_clock::time_point deadline) {
    const bool first = !attached_once;
    struct stat info {};
    const auto started = std::chrono::steady_clock::now();
    if (first) deadline = std::min(deadline, std::chrono::steady_clock::now() + kFirstAttachWait);
    for (;;) {
      client.reset();  // one kj event loop per thread: the dead daemon's goes first
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      try {
        client = std::make_unique<ioworker::RpcClient>(
            socket, std::clamp(left, kMinCallTimeout, kMaxCallTimeout));
        const ioworker::Attachment attachment = client->attach(identity, verify);
        session = attachment.session;
        if (!first)
          fmt::print(stderr, "sluice: reattached to sluice-io at {} (segment {})\n", socket,
                     attachment.segment_name);
        attached_once = true;
        return attachment.segment_name;
      } catch (const Error& e) {
        const bool restarting = dynamic_cast<const ioworker::DaemonUnreachable*>(&e) != nullptr &&
                                ::stat(socket.c_str(), &info) == 0 && S_ISSOCK(info.st_mode);
        if (first && !restarting) throw;
        if (std::chrono::steady_clock::now() >= deadline) {
          fail("{} (gave up {} after {:.0f} s)", e.what(),
               first ? "waiting for it" : "reattaching (--read-timeout)",
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
        }
      }
      std::this_thread::sleep_for(kRetryPause);
    }
  }
  ~DaemonSession() {
    rpc.run([&] {
      try {
        if (client) client->detach(session);
      } catch (const Error&) {
        // The daemon is gone; its reaper drops our client entry without us.
      }
      client.reset();
    });
  }
};

}  // namespace

EngineOptions EngineFlags::options() const {
  EngineOptions options;
  options.context = context;
  if (threads > 0) options.threads = threads;
  options.prefill_chunk = chunk;
  options.verify_records = verify;
  if (!attach.empty() && no_cache) fail("--attach and --no-cache exclude each other");
  if (!attach.empty() && !budget.empty()) fail("--budget belongs to the daemon (sluice-io) when using --attach");
  if (no_cache) return options;
  if (!attach.empty()) {
    auto session = std::make_shared<DaemonSession>();
    const std::string socket = ioworker::resolve_socket(attach);
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(read_timeout * 1000));
    options.expert_source = [session, socket, verify = verify,
                             timeout](const Container& container) -> std::unique_ptr<ExpertSource> {
      const uint64_t identity = container.identity();
      DaemonAttacher attacher = [session, socket, verify,
                                 identity](std::chrono::steady_clock::time_point deadline) {
        return session->attach(socket, identity, verify, deadline);
      };
      return CachedExpertSource::attached(container, std::move(attacher), timeout);
    };
    return options;
  }
  options.expert_source = [flags = *this](const Container& container) -> std::unique_ptr<ExpertSource> {
    ioworker::WorkerOptions worker;
    const PlanRequest shape = plan_shape(flags);
    worker.cache_bytes = plan_for(container, flags.budget, flags.context, shape).cache_bytes;
    worker.readers = flags.readers;
    worker.verify_crc = flags.verify;
    worker.quiet = true;
    worker.progress = true;
    worker.mailbox_rows = shape.mailbox_rows;
    return CachedExpertSource::embedded(container, worker);
  };
  return options;
}

bool has_vision_tower(const std::string& model_dir) {
  const Container container = Container::open(model_dir);
  return ModelConfig::from_json(container.arch(), container.config()).vision.has_value();
}

PlanRequest plan_shape(size_t threads) {
  PlanRequest shape;
  shape.scratch.threads = static_cast<uint32_t>(
      kernels::resolve_thread_count(threads > 0 ? std::optional<size_t>(threads) : std::nullopt));
  shape.half_latents = kernels::trunk_activations_from_environment() == kernels::TrunkActivations::kInt8;
  return shape;
}

PlanRequest plan_shape(const EngineFlags& flags) {
  PlanRequest shape = plan_shape(flags.threads);
  shape.force = flags.force;
  shape.images = flags.images;
  shape.scratch.chunk = flags.chunk;
  shape.scratch.sequences = flags.sequences;
  // Sequences decoded together publish one lookahead row each.
  shape.mailbox_rows = std::max(shape.mailbox_rows, flags.sequences);
  shape.saved_states = flags.saved_states;
  return shape;
}

}  // namespace sluice
