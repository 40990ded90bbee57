// tests/shm/segment_test.cpp: named segments (mode 0600, stale reclaim, live
// owner refused, identity check, owner death seen by attachers), anonymous
// segments, the robust lock's recovery after a holder dies, and a client
// giving up on a holder that stopped.
#include <doctest/doctest.h>

#include <csignal>
#include <sys/stat.h>

#include "proto/error.h"
#include "shm/client.h"
#include "shm/pins.h"
#include "shm/segment.h"
#include "shm/segment_lock.h"
#include "tests/shm/shm_test_util.h"

using namespace sluice;
using namespace sluice::shm;
using sluice::testing::ShmGuard;

namespace {
const Geometry kGeometry = geometry_for_slots(8, 4096, 4, 8);
constexpr uint64_t kIdentity = 0x1234abcd;
bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}
}  // namespace

TEST_CASE("a named segment is created with mode 0600 whatever the umask, and removed with its owner") {
  ShmGuard guard(sluice::testing::unique_instance("perm"));
  const mode_t old_mask = ::umask(0);
  {
    auto segment = Segment::create(guard.instance(), kGeometry, kIdentity);
    ::umask(old_mask);
    struct stat st {};
    REQUIRE(::stat(guard.path().c_str(), &st) == 0);
    CHECK((st.st_mode & 07777) == 0600);
    CHECK(st.st_uid == ::getuid());
    CHECK(static_cast<uint64_t>(st.st_size) == compute_layout(kGeometry).total);
    CHECK(segment->header().identity == kIdentity);
    CHECK(segment->header().owner_pid == ::getpid());
  }
  ::umask(old_mask);
  CHECK_FALSE(exists(guard.path()));
}

TEST_CASE("a second owner is refused while the first lives") {
  ShmGuard guard(sluice::testing::unique_instance("live"));
  auto first = Segment::create(guard.instance(), kGeometry, kIdentity);
  CHECK_THROWS_WITH_AS(Segment::create(guard.instance(), kGeometry, kIdentity),
                       doctest::Contains("in use by a live sluice-io"), Error);
  CHECK(exists(guard.path()));
}

TEST_CASE("the stale segment of a dead owner is reclaimed at start") {
  ShmGuard guard(sluice::testing::unique_instance("stale"));
  // The child creates the segment and dies without cleaning up (_exit runs no destructor).
  const pid_t child = sluice::testing::fork_child([&] {
    auto segment = Segment::create(guard.instance(), kGeometry, kIdentity);
    segment->client(0).pid = 4242;  // leave a mark to see it is gone afterwards
    ::_exit(0);
    return 0;
  });
  REQUIRE(sluice::testing::wait_child(child) == 0);
  REQUIRE(exists(guard.path()));
  CHECK_THROWS_WITH_AS(Segment::attach(guard.name(), kIdentity), doctest::Contains("is gone"), Error);
  auto fresh = Segment::create(guard.instance(), kGeometry, kIdentity + 1);
  CHECK(fresh->header().identity == kIdentity + 1);
  CHECK(fresh->client(0).pid == 0);
}

TEST_CASE("attach checks identity and notices the owner's death") {
  ShmGuard guard(sluice::testing::unique_instance("attach"));
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t owner = sluice::testing::fork_child([&] {
    auto segment = Segment::create(guard.instance(), kGeometry, kIdentity);
    segment->set_owner_state(OwnerState::kServing);
    char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    ::pause();
    return 0;
  });
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  CHECK_THROWS_WITH_AS(Segment::attach(guard.name(), kIdentity + 1), doctest::Contains("serves another model"), Error);
  auto attached = Segment::attach("/" + guard.name(), kIdentity);
  CHECK_FALSE(attached->is_owner());
  CHECK(attached->geometry() == kGeometry);
  CHECK(attached->owner_alive());
  ::kill(owner, SIGKILL);
  CHECK(sluice::testing::wait_child(owner) == 128 + SIGKILL);
  CHECK_FALSE(attached->owner_alive());
  ::close(ready[0]);
  ::close(ready[1]);
}

TEST_CASE("attach refuses what is not a cache segment") {
  CHECK_THROWS_WITH_AS(Segment::attach("sluice-no-such-instance-here", kIdentity), doctest::Contains("cannot attach"), Error);
  CHECK_THROWS_AS(segment_name("bad/name"), Error);
  CHECK_THROWS_AS(segment_name(""), Error);
}

TEST_CASE("anonymous segments need no name and bounds-check every index") {
  auto segment = Segment::create_anonymous(kGeometry, kIdentity);
  CHECK(segment->name().empty());
  CHECK(segment->owner_alive());
  CHECK(reinterpret_cast<uintptr_t>(segment->slot_data(0)) % 4096 == 0);
  CHECK(segment->slot_data(1) - segment->slot_data(0) == 4096);
  CHECK_THROWS_AS(segment->slot(kGeometry.slot_count), Error);
  CHECK_THROWS_AS(segment->slot_data(kGeometry.slot_count), Error);
  CHECK_THROWS_AS(segment->client(kGeometry.max_clients), Error);
  // The batch's positions, then as many hold positions.
  CHECK(segment->client_pins(0).size() == 2 * kGeometry.pins_per_client);
  CHECK(hold_position(kGeometry, 0) == kGeometry.pins_per_client);
}

TEST_CASE("a process killed holding the lock leaves pin counts that the next locker rebuilds") {
  auto segment = Segment::create_anonymous(kGeometry, kIdentity);
  segment->client(1).state = static_cast<uint32_t>(ClientState::kActive);
  const pid_t child = sluice::testing::fork_child([&] {
    SegmentLock lock(*segment);
    // Listed but not counted yet: what a kill in the middle of pin_slot leaves.
    segment->client_pins(1)[0] = 3 + 1;
    segment->client_pins(1)[1] = 5 + 1;
    segment->client_pins(1)[hold_position(kGeometry, 2)] = 7 + 1;  // a held record counts alike
    segment->slot(5).pins = 1;
    segment->slot(6).pins = 9;  // and a count nobody holds
    ::_exit(0);
    return 0;
  });
  REQUIRE(sluice::testing::wait_child(child) == 0);
  {
    SegmentLock lock(*segment);  // EOWNERDEAD: recount
    CHECK(segment->slot(3).pins == 1);
    CHECK(segment->slot(5).pins == 1);
    CHECK(segment->slot(6).pins == 0);
    CHECK(segment->slot(7).pins == 1);
  }
  {
    SegmentLock lock(*segment);  // consistent again: an ordinary lock
    CHECK(unpin_position(*segment, 1, 0));
    CHECK(segment->slot(3).pins == 0);
    release_client(*segment, 1);
    CHECK(segment->slot(5).pins == 0);
    CHECK(segment->slot(7).pins == 0);
    CHECK(segment->client(1).state == static_cast<uint32_t>(ClientState::kFree));
  }
}

TEST_CASE("a client gives up on a lock that a stopped holder keeps, after its read timeout, saying why") {
  auto segment = Segment::create_anonymous(kGeometry, kIdentity);
  int taken[2];
  REQUIRE(::pipe(taken) == 0);
  const pid_t child = sluice::testing::fork_child([&] {
    SegmentLock lock(*segment);
    const char byte = 1;
    if (::write(taken[1], &byte, 1) != 1) return 1;
    ::raise(SIGSTOP);
    return 0;
  });
  char byte = 0;
  REQUIRE(::read(taken[0], &byte, 1) == 1);
  std::string message;
  try {
    Client client(*segment, std::chrono::milliseconds(300));
  } catch (const Error& e) {
    message = e.what();
  }
  ::kill(child, SIGKILL);
  sluice::testing::wait_child(child);
  ::close(taken[0]);
  ::close(taken[1]);
  CHECK(message.find("did not land within") != std::string::npos);
  CHECK(message.find("(--read-timeout): the segment's lock stayed taken") != std::string::npos);
  CHECK(message.find("is alive") != std::string::npos);
  SegmentLock lock(*segment);  // the holder's death frees it for the next locker
}
