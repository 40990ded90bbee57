// tests/shm/mailbox_test.cpp: the segment's hidden-state mailbox never hands
// out a torn message under a concurrent writer, never blocks a second writer,
// is seen through an attached mapping, and recovers from a writer killed
// mid-message.
#include <doctest/doctest.h>

#include <atomic>
#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include "proto/error.h"
#include "shm/mailbox.h"
#include "shm/segment.h"

using namespace sluice::shm;

namespace {

std::unique_ptr<Segment> segment_with_mailbox(MailboxShape shape) {
  return Segment::create_anonymous(geometry_for_slots(4, 4096, 2, 8, shape), 42);
}

}  // namespace

TEST_CASE("a segment without a mailbox says so") {
  auto segment = Segment::create_anonymous(geometry_for_slots(4, 4096, 2, 8), 42);
  CHECK_THROWS_WITH_AS((Mailbox{*segment, 0}), doctest::Contains("no hidden-state mailbox"), sluice::Error);
  CHECK_THROWS_AS(compute_layout(geometry_for_slots(4, 4096, 2, 8, {16, 0, 2})), sluice::Error);
}

TEST_CASE("a reader racing a writer only ever sees whole messages") {
  const MailboxShape shape{512, 2, 8};
  auto segment = segment_with_mailbox(shape);
  Mailbox box(*segment, 0);
  MailboxMessage m;
  CHECK_FALSE(box.read(box.sequence(), m).has_value());  // nothing published yet

  std::atomic<bool> done{false};
  std::thread writer([&] {
    Mailbox mine(*segment, 0);
    std::vector<float> values(size_t{2} * shape.width);
    std::vector<uint32_t> ids(16);
    for (uint64_t step = 1; step <= 200000 && !done; ++step) {
      // Every word of message `step` derives from `step`: a mix of two
      // messages cannot pass the checks below.
      const uint32_t rows = 1 + step % 2;
      for (size_t i = 0; i < size_t{rows} * shape.width; ++i) {
        values[i] = static_cast<float>(step) + static_cast<float>(i % 7);
      }
      for (uint32_t i = 0; i < rows * 8; ++i) ids[i] = static_cast<uint32_t>(step * 3 + i);
      mine.publish(step, static_cast<uint32_t>(step % 16), rows,
                   std::span<const float>(values.data(), size_t{rows} * shape.width), 8,
                   std::span<const uint32_t>(ids.data(), rows * 8));
    }
    done = true;
  });
  uint32_t seen = 0;
  uint64_t reads = 0, last_step = 0;
  bool whole = true;
  while (!done) {
    const auto sequence = box.read(seen, m);
    if (!sequence) continue;
    if (*sequence % 2 != 0) whole = false;
    seen = *sequence;
    ++reads;
    const uint64_t step = m.step;
    bool ok = m.layer == step % 16 && m.rows == 1 + step % 2 && m.values.size() == size_t{m.rows} * shape.width &&
              m.ids_per_row == 8 && step > last_step;
    for (size_t i = 0; ok && i < m.values.size(); ++i) {
      ok = m.values[i] == static_cast<float>(step) + static_cast<float>(i % 7);
    }
    for (uint32_t i = 0; ok && i < m.ids.size(); ++i) ok = m.ids[i] == step * 3 + i;
    if (!ok) whole = false;
    last_step = step;
  }
  writer.join();
  CHECK(whole);
  CHECK(reads > 10);  // the race was actually run
  MESSAGE("reader took ", reads, " consistent snapshots");
}

TEST_CASE("messages are checked against the shape, and wait returns when one lands") {
  auto segment = segment_with_mailbox({4, 1, 2});
  Mailbox box(*segment, 0);
  const std::vector<float> values = {1, 2, 3, 4};
  CHECK(box.publish(1, 0, 1, values, 2, std::vector<uint32_t>{0, 1}));
  const uint32_t after_one = box.sequence();
  CHECK(after_one == 2);
  MailboxMessage m;
  REQUIRE(box.read(0, m) == after_one);
  CHECK(m.values == values);
  CHECK_FALSE(box.read(after_one, m).has_value());
  // Oversized messages are refused loudly, not truncated.
  CHECK_THROWS_AS(box.publish(2, 0, 2, std::vector<float>(8, 0.0f), 2, std::vector<uint32_t>(4, 0)), sluice::Error);
  CHECK_THROWS_AS(box.publish(2, 0, 1, values, 3, std::vector<uint32_t>(3, 0)), sluice::Error);

  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    box.publish(7, 3, 1, values, 1, std::vector<uint32_t>{9});
  });
  const auto start = std::chrono::steady_clock::now();
  box.wait(after_one, std::chrono::seconds(5));
  writer.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  REQUIRE(box.read(after_one, m).has_value());
  CHECK(m.layer == 3);
  CHECK(m.ids == std::vector<uint32_t>{9});
}

TEST_CASE("a process attached to a named segment reads what its owner's client published") {
  const std::string instance = "mailbox-test-" + std::to_string(::getpid());
  auto owner = Segment::create(instance, geometry_for_slots(4, 4096, 2, 8, {8, 1, 2}), 77);
  Mailbox published(*owner, 1);
  const std::vector<float> values(8, 0.5f);
  REQUIRE(published.publish(3, 1, 1, values, 2, std::vector<uint32_t>{4, 5}));
  auto attached = Segment::attach(owner->name(), 77);
  Mailbox seen(*attached, 1);
  CHECK(seen.shape().width == 8);
  MailboxMessage m;
  REQUIRE(seen.read(0, m).has_value());
  CHECK(m.step == 3);
  CHECK(m.values == values);
  CHECK(m.ids == std::vector<uint32_t>{4, 5});
}

TEST_CASE("a writer killed mid-message: reads give nothing, then the reader ends the message and all resumes") {
  const MailboxShape shape{1u << 20, 1, 1};  // 4 MiB messages: the writer spends its life mid-message
  auto segment = segment_with_mailbox(shape);
  Mailbox box(*segment, 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the anonymous mapping is shared with the child
    const std::vector<float> values(shape.width, 1.0f);
    for (uint64_t step = 1;; ++step) box.publish(step, 0, 1, values, 1, std::vector<uint32_t>{1});
  }
  // Kill it once it is mid-message (the sequence is odd).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const uint32_t raw = box.raw_sequence();
    if (raw > 2 && (raw & 1) != 0) break;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const uint32_t raw = box.raw_sequence();
  if ((raw & 1) == 0) {
    MESSAGE("the writer died between messages; nothing to recover this time");
    return;
  }
  MailboxMessage m;
  CHECK_FALSE(box.read(0, m).has_value());
  const std::vector<float> small(shape.width, 2.0f);
  CHECK_FALSE(box.publish(1, 0, 1, small, 1, std::vector<uint32_t>{2}));  // refused, never blocks
  CHECK(box.recover_dead_writer(raw));
  CHECK_FALSE(box.recover_dead_writer(raw));
  CHECK_FALSE(box.read(0, m).has_value());  // the half-written message reads as nothing
  CHECK(box.publish(9, 3, 1, small, 1, std::vector<uint32_t>{2}));
  REQUIRE(box.read(0, m).has_value());
  CHECK(m.step == 9);
  CHECK(m.values == small);
}

TEST_CASE("each client entry has a mailbox of its own, and every publish rings the segment's bell") {
  auto segment = segment_with_mailbox({4, 1, 2});
  Mailbox first(*segment, 0), second(*segment, 1);
  CHECK_THROWS_WITH_AS((Mailbox{*segment, 2}), doctest::Contains("mailbox 2 out of range"), sluice::Error);
  const uint32_t bell = mailbox_bell(*segment);
  REQUIRE(first.publish(1, 5, 1, std::vector<float>(4, 1.0f), 2, std::vector<uint32_t>{1, 2}));
  CHECK(mailbox_bell(*segment) != bell);
  REQUIRE(second.publish(8, 6, 1, std::vector<float>(4, 2.0f), 2, std::vector<uint32_t>{3, 4}));
  MailboxMessage m;
  REQUIRE(first.read(0, m).has_value());
  CHECK(m.step == 1);
  CHECK(m.layer == 5);
  CHECK(m.values == std::vector<float>(4, 1.0f));
  CHECK(m.ids == std::vector<uint32_t>{1, 2});
  REQUIRE(second.read(0, m).has_value());
  CHECK(m.step == 8);
  CHECK(m.values == std::vector<float>(4, 2.0f));
  CHECK(m.ids == std::vector<uint32_t>{3, 4});
}
