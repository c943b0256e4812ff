// Raw-socket HTTP for the e2e tests of the panel's HTTP layer (panel_http_test.cpp,
// http_server_test.cpp): a test can be the client a library would not be.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace holdfast::panel::rawhttp {

using std::chrono::milliseconds;

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A connection to the server from `source` (any 127.x.y.z address reaches loopback). With a
// `receive_buffer` (bytes), its receive buffer is set to that before it connects (1: as
// small as the kernel allows, a client that takes an answer slowly).
inline int connect_from(int port, const char* source, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
  }
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, source, &local.sin_addr);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

inline bool send_text(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

// Everything the server sends until it closes, or until `limit` passes.
inline std::string read_until_closed(int fd, milliseconds limit) {
  std::string out;
  const auto until = std::chrono::steady_clock::now() + limit;
  char buf[4096];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

// `text` with "Connection: close" after its request line (unless it names a Connection), so
// that the server closes once it has answered: the helpers below read until it does.
inline std::string closing(std::string_view text) {
  std::string out(text);
  const std::size_t line_end = out.find("\r\n");
  if (line_end != std::string::npos && out.find("Connection:") == std::string::npos) {
    out.insert(line_end + 2, "Connection: close\r\n");
  }
  return out;
}

inline std::string request(int port, std::string_view text,
                           milliseconds limit = milliseconds(5000)) {
  const int fd = connect_to(port);
  if (fd < 0) return "";
  send_text(fd, closing(text));
  std::string out = read_until_closed(fd, limit);
  ::close(fd);
  return out;
}

inline std::string request_from(int port, const char* source, std::string_view text) {
  const int fd = connect_from(port, source);
  if (fd < 0) return "";
  send_text(fd, closing(text));
  std::string out = read_until_closed(fd, milliseconds(5000));
  ::close(fd);
  return out;
}

inline constexpr std::string_view kHealthz = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";

}  // namespace holdfast::panel::rawhttp
