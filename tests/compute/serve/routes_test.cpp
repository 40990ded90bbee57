// tests/compute/serve/routes_test.cpp: every route of the server's table, on
// a real socket: its method reaches its own handler, HEAD works where GET
// does, every other method gets 405 with an Allow header naming the route's
// method (OPTIONS: 204 with Allow) and an error body in the path's API shape.
// A route added to the table is probed here without a line of this file
// changing.
#include "compute/serve/routes.h"

#include <doctest/doctest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>

using sluice::serve::allowed_methods;
using sluice::serve::endpoint_label;
using sluice::serve::install_routes;
using sluice::serve::Route;
using sluice::serve::route_table;

namespace {

// A server whose every route answers 200 with its own label.
struct StubServer {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  StubServer() {
    install_routes(http, [](const Route& route) -> httplib::Server::Handler {
      const std::string label(route.label);
      return [label](const httplib::Request&, httplib::Response& res) {
        res.set_content(label, "text/plain");
      };
    });
    port = http.bind_to_any_port("127.0.0.1");
    REQUIRE(port > 0);
    // Connections wait in the bound socket's backlog until listening starts.
    thread = std::thread([this] { http.listen_after_bind(); });
  }
  ~StubServer() {
    while (!http.is_running() && thread.joinable()) std::this_thread::yield();
    http.stop();
    thread.join();
  }
};

httplib::Result call(httplib::Client& client, const std::string& method, const std::string& path) {
  if (method == "GET") return client.Get(path.c_str());
  if (method == "HEAD") return client.Head(path.c_str());
  if (method == "POST") return client.Post(path.c_str(), "{}", "application/json");
  if (method == "PUT") return client.Put(path.c_str(), "{}", "application/json");
  if (method == "PATCH") return client.Patch(path.c_str(), "{}", "application/json");
  if (method == "DELETE") return client.Delete(path.c_str());
  return client.Options(path.c_str());
}

}  // namespace

TEST_CASE("every route answers its method and 405 with Allow for the others") {
  StubServer server;
  httplib::Client client("127.0.0.1", server.port);
  REQUIRE(route_table().size() >= 10);
  for (const Route& route : route_table()) {
    const std::string path(route.example), method(route.method);
    CAPTURE(path);
    const auto own = call(client, method, path);
    REQUIRE(own);
    CHECK(own->status == 200);
    CHECK(own->body == route.label);
    if (method == "GET") {
      const auto head = call(client, "HEAD", path);
      REQUIRE(head);
      CHECK(head->status == 200);
    }
    for (const std::string other : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
      if (other == method) continue;
      CAPTURE(other);
      const auto refused = call(client, other, path);
      REQUIRE(refused);
      CHECK(refused->status == 405);
      const std::string allow = refused->get_header_value("Allow");
      CHECK(allow == allowed_methods(path));
      CHECK(allow.find(method) != std::string::npos);
      CHECK(allow.find(other) == std::string::npos);
      const auto body = nlohmann::json::parse(refused->body, nullptr, false);
      REQUIRE(body.is_object());
      if (path.starts_with("/v1/messages")) {
        CHECK(body["type"] == "error");
        CHECK(body["error"]["type"] == "invalid_request_error");
      } else {
        CHECK(body["error"]["type"] == "invalid_request_error");
      }
      CHECK(body["error"]["message"].get<std::string>().find(other + " " + path) !=
            std::string::npos);
    }
    const auto options = call(client, "OPTIONS", path);
    REQUIRE(options);
    CHECK(options->status == 204);
    CHECK(options->get_header_value("Allow") == allowed_methods(path));
  }
  const auto unknown = call(client, "GET", "/v1/nothing");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
}

TEST_CASE("Allow names each path's methods, and /metrics labels are per route") {
  CHECK(allowed_methods("/health") == "GET, HEAD");
  CHECK(allowed_methods("/v1/messages") == "POST");
  CHECK(allowed_methods("/v1/messages/count_tokens") == "POST");
  CHECK(allowed_methods("/v1/models/any-id") == "GET, HEAD");
  CHECK(allowed_methods("/v1/nothing").empty());
  CHECK(endpoint_label("/v1/models/any-id") == "/v1/models/{id}");
  CHECK(endpoint_label("/v1/messages") == "/v1/messages");
  CHECK(endpoint_label("/v1/nothing") == "other");
}
