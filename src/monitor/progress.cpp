// Progress display; see progress.h.
#include "frugal/monitor/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "frugal/core/console.h"
#include "frugal/core/wall_clock.h"

namespace frugal {

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(s + 0.5);
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

std::string format_rate(double r) {
  if (r >= 1e6) return fmt::format("{:.2f}M", r / 1e6);
  if (r >= 1e3) return fmt::format("{:.1f}k", r / 1e3);
  return fmt::format("{:.0f}", r);
}

std::string format_usd(double usd) {
  const double a = std::fabs(usd);
  if (!std::isfinite(usd) || a >= 1 || a == 0) return fmt::format("${:.2f}", usd);
  if (a >= 0.01) return fmt::format("${:.4f}", usd);
  const int decimals = 2 - static_cast<int>(std::floor(std::log10(a)));  // 3 significant digits
  return fmt::format("${:.{}f}", usd, decimals);
}

ProgressDisplay::ProgressDisplay(double interval_s, std::function<double()> clock)
    : interval_s_(interval_s), clock_(std::move(clock)) {
  if (!clock_) clock_ = unix_now;
}

void ProgressDisplay::on_train_begin(const RunInfo& info) {
  log_every_ = std::max<int64_t>(1, info.config->train.log_every);
  rate_unit_ = info.item == "token" ? "tok/s" : info.item + "s/s";
}

void ProgressDisplay::on_step_end(const StepMetrics& m, Control&) {
  if (m.logged) last_loss_ = m.loss;
  const double eta =
      m.step > 0 ? m.elapsed_s / static_cast<double>(m.step) * static_cast<double>(m.total_steps - m.step) : 0;
  // Until the first log step there is neither a loss nor a measured rate: say when they come.
  const bool measured = last_loss_ >= 0;
  const std::string loss = measured ? fmt::format("loss {:.4f}", last_loss_)
                                    : fmt::format("first loss at step {}", std::min(log_every_, m.total_steps));
  const std::string val = last_val_ >= 0 ? fmt::format("  val {:.4f}", last_val_) : "";
  const std::string rate = m.tokens_per_s > 0 ? fmt::format("  {} {}", format_rate(m.tokens_per_s), rate_unit_) : "";
  auto& con = Console::get();
  const bool last = m.step == m.total_steps;
  if (con.is_tty()) {
    if (!last && m.elapsed_s - last_draw_s_ < 0.1) return;  // ~10 redraws/s
    last_draw_s_ = m.elapsed_s;
    const int width = 20;
    int filled = static_cast<int>(width * m.step / std::max<int64_t>(1, m.total_steps));
    con.status(fmt::format("step {}/{} [{}{}]  {}{}{}{}  ETA {}", m.step, m.total_steps, std::string(filled, '#'),
                           std::string(width - filled, '-'), loss, val, rate,
                           m.cost_usd > 0 ? "  " + format_usd(m.cost_usd) : "", format_duration(eta)));
    return;
  }
  // A pipe: on a time interval, at log steps (a fresh loss), and at the end.
  const bool due = m.logged && (last_line_s_ < 0 || m.elapsed_s - last_line_s_ >= interval_s_);
  if (!due && !last) return;
  last_line_s_ = m.elapsed_s;
  con.line(fmt::format("{} step {}/{}  {}{}{}  elapsed {}  ETA {}", format_utc(clock_()), m.step, m.total_steps, loss,
                       val, rate, format_duration(m.elapsed_s), format_duration(eta)));
}

void ProgressDisplay::on_eval_end(const EvalMetrics& m, Control&) {
  last_val_ = m.val_loss;
  Console::get().line(fmt::format("eval  step {}  val_loss {:.4f}  best {:.4f}  ({:.1f}s)", m.step, m.val_loss,
                                  m.best_val_loss, m.eval_s));
}

void ProgressDisplay::on_train_end(const nlohmann::json&) { Console::get().finish_status(); }

}  // namespace frugal
