// tests/ctl/tiny_container.cpp: builds the tiny container with the project's
// own tools and runs child processes for the process-level tests.
#include "tests/ctl/tiny_container.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <csignal>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

namespace sluice::testing {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : fallback;
}

// A fixture that cannot be built is a failure: a broken converter must show in
// the totals, not turn every test that needs the container into a skip.
[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "FAIL: cannot build the tiny container: %s\n", why.c_str());
  std::exit(1);
}

struct Scratch {
  Scratch() {
    char pattern[] = "/tmp/sluice-ctl-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) std::abort();
    path = pattern;
  }
  ~Scratch() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::string path;
};

}  // namespace

const std::string& scratch_dir() {
  static Scratch scratch;
  return scratch.path;
}

std::string sluice_bin() { return env_or("SLUICE_BIN", "sluice"); }
std::string sluice_io_bin() { return env_or("SLUICE_IO_BIN", "sluice-io"); }

std::string make_tiny_container(const std::string& name, const std::vector<std::string>& generator_args,
                                        const std::string& family) {
  const std::string root = env_or("SLUICE_SOURCE_ROOT", "");
  if (root.empty()) fail("SLUICE_SOURCE_ROOT is not set (run through meson test)");
  const std::string generator = root + "/scripts/make_tiny_checkpoint.py";
  if (!std::filesystem::exists(generator)) fail(generator + " does not exist");
  const std::string checkpoint = scratch_dir() + "/" + name + "-checkpoint";
  const std::string container = scratch_dir() + "/" + name + ".sluice";
  std::vector<std::string> argv = {env_or("PYTHON", "/usr/bin/python3"), generator, family, checkpoint};
  argv.insert(argv.end(), generator_args.begin(), generator_args.end());
  std::string output;
  if (run_command(argv, &output) != 0) fail(generator + " failed: " + output);
  if (run_command({sluice_bin(), "convert", checkpoint, container}, &output) != 0) {
    fail("`sluice convert " + checkpoint + "` failed: " + output);
  }
  return container;
}

const std::string& tiny_container() {
  static const std::string path = make_tiny_container("tiny", {});
  return path;
}

int run_command(const std::vector<std::string>& argv, std::string* output) {
  const std::string log = scratch_dir() + "/command-" + std::to_string(::getpid()) + ".log";
  const pid_t pid = spawn(argv, log);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) fail("waitpid for " + argv[0] + ": " + std::strerror(errno));
  }
  if (output != nullptr) *output = read_text(log);
  std::remove(log.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

pid_t spawn(const std::vector<std::string>& argv, const std::string& log_path,
            const std::vector<std::string>& environment) {
  std::vector<char*> args;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    for (const auto& entry : environment) ::putenv(const_cast<char*>(entry.c_str()));
    ::execvp(args[0], args.data());
    std::perror(args[0]);
    ::_exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Daemon::Daemon(const std::vector<std::string>& extra_args, const std::string& model) {
  static int count = 0;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(count++);
  instance_ = "ctltest-" + tag;
  socket_ = scratch_dir() + "/io-" + tag + ".sock";
  log_ = scratch_dir() + "/io-" + tag + ".log";
  std::vector<std::string> argv = {sluice_io_bin(), model.empty() ? tiny_container() : model, "--socket", socket_,
                                   "--instance", instance_, "--readers", "2"};
  argv.insert(argv.end(), extra_args.begin(), extra_args.end());
  pid_ = spawn(argv, log_);
}

Daemon::~Daemon() {
  if (pid_ > 0 && stop(SIGTERM, 10) < 0 && stop(SIGKILL, 5) < 0) {
    std::fprintf(stderr, "daemon %d did not die\n", pid_);
  }
  // A daemon killed along the way leaves these; never leave them in /dev/shm.
  std::error_code ignored;
  std::filesystem::remove(socket_, ignored);
  std::filesystem::remove(segment_path(), ignored);
}

bool Daemon::wait_ready(double seconds, std::string* why) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      *why = "sluice-io exited early: " + log();
      return false;
    }
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    socket_.copy(address.sun_path, sizeof(address.sun_path) - 1);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    const bool answered = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    ::close(fd);
    if (answered) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  *why = "sluice-io did not answer in time: " + log();
  return false;
}

int Daemon::stop(int signal, double seconds) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signal);
  const int status = wait_exit(pid_, seconds);
  if (status >= 0) pid_ = -1;
  return status;
}

}  // namespace sluice::testing
