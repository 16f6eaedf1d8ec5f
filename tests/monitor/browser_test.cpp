// What a person sees: report.html and the live dashboard page rendered by headless Chromium
// (Debian's `chromium`). The tests read the DOM Chromium built (charts present as SVG, the
// headline numbers equal summary.json's / the metrics line's) and keep a screenshot of each page
// under <build>/browser-artifacts/ for a person to look at. CTest label: browser.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>

#include "frugal/core/config_loader.h"
#include "frugal/train/trainer.h"
#include "quiet_trainer.h"
#include "test_util.h"

namespace frugal::browser_test {
namespace {

using test::quiet_overwrite;
namespace fs = std::filesystem;

std::string artifacts_dir() {
  fs::path dir = fs::path(FRUGAL_BINARY).parent_path() / "browser-artifacts";
  fs::create_directories(dir);
  return dir.string();
}

bool chromium_installed() { return std::system("command -v chromium >/dev/null 2>&1") == 0; }

// Renders `url` and returns the DOM after load; writes a screenshot to `png`.
std::string render(const std::string& url, const std::string& png, const std::string& profile_dir) {
  const std::string cmd =
      "timeout 180 chromium --headless --disable-gpu --no-sandbox --hide-scrollbars "
      "--user-data-dir='" +
      profile_dir + "' --window-size=1280,2400 --screenshot='" + png + "' --dump-dom '" + url + "' 2>/dev/null";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  pclose(p);
  return out;
}

// Width and height from a PNG's IHDR chunk (0, 0 if it is not a PNG).
std::pair<int, int> png_size(const std::string& path) {
  const std::string b = test::read_text(path);
  if (b.size() < 24 || b.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {0, 0};
  auto be32 = [&](size_t at) {
    return (static_cast<unsigned char>(b[at]) << 24) | (static_cast<unsigned char>(b[at + 1]) << 16) |
           (static_cast<unsigned char>(b[at + 2]) << 8) | static_cast<unsigned char>(b[at + 3]);
  };
  return {static_cast<int>(be32(16)), static_cast<int>(be32(20))};
}

// data-figure='KEY' -> the number shown.
std::map<std::string, double> headline_figures(const std::string& dom) {
  std::map<std::string, double> out;
  std::regex re("data-figure=\"([a-z_]+)\">([^<]+)<");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), re); it != std::sregex_iterator(); ++it) {
    std::string shown = (*it)[2].str();  // "14,214", "1.23M", "45.7" (report.h: format_figure)
    shown.erase(std::remove(shown.begin(), shown.end(), ','), shown.end());
    const bool mega = !shown.empty() && shown.back() == 'M';
    out[(*it)[1].str()] = std::stod(shown) * (mega ? 1e6 : 1);
  }
  return out;
}

void expect_charts(const std::string& dom, std::vector<std::string> ids) {
  for (const auto& id : ids) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(dom, m, std::regex("<svg id=\"" + id + "\"[^>]*>(.*?)</svg>"))) << "no chart " << id;
    if (!m.empty()) {
      EXPECT_TRUE(m[1].str().find("<polyline") != std::string::npos || m[1].str().find("<rect") != std::string::npos)
          << "chart " << id << " draws nothing";
    }
  }
}

// Shown with 3 significant digits (whole numbers from 1,000 up): within 0.6% of the value.
void expect_shown(double shown, double value, const std::string& what) {
  EXPECT_NEAR(shown, value, 6e-3 * std::fabs(value) + 1e-12) << what;
}

TEST(Browser, ReportShowsEveryChartAndTheNumbersOfSummaryJson) {
  ASSERT_TRUE(chromium_installed()) << "chromium not found: run scripts/install-deps.sh (installs Debian's "
                                       "chromium package for the browser tests)";
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  for (const char* s : {"budget.usd_per_hour=3.0", "train.accum=2", "profile.capture_steps=2", "profile.start_step=10"})
    sets.push_back(s);
  Trainer(resolve_config("", sets, {}), quiet_overwrite()).fit();
  const auto summary = nlohmann::json::parse(test::read_text(dir.file("demo/summary.json")));
  const std::string png = artifacts_dir() + "/report.png";
  fs::remove(png);
  const std::string dom = render("file://" + dir.file("demo/report.html"), png, dir.file("chromium"));
  ASSERT_NE(dom.find("</html>"), std::string::npos) << "chromium rendered nothing:\n" << dom;

  expect_charts(dom, {"loss", "lr", "grad-norm", "throughput", "mfu", "breakdown", "memory", "cost", "grad-noise"});
  // Every tick label on the page is a round number a person would write (no "1.4e+04", at most
  // 6 characters, so it stays clear of the axis title).
  std::regex tick_re("data-axis=\"[xy]\"[^>]*>([^<]*)<");
  int ticks = 0;
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), tick_re); it != std::sregex_iterator(); ++it, ++ticks) {
    const std::string t = (*it)[1].str();
    EXPECT_LE(t.size(), 6u) << t;
    EXPECT_EQ(t.find("e+"), std::string::npos) << t;
  }
  EXPECT_GT(ticks, 40);
  const auto figures = headline_figures(dom);
  for (const char* k : {"tokens_per_s", "samples_per_s", "mfu", "cost_usd", "final_val_loss", "peak_rss_mb"}) {
    ASSERT_TRUE(figures.count(k)) << "headline lacks " << k;
    expect_shown(figures.at(k), summary[k].get<double>() * (std::string(k) == "mfu" ? 100 : 1), k);
  }
  EXPECT_NE(dom.find("<td data-key=\"steps\">30</td>"), std::string::npos);
  EXPECT_NE(dom.find(summary["stop_reason"].get<std::string>()), std::string::npos);
  ASSERT_NE(dom.find("id=\"top-ops\""), std::string::npos);
  EXPECT_NE(dom.find("<td>" + summary["profile"]["top_ops"][0]["name"].get<std::string>() + "</td>"),
            std::string::npos);
  EXPECT_EQ(png_size(png), std::make_pair(1280, 2400)) << png;
}

// At step 20 of 30 (on the trainer thread) renders the dashboard's page.
class RenderAt : public Callback {
 public:
  RenderAt(const std::string* url, std::string profile) : url_(url), profile_(std::move(profile)) {}
  void on_step_end(const StepMetrics& m, Control&) override {
    if (m.step == 20) dom = render(*url_, artifacts_dir() + "/live.png", profile_);
  }
  std::string dom;

 private:
  const std::string* url_;
  std::string profile_;
};

TEST(Browser, LivePageShowsTheRunInProgress) {
  ASSERT_TRUE(chromium_installed()) << "chromium not found: run scripts/install-deps.sh (installs Debian's "
                                       "chromium package for the browser tests)";
  test::TempDir dir;
  auto sets = test::tiny_overrides(dir.path());
  sets.push_back("monitor.http=127.0.0.1:0");
  std::string url;
  auto cb = std::make_shared<RenderAt>(&url, dir.file("chromium"));
  fs::remove(artifacts_dir() + "/live.png");
  Trainer t(resolve_config("", sets, {}), quiet_overwrite({cb}));
  url = t.dashboard_url();
  t.fit();
  const std::string& dom = cb->dom;
  ASSERT_NE(dom.find("</html>"), std::string::npos) << "chromium rendered nothing:\n" << dom;
  EXPECT_NE(dom.find("(live)"), std::string::npos);
  EXPECT_NE(dom.find("running, step 20 of 30"), std::string::npos);
  expect_charts(dom, {"loss", "throughput", "mfu", "breakdown", "memory", "cost"});
  // The figures of the newest metrics line (step 20).
  nlohmann::json line20;
  std::istringstream in(test::read_text(dir.file("demo/metrics.jsonl")));
  std::string l;
  while (std::getline(in, l)) {
    auto j = nlohmann::json::parse(l);
    if (j["event"] == "step" && j["step"] == 20) line20 = j;
  }
  ASSERT_FALSE(line20.is_null());
  const auto figures = headline_figures(dom);
  ASSERT_TRUE(figures.count("tokens_per_s"));
  expect_shown(figures.at("tokens_per_s"), line20["tokens_per_s"].get<double>(), "tokens_per_s");
  expect_shown(figures.at("mfu"), 100 * line20["mfu"].get<double>(), "mfu");
  EXPECT_NE(dom.find("<td data-key=\"steps\">20</td>"), std::string::npos);
  EXPECT_EQ(png_size(artifacts_dir() + "/live.png"), std::make_pair(1280, 2400));
}

}  // namespace
}  // namespace frugal::browser_test
