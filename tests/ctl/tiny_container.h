// tests/ctl/tiny_container.h: the tiny OLMoE container the control-plane tests
// run against (scripts/make_tiny_checkpoint.py + `sluice convert`), and small
// process helpers. Test-only; a test that needs the container fails (exit 1,
// with the reason) when the tools cannot make one: that is a regression, not a skip.
#pragma once

#include <string>
#include <vector>

#include <sys/types.h>
#include <unistd.h>

namespace sluice::testing {

// A fresh private directory removed (with everything in it) at exit.
const std::string& scratch_dir();

// Path of a converted tiny container, built once per test process.
const std::string& tiny_container();
// Builds another tiny container `name` of `family` (make_tiny_checkpoint.py
// with `generator_args`, e.g. {"--set", "num_hidden_layers=4"}); fails the
// test when the tools cannot.
std::string make_tiny_container(const std::string& name, const std::vector<std::string>& generator_args,
                                        const std::string& family = "olmoe");

// $SLUICE_BIN, and sluice-io (from $SLUICE_IO_BIN).
std::string sluice_bin();
std::string sluice_io_bin();

// Runs `argv` to completion, returning its exit status; stdout/stderr are
// collected into `output` (both) when given.
int run_command(const std::vector<std::string>& argv, std::string* output = nullptr);

// Starts `argv` with `environment` added to ours; stderr goes to `log_path`.
pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path,
            const std::vector<std::string>& environment = {});
// Waits up to `seconds` for `pid` to exit; returns its wait status or -1.
int wait_exit(pid_t pid, double seconds);

std::string read_text(const std::string& path);

// A sluice-io on the tiny container, on its own socket and instance. If a
// test leaves it running it gets SIGTERM, then SIGKILL, and whatever socket
// or segment it left is removed.
class Daemon {
 public:
  // Serves `model` (default: the tiny container).
  explicit Daemon(const std::vector<std::string>& extra_args = {}, const std::string& model = "");
  ~Daemon();
  // Waits until the socket answers; false (with the log in `why`) if the
  // daemon exited or did not answer within `seconds`.
  bool wait_ready(double seconds, std::string* why);
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& instance() const { return instance_; }
  std::string segment_path() const { return "/dev/shm/" + segment_name(); }
  // shm::segment_name spelled out: "sluice-<euid>-<instance>".
  std::string segment_name() const { return "sluice-" + std::to_string(::geteuid()) + "-" + instance_; }
  std::string log() const { return read_text(log_); }
  // Sends `signal` and waits for the exit; returns the wait status or -1.
  int stop(int signal, double seconds = 20);

 private:
  pid_t pid_ = -1;
  std::string socket_, instance_, log_;
};

}  // namespace sluice::testing
