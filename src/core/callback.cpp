// Names of stop kinds; see callback.h.
#include "frugal/core/callback.h"

namespace frugal {

const char* stop_kind_name(StopKind k) {
  switch (k) {
    case StopKind::kCompleted: return "completed";
    case StopKind::kCallback: return "callback";
    case StopKind::kEarlyStop: return "early_stop";
    case StopKind::kMaxMinutes: return "max_minutes";
    case StopKind::kPreempted: return "preempted";
    case StopKind::kGuard: return "guard";
    case StopKind::kBudget: return "budget";
  }
  return "?";
}

}  // namespace frugal
