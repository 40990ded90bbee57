// ioworker/rpc_client.cpp: a two-party Cap'n Proto client over a Unix socket
// connected synchronously (so "nothing there" is a plain error) and every call
// raced against a timer. kj exceptions never escape: they become Errors that
// name the socket.
#include "ioworker/rpc_client.h"

#include <cerrno>
#include <cstring>

#include <capnp/rpc-twoparty.h>
#include <fmt/format.h>
#include <kj/async-io.h>
#include <kj/timer.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "proto/error.h"
#include "proto/sluice_io.capnp.h"

namespace sluice::ioworker {
namespace {

int connect_unix(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) fail("--attach {}: not a valid socket path", path);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("{}: socket: {}", path, std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    ::close(fd);
    throw DaemonUnreachable(fmt::format(
        "cannot reach sluice-io at {}: {} (is the daemon running? see scripts/sluice-up)", path,
        std::strerror(error)));
  }
  return fd;
}

shm::StatsSnapshot read_snapshot(rpc::Stats::Reader in) {
  shm::StatsSnapshot out;
  out.hits = in.getHits();
  out.inflight_hits = in.getInflightHits();
  out.misses = in.getMisses();
  out.demand_reads = in.getDemandReads();
  out.prefetch_reads = in.getPrefetchReads();
  out.prefetch_requests = in.getPrefetchRequests();
  out.prefetch_dropped = in.getPrefetchDropped();
  out.bytes_read = in.getBytesRead();
  out.read_errors = in.getReadErrors();
  out.evictions = in.getEvictions();
  out.wasted_prefetches = in.getWastedPrefetches();
  out.bad_requests = in.getBadRequests();
  out.clients_reaped = in.getClientsReaped();
  out.queue_depth = in.getQueueDepth();
  out.inflight = in.getInflight();
  out.read_seconds_total = in.getReadSecondsTotal();
  out.read_p50_us = in.getReadP50Us();
  out.read_p90_us = in.getReadP90Us();
  out.read_p99_us = in.getReadP99Us();
  out.direct_io = in.getDirectIo();
  out.slot_count = in.getSlotCount();
  out.slot_bytes = in.getSlotBytes();
  out.slots_ready = in.getSlotsReady();
  out.slots_pinned = in.getSlotsPinned();
  for (auto layer : in.getLayers()) out.layers.push_back({layer.getLayer(), layer.getHits(), layer.getMisses()});
  for (auto client : in.getClients()) {
    out.clients.push_back({client.getId(), client.getPid(), client.getRequests(), client.getHits(),
                           client.getMisses(), client.getWaitSeconds(), client.getHeartbeatAgeSeconds()});
  }
  const auto lookahead = in.getLookahead();
  out.lookahead.router_pid = lookahead.getRouterPid();
  out.lookahead.k = lookahead.getK();
  out.lookahead.messages = lookahead.getMessages();
  out.lookahead.skipped = lookahead.getSkipped();
  out.lookahead.prefetches = lookahead.getPrefetches();
  out.lookahead.prefetched = lookahead.getPrefetched();
  out.lookahead.heartbeat_age_seconds = lookahead.getHeartbeatAgeSeconds();
  out.scheduler_heartbeat_age_seconds = in.getSchedulerHeartbeatAgeSeconds();
  for (auto g : lookahead.getLayers()) {
    out.lookahead.layers.push_back({g.getLayer(), g.getScored(), g.getRank1Hits(), g.getRecalled(), g.getReal()});
  }
  return out;
}

}  // namespace

struct RpcClient::Impl {
  Impl(const std::string& path, std::chrono::milliseconds timeout_in)
      : socket_path(path),
        timeout(timeout_in),
        io(kj::setupAsyncIo()),
        stream(io.lowLevelProvider->wrapSocketFd(connect_unix(path), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP)),
        network(*stream, capnp::rpc::twoparty::Side::CLIENT),
        system(capnp::makeRpcClient(network)),
        daemon(bootstrap()) {}

  rpc::SluiceIo::Client bootstrap() {
    capnp::word scratch[4]{};
    capnp::MallocMessageBuilder message(scratch);
    auto vat = message.getRoot<capnp::rpc::twoparty::VatId>();
    vat.setSide(capnp::rpc::twoparty::Side::SERVER);
    return system.bootstrap(vat).castAs<rpc::SluiceIo>();
  }

  // Waits for `promise`, failing after the timeout or when the daemon goes away.
  template <typename T>
  T wait(kj::Promise<T>&& promise, const char* what) {
    try {
      auto deadline = io.provider->getTimer()
                          .afterDelay(timeout.count() * kj::MILLISECONDS)
                          .then([]() -> T { KJ_FAIL_REQUIRE("timed out"); });
      return promise.exclusiveJoin(kj::mv(deadline)).wait(io.waitScope);
    } catch (const kj::Exception& e) {
      std::string detail = e.getDescription().cStr();
      if (detail.rfind("remote exception: ", 0) == 0) detail = detail.substr(18);
      if (e.getType() == kj::Exception::Type::DISCONNECTED) {
        throw DaemonUnreachable(
            fmt::format("sluice-io at {} went away during {}: {}", socket_path, what, detail));
      }
      fail("sluice-io at {}: {} failed: {}", socket_path, what, detail);
    }
  }

  std::string socket_path;
  std::chrono::milliseconds timeout;
  kj::AsyncIoContext io;
  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> system;
  rpc::SluiceIo::Client daemon;
};

RpcClient::RpcClient(const std::string& socket_path, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<Impl>(socket_path, timeout)) {}

RpcClient::~RpcClient() = default;


Attachment RpcClient::attach(uint64_t identity, bool verify) {
  auto request = impl_->daemon.attachRequest();
  request.setPid(::getpid());
  request.setIdentity(identity);
  request.setVerify(verify);
  auto response = impl_->wait(request.send(), "attach");
  const auto result = response.getResult();
  if (result.isRefused()) {
    fail("sluice-io at {} refused to attach: {}", impl_->socket_path, result.getRefused().cStr());
  }
  const auto attached = result.getAttached();
  const auto g = attached.getGeometry();
  Attachment out;
  out.segment_name = attached.getSegmentName().cStr();
  out.geometry.slot_count = g.getSlotCount();
  out.geometry.slot_bytes = g.getSlotBytes();
  out.geometry.max_clients = g.getMaxClients();
  out.geometry.pins_per_client = g.getPinsPerClient();
  out.geometry.index_capacity = g.getIndexCapacity();
  out.geometry.demand_ring_capacity = g.getDemandRingCapacity();
  out.geometry.prefetch_ring_capacity = g.getPrefetchRingCapacity();
  out.geometry.mailbox_width = g.getMailboxWidth();
  out.geometry.mailbox_rows = g.getMailboxRows();
  out.geometry.mailbox_ids = g.getMailboxIds();
  out.segment_bytes = attached.getSegmentBytes();
  out.verifies_records = attached.getVerifiesRecords();
  if (verify && !out.verifies_records) {
    fail("--verify: sluice-io at {} does not check record crc32s; start it with --verify (sluice-up --verify)",
         impl_->socket_path);
  }
  out.identity = attached.getIdentity();
  out.session = attached.getSession();
  out.direct_io = attached.getDirectIo();
  if (out.identity != identity) {
    fail("sluice-io at {} attached us to container {:016x}, not {:016x}", impl_->socket_path, out.identity, identity);
  }
  return out;
}

void RpcClient::detach(uint32_t session) {
  auto request = impl_->daemon.detachRequest();
  request.setSession(session);
  impl_->wait(request.send(), "detach");
}

uint32_t RpcClient::prefetch(uint32_t layer, std::span<const uint32_t> experts, RpcPrefetchOrigin origin) {
  auto request = impl_->daemon.prefetchRequest();
  request.setLayer(layer);
  auto list = request.initExperts(static_cast<unsigned>(experts.size()));
  for (unsigned i = 0; i < list.size(); ++i) list.set(i, experts[i]);
  switch (origin) {
    case RpcPrefetchOrigin::kRouter: request.setOrigin(rpc::PrefetchOrigin::ROUTER); break;
    case RpcPrefetchOrigin::kClient: request.setOrigin(rpc::PrefetchOrigin::CLIENT); break;
  }
  return impl_->wait(request.send(), "prefetch").getQueued();
}

DaemonStats RpcClient::stats() {
  auto response = impl_->wait(impl_->daemon.statsRequest().send(), "stats");
  const auto in = response.getStats();
  DaemonStats out;
  out.cache = read_snapshot(in);
  out.pid = in.getPid();
  out.instance = in.getInstance().cStr();
  out.model = in.getModel().cStr();
  out.segment_name = in.getSegmentName().cStr();
  out.budget_bytes = in.getBudgetBytes();
  out.cache_bytes = in.getCacheBytes();
  out.backend = in.getBackend().cStr();
  out.readers = in.getReaders();
  out.uptime_seconds = in.getUptimeSeconds();
  out.sessions = in.getSessions();
  out.startup_seconds = in.getStartupSeconds();
  out.resident_seconds = in.getResidentSeconds();
  out.populate = in.getPopulate().cStr();
  out.huge_pages = in.getHugePages().cStr();
  out.huge_bytes = in.getHugeBytes();
  out.registered = in.getRegistered();
  out.register_seconds = in.getRegisterSeconds();
  out.page_faults = in.getPageFaults();
  return out;
}

}  // namespace sluice::ioworker
