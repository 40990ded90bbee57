// compute/serve/connection.cpp: finds a request's socket among this process's
// descriptors by its local and remote ports, then polls it for a hang-up.
// Linux only (/proc/self/fd, POLLRDHUP).
#include "compute/serve/connection.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace sluice::serve {
namespace {

int port_of(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  if (address.ss_family == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  return -1;
}

bool socket_matches(int fd, int local_port, int remote_port) {
  sockaddr_storage local{}, remote{};
  socklen_t local_size = sizeof(local), remote_size = sizeof(remote);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0) return false;
  if (port_of(local) != local_port) return false;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &remote_size) != 0) return false;
  return port_of(remote) == remote_port;
}

int find_socket(int local_port, int remote_port) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = ::readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(entry->d_name, &end, 10);
    if (end == entry->d_name || *end != '\0' || fd == ::dirfd(dir)) continue;
    if (socket_matches(static_cast<int>(fd), local_port, remote_port)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

}  // namespace

std::function<bool()> peer_gone_check(const httplib::Request& request) {
  const int fd = find_socket(request.local_port, request.remote_port);
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
  const int fd = find_socket(request.local_port, request.remote_port);
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
