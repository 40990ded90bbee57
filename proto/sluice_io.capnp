# proto/sluice_io.capnp: the control plane of sluice-io, spoken over a Unix
# socket (mode 0600). Only control messages travel here: expert data and cache
# hits go through the shared-memory segment and never through this interface.
@0xc80c25c038615e00;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("sluice::rpc");

# The segment's geometry (shm/layout.h Geometry), so a client can check the
# mapping it attaches to describes the same tables.
struct Geometry {
  slotCount @0 :UInt32;
  slotBytes @1 :UInt32;
  maxClients @2 :UInt32;
  pinsPerClient @3 :UInt32;
  indexCapacity @4 :UInt32;
  demandRingCapacity @5 :UInt32;
  prefetchRingCapacity @6 :UInt32;
  mailboxWidth @7 :UInt32;
  mailboxRows @8 :UInt32;
  mailboxIds @9 :UInt32;
}

struct Attached {
  segmentName @0 :Text;      # pass to shm::Segment::attach
  geometry @1 :Geometry;
  segmentBytes @2 :UInt64;
  identity @3 :UInt64;       # the container identity the daemon serves
  session @4 :UInt32;        # names this attachment in detach
  directIo @5 :Bool;
  verifiesRecords @6 :Bool;  # the daemon checks every record's crc32 (sluice-io --verify)
}

struct AttachResult {
  union {
    attached @0 :Attached;
    refused @1 :Text;        # why, for people: names both identities
  }
}

enum PrefetchOrigin {
  router @0;                 # sluice-router's lookahead
  client @1;                 # a compute client's own hint
  hotlist @2;                # a warm start from a saved list of hot experts
}

struct LayerStats {
  layer @0 :UInt32;
  hits @1 :UInt64;
  misses @2 :UInt64;
}

struct ClientStats {
  id @0 :UInt32;
  pid @1 :Int32;
  requests @2 :UInt64;
  hits @3 :UInt64;
  misses @4 :UInt64;
  waitSeconds @5 :Float64;
  heartbeatAgeSeconds @6 :Float64;
}

# Lookahead's guesses at one layer against the real routing.
struct GuessStats {
  layer @0 :UInt32;
  scored @1 :UInt64;
  rank1Hits @2 :UInt64;
  recalled @3 :UInt64;
  real @4 :UInt64;
}

# What the router serving the segment's mailbox has done.
struct LookaheadStats {
  routerPid @0 :Int32;       # 0: no router has served it
  k @1 :UInt32;
  messages @2 :UInt64;
  skipped @3 :UInt64;
  prefetches @4 :UInt64;
  prefetched @5 :UInt64;
  layers @6 :List(GuessStats);
  heartbeatAgeSeconds @7 :Float64;  # since sluice-router's loop last ran; negative: it never did
}

# The segment's stats block (shm/stats.h StatsSnapshot) plus what the daemon
# knows about itself.
struct Stats {
  hits @0 :UInt64;
  inflightHits @1 :UInt64;
  misses @2 :UInt64;
  demandReads @3 :UInt64;
  prefetchReads @4 :UInt64;
  prefetchRequests @5 :UInt64;
  prefetchDropped @6 :UInt64;
  bytesRead @7 :UInt64;
  readErrors @8 :UInt64;
  evictions @9 :UInt64;
  wastedPrefetches @10 :UInt64;
  badRequests @11 :UInt64;
  clientsReaped @12 :UInt64;
  queueDepth @13 :UInt64;
  inflight @14 :UInt64;
  readSecondsTotal @15 :Float64;
  readP50Us @16 :Float64;
  readP90Us @17 :Float64;
  readP99Us @18 :Float64;
  directIo @19 :Bool;
  slotCount @20 :UInt32;
  slotBytes @21 :UInt32;
  slotsReady @22 :UInt32;
  slotsPinned @23 :UInt32;
  layers @24 :List(LayerStats);
  clients @25 :List(ClientStats);
  # The daemon.
  pid @26 :Int32;
  instance @27 :Text;
  model @28 :Text;
  segmentName @29 :Text;
  budgetBytes @30 :UInt64;
  cacheBytes @31 :UInt64;
  backend @32 :Text;         # "io_uring" or "threads"
  readers @33 :UInt32;
  uptimeSeconds @34 :Float64;
  sessions @35 :UInt32;      # attachments not yet detached
  lookahead @36 :LookaheadStats;
  schedulerHeartbeatAgeSeconds @37 :Float64;  # since the worker's scheduler last ran (a stuck one ages)
  # Start-up (ioworker/worker.h Startup): all of it, the slots made resident
  # (how, and in which pages), their io_uring registration; then the
  # daemon's page faults since.
  startupSeconds @38 :Float64;
  residentSeconds @39 :Float64;
  populate @40 :Text;        # "MADV_POPULATE_WRITE" or "touched"
  hugePages @41 :Text;       # shm::Residency::huge_pages()
  hugeBytes @42 :UInt64;
  registered @43 :Bool;      # slots registered with io_uring
  registerSeconds @44 :Float64;
  pageFaults @45 :UInt64;
}

interface SluiceIo {
  # Joins the cache of a daemon serving the container with `identity`; a
  # daemon serving another one refuses, saying which. With `verify` the
  # client wants every record it uses crc-checked: a daemon that does not
  # check them refuses, saying so.
  attach @0 (pid :Int32, identity :UInt64, verify :Bool) -> (result :AttachResult);
  # Ends an attachment; closing the connection ends its attachments too.
  detach @1 (session :UInt32) -> ();
  # Queues reads of `experts` of model layer `layer` behind every demand
  # read; returns how many were handed to the worker (duplicates dropped).
  prefetch @2 (layer :UInt32, experts :List(UInt32), origin :PrefetchOrigin) -> (queued :UInt32);
  stats @3 () -> (stats :Stats);
}
