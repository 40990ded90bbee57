// ioworker/rpc_server.cpp: one SluiceIo capability per connection, so a
// connection that closes (client exit or crash) ends its attachments. All of
// it runs on the event loop's thread; nothing here is shared with readers.
#include "ioworker/rpc_server.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <unistd.h>

#include "ioworker/rpc_socket.h"
#include "ioworker/worker.h"
#include "proto/error.h"
#include "proto/manifest.h"
#include "proto/sluice_io.capnp.h"

namespace sluice::ioworker {
namespace {

using Clock = std::chrono::steady_clock;

// An error the caller sees as the remote exception's description.
kj::Promise<void> refuse(const std::string& message) {
  return kj::Promise<void>(kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::str(message)));
}

// Sessions of every connection, so stats can count them.
struct Sessions {
  uint32_t next = 1;
  std::map<uint32_t, int32_t> pids;  // session → client pid
};

void fill_stats(const shm::StatsSnapshot& snapshot, rpc::Stats::Builder out) {
  out.setHits(snapshot.hits);
  out.setInflightHits(snapshot.inflight_hits);
  out.setMisses(snapshot.misses);
  out.setDemandReads(snapshot.demand_reads);
  out.setPrefetchReads(snapshot.prefetch_reads);
  out.setPrefetchRequests(snapshot.prefetch_requests);
  out.setPrefetchDropped(snapshot.prefetch_dropped);
  out.setBytesRead(snapshot.bytes_read);
  out.setReadErrors(snapshot.read_errors);
  out.setEvictions(snapshot.evictions);
  out.setWastedPrefetches(snapshot.wasted_prefetches);
  out.setBadRequests(snapshot.bad_requests);
  out.setClientsReaped(snapshot.clients_reaped);
  out.setQueueDepth(snapshot.queue_depth);
  out.setInflight(snapshot.inflight);
  out.setReadSecondsTotal(snapshot.read_seconds_total);
  out.setReadP50Us(snapshot.read_p50_us);
  out.setReadP90Us(snapshot.read_p90_us);
  out.setReadP99Us(snapshot.read_p99_us);
  out.setDirectIo(snapshot.direct_io);
  out.setSlotCount(snapshot.slot_count);
  out.setSlotBytes(snapshot.slot_bytes);
  out.setSlotsReady(snapshot.slots_ready);
  out.setSlotsPinned(snapshot.slots_pinned);
  auto layers = out.initLayers(static_cast<unsigned>(snapshot.layers.size()));
  for (unsigned i = 0; i < layers.size(); ++i) {
    layers[i].setLayer(snapshot.layers[i].layer);
    layers[i].setHits(snapshot.layers[i].hits);
    layers[i].setMisses(snapshot.layers[i].misses);
  }
  auto clients = out.initClients(static_cast<unsigned>(snapshot.clients.size()));
  for (unsigned i = 0; i < clients.size(); ++i) {
    const auto& client = snapshot.clients[i];
    clients[i].setId(client.id);
    clients[i].setPid(client.pid);
    clients[i].setRequests(client.requests);
    clients[i].setHits(client.hits);
    clients[i].setMisses(client.misses);
    clients[i].setWaitSeconds(client.wait_seconds);
    clients[i].setHeartbeatAgeSeconds(client.heartbeat_age_seconds);
  }
  auto lookahead = out.initLookahead();
  lookahead.setRouterPid(snapshot.lookahead.router_pid);
  lookahead.setK(snapshot.lookahead.k);
  lookahead.setMessages(snapshot.lookahead.messages);
  lookahead.setSkipped(snapshot.lookahead.skipped);
  lookahead.setPrefetches(snapshot.lookahead.prefetches);
  lookahead.setPrefetched(snapshot.lookahead.prefetched);
  lookahead.setHeartbeatAgeSeconds(snapshot.lookahead.heartbeat_age_seconds);
  out.setSchedulerHeartbeatAgeSeconds(snapshot.scheduler_heartbeat_age_seconds);
  auto guesses = lookahead.initLayers(static_cast<unsigned>(snapshot.lookahead.layers.size()));
  for (unsigned i = 0; i < guesses.size(); ++i) {
    const shm::GuessStats& g = snapshot.lookahead.layers[i];
    guesses[i].setLayer(g.layer);
    guesses[i].setScored(g.scored);
    guesses[i].setRank1Hits(g.rank1_hits);
    guesses[i].setRecalled(g.recalled);
    guesses[i].setReal(g.real);
  }
}

class Service final : public rpc::SluiceIo::Server {
 public:
  Service(Worker& worker, const DaemonInfo& info, Sessions& sessions, Clock::time_point started,
          const RpcServer::Log& log, uint64_t connection)
      : worker_(worker), info_(info), sessions_(sessions), started_(started), log_(log), connection_(connection) {}

  // The connection closed: whatever it attached is over.
  ~Service() {
    for (uint32_t session : open_) {
      log_(fmt::format("connection {} closed: session {} (pid {}) ended", connection_, session,
                       sessions_.pids[session]));
      sessions_.pids.erase(session);
    }
  }

  kj::Promise<void> attach(AttachContext context) override {
    const auto params = context.getParams();
    auto result = context.getResults().initResult();
    if (params.getIdentity() != worker_.identity()) {
      const std::string reason = fmt::format(
          "sluice-io instance '{}' serves {} (container identity {:016x}); the client's container has identity "
          "{:016x}: attach to a daemon serving the same container",
          info_.instance, info_.model, worker_.identity(), params.getIdentity());
      log_(fmt::format("refused attach from pid {}: identity {:016x} is not {:016x}", params.getPid(),
                       params.getIdentity(), worker_.identity()));
      result.setRefused(reason);
      return kj::READY_NOW;
    }
    if (params.getVerify() && !info_.verifies_records) {
      log_(fmt::format("refused attach from pid {}: it asks for --verify and this daemon does not verify",
                       params.getPid()));
      result.setRefused(fmt::format("the client asks for --verify, but sluice-io instance '{}' does not check "
                                    "record crc32s: start it with --verify (sluice-up --verify)",
                                    info_.instance));
      return kj::READY_NOW;
    }
    const uint32_t session = sessions_.next++;
    sessions_.pids[session] = params.getPid();
    open_.push_back(session);
    auto attached = result.initAttached();
    attached.setSegmentName(worker_.segment_name());
    const shm::Geometry& g = worker_.geometry();
    auto geometry = attached.initGeometry();
    geometry.setSlotCount(g.slot_count);
    geometry.setSlotBytes(g.slot_bytes);
    geometry.setMaxClients(g.max_clients);
    geometry.setPinsPerClient(g.pins_per_client);
    geometry.setIndexCapacity(g.index_capacity);
    geometry.setDemandRingCapacity(g.demand_ring_capacity);
    geometry.setPrefetchRingCapacity(g.prefetch_ring_capacity);
    geometry.setMailboxWidth(g.mailbox_width);
    geometry.setMailboxRows(g.mailbox_rows);
    geometry.setMailboxIds(g.mailbox_ids);
    attached.setSegmentBytes(worker_.segment().mapped_bytes());
    attached.setIdentity(worker_.identity());
    attached.setSession(session);
    attached.setDirectIo(worker_.direct_io());
    attached.setVerifiesRecords(info_.verifies_records);
    log_(fmt::format("attach: session {} for pid {}", session, params.getPid()));
    return kj::READY_NOW;
  }

  kj::Promise<void> detach(DetachContext context) override {
    const uint32_t session = context.getParams().getSession();
    const auto mine = std::find(open_.begin(), open_.end(), session);
    if (mine == open_.end()) {
      return refuse(fmt::format("detach: session {} was not attached on this connection", session));
    }
    open_.erase(mine);
    log_(fmt::format("detach: session {} (pid {})", session, sessions_.pids[session]));
    sessions_.pids.erase(session);
    return kj::READY_NOW;
  }

  kj::Promise<void> prefetch(PrefetchContext context) override {
    const auto params = context.getParams();
    // Bounded before anything is copied, sorted or locked: a request names
    // each expert of one layer at most once.
    if (params.getExperts().size() > kMaxExpertsPerLayer) {
      return refuse(fmt::format("prefetch: {} experts in one request; a layer has at most {}",
                                params.getExperts().size(), kMaxExpertsPerLayer));
    }
    std::vector<uint32_t> experts;
    for (uint32_t expert : params.getExperts()) experts.push_back(expert);
    std::sort(experts.begin(), experts.end());
    experts.erase(std::unique(experts.begin(), experts.end()), experts.end());
    const PrefetchOrigin origin =
        params.getOrigin() == rpc::PrefetchOrigin::ROUTER ? PrefetchOrigin::kRouter : PrefetchOrigin::kRpc;
    try {
      worker_.prefetch(params.getLayer(), experts, origin);
    } catch (const Error& e) {
      return refuse(fmt::format("prefetch: {}", e.what()));
    }
    context.getResults().setQueued(static_cast<uint32_t>(experts.size()));
    return kj::READY_NOW;
  }

  kj::Promise<void> stats(StatsContext context) override {
    auto out = context.getResults().initStats();
    fill_stats(worker_.stats(), out);
    out.setPid(::getpid());
    out.setInstance(info_.instance);
    out.setModel(info_.model);
    out.setSegmentName(worker_.segment_name());
    out.setBudgetBytes(info_.budget_bytes);
    out.setCacheBytes(info_.cache_bytes);
    out.setBackend(worker_.backend_name());
    out.setReaders(info_.readers);
    out.setUptimeSeconds(std::chrono::duration<double>(Clock::now() - started_).count());
    out.setSessions(static_cast<uint32_t>(sessions_.pids.size()));
    const Startup& startup = worker_.startup();
    out.setStartupSeconds(startup.seconds);
    out.setResidentSeconds(startup.residency.seconds);
    out.setPopulate(startup.residency.populate);
    out.setHugePages(startup.residency.huge_pages());
    out.setHugeBytes(startup.residency.huge_bytes);
    out.setRegistered(worker_.registered_buffers());
    out.setRegisterSeconds(startup.register_seconds);
    out.setPageFaults(worker_.page_faults_since_startup());
    return kj::READY_NOW;
  }

 private:
  Worker& worker_;
  const DaemonInfo& info_;
  Sessions& sessions_;
  Clock::time_point started_;
  const RpcServer::Log& log_;
  uint64_t connection_;
  std::vector<uint32_t> open_;
};

// One accepted connection: its stream, its RPC system and its capability.
struct Connection {
  Connection(kj::Own<kj::AsyncIoStream>&& stream_in, capnp::Capability::Client bootstrap)
      : stream(kj::mv(stream_in)),
        network(*stream, capnp::rpc::twoparty::Side::SERVER),
        system(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> system;
};

class LoggingErrorHandler final : public kj::TaskSet::ErrorHandler {
 public:
  explicit LoggingErrorHandler(const RpcServer::Log& log) : log_(log) {}
  void taskFailed(kj::Exception&& exception) override {
    log_(fmt::format("connection ended with an error: {}", exception.getDescription().cStr()));
  }

 private:
  const RpcServer::Log& log_;
};

}  // namespace

RpcServer::RpcServer(Worker& worker, DaemonInfo info, Log log)
    : worker_(worker), info_(std::move(info)), log_(std::move(log)) {}

int RpcServer::serve(ListeningSocket& socket, std::initializer_list<int> stop_signals) {
  if (stop_signals.size() == 0) fail("RpcServer::serve: no stop signal");
  const Clock::time_point started = Clock::now();
  Sessions sessions;
  try {
    auto io = kj::setupAsyncIo();
    auto listener = io.lowLevelProvider->wrapListenSocketFd(
        socket.release_fd(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP);
    LoggingErrorHandler errors(log_);
    kj::TaskSet connections(errors);
    uint64_t connection_count = 0;

    kj::Function<kj::Promise<void>()> accept_loop;
    accept_loop = [&]() -> kj::Promise<void> {
      return listener->accept().then([&](kj::Own<kj::AsyncIoStream>&& stream) {
        const uint64_t id = ++connection_count;
        auto connection = kj::heap<Connection>(
            kj::mv(stream), kj::heap<Service>(worker_, info_, sessions, started, log_, id));
        auto closed = connection->network.onDisconnect();
        connections.add(closed.attach(kj::mv(connection)));
        return accept_loop();
      });
    };

    auto signal = [&](int number) {
      return io.unixEventPort.onSignal(number).then([](siginfo_t info) { return info.si_signo; });
    };
    auto begin = stop_signals.begin();
    kj::Promise<int> stop = signal(*begin);
    for (auto it = begin + 1; it != stop_signals.end(); ++it) stop = stop.exclusiveJoin(signal(*it));
    kj::Promise<int> accepting = accept_loop().then([]() -> int { KJ_UNREACHABLE; });
    const int received = stop.exclusiveJoin(kj::mv(accepting)).wait(io.waitScope);
    log_(fmt::format("received signal {}; {} session(s) open", received, sessions.pids.size()));
    return received;
  } catch (const kj::Exception& e) {
    fail("{}: serving RPC failed: {}", socket.path(), e.getDescription().cStr());
  }
}

}  // namespace sluice::ioworker
