// compute/cli/run_options.cpp: shared flags of the model-loading commands.
#include "compute/cli/run_options.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "compute/cli/commands.h"
#include "compute/kernels/dispatch.h"
#include "compute/kernels/thread_pool.h"
#include "compute/model/cached_expert_source.h"
#include "ioworker/memory_plan.h"
#include "ioworker/rpc_client.h"
#include "ioworker/rpc_socket.h"
#include "proto/container.h"
#include "proto/error.h"
#include "proto/model_config.h"

namespace sluice::cli {

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

CLI::Validator at_least_one() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        long long value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size())
          return fmt::format("'{}' is not a number", text);
        return value >= 1 ? "" : fmt::format("{} is out of range: must be at least 1", text);
      },
      "N>=1");
}

CLI::Validator memory_size() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return "an empty size: give e.g. 2G, 512M";
        try {
          parse_size(text, "SIZE");
        } catch (const Error&) {
          return fmt::format(
              "bad size '{}' (expected a number with an optional K, M, G or T suffix, 1024-based)",
              text);
        }
        return "";
      },
      "SIZE");
}

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

void add_engine_flags(CLI::App& cmd, EngineFlags& flags) {
  cmd.add_option("--ctx", flags.context,
                 "context length in tokens (default: the model's, at most 4096)")
      ->check(at_least_one());
  cmd.add_option("--threads", flags.threads,
                 "compute threads (default: SLUICE_THREADS or every available core)")
      ->check(at_least_one());
  cmd.add_option("--chunk", flags.chunk,
                 "prefill chunk: tokens whose experts are read once together")
      ->capture_default_str()
      ->check(at_least_one());
  cmd.add_flag("--verify", flags.verify,
               "check the crc32 of every expert record read; with --attach, only a daemon that verifies "
               "(sluice-io --verify) is accepted");
  cmd.add_option("--attach", flags.attach,
                 "join a running sluice-io: its socket path, or an instance name such as 'default'");
  cmd.add_option("--read-timeout", flags.read_timeout,
                 "seconds to wait for an expert record, or for a restarted sluice-io to take us "
                 "back, before "
                 "giving up with the reason")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 86400.0));
  cmd.add_option("--budget", flags.budget,
                 "memory budget of the in-process cache (K/M/G/T); default: the `sluice plan` rule")
      ->check(memory_size());
  cmd.add_flag(
      "--force", flags.force,
      "take a --budget above the usable memory (physical RAM, cgroup limits); a budget equal to "
      "a cgroup's limit is not above it (the whole process counts, and the kernel keeps the limit "
      "in "
      "whole pages)");
  cmd.add_option("--readers", flags.readers, "reads in flight of the in-process cache")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd.add_flag("--no-cache", flags.no_cache, "read every expert record from disk, with no cache");
}

void add_thinking_flags(CLI::App& cmd, std::optional<bool>& enable_thinking) {
  CLI::Option* on = cmd.add_flag_callback(
      "--enable-thinking", [&enable_thinking] { enable_thinking = true; },
      "pass enable_thinking=true to the template");
  CLI::Option* off = cmd.add_flag_callback(
      "--disable-thinking", [&enable_thinking] { enable_thinking = false; },
      "pass enable_thinking=false to the template");
  on->excludes(off);
}

namespace {

// The sampler's own rule (validate()) for one field, so an out-of-range
// value is a usage error at parse time; a value that is not a number is
// left to the option's conversion, which names it.
template <typename T>
CLI::Validator sampler_accepts(T SamplingParams::*field) {
  return CLI::Validator(
      [field](std::string& text) -> std::string {
        SamplingParams probe;
        T value{};
        if (!CLI::detail::lexical_cast(text, value)) return "";
        probe.*field = value;
        try {
          validate(probe);
        } catch (const Error& e) {
          const std::string_view message = e.what();
          const size_t rule =
              message.find(' ');  // "--temp must be ...": the parser names the flag already
          return std::string(message.substr(rule == std::string_view::npos ? 0 : rule + 1));
        }
        return "";
      },
      "");
}

}  // namespace

void add_sampling_flags(CLI::App& cmd, SamplingParams& params, int64_t& seed) {
  cmd.add_option("--temp", params.temperature, "temperature; 0 is greedy")
      ->capture_default_str()
      ->check(sampler_accepts(&SamplingParams::temperature));
  cmd.add_option("--top-k", params.top_k, "keep the k most likely tokens (0: off)")
      ->capture_default_str()
      ->check(sampler_accepts(&SamplingParams::top_k));
  cmd.add_option("--top-p", params.top_p,
                 "keep the smallest set with this much probability (1: off)")
      ->capture_default_str()
      ->check(sampler_accepts(&SamplingParams::top_p));
  cmd.add_option("--min-p", params.min_p,
                 "drop tokens below this fraction of the best one's probability (0: off)")
      ->capture_default_str()
      ->check(sampler_accepts(&SamplingParams::min_p));
  cmd.add_option("--repeat-penalty", params.repetition_penalty,
                 "penalty on tokens already in the context (1: off)")
      ->capture_default_str()
      ->check(sampler_accepts(&SamplingParams::repetition_penalty));
  cmd.add_option("--seed", seed,
                 "random seed of the sampler; -1: draw one (printed in the summary)")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()));
}

uint64_t resolve_seed(int64_t seed) {
  if (seed >= 0) return static_cast<uint64_t>(seed);
  std::random_device entropy;
  // Kept below 2^53 so a JSON reader that parses numbers as doubles repeats it exactly.
  return ((uint64_t{entropy()} << 32) | entropy()) & ((uint64_t{1} << 53) - 1);
}

std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || std::isspace(static_cast<unsigned char>(text[i]))) {
      ++i;
      continue;
    }
    int32_t id = 0;
    const auto [end, error] = std::from_chars(text.data() + i, text.data() + text.size(), id);
    if (error != std::errc() || id < 0) {
      usage_error("{}: '{}' is not a list of token ids (expected e.g. 1,2,3)", flag, text);
    }
    ids.push_back(id);
    i = static_cast<size_t>(end - text.data());
  }
  if (ids.empty()) usage_error("{}: no token ids given", flag);
  return ids;
}

TimedTokenizer load_container_tokenizer(const std::string& model) {
  const auto start = std::chrono::steady_clock::now();
  tokenizer::Tokenizer tok = tokenizer::Tokenizer::load_from_container(model);
  return {std::move(tok), std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

std::string read_stdin() {
  std::string text(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>{});
  if (std::cin.bad()) fail("reading stdin failed");
  if (text.ends_with("\r\n")) {
    text.resize(text.size() - 2);
  } else if (text.ends_with('\n')) {
    text.pop_back();
  }
  return text;
}

std::string read_file(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read {}", flag, path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

PendingOutput::PendingOutput(std::string path) : path_(std::move(path)) {
  if (path_.empty()) return;
  struct stat info {};
  if (::stat(path_.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    // A pipe or a terminal (/dev/stdout): there is nothing to rename onto.
    temp_path_ = path_;
    committed_ = true;
    return;
  }
  temp_path_ = fmt::format("{}.partial-{}", path_, ::getpid());
}

PendingOutput::~PendingOutput() {
  if (!temp_path_.empty() && !committed_) ::unlink(temp_path_.c_str());
}

void PendingOutput::commit() {
  if (temp_path_.empty() || committed_) return;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0)
    fail("{}: cannot rename {} onto it: {}", path_, temp_path_, std::strerror(errno));
  committed_ = true;
}

std::string experts_summary(const ExpertSourceStats& stats) {
  const double hit_rate = stats.requests ? 100.0 * static_cast<double>(stats.hits) / static_cast<double>(stats.requests) : 0.0;
  return fmt::format("experts: {} requested, {:.1f}% hits, {} reads ({:.1f} MB, {:.2f} s waiting){}", stats.requests,
                     hit_rate, stats.reads, static_cast<double>(stats.bytes_read) / 1e6, stats.wait_seconds,
                     stats.direct_io ? ", O_DIRECT" : ", buffered I/O");
}

nlohmann::json experts_json(const ExpertSourceStats& stats) {
  return {{"requested", stats.requests},       {"hits", stats.hits},
          {"reads", stats.reads},              {"bytes_read", stats.bytes_read},
          {"wait_seconds", stats.wait_seconds}, {"direct_io", stats.direct_io}};
}

}  // namespace sluice::cli
