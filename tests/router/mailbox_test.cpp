// tests/router/mailbox_test.cpp: the seqlock never hands out a torn message
// under a concurrent writer, shared mailboxes are 0600 and survive a router
// restart, and a mailbox of another container is not opened.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <thread>

#include <csignal>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/error.h"
#include "router/mailbox.h"

using namespace sluice::router;

TEST_CASE("a reader racing a writer only ever sees whole messages") {
  const MailboxGeometry g{512, 2, 8};
  auto box = Mailbox::in_process(g, 42);
  MailboxMessage m;
  CHECK_FALSE(box->read(box->sequence(), m).has_value());  // nothing published yet

  std::atomic<bool> done{false};
  std::thread writer([&] {
    std::vector<float> hidden(size_t{2} * g.hidden);
    std::vector<uint32_t> experts(16);
    for (uint64_t step = 1; step <= 200000 && !done; ++step) {
      // Every word of message `step` derives from `step`: a mix of two
      // messages cannot pass the checks below.
      const uint32_t rows = 1 + step % 2;
      for (size_t i = 0; i < size_t{rows} * g.hidden; ++i) hidden[i] = static_cast<float>(step) + static_cast<float>(i % 7);
      for (uint32_t i = 0; i < rows * 8; ++i) experts[i] = static_cast<uint32_t>(step * 3 + i);
      box->publish(step, static_cast<uint32_t>(step % 16), rows,
                   std::span<const float>(hidden.data(), size_t{rows} * g.hidden), 8,
                   std::span<const uint32_t>(experts.data(), rows * 8));
    }
    done = true;
  });
  uint32_t seen = 0;
  uint64_t reads = 0, last_step = 0;
  bool whole = true;
  while (!done) {
    const auto sequence = box->read(seen, m);
    if (!sequence) continue;
    if (*sequence % 2 != 0) whole = false;
    seen = *sequence;
    ++reads;
    const uint64_t step = m.step;
    bool ok = m.layer == step % 16 && m.rows == 1 + step % 2 && m.hidden.size() == size_t{m.rows} * g.hidden &&
              m.experts_per_row == 8 && step > last_step;
    for (size_t i = 0; ok && i < m.hidden.size(); ++i) ok = m.hidden[i] == static_cast<float>(step) + static_cast<float>(i % 7);
    for (uint32_t i = 0; ok && i < m.experts.size(); ++i) ok = m.experts[i] == step * 3 + i;
    if (!ok) whole = false;
    last_step = step;
  }
  writer.join();
  CHECK(whole);
  CHECK(reads > 10);  // the race was actually run
  MESSAGE("reader took ", reads, " consistent snapshots");
}

TEST_CASE("a second writer never blocks: it is told the mailbox is busy") {
  auto box = Mailbox::in_process({4, 1, 2}, 1);
  const std::vector<float> hidden = {1, 2, 3, 4};
  const std::vector<uint32_t> experts = {0, 1};
  CHECK(box->publish(1, 0, 1, hidden, 2, experts));
  const uint32_t after_one = box->sequence();
  CHECK(after_one == 2);
  MailboxMessage m;
  REQUIRE(box->read(0, m) == after_one);
  CHECK(m.hidden == hidden);
  CHECK_FALSE(box->read(after_one, m).has_value());
  // Oversized messages are refused loudly, not truncated.
  const std::vector<float> wide(8, 0.0f);
  CHECK_THROWS_AS(box->publish(2, 0, 2, wide, 2, std::vector<uint32_t>(4, 0)), sluice::Error);
}

TEST_CASE("wait returns when a message lands") {
  auto box = Mailbox::in_process({4, 1, 1}, 1);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::vector<float> hidden(4, 1.0f);
    box->publish(1, 3, 1, hidden, 1, std::vector<uint32_t>{9});
  });
  const auto start = std::chrono::steady_clock::now();
  box->wait(0, std::chrono::seconds(5));
  writer.join();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(4));
  MailboxMessage m;
  REQUIRE(box->read(0, m).has_value());
  CHECK(m.layer == 3);
  CHECK(m.experts == std::vector<uint32_t>{9});
}

TEST_CASE("a shared mailbox is 0600, reused by a restarted router, refused for another container") {
  const std::string path = "/dev/shm/sluice-router-test-" + std::to_string(::getpid()) + ".router";
  const MailboxGeometry g{8, 1, 2};
  {
    auto router = Mailbox::create_shared(path, g, 7);
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);
    auto client = Mailbox::open_shared(path, 7);
    REQUIRE(client != nullptr);
    CHECK(client->geometry() == g);
    CHECK(Mailbox::open_shared(path, 8) == nullptr);  // another model
    router->score(2, true, 3, 4);
    // The router restarts: it must find the mailbox the client still writes to.
    router.reset();
    auto restarted = Mailbox::create_shared(path, g, 7);
    const std::vector<float> hidden(8, 0.5f);
    CHECK(client->publish(1, 0, 1, hidden, 2, std::vector<uint32_t>{1, 2}));
    MailboxMessage m;
    CHECK(restarted->read(0, m).has_value());
    const auto accuracy = restarted->accuracy();
    REQUIRE(accuracy.size() == 1);
    CHECK(accuracy[0].layer == 2);
    CHECK(accuracy[0].precision_at_1() == 1.0);
    CHECK(accuracy[0].recall() == doctest::Approx(0.75));
  }
  std::filesystem::remove(path);
  CHECK(Mailbox::open_shared(path, 7) == nullptr);  // no mailbox: the client runs without lookahead
}

TEST_CASE("a writer killed mid-message: reads give nothing, then the reader ends the message and all resumes") {
  const std::string path = "/dev/shm/sluice-router-test-dead-" + std::to_string(::getpid());
  const MailboxGeometry g{1u << 20, 1, 1};  // 4 MiB messages: the writer spends its life mid-message
  auto box = Mailbox::create_shared(path, g, 5);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    auto mine = Mailbox::open_shared(path, 5);
    const std::vector<float> hidden(g.hidden, 1.0f);
    for (uint64_t step = 1;; ++step) mine->publish(step, 0, 1, hidden, 1, std::vector<uint32_t>{1});
  }
  // Kill it once it is mid-message (the sequence is odd).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    const uint32_t raw = box->raw_sequence();
    if (raw > 2 && (raw & 1) != 0) break;
  }
  ::kill(child, SIGKILL);
  int status = 0;
  ::waitpid(child, &status, 0);
  const uint32_t raw = box->raw_sequence();
  if ((raw & 1) == 0) {
    MESSAGE("the writer died between messages; nothing to recover this time");
  } else {
    MailboxMessage m;
    CHECK_FALSE(box->read(0, m).has_value());
    const std::vector<float> small(g.hidden, 2.0f);
    CHECK_FALSE(box->publish(1, 0, 1, small, 1, std::vector<uint32_t>{2}));  // refused, never blocks
    CHECK(box->recover_dead_writer(raw));
    CHECK_FALSE(box->recover_dead_writer(raw));
    CHECK_FALSE(box->read(0, m).has_value());  // the half-written message reads as nothing
    CHECK(box->publish(9, 3, 1, small, 1, std::vector<uint32_t>{2}));
    REQUIRE(box->read(0, m).has_value());
    CHECK(m.step == 9);
    CHECK(m.hidden == small);
  }
  std::filesystem::remove(path);
}
