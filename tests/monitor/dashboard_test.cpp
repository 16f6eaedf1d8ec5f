// The live dashboard: address parsing and the loopback rule at config validation, the Prometheus
// text, and the endpoints over real HTTP while a run trains (fetched from a callback in the middle
// of the run), with and without a token.
#include "frugal/monitor/dashboard.h"

#include <httplib.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "frugal/core/config_loader.h"
#include "frugal/core/errors.h"
#include "frugal/train/trainer.h"
#include "test_util.h"

namespace frugal::dashboard_test {
namespace {

std::string config_error(const std::vector<std::string>& sets) {
  try {
    resolve_config("", sets, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Dashboard, ParsesHostAndPort) {
  HttpAddress a = parse_http_address("127.0.0.1:8080");
  EXPECT_EQ(a.host, "127.0.0.1");
  EXPECT_EQ(a.port, 8080);
  EXPECT_EQ(parse_http_address("[::1]:0").host, "::1");
  EXPECT_THROW(parse_http_address("8080"), ConfigError);
  EXPECT_THROW(parse_http_address("127.0.0.1:http"), ConfigError);
  EXPECT_THROW(parse_http_address("127.0.0.1:70000"), ConfigError);
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("192.168.1.5"));
  // Decided on the addresses a name resolves to, never on its spelling: a name that begins like
  // a loopback address may resolve to any address (to 0.0.0.0, all interfaces), or to none.
  EXPECT_FALSE(is_loopback_host("127.evil.example"));
  EXPECT_FALSE(is_loopback_host("127.0.0.1.evil.example"));
  EXPECT_TRUE(is_loopback_address("127.3.2.1"));
  EXPECT_TRUE(is_loopback_address("::ffff:127.0.0.1"));
  EXPECT_FALSE(is_loopback_address("::ffff:10.0.0.1"));
  EXPECT_FALSE(is_loopback_address("::"));
  EXPECT_FALSE(is_loopback_address("localhost")) << "a name is not an address";
  for (const auto& addr : resolve_host_addresses("localhost")) EXPECT_TRUE(is_loopback_address(addr)) << addr;
}

TEST(Dashboard, ANameThatDoesNotResolveToLoopbackIsRefusedBeforeAnythingListens) {
  std::string e = config_error({"monitor.http=127.evil.example:0"});
  EXPECT_NE(e.find("monitor.allow_remote = true"), std::string::npos) << e;
}

TEST(Dashboard, NonLoopbackAddressNeedsAllowRemoteAndAToken) {
  EXPECT_EQ(config_error({"monitor.http=127.0.0.1:0"}), "");
  std::string e = config_error({"monitor.http=0.0.0.0:8080"});
  EXPECT_NE(e.find("monitor.allow_remote = true"), std::string::npos) << e;
  e = config_error({"monitor.http=0.0.0.0:8080", "monitor.allow_remote=true"});
  EXPECT_NE(e.find("needs monitor.token"), std::string::npos) << e;
  EXPECT_EQ(config_error({"monitor.http=0.0.0.0:8080", "monitor.allow_remote=true", "monitor.token=t0k"}), "");
  e = config_error({"monitor.http=localhost"});
  EXPECT_NE(e.find("monitor.http"), std::string::npos) << e;
}

TEST(Dashboard, PrometheusTextHasHelpTypeAndValues) {
  nlohmann::json latest = {{"step", 40},        {"loss", 1.5},     {"tokens_per_s", 1234.5},
                           {"tokens", 5000},    {"rss_mb", 100.0}, {"cost_usd", 0.25},
                           {"forward_s", 0.01}, {"mfu", 0.125},    {"grad_noise_scale", nullptr},
                           {"running", true}};
  const std::string t = prometheus_text(latest, "my\"run");
  EXPECT_NE(t.find("# HELP frugal_step "), std::string::npos);
  EXPECT_NE(t.find("# TYPE frugal_step gauge\nfrugal_step{run=\"my\\\"run\"} 40\n"), std::string::npos) << t;
  EXPECT_NE(t.find("# TYPE frugal_tokens_total counter\nfrugal_tokens_total{run=\"my\\\"run\"} 5000\n"),
            std::string::npos);
  EXPECT_NE(t.find("frugal_tokens_per_second{run=\"my\\\"run\"} 1234.5\n"), std::string::npos);
  EXPECT_NE(t.find("frugal_resident_memory_bytes{run=\"my\\\"run\"} 100000000\n"), std::string::npos);
  EXPECT_NE(t.find("frugal_mfu_ratio{run=\"my\\\"run\"} 0.125\n"), std::string::npos);
  EXPECT_NE(t.find("frugal_phase_seconds{run=\"my\\\"run\",phase=\"forward\"} 0.01\n"), std::string::npos);
  EXPECT_NE(t.find("frugal_running{run=\"my\\\"run\"} 1\n"), std::string::npos);
  EXPECT_EQ(t.find("frugal_grad_noise_scale{"), std::string::npos);  // null: not exported
  // Every sample line belongs to a metric announced by a TYPE line.
  std::regex sample("^(frugal_[a-z_]+)\\{");
  std::smatch m;
  std::istringstream in(t);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ASSERT_TRUE(std::regex_search(line, m, sample)) << line;
    EXPECT_NE(t.find("# TYPE " + m[1].str() + " "), std::string::npos) << line;
  }
}

struct Fetched {
  int status = 0;
  std::string body;
};

// At step `at` (on the trainer thread, mid-run), fetches every path from the dashboard.
class FetchAt : public Callback {
 public:
  FetchAt(int64_t at, const std::string* url, std::vector<std::pair<std::string, httplib::Headers>> requests)
      : at_(at), url_(url), requests_(std::move(requests)) {}
  void on_step_end(const StepMetrics& m, Control&) override {
    if (m.step != at_) return;
    std::smatch g;
    ASSERT_TRUE(std::regex_search(*url_, g, std::regex("http://([^:/]+):([0-9]+)/")));
    httplib::Client cli(g[1].str(), std::stoi(g[2].str()));
    cli.set_read_timeout(30, 0);
    for (const auto& [path, headers] : requests_) {
      auto r = cli.Get(path.c_str(), headers);
      got.push_back(r ? Fetched{r->status, r->body} : Fetched{-1, httplib::to_string(r.error())});
    }
  }
  std::vector<Fetched> got;

 private:
  int64_t at_;
  const std::string* url_;
  std::vector<std::pair<std::string, httplib::Headers>> requests_;
};

TEST(Dashboard, ServesMetricsApiAndLivePageWhileTraining) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("monitor.http=127.0.0.1:0");
  std::string url;
  auto fetch = std::make_shared<FetchAt>(
      20, &url,
      std::vector<std::pair<std::string, httplib::Headers>>{{"/metrics", {}}, {"/api/metrics", {}}, {"/", {}}});
  Trainer t(resolve_config("", sets, {}), test::quiet_run({fetch}));
  url = t.dashboard_url();
  ASSERT_TRUE(std::regex_match(url, std::regex("http://127\\.0\\.0\\.1:[0-9]+/"))) << url;
  EXPECT_EQ(url.find(":0/"), std::string::npos);  // port 0 became a real port
  t.fit();
  ASSERT_EQ(fetch->got.size(), 3u);
  for (const auto& f : fetch->got) ASSERT_EQ(f.status, 200) << f.body;

  const std::string& prom = fetch->got[0].body;
  EXPECT_NE(prom.find("frugal_step{run=\"demo\"} 20\n"), std::string::npos) << prom;  // mid-run
  EXPECT_NE(prom.find("frugal_total_steps{run=\"demo\"} 30\n"), std::string::npos);
  EXPECT_NE(prom.find("frugal_running{run=\"demo\"} 1\n"), std::string::npos);
  for (const char* name : {"frugal_loss", "frugal_tokens_per_second", "frugal_samples_per_second", "frugal_mfu_ratio",
                           "frugal_cost_usd", "frugal_val_loss"})
    EXPECT_NE(prom.find(std::string("# TYPE ") + name + " gauge"), std::string::npos) << name;

  auto api = nlohmann::json::parse(fetch->got[1].body);
  EXPECT_EQ(api["latest"]["step"], 20);
  EXPECT_EQ(api["run"]["state"], "running");
  int step_lines = 0;
  for (const auto& l : api["lines"]) step_lines += l["event"] == "step";
  EXPECT_EQ(step_lines, 4);  // log steps 5, 10, 15, 20
  // The same numbers as the metrics file's line for step 20.
  std::istringstream file(test::read_text(dir.file("demo/metrics.jsonl")));
  std::string line;
  while (std::getline(file, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["event"] == "step" && j["step"] == 20) {
      EXPECT_EQ(j["loss"], api["latest"]["loss"]);
    }
  }
  const std::string& page = fetch->got[2].body;
  // The page updates itself in place (a plain reload only without scripts) and says how long is left.
  EXPECT_NE(page.find("<script>setInterval(function(){fetch(\"/\",{cache:'no-store'})"), std::string::npos)
      << page.substr(0, 600);
  EXPECT_NE(page.find("<noscript><meta http-equiv='refresh'"), std::string::npos);
  EXPECT_EQ(page.find("<meta http-equiv='refresh'"), page.find("<noscript>") + 10);  // none outside <noscript>
  EXPECT_TRUE(std::regex_search(page, std::regex("running, step 20 of 30, ETA [0-9]+:[0-9]{2}"))) << page;
  EXPECT_NE(page.find("id='loss'"), std::string::npos);
}

TEST(Dashboard, TokenIsRequiredWhenSetAndNeverWrittenToFiles) {
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("monitor.http=127.0.0.1:0");
  sets.push_back("monitor.token=s3cret-t0ken");
  std::string url;
  auto fetch = std::make_shared<FetchAt>(
      10, &url,
      std::vector<std::pair<std::string, httplib::Headers>>{{"/metrics", {}},
                                                            {"/metrics", {{"Authorization", "Bearer wrong"}}},
                                                            {"/api/metrics?token=wrong", {}},
                                                            {"/metrics", {{"Authorization", "Bearer s3cret-t0ken"}}},
                                                            {"/api/metrics?token=s3cret-t0ken", {}}});
  Trainer t(resolve_config("", sets, {}), test::quiet_run({fetch}));
  url = t.dashboard_url();
  t.fit();
  ASSERT_EQ(fetch->got.size(), 5u);
  EXPECT_EQ(fetch->got[0].status, 401);
  EXPECT_EQ(fetch->got[1].status, 401);
  EXPECT_EQ(fetch->got[2].status, 401);
  EXPECT_EQ(fetch->got[0].body.find("frugal_step"), std::string::npos);
  EXPECT_EQ(fetch->got[3].status, 200);
  EXPECT_NE(fetch->got[3].body.find("frugal_step{run=\"demo\"} 10"), std::string::npos);
  EXPECT_EQ(fetch->got[4].status, 200);
  // The secret stays out of the run's files.
  EXPECT_EQ(test::read_text(dir.file("demo/config.toml")).find("s3cret"), std::string::npos);
  EXPECT_NE(test::read_text(dir.file("demo/config.toml")).find("# token = (secret, not written)"), std::string::npos);
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path()))
    if (e.is_regular_file()) {
      EXPECT_EQ(test::read_text(e.path().string()).find("s3cret"), std::string::npos) << e.path();
    }
}

TEST(Dashboard, BusyPortIsAnIoErrorNamingTheAddress) {
  MonitorConfig c;
  c.http = "127.0.0.1:0";
  Dashboard a(c, "a");
  c.http = "127.0.0.1:" + std::to_string(a.port());
  try {
    Dashboard b(c, "b");
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(c.http), std::string::npos) << e.what();
  }
}

int connect_to(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// 60 connections that never send a byte must not make the page unreachable (each is dropped
// after the 2 s read timeout, 32 at a time); a client that drip-feeds header lines must not
// delay the shutdown (a preempted run exits 75 within the grace period, or is SIGKILLed).
TEST(Dashboard, IdleConnectionsDoNotBlockThePageAndASlowClientDoesNotDelayShutdown) {
  MonitorConfig mc;
  mc.http = "127.0.0.1:0";
  auto d = std::make_unique<Dashboard>(mc, "guarded");
  const int port = d->port();
  std::vector<int> idle;
  for (int i = 0; i < 60; ++i) idle.push_back(connect_to(port));
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(20, 0);  // with 8 workers and a 5 s read timeout the page came after ~40 s
  auto r = cli.Get("/metrics");
  ASSERT_TRUE(r) << "the page is unreachable behind 60 idle connections";
  EXPECT_EQ(r->status, 200);
  for (int fd : idle) ::close(fd);

  const int slow = connect_to(port);
  ASSERT_GE(slow, 0);
  const std::string start = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(::send(slow, start.data(), start.size(), MSG_NOSIGNAL), static_cast<ssize_t>(start.size()));
  constexpr int kLines = 300;  // one every 100 ms: 30 s, far past any reasonable grace period
  std::atomic<int> sent{0};
  std::thread dripper([&] {
    for (int i = 0; i < kLines; ++i) {
      const std::string line = "X-Slow-" + std::to_string(i) + ": 1\r\n";
      if (::send(slow, line.data(), line.size(), MSG_NOSIGNAL) < 0) return;
      ++sent;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  d.reset();  // stops the server; must not wait for the slow client
  const int at_exit = sent.load();
  EXPECT_LT(at_exit, kLines) << "shutdown waited for the slow client to finish its request";
  char byte;
  EXPECT_LE(::recv(slow, &byte, 1, 0), 0) << "the slow client's connection is still open";
  dripper.join();
  ::close(slow);
}

int open_descriptors() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// 400 connections that never send a byte hold at most the workers' and the waiting queue's
// descriptors on the server's side (before the bound: one each, without limit, until the process
// ran out and a checkpoint write failed), and the page still comes within seconds.
TEST(Dashboard, AFloodOfIdleConnectionsHoldsABoundedNumberOfDescriptors) {
  MonitorConfig mc;
  mc.http = "127.0.0.1:0";
  Dashboard d(mc, "flood");
  const int before = open_descriptors();
  std::vector<int> idle;
  for (int i = 0; i < 400; ++i) {
    const int fd = connect_to(d.port());
    if (fd >= 0) idle.push_back(fd);
  }
  ASSERT_GT(idle.size(), 300u);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the accepting thread catches up
  const int server_side = open_descriptors() - before - static_cast<int>(idle.size());
  EXPECT_LE(server_side, 32 + 64 + 4) << "descriptors the dashboard holds for idle clients";
  httplib::Client cli("127.0.0.1", d.port());
  cli.set_read_timeout(5, 0);
  const auto t0 = std::chrono::steady_clock::now();
  bool served = false;
  while (!served && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20)) {
    auto r = cli.Get("/metrics");  // turned away while the queue is full: asked again
    served = r && r->status == 200;
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(served) << "the page was unreachable for 20 s behind idle connections";
  for (int fd : idle) ::close(fd);
}

}  // namespace
}  // namespace frugal::dashboard_test
