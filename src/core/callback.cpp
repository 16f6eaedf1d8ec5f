// Names of stop kinds; see callback.h.
#include "frugal/core/callback.h"

namespace frugal {

const char* stop_kind_name(StopKind k) {
  switch (k) {
    case StopKind::kCompleted:
      return "completed";
    case StopKind::kCallback:
      return "callback";
    case StopKind::kEarlyStop:
      return "early_stop";
    case StopKind::kMaxMinutes:
      return "max_minutes";
    case StopKind::kPreempted:
      return "preempted";
    case StopKind::kGuard:
      return "guard";
    case StopKind::kBudget:
      return "budget";
    case StopKind::kTarget:
      return "target_reached";
  }
  return "?";
}

int stop_severity(StopKind k) {
  switch (k) {
    case StopKind::kCompleted:
      return 0;
    case StopKind::kMaxMinutes:
      return 1;
    case StopKind::kCallback:
    case StopKind::kEarlyStop:
    case StopKind::kTarget:
      return 2;
    case StopKind::kPreempted:
      return 3;
    case StopKind::kBudget:
      return 4;
    case StopKind::kGuard:
      return 5;
  }
  return 0;
}

}  // namespace frugal
