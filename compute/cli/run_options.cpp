// compute/cli/run_options.cpp: shared flags of the model-loading commands.
#include "compute/cli/run_options.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>

#include "compute/cli/commands.h"
#include "ioworker/memory_plan.h"
#include "proto/error.h"

namespace sluice::cli {

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

}  // namespace sluice::cli
