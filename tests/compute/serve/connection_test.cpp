// tests/compute/serve/connection_test.cpp: a request's socket is told apart
// by both ends, not by ports: two clients on 127.0.0.2 and 127.0.0.3 with the
// same source port, accepted by one listener, each get their own hang-up
// check and only their own unread body dropped.
#include "compute/serve/connection.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

using sluice::serve::discard_unread_body;
using sluice::serve::peer_gone_check;

namespace {

// A descriptor closed when the test leaves its scope, failed or not.
struct Fd {
  int fd = -1;
  explicit Fd(int fd) : fd(fd) { REQUIRE(fd >= 0); }
  ~Fd() { close(); }
  void close() {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

sockaddr_in loopback(const char* address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  REQUIRE(::inet_pton(AF_INET, address, &a.sin_addr) == 1);
  return a;
}

int port_of(int fd, bool local) {
  sockaddr_in a{};
  socklen_t size = sizeof(a);
  REQUIRE((local ? ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size)
                 : ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &size)) == 0);
  return ntohs(a.sin_port);
}

// A client socket bound to `address`:`port` (0: any), connected to `server`.
int client(const char* address, int port, int server) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const sockaddr_in from = loopback(address, port);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&from), sizeof(from)) == 0);
  const sockaddr_in to = loopback("127.0.0.1", port_of(server, true));
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) == 0);
  return fd;
}

// The request cpp-httplib would hand a handler for a connection from
// `address`:`port` to `server`.
httplib::Request request_from(const char* address, int port, int server) {
  httplib::Request req;
  req.remote_addr = address;
  req.remote_port = port;
  req.local_addr = "127.0.0.1";
  req.local_port = port_of(server, true);
  return req;
}

// Waits (poll, no sleep) until the peer of `fd` has hung up.
void await_hang_up(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  REQUIRE((p.revents & (POLLRDHUP | POLLHUP)) != 0);
}

}  // namespace

TEST_CASE("two clients with the same source port on different addresses stay apart") {
  Fd listener(::socket(AF_INET, SOCK_STREAM, 0));
  const sockaddr_in any = loopback("127.0.0.1", 0);
  REQUIRE(::bind(listener.fd, reinterpret_cast<const sockaddr*>(&any), sizeof(any)) == 0);
  REQUIRE(::listen(listener.fd, 4) == 0);
  // A connects and is accepted first, so its server-side descriptor is the
  // lower one: a match by ports alone would always find A's.
  Fd a(client("127.0.0.2", 0, listener.fd));
  const int port = port_of(a.fd, true);
  Fd accepted_a(::accept(listener.fd, nullptr, nullptr));
  Fd b(client("127.0.0.3", port, listener.fd));
  Fd accepted_b(::accept(listener.fd, nullptr, nullptr));
  REQUIRE(port_of(b.fd, true) == port);
  REQUIRE(accepted_a.fd < accepted_b.fd);
  const httplib::Request from_a = request_from("127.0.0.2", port, listener.fd);
  const httplib::Request from_b = request_from("127.0.0.3", port, listener.fd);

  SUBCASE("the hang-up of B is B's, not A's") {
    CHECK_FALSE(peer_gone_check(from_a)());
    CHECK_FALSE(peer_gone_check(from_b)());
    b.close();
    await_hang_up(accepted_b.fd);
    CHECK(peer_gone_check(from_b)());
    CHECK_FALSE(peer_gone_check(from_a)());
  }
  SUBCASE("the hang-up of A is A's, not B's") {
    a.close();
    await_hang_up(accepted_a.fd);
    CHECK(peer_gone_check(from_a)());
    CHECK_FALSE(peer_gone_check(from_b)());
  }
  SUBCASE("dropping B's unread body leaves A's bytes unread") {
    const std::string body_a = "AAAA", body_b = "BBBB";
    REQUIRE(::send(a.fd, body_a.data(), body_a.size(), 0) == 4);
    REQUIRE(::send(b.fd, body_b.data(), body_b.size(), 0) == 4);
    httplib::Request refused = from_b;
    refused.headers.emplace("Content-Length", "4");
    discard_unread_body(refused, 1 << 20);
    char got[8] = {};
    pollfd p{accepted_a.fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    CHECK(::recv(accepted_a.fd, got, sizeof(got), MSG_DONTWAIT) == 4);
    CHECK(std::string(got, 4) == body_a);
    // B's bytes were the ones read: nothing is left on its socket.
    CHECK(::recv(accepted_b.fd, got, sizeof(got), MSG_DONTWAIT) == -1);
  }
  SUBCASE("a request from an address no socket has finds nothing") {
    // A match by ports alone would find A's socket, which has hung up.
    const httplib::Request stranger = request_from("127.0.0.4", port, listener.fd);
    a.close();
    await_hang_up(accepted_a.fd);
    CHECK_FALSE(peer_gone_check(stranger)());
  }
}
