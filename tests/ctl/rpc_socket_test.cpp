// tests/ctl/rpc_socket_test.cpp: the control socket's path rules and its
// life: mode 0600 in a 0700 directory, a live socket never replaced, a stale
// one reclaimed, a non-socket refused, the path removed afterwards.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "ioworker/rpc_socket.h"
#include "proto/error.h"
#include "tests/ctl/tiny_container.h"

using namespace sluice;
using sluice::ioworker::ListeningSocket;

namespace {

unsigned mode_of(const std::string& path) {
  struct stat info{};
  REQUIRE(::lstat(path.c_str(), &info) == 0);
  return info.st_mode & 0777;
}

// A socket bound at `path` and then abandoned, as a daemon killed with
// SIGKILL leaves it: the path exists, nobody listens.
void leave_stale_socket(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof(address.sun_path) - 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  ::close(fd);
}

std::string expect_error(auto&& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("no error");
  return "";
}

}  // namespace

TEST_CASE("the default socket lives in $XDG_RUNTIME_DIR/sluice") {
  const char* saved = std::getenv("XDG_RUNTIME_DIR");
  const std::string restore = saved ? saved : "";
  ::setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  CHECK(ioworker::runtime_dir() == "/run/user/4242/sluice");
  CHECK(ioworker::default_socket_path("default") == "/run/user/4242/sluice/default.sock");
  ::unsetenv("XDG_RUNTIME_DIR");
  CHECK(ioworker::runtime_dir() == (::geteuid() == 0 ? "/run/sluice" : "/tmp/sluice-" + std::to_string(::geteuid())));
  if (saved) ::setenv("XDG_RUNTIME_DIR", restore.c_str(), 1);
}

TEST_CASE("a listening socket is 0600 in a 0700 directory and removed afterwards") {
  const std::string dir = testing::scratch_dir() + "/run/sluice";
  const std::string path = dir + "/a.sock";
  {
    ListeningSocket socket(path);
    CHECK(mode_of(dir) == 0700);
    CHECK(mode_of(path) == 0600);
    CHECK(ioworker::socket_answers(path));
    const std::string message = expect_error([&] { ListeningSocket second(path); });
    CHECK(message.find(path) != std::string::npos);
    CHECK(message.find("already serving") != std::string::npos);
    CHECK(std::filesystem::exists(path));  // the refused second socket left the live one alone
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK_FALSE(ioworker::socket_answers(path));
}

TEST_CASE("a stale socket is reclaimed; a file that is not a socket is refused") {
  const std::string path = testing::scratch_dir() + "/stale.sock";
  leave_stale_socket(path);
  REQUIRE(std::filesystem::exists(path));
  CHECK_FALSE(ioworker::socket_answers(path));
  {
    ListeningSocket socket(path);
    CHECK(ioworker::socket_answers(path));
    CHECK(mode_of(path) == 0600);
  }
  const std::string file = testing::scratch_dir() + "/plain.sock";
  std::ofstream(file) << "not a socket";
  const std::string message = expect_error([&] { ListeningSocket socket(file); });
  CHECK(message.find("not a socket") != std::string::npos);
  CHECK(std::filesystem::exists(file));
}

TEST_CASE("a socket path too long for sockaddr_un is an error naming it") {
  const std::string path = testing::scratch_dir() + "/" + std::string(200, 'x') + ".sock";
  const std::string message = expect_error([&] { ListeningSocket socket(path); });
  CHECK(message.find("--socket") != std::string::npos);
}
