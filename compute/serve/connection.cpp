// compute/serve/connection.cpp: finds a request's socket among this process's
// descriptors by both of its ends, address and port, then polls it for a
// hang-up. Linux only (/proc/self/fd, POLLRDHUP).
#include "compute/serve/connection.h"

#include <dirent.h>
#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace sluice::serve {
namespace {

// One end of a connection as cpp-httplib reports it: the numeric host that
// getnameinfo writes (as httplib itself calls it) and the port.
struct Endpoint {
  std::string address;
  int port = -1;
};

bool same_endpoint(const sockaddr_storage& socket_address, socklen_t size, const Endpoint& end) {
  if (socket_address.ss_family != AF_INET && socket_address.ss_family != AF_INET6) return false;
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&socket_address), size, host, sizeof(host),
                    port, sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  return end.address == host && end.port == std::atoi(port);
}

bool socket_matches(int fd, const Endpoint& local, const Endpoint& remote) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &size) != 0 ||
      !same_endpoint(address, size, local))
    return false;
  size = sizeof(address);
  return ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &size) == 0 &&
         same_endpoint(address, size, remote);
}

int find_socket(const httplib::Request& request) {
  const Endpoint local{request.local_addr, request.local_port};
  const Endpoint remote{request.remote_addr, request.remote_port};
  if (local.port < 0 || remote.port < 0) return -1;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    if (socket_matches(static_cast<int>(fd), local, remote)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

std::function<bool()> peer_gone_check(const httplib::Request& request) {
  const int fd = find_socket(request);
  if (fd < 0) return [] { return false; };
  // The descriptor stays this connection's while the handler runs: the
  // server closes it only after the handler (and its content provider)
  // returned, and the check is not used after that.
  return [fd] {
    pollfd p{fd, POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  };
}

void discard_unread_body(const httplib::Request& request, size_t limit) {
  const int fd = find_socket(request);
  if (fd < 0) return;
  size_t left = std::min<uint64_t>(limit, request.get_header_value<uint64_t>("Content-Length"));
  char buffer[16384];
  while (left > 0) {
    pollfd p{fd, POLLIN, 0};
    // Some of the body may already sit in the server's own buffer; then the
    // socket goes quiet before `left` reaches 0.
    if (::poll(&p, 1, 200) <= 0 || (p.revents & POLLIN) == 0) return;
    const ssize_t got = ::recv(fd, buffer, std::min(sizeof(buffer), left), MSG_DONTWAIT);
    if (got <= 0) return;
    left -= static_cast<size_t>(got);
  }
}

}  // namespace sluice::serve
