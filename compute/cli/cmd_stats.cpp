// compute/cli/cmd_stats.cpp: `sluice stats [--attach SOCKET|INSTANCE] [--watch SECONDS]
// [--json]`: the cache and reader figures of a running sluice-io, asked over
// its control socket. It only reads; it never attaches to the segment.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "compute/cli/commands.h"
#include "ioworker/memory_plan.h"
#include "ioworker/rpc_client.h"
#include "ioworker/rpc_socket.h"
#include "proto/error.h"

namespace sluice::cli {
namespace {

using ioworker::DaemonStats;

double rate(uint64_t hits, uint64_t misses) {
  return hits + misses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(hits + misses);
}

// Bytes per second between two snapshots (or since start when `previous` is empty).
double read_gbps(const DaemonStats& now, const std::optional<DaemonStats>& previous) {
  const double bytes = static_cast<double>(now.cache.bytes_read - (previous ? previous->cache.bytes_read : 0));
  const double seconds = now.uptime_seconds - (previous ? previous->uptime_seconds : 0.0);
  return seconds <= 0 ? 0.0 : bytes / seconds / 1e9;
}

// The router's guesses scored against the real routing (from the segment's
// stats block); null when no router has served this daemon.
bool router_served(const shm::LookaheadStats& r) { return r.router_pid != 0 || r.messages != 0; }

nlohmann::json router_json(const shm::LookaheadStats& r) {
  if (!router_served(r)) return nullptr;
  nlohmann::json layers = nlohmann::json::array();
  for (const shm::GuessStats& a : r.layers) {
    layers.push_back({{"layer", a.layer}, {"scored", a.scored}, {"precision_at_1", a.precision_at_1()},
                      {"recall", a.recall()}});
  }
  return {{"pid", r.router_pid}, {"lookahead", r.k}, {"messages", r.messages}, {"skipped", r.skipped},
          {"prefetches", r.prefetches}, {"prefetched", r.prefetched}, {"layers", layers}};
}

nlohmann::json to_json(const DaemonStats& s, const std::optional<DaemonStats>& previous) {
  const auto& c = s.cache;
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : c.layers) {
    layers.push_back({{"layer", layer.layer}, {"hits", layer.hits}, {"misses", layer.misses},
                      {"hit_rate", rate(layer.hits, layer.misses)}});
  }
  nlohmann::json clients = nlohmann::json::array();
  for (const auto& client : c.clients) {
    clients.push_back({{"id", client.id}, {"pid", client.pid}, {"requests", client.requests},
                       {"hits", client.hits}, {"misses", client.misses},
                       {"hit_rate", rate(client.hits, client.misses)}, {"wait_seconds", client.wait_seconds},
                       {"heartbeat_age_seconds", client.heartbeat_age_seconds}});
  }
  // Null until a sluice-router's loop has run over this segment.
  const double router_beat = c.lookahead.heartbeat_age_seconds;
  const nlohmann::json router_age =
      router_beat < 0 ? nlohmann::json(nullptr) : nlohmann::json(router_beat);
  return {{"pid", s.pid},
          {"instance", s.instance},
          {"model", s.model},
          {"segment", s.segment_name},
          {"uptime_seconds", s.uptime_seconds},
          {"scheduler_heartbeat_age_seconds", c.scheduler_heartbeat_age_seconds},
          {"router_heartbeat_age_seconds", router_age},
          {"backend", s.backend},
          {"readers", s.readers},
          {"direct_io", c.direct_io},
          {"budget_bytes", s.budget_bytes},
          {"cache_bytes", s.cache_bytes},
          {"slot_count", c.slot_count},
          {"slot_bytes", c.slot_bytes},
          {"slots_ready", c.slots_ready},
          {"slots_pinned", c.slots_pinned},
          {"sessions", s.sessions},
          {"startup", {{"seconds", s.startup_seconds},
                       {"resident_seconds", s.resident_seconds},
                       {"populate", s.populate},
                       {"huge_pages", s.huge_pages},
                       {"huge_bytes", s.huge_bytes},
                       {"registered", s.registered},
                       {"register_seconds", s.register_seconds}}},
          {"page_faults_since_startup", s.page_faults},
          {"hits", c.hits},
          {"inflight_hits", c.inflight_hits},
          {"misses", c.misses},
          {"hit_rate", c.hit_rate()},
          {"demand_reads", c.demand_reads},
          {"prefetch_reads", c.prefetch_reads},
          {"prefetch_requests", c.prefetch_requests},
          {"prefetch_dropped", c.prefetch_dropped},
          {"wasted_prefetches", c.wasted_prefetches},
          {"bytes_read", c.bytes_read},
          {"read_gbps", read_gbps(s, previous)},
          {"read_gbps_window", previous ? "interval" : "since start"},
          {"read_errors", c.read_errors},
          {"evictions", c.evictions},
          {"bad_requests", c.bad_requests},
          {"clients_reaped", c.clients_reaped},
          {"queue_depth", c.queue_depth},
          {"inflight", c.inflight},
          {"read_seconds_total", c.read_seconds_total},
          {"read_latency_us", {{"p50", c.read_p50_us}, {"p90", c.read_p90_us}, {"p99", c.read_p99_us}}},
          {"layers", layers},
          {"clients", clients},
          {"router", router_json(c.lookahead)}};
}

// The text view fits a terminal of kColumns: lists (per layer, per client)
// wrap, and a path too long for its line keeps its end.
constexpr size_t kColumns = 80;

std::string fit(const std::string& text, size_t width) {
  return text.size() <= width ? text : "..." + text.substr(text.size() - (width - 3));
}

// "  label       item item item", wrapped under the first item.
void add_wrapped(std::string& out, std::string_view label, const std::vector<std::string>& items) {
  const std::string indent(14, ' ');
  std::string line = fmt::format("  {:<12}", label);
  bool first = true;
  for (const std::string& item : items) {
    if (!first && line.size() + 1 + item.size() > kColumns) {
      out += line + "\n";
      line = indent;
      first = true;
    }
    line += (first ? "" : " ") + item;
    first = false;
  }
  out += line + "\n";
}

std::string to_text(const DaemonStats& s, const std::optional<DaemonStats>& previous) {
  const auto& c = s.cache;
  std::string out;
  out += fmt::format("sluice-io pid {}, instance '{}', up {:.1f} s\n", s.pid, s.instance,
                     s.uptime_seconds);
  out += fmt::format("  model       {}\n", fit(s.model, kColumns - 14));
  out += fmt::format("  readers     {} via {}, {}\n", s.readers, s.backend,
                     c.direct_io ? "O_DIRECT" : "buffered (no O_DIRECT here)");
  out += fmt::format("  cache       {} slots of {}: {} ready, {} pinned\n", c.slot_count,
                     format_bytes(c.slot_bytes), c.slots_ready, c.slots_pinned);
  out += fmt::format("  memory      cache {}, budget {}\n", format_bytes(s.cache_bytes),
                     format_bytes(s.budget_bytes));
  out += fmt::format("  segment     /dev/shm/{}\n", fit(s.segment_name, kColumns - 23));
  out += fmt::format("  start-up    {:.2f} s: resident {:.2f} s ({}), {}\n", s.startup_seconds,
                     s.resident_seconds, s.populate,
                     s.registered ? fmt::format("io_uring {:.2f} s", s.register_seconds) : "unregistered");
  out += fmt::format("  pages       {}, {} faults since\n", s.huge_pages, s.page_faults);
  out += fmt::format("  hit rate    {:.1f}%: {} hits ({} still loading), {} misses\n",
                     100 * c.hit_rate(), c.hits, c.inflight_hits, c.misses);
  out += fmt::format("  reads       {} demand, {} prefetch, {} errors\n", c.demand_reads,
                     c.prefetch_reads, c.read_errors);
  out += fmt::format("  prefetch    {} asked, {} dropped, {} wasted\n", c.prefetch_requests,
                     c.prefetch_dropped, c.wasted_prefetches);
  out += fmt::format("  bytes read  {}, {:.3f} GB/s {}\n", format_bytes(c.bytes_read),
                     read_gbps(s, previous), previous ? "(last interval)" : "(since start)");
  out += fmt::format("  latency     p50 {:.0f} us, p90 {:.0f} us, p99 {:.0f} us\n", c.read_p50_us,
                     c.read_p90_us, c.read_p99_us);
  out += fmt::format("  queue       {} waiting, {} in flight, {} evictions\n", c.queue_depth,
                     c.inflight, c.evictions);
  if (!c.layers.empty()) {
    std::vector<std::string> items;
    for (const auto& layer : c.layers) {
      items.push_back(
          fmt::format("L{} {:.0f}%", layer.layer, 100 * rate(layer.hits, layer.misses)));
    }
    add_wrapped(out, "layer hits", items);
  }
  if (const shm::LookaheadStats& r = c.lookahead; router_served(r)) {
    out += fmt::format("  router      pid {}, lookahead {}: {} messages ({} skipped)\n",
                       r.router_pid, r.k, r.messages, r.skipped);
    out += fmt::format("  prefetched  {} experts in {} prefetches\n", r.prefetched, r.prefetches);
    if (!r.layers.empty()) {
      std::vector<std::string> items;
      for (const shm::GuessStats& a : r.layers) {
        items.push_back(fmt::format("L{} {:.0f}%/{:.0f}%", a.layer, 100 * a.precision_at_1(),
                                    100 * a.recall()));
      }
      add_wrapped(out, "P@1/recall", items);
    }
  }
  out += fmt::format("  clients     {} session(s), {} in the table, {} reaped, {} bad requests\n",
                     s.sessions, c.clients.size(), c.clients_reaped, c.bad_requests);
  for (const auto& client : c.clients) {
    out += fmt::format(
        "    {} pid {}: {} requests, {:.1f}% hits, waited {:.3f} s, beat {:.1f} s ago\n", client.id,
        client.pid, client.requests, 100 * rate(client.hits, client.misses), client.wait_seconds,
        client.heartbeat_age_seconds);
  }
  return out;
}

}  // namespace

void add_stats_command(CLI::App& app) {
  struct Options {
    std::string socket;
    double watch = 0;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("stats", "Show a running sluice-io's cache hit rate, reads and clients");
  cmd->add_option("--attach", options->socket,
                  "Control socket path, or an instance name (no '/') for its default socket; default: 'default'");
  cmd->add_option("--watch", options->watch,
                  "Redraw every SECONDS (one JSON line per interval when not a terminal) until the "
                  "daemon goes away")
      ->check(CLI::Range(0.1, 86400.0));
  cmd->add_flag("--json", options->json, "Print JSON");
  cmd->callback([options] {
    const std::string socket = ioworker::resolve_socket(
        options->socket.empty() ? std::string(ioworker::kDefaultInstance) : options->socket);
    ioworker::RpcClient client(socket);
    if (options->watch == 0) {
      const DaemonStats stats = client.stats();
      if (options->json) {
        fmt::print("{}\n", to_json(stats, std::nullopt).dump());
      } else {
        fmt::print("{}", to_text(stats, std::nullopt));
      }
      return;
    }
    const bool terminal = ::isatty(STDOUT_FILENO) && !options->json;
    std::optional<DaemonStats> previous;
    const auto interval = std::chrono::duration<double>(options->watch);
    while (true) {
      DaemonStats stats;
      try {
        stats = client.stats();
      } catch (const Error&) {
        // The daemon stopped (or was stopped): the end of the watch, not a fault of ours.
        fmt::print(stderr, "sluice: sluice-io at {} went away; stopped watching\n", socket);
        throw ExitStatus{1};
      }
      if (terminal) {
        fmt::print("\033[H\033[2J{}", to_text(stats, previous));  // home, clear, redraw
      } else {
        fmt::print("{}\n", to_json(stats, previous).dump());
      }
      std::fflush(stdout);
      previous = stats;
      std::this_thread::sleep_for(interval);
    }
  });
}

}  // namespace sluice::cli
